"""Decoder behaviour on small hand-built batches: the facts-sheet examples and every header shape.

`raw_record` / `make_batch` are a deliberately naive scalar writer (one field after the other,
header and CRC via batch.pack_header) so these tests do not depend on the vectorized encoder.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.record.batch import (
    INT32_MAX,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    Compression,
    TimestampType,
    make_attributes,
    pack_header,
)
from kafkalog_core.record.decoder import (
    RECORD_SCHEMA,
    RecordBatch,
    decode_records,
    read_batches,
)
from kafkalog_core.record.varint import encode_varint

# ---------------------------------------------------------------------------------------------
# a naive writer for the tests
# ---------------------------------------------------------------------------------------------


def _blob(value: bytes | None) -> bytes:
    return encode_varint(-1) if value is None else encode_varint(len(value)) + value


def raw_record(
    offset_delta: int,
    timestamp_delta: int = 0,
    key: bytes | None = None,
    value: bytes | None = b"",
    headers: list[tuple[str, bytes | None]] = (),  # type: ignore[assignment]
) -> bytes:
    body = (
        b"\x00"
        + encode_varint(timestamp_delta)
        + encode_varint(offset_delta)
        + _blob(key)
        + _blob(value)
    )
    body += encode_varint(len(headers))
    for hkey, hvalue in headers:
        body += _blob(hkey.encode()) + _blob(hvalue)
    return encode_varint(len(body)) + body


def make_batch(
    records: bytes,
    count: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    attributes: int = 0,
    last_offset_delta: int | None = None,
    base_timestamp: int = 1000,
    max_timestamp: int = 1000,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A v2 batch around an already encoded (and possibly compressed) records area."""
    buf = bytearray(RECORD_BATCH_OVERHEAD + len(records))
    buf[RECORD_BATCH_OVERHEAD:] = records
    pack_header(
        buf,
        0,
        base_offset=base_offset,
        length=len(buf) - LOG_OVERHEAD,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=count - 1 if last_offset_delta is None else last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=count,
    )
    return bytes(buf)


# ---------------------------------------------------------------------------------------------
# facts sheet §1.7 worked examples and §13 cases
# ---------------------------------------------------------------------------------------------

EXAMPLE_A = bytes.fromhex(
    "00000000000000000000003affffffff02716a618900000000000000000000000003e800000000000003e8"
    "ffffffffffffffffffffffffffff0000000110000000026b027600"
)
EXAMPLE_B = bytes.fromhex(
    "00000000000000000000004dffffffff02f6ee7ff900000000000100000000000003e800000000000003e9"
    "ffffffffffffffffffffffffffff000000021c000000066b65790a76616c75650018000202010476320202680278"
)
EXAMPLE_C = bytes.fromhex(
    "0000000000000007000000420000000002be37f0a700300000000000000000000003e800000000000003e8"
    "00000000000000050000ffffffff000000012000000008000000010c00000000000000"
)


def test_example_a() -> None:
    batch = next(read_batches(EXAMPLE_A))
    assert batch.header.crc == 1902797193
    assert batch.records().to_pylist() == [
        {
            "offset": 0,
            "timestamp": 1000,
            "timestamp_type": 0,
            "key": b"k",
            "value": b"v",
            "headers": [],
        }
    ]
    assert batch.control_record() is None


def test_example_b_headers_and_null_key() -> None:
    rows = decode_records(EXAMPLE_B).to_pylist()
    assert rows == [
        {
            "offset": 0,
            "timestamp": 1000,
            "timestamp_type": 0,
            "key": b"key",
            "value": b"value",
            "headers": [],
        },
        {
            "offset": 1,
            "timestamp": 1001,
            "timestamp_type": 0,
            "key": None,
            "value": b"v2",
            "headers": [{"key": "h", "value": b"x"}],
        },
    ]


def test_example_c_commit_marker() -> None:
    batch = next(read_batches(EXAMPLE_C))
    h = batch.header
    assert h.is_control and h.is_transactional and h.producer_id == 5
    marker = batch.control_record()
    assert marker is not None
    assert (marker.type, marker.coordinator_epoch, marker.is_end_txn_marker) == (1, 0, True)
    # consumers never see control records unless they ask
    assert decode_records(EXAMPLE_C).num_rows == 0
    assert decode_records(EXAMPLE_C, include_control=True).column("offset").to_pylist() == [7]


def test_sequence_wraparound() -> None:
    """§13 case 5: baseSequence Int.MAX-1, three records at offsets 1234567..1234569."""
    records = b"".join(raw_record(i, key=b"k", value=b"v") for i in range(3))
    data = make_batch(
        records,
        3,
        base_offset=1234567,
        base_sequence=INT32_MAX - 1,
        producer_id=1,
        producer_epoch=0,
    )
    batch = next(read_batches(data))
    assert batch.header.last_sequence == 0
    assert batch.sequences().tolist() == [INT32_MAX - 1, INT32_MAX, 0]
    assert batch.records().column("offset").to_pylist() == [1234567, 1234568, 1234569]
    plain = next(read_batches(make_batch(records, 3)))
    assert plain.sequences().tolist() == [-1, -1, -1]


def test_empty_batch_header() -> None:
    """A cleaner-kept empty batch: 61 bytes, recordsCount 0, baseTimestamp -1."""
    data = make_batch(
        b"", 0, base_offset=40, last_offset_delta=9, base_timestamp=-1, max_timestamp=77
    )
    batch = next(read_batches(data))
    assert batch.header.size == 61 and batch.record_count == 0
    table = batch.records()
    assert table.num_rows == 0 and table.schema == RECORD_SCHEMA
    assert decode_records(data + EXAMPLE_A).num_rows == 1


def test_compacted_offsets_have_gaps() -> None:
    records = raw_record(0, key=b"a") + raw_record(3, 5, key=b"b") + raw_record(9, -2, key=b"c")
    data = make_batch(records, 3, base_offset=100, last_offset_delta=9)
    table = decode_records(data)
    assert table.column("offset").to_pylist() == [100, 103, 109]
    assert table.column("timestamp").to_pylist() == [1000, 1005, 998]


def test_log_append_time_reads_max_timestamp() -> None:
    records = raw_record(0, 0) + raw_record(1, 123)
    attributes = make_attributes(timestamp_type=TimestampType.LOG_APPEND_TIME)
    data = make_batch(records, 2, attributes=attributes, base_timestamp=5, max_timestamp=999_999)
    table = decode_records(data)
    assert table.column("timestamp").to_pylist() == [999_999, 999_999]
    assert table.column("timestamp_type").to_pylist() == [1, 1]


def test_null_and_empty_values_and_headers() -> None:
    records = (
        raw_record(0, key=b"", value=None)
        + raw_record(1, key=None, value=b"", headers=[("", None), ("k2", b"")])
        + raw_record(2, key=b"x" * 13, value=b"y" * 300, headers=[("h\u00e9", b"z" * 20)])
    )
    rows = decode_records(make_batch(records, 3)).to_pylist()
    assert [(r["key"], r["value"]) for r in rows] == [
        (b"", None),
        (None, b""),
        (b"x" * 13, b"y" * 300),
    ]
    assert rows[0]["headers"] == []
    assert rows[1]["headers"] == [{"key": "", "value": None}, {"key": "k2", "value": b""}]
    assert rows[2]["headers"] == [{"key": "h\u00e9", "value": b"z" * 20}]


def test_many_batches_in_one_pass_keep_order_and_base_fields() -> None:
    buf = b""
    expected = []
    for b in range(20):
        n = 1 + b % 4
        records = b"".join(
            raw_record(i, i, key=b"%d-%d" % (b, i), value=b"v" * (b * 7 + i)) for i in range(n)
        )
        buf += make_batch(
            records, n, base_offset=100 * b, base_timestamp=10 * b, max_timestamp=10 * b + n
        )
        expected += [
            (100 * b + i, 10 * b + i, b"%d-%d" % (b, i), b"v" * (b * 7 + i)) for i in range(n)
        ]
    table = decode_records(buf)
    got = list(
        zip(
            table.column("offset").to_pylist(),
            table.column("timestamp").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )
    assert got == expected
    assert decode_records(
        buf, start=len(make_batch(raw_record(0, key=b"0-0", value=b""), 1))
    ).num_rows == (len(expected) - 1)


def test_uniform_records_take_the_stride_path() -> None:
    """Many equal-size records followed by odd-size ones: both walking strategies agree."""
    sizes = [10] * 300 + [11, 12] + [10] * 50 + [3]
    records = b"".join(raw_record(i, 0, key=b"k", value=b"v" * s) for i, s in enumerate(sizes))
    table = decode_records(make_batch(records, len(sizes)))
    assert [len(v) for v in table.column("value").to_pylist()] == sizes
    assert table.column("offset").to_pylist() == list(range(len(sizes)))


def test_values_at_the_very_end_of_the_buffer() -> None:
    """Short values in the last bytes of the buffer (no 12-byte window left to read inline)."""
    records = raw_record(0, key=b"a", value=b"bc")
    data = make_batch(records, 1)
    assert decode_records(memoryview(data)).column("value").to_pylist() == [b"bc"]


def test_decompressed_batches() -> None:
    from kafkalog_core.record.compression import compress

    records = b"".join(raw_record(i, i, key=b"k%d" % i, value=b"value-%d" % i) for i in range(50))
    for codec in Compression:
        attributes = make_attributes(compression=codec)
        area = records if codec is Compression.NONE else compress(codec, records)
        table = decode_records(make_batch(area, 50, attributes=attributes))
        assert table.column("value").to_pylist() == [b"value-%d" % i for i in range(50)], codec


def test_unknown_codec_and_magic_are_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="codec"):
        decode_records(make_batch(raw_record(0), 1, attributes=5))
    bad_magic = bytearray(EXAMPLE_A)
    bad_magic[16] = 7
    with pytest.raises(CorruptRecordError, match="magic"):
        decode_records(bytes(bad_magic))


def test_record_batch_view_api() -> None:
    batch = RecordBatch(EXAMPLE_B, next(read_batches(EXAMPLE_B)).header)
    assert batch.record_count == 2 and batch.is_valid()
    batch.ensure_valid()
    assert bytes(batch.raw()) == EXAMPLE_B
    assert isinstance(batch.records(), pa.Table)
    assert np.array_equal(batch.sequences(), [-1, -1])


def test_value_sizes_instead_of_values_and_prewalked_headers(fixtures_dir) -> None:
    """`values=False` swaps `value` for its length (-1 = null) in place, for v2 and legacy
    entries alike; `headers=` (the caller's own walk) decodes the same table."""
    import pyarrow.compute as pc

    from kafkalog_core.record.batch import iter_batch_headers

    logs = sorted((fixtures_dir / "segments").rglob("*.log"))
    logs += sorted(p for p in (fixtures_dir / "batches").iterdir() if p.is_file())
    legacy = 0
    for path in logs:
        data = path.read_bytes()
        try:
            full = decode_records(data, include_control=True, with_sizes=True)
        except CorruptRecordError:  # a records area or a deliberately damaged batch
            continue
        legacy += any(h.magic < 2 for h in iter_batch_headers(data))
        sizes = decode_records(data, include_control=True, with_sizes=True, values=False)
        expected = pc.fill_null(pc.binary_length(full.column("value")), -1).cast(pa.int32())
        assert sizes.column("value_size").equals(expected), path.name
        assert sizes.schema.names == [
            "value_size" if n == "value" else n for n in full.schema.names
        ]
        assert sizes.drop_columns(["value_size"]).equals(full.drop_columns(["value"]))
        walked = list(iter_batch_headers(data, verify=True))
        assert decode_records(data, include_control=True, with_sizes=True, headers=walked).equals(
            full
        )
    assert legacy  # the legacy path is covered too
