"""Real bytes from real brokers and clients (shared/fixtures) through our decoder.

Every MANIFEST.json entry is a test case of its own (parametrized by file name), and every .log
under fixtures/segments and fixtures/logdirs is decoded completely with CRC checks.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.record.batch import Compression, iter_batch_headers
from kafkalog_core.record.decoder import RECORD_SCHEMA, RecordBatch, decode_records, read_batches
from kafkalog_core.record.encoder import Record, build_batch
from tests.conftest import FIXTURES


def _entries(kind: str) -> list[str]:
    """File names of one kind, read at collection time so each file is its own test id."""
    path = FIXTURES / "MANIFEST.json"
    if not path.is_file():
        return []
    return [e["file"] for e in json.loads(path.read_text())["batches"] if e["kind"] == kind]


def _entry(manifest: dict, name: str) -> dict:
    return next(e for e in manifest["batches"] if e["file"] == name)


def _bytes(fixtures_dir: Path, name: str) -> bytes:
    return (fixtures_dir / "batches" / name).read_bytes()


def render(value: bytes | None) -> str | None:
    """The manifest's preview convention: UTF-8 text cut at 40 characters, else "hex:" + 20 bytes."""
    if value is None:
        return None
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return "hex:" + value[:20].hex() + ("..." if len(value) > 20 else "")
    return text[:40] + "..." if len(text) > 40 else text


def test_manifest_is_present(manifest: dict) -> None:
    kinds = Counter(e["kind"] for e in manifest["batches"])
    assert kinds["record_batch_v2"] > 0 and kinds["records_blob"] > 0
    assert sum(kinds.values()) == len(_entries("record_batch_v2")) + sum(
        len(_entries(k)) for k in kinds if k != "record_batch_v2"
    )


def test_render_convention() -> None:
    assert render(b"x" * 41) == "x" * 40 + "..."
    assert render(b"x" * 40) == "x" * 40
    assert render(b"\xff" * 21) == "hex:" + "ff" * 20 + "..."
    assert render(b"\xff\x00") == "hex:ff00"


_HEADER_FIELDS = {
    "base_offset": "base_offset",
    "batch_length": "length",
    "partition_leader_epoch": "partition_leader_epoch",
    "attributes": "attributes",
    "last_offset_delta": "last_offset_delta",
    "first_timestamp": "base_timestamp",
    "max_timestamp": "max_timestamp",
    "producer_id": "producer_id",
    "producer_epoch": "producer_epoch",
    "base_sequence": "base_sequence",
    "records_count": "records_count",
}


@pytest.mark.parametrize("name", _entries("record_batch_v2"))
def test_record_batch_v2(name: str, manifest: dict, fixtures_dir: Path) -> None:
    entry = _entry(manifest, name)
    decoded = entry["decoded"]
    data = _bytes(fixtures_dir, name)
    batches = list(read_batches(data, verify=True))
    assert len(batches) == 1
    batch = batches[0]
    header = batch.header
    for theirs, ours in _HEADER_FIELDS.items():
        assert getattr(header, ours) == decoded[theirs], theirs
    assert header.magic == decoded["magic"] == 2
    assert header.crc == int(decoded["crc"], 16)
    assert batch.is_valid() is decoded["crc_valid"] is True
    batch.ensure_valid()
    assert header.compression.kafka_name == decoded["codec"]
    assert header.timestamp_type.kafka_name == decoded["timestamp_type"]
    assert header.is_transactional is decoded["is_transactional"]
    assert header.is_control is decoded["is_control"]
    assert header.size == decoded["size_bytes"] == len(data)

    table = batch.records()
    assert table.schema == RECORD_SCHEMA
    assert table.num_rows == decoded["decoded_record_count"] == batch.record_count
    rows = table.to_pylist()
    for expected, row in zip(decoded["records_preview"], rows, strict=False):
        got = {
            "offset": row["offset"],
            "timestamp": row["timestamp"],
            "key": render(row["key"]),
            "value": render(row["value"]),
            "headers": [[h["key"], render(h["value"])] for h in row["headers"]],
        }
        assert got == expected
    assert rows[0]["offset"] == decoded["first_record_offset"]
    assert rows[-1]["offset"] == decoded["last_record_offset"]
    expected_type = 1 if decoded["timestamp_type"] == "LogAppendTime" else 0
    assert set(table.column("timestamp_type").to_pylist()) == {expected_type}
    if expected_type == 1:  # LogAppendTime: every record reads maxTimestamp
        assert set(table.column("timestamp").to_pylist()) == {decoded["max_timestamp"]}
    # the one-call API agrees with the view
    assert decode_records(data, include_control=True).equals(table)


def _v2_by_codec(compressed: bool) -> list[str]:
    path = FIXTURES / "MANIFEST.json"
    if not path.is_file():
        return []
    return [
        e["file"]
        for e in json.loads(path.read_text())["batches"]
        if e["kind"] == "record_batch_v2" and (e["decoded"]["codec"] != "none") == compressed
    ]


def _rebuild(batch: RecordBatch) -> bytes:
    """Our encoder's scalar build_batch fed with everything the decoder read."""
    h = batch.header
    records = [
        Record(
            offset_delta=r["offset"] - h.base_offset,
            # LogAppendTime batches store producer deltas the decoder (rightly) hides
            timestamp=r["timestamp"],
            key=r["key"],
            value=r["value"],
            headers=[(x["key"], x["value"]) for x in r["headers"]],
        )
        for r in batch.records().to_pylist()
    ]
    return build_batch(
        records,
        base_offset=h.base_offset,
        partition_leader_epoch=h.partition_leader_epoch,
        compression=h.compression,
        timestamp_type=h.timestamp_type,
        is_transactional=h.is_transactional,
        is_control=h.is_control,
        last_offset_delta=h.last_offset_delta,
        base_timestamp=h.base_timestamp,
        max_timestamp=h.max_timestamp,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
    )


@pytest.mark.parametrize("name", _v2_by_codec(compressed=False))
def test_uncompressed_batch_reencodes_identically(name: str, fixtures_dir: Path) -> None:
    """Decoded fields -> build_batch gives back the exact bytes (header, records and CRC)."""
    data = _bytes(fixtures_dir, name)
    assert _rebuild(next(read_batches(data))) == data


@pytest.mark.parametrize("name", _v2_by_codec(compressed=True))
def test_compressed_batch_reencodes_to_same_records(name: str, fixtures_dir: Path) -> None:
    """Compressed bytes depend on the producer's compressor; the records must survive a re-encode."""
    data = _bytes(fixtures_dir, name)
    batch = next(read_batches(data))
    rebuilt = next(read_batches(_rebuild(batch)))
    assert rebuilt.header.compression is batch.header.compression
    assert rebuilt.records().equals(batch.records())


def _check_blob(entry: dict, data: bytes) -> None:
    batches = list(read_batches(data, verify=True))
    by_pos = {b.header.position: b for b in batches}
    counts: Counter[str] = Counter()
    for b in batches:
        records = b.records()
        assert records.num_rows >= 1
        counts[f"v{b.header.magic}/{Compression(b.header.attributes & 7).kafka_name}"] += 1
    for expected in entry.get("entries", []):
        if "pos" not in expected:
            continue  # the manifest elides long runs as {"...": n}
        batch = by_pos[expected["pos"]]
        h = batch.header
        assert h.magic == expected["magic"]
        assert Compression(h.attributes & 7).kafka_name == expected["codec"]
        assert batch.is_valid() is expected["crc_valid"]
        table = batch.records()
        if h.magic == 2:
            assert h.base_offset == expected["base_offset"]
            assert table.num_rows == h.records_count == expected["count"]
            assert h.timestamp_type.kafka_name == expected["timestamp_type"]
        else:
            assert h.base_offset == expected["offset"]  # a legacy entry's offset is its last offset
            assert table.num_rows == expected["inner_records"]
            assert table.column("offset").to_pylist()[-1] == expected["offset"]
    # entry_counts counts top-level entries: v2 batches, legacy messages or wrappers
    assert counts == Counter(entry["entry_counts"])
    table = decode_records(data, include_control=True)
    offsets = table.column("offset").to_pylist()
    assert offsets == sorted(set(offsets))
    assert table.num_rows == sum(b.records().num_rows for b in batches)


@pytest.mark.parametrize("name", _entries("records_blob") + _entries("records_blob_legacy"))
def test_records_blob(name: str, manifest: dict, fixtures_dir: Path) -> None:
    _check_blob(_entry(manifest, name), _bytes(fixtures_dir, name))


@pytest.mark.parametrize("name", _entries("records_blob") + _entries("records_blob_legacy"))
def test_records_blob_with_partial_tail(name: str, manifest: dict, fixtures_dir: Path) -> None:
    """A fetch response may end inside a batch: everything before it still decodes."""
    data = _bytes(fixtures_dir, name)
    last = list(iter_batch_headers(data))[-1]
    cut = data[: last.position + last.size - 1]
    whole = decode_records(data, include_control=True)
    partial = decode_records(cut, include_control=True)
    assert partial.num_rows == whole.num_rows - RecordBatch(data, last).records().num_rows
    assert partial.equals(whole.slice(0, partial.num_rows))


@pytest.mark.parametrize("name", _entries("records_blob_legacy"))
def test_legacy_blob_details(name: str, fixtures_dir: Path) -> None:
    table = decode_records(_bytes(fixtures_dir, name))
    magic = 0 if "_v0" in name else 1
    types = set(table.column("timestamp_type").to_pylist())
    if magic == 0:
        assert types == {-1}
        assert set(table.column("timestamp").to_pylist()) == {-1}
    else:
        assert types == {0}
        assert min(table.column("timestamp").to_pylist()) > 0
    assert table.column("offset").to_pylist() == list(range(table.num_rows))


@pytest.mark.parametrize("name", _entries("invalid_record_batch"))
def test_bad_crc_is_refused(name: str, manifest: dict, fixtures_dir: Path) -> None:
    data = _bytes(fixtures_dir, name)
    assert _entry(manifest, name)["decoded"]["crc_valid"] is False
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_records(data)
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(read_batches(data, verify=True))
    batch = next(read_batches(data, verify=False))
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match="CRC"):
        batch.ensure_valid()


@pytest.mark.parametrize("name", _entries("anomalous_record_batch"))
def test_anomalous_batch_is_refused(name: str, fixtures_dir: Path) -> None:
    """Attributes say "none" but the records are a zstd frame: refuse, never invent records."""
    data = _bytes(fixtures_dir, name)
    batch = next(read_batches(data, verify=True))  # the CRC itself is fine
    assert batch.header.compression is Compression.NONE
    with pytest.raises(CorruptRecordError, match="position 0"):
        batch.records()
    with pytest.raises(CorruptRecordError):
        decode_records(data)


# ---------------------------------------------------------------------------------------------
# whole segment files and log dirs
# ---------------------------------------------------------------------------------------------


def _partition_dirs() -> list[str]:
    dirs = {p.parent for root in ("segments", "logdirs") for p in (FIXTURES / root).rglob("*.log")}
    return sorted(str(d.relative_to(FIXTURES)) for d in dirs)


@pytest.mark.parametrize("partition", _partition_dirs())
def test_partition_segments_decode_completely(partition: str, fixtures_dir: Path) -> None:
    segments = sorted((fixtures_dir / partition).glob("*.log"))
    assert segments
    previous_last = None
    for segment in segments:
        base = int(segment.name[:20])
        data = segment.read_bytes()
        headers = list(iter_batch_headers(data, verify=True))
        # no partial tail in a closed segment: the batches tile the file exactly
        assert sum(h.size for h in headers) == len(data)
        table = decode_records(data, verify=True, include_control=True)
        offsets = table.column("offset").to_numpy()
        assert table.num_rows == sum(h.records_count for h in headers)
        if not len(offsets):
            continue
        assert (offsets[1:] > offsets[:-1]).all()
        assert offsets[0] >= base
        assert offsets[-1] <= headers[-1].last_offset
        for h in headers:  # every record inside its batch's [base, last] range
            assert h.last_offset >= h.base_offset
        if previous_last is not None:
            assert base > previous_last
            if "compact" not in partition and "__consumer_offsets" not in partition:
                assert base == previous_last + 1  # contiguous segments of a delete-policy log
        previous_last = headers[-1].last_offset
