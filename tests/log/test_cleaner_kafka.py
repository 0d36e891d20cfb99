"""The cleaner's rewrite against Kafka's own: MemoryRecords.filterTo in the Java client.

tests/java/CleanOracle.java runs Kafka's batch filter over the same source segments, in the
broker's read chunks, with the same clock, delete.retention.ms and transaction/producer
decisions (our round hands them over), building its own MD5 offset map from the records.
Uncompressed, the rewritten segments must be byte-identical and so must their indexes (the same
appends); compressed, Kafka's client must read the same batch headers and records from both
(the codec libraries differ, so the compressed bytes may).
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from kafkalog_core.log.names import log_file_name, segment_log_files
from kafkalog_core.log.segment.log_segment import LogSegment
from kafkalog_core.maintenance.cleaner import CleanerSettings, clean_partition
from kafkalog_core.maintenance.cleaner_audit import floor_segment
from kafkalog_core.maintenance.cleaner_legacy import legacy_message, legacy_wrapper
from kafkalog_core.record.batch import Compression, iter_batch_headers
from kafkalog_core.record.encoder import Record, build_batch
from tests.kafka_oracle import JAVA_DIR, kafka_client_read, run_java
from tests.log.cleaner_logs import COMPACT, DAY, NOW, changelog_partition

CLEAN_ORACLE = JAVA_DIR / "CleanOracle.java"
# small buffers: several read chunks per segment, a growth and a write-buffer overflow
SETTINGS = CleanerSettings(io_buffer_size=1200, producer_id_expiration_ms=7 * DAY)


def _round(
    ours: Path, monkeypatch, *, now: int = NOW, checkpoint: int | None = None, config=COMPACT
):
    """Our round over `ours` (a copy of the source); (result, decisions, appends per output
    segment)."""
    decisions: list[tuple[np.ndarray, ...]] = []
    appends: dict[int, list[tuple[int, int, int, int]]] = {}
    original = LogSegment.append

    def recording(self, largest_offset, largest_timestamp, shallow, records):
        appends.setdefault(self.base_offset, []).append(
            (largest_offset, largest_timestamp, shallow, len(records))
        )
        return original(self, largest_offset, largest_timestamp, shallow, records)

    monkeypatch.setattr(LogSegment, "append", recording)
    result = clean_partition(
        ours,
        config,
        now,
        cleaner_checkpoint=checkpoint,
        apply=True,
        settings=SETTINGS,
        trace=lambda *a: decisions.append(a),
    )
    monkeypatch.undo()
    assert result.status == "cleaned", result.reason
    return result, decisions, appends


def _copy(source: Path, to: Path) -> Path:
    shutil.copytree(source, to)
    return to


def _kafka_round(
    tmp_path: Path, source: Path, result, decisions, now: int = NOW
) -> dict[int, list]:
    """CleanOracle over the source segments: its chunks per output segment (by base offset)."""
    state = result.state
    bases, discardable, last = (np.concatenate(x) for x in zip(*decisions, strict=True))
    control = {
        h.base_offset: h.is_control
        for p in segment_log_files(source)
        for h in iter_batch_headers(p.read_bytes())
    }
    dirty = state.segments[floor_segment(state.segments, state.first_dirty_offset) :]
    lines = [
        " ".join(
            str(v)
            for v in (
                "round",
                now,
                COMPACT.delete_retention_ms,
                result.end_offset - 1,
                state.first_dirty_offset,
                state.first_uncleanable_offset,
                SETTINGS.io_buffer_size // 2,
                SETTINGS.max_io_buffer_size,
                COMPACT.max_message_bytes,
            )
        )
    ]
    lines += [
        f"map {source / log_file_name(s.base_offset)}"
        for s in dirty
        if s.base_offset < state.first_uncleanable_offset
    ]
    lines += [f"discardable {b}" for b in bases[discardable].tolist()]
    lines += [f"aborted {b}" for b in bases[discardable].tolist() if not control[b]]
    lines += [f"producer-last {b}" for b in bases[last].tolist()]
    for group in result.groups:
        lines.append("group")
        lines += [f"clean {source / log_file_name(b)}" for b in group]
    lines += [
        f"legacy-deletes-gone {source / log_file_name(s.base_offset)}"
        for s in state.segments
        if s.last_modified_ms <= state.delete_horizon_legacy_ms
    ]
    spec = tmp_path / f"spec-{now}.txt"
    spec.write_text("\n".join(lines) + "\n")
    chunks: dict[int, list] = {}
    for line in run_java(CLEAN_ORACLE, str(spec)).splitlines():
        _, group, max_offset, max_ts, shallow, data = line.split(" ")
        base = result.groups[int(group)][0]
        chunks.setdefault(base, []).append(
            (int(max_offset), int(max_ts), int(shallow), base64.b64decode(data))
        )
    return chunks


def _reference_segment(tmp: Path, base: int, chunks: list) -> LogSegment:
    """A segment built from Kafka's chunks with one append each, as the broker's cleaner does."""
    tmp.mkdir(parents=True, exist_ok=True)
    seg = LogSegment.open(tmp, base, COMPACT)
    for max_offset, max_ts, shallow, data in chunks:
        seg.append(max_offset, max_ts, shallow, data)
    seg.on_become_inactive_segment()
    seg.flush()
    return seg


def _same_as_kafka(tmp_path: Path, ours: Path, result, appends, kafka) -> None:
    """Each output segment: the same appends as Kafka's chunks, the same .log and indexes."""
    assert sorted(kafka) == [g[0] for g in result.groups]
    for base, chunks in kafka.items():
        assert appends[base] == [(o, t, s, len(d)) for o, t, s, d in chunks]
        ref = _reference_segment(tmp_path / f"ref-{result.end_offset}", base, chunks)
        for ours_file, ref_file in (
            (ours / log_file_name(base), ref.log_path),
            (ours / log_file_name(base).replace(".log", ".index"), ref.index_path),
            (ours / log_file_name(base).replace(".log", ".timeindex"), ref.time_index_path),
        ):
            assert ours_file.read_bytes() == ref_file.read_bytes(), ours_file.name


def test_uncompressed_segments_match_kafka_byte_for_byte(tmp_path, monkeypatch, kafka_client):
    source = changelog_partition(tmp_path / "source" / "t-0")
    ours = _copy(source, tmp_path / "ours" / "t-0")
    result, decisions, appends = _round(ours, monkeypatch)
    stats = result.stats
    # the partition exercises what it claims to: every kind of batch decision
    assert stats.batches_copied and stats.batches_rebuilt and stats.batches_removed
    assert stats.batches_emptied  # the aborted producer's last batch, as a header
    assert stats.superseded_removed and stats.tombstones_removed and stats.null_key_removed
    assert stats.aborted_removed and stats.tombstones_given_horizon
    assert any(d[2].any() for d in decisions)  # a producer's last batch
    kafka = _kafka_round(tmp_path, source, result, decisions)
    _same_as_kafka(tmp_path, ours, result, appends, kafka)
    # the chunks: a write-buffer overflow cut one short, the read buffer grew for another
    sizes = [len(c[3]) for c in kafka[result.groups[-1][0]]]
    assert sizes[0] > SETTINGS.io_buffer_size // 2 > sizes[1] and sizes[2] > sizes[0]


def test_a_later_round_removes_what_the_horizons_release_as_kafka_does(
    tmp_path, monkeypatch, kafka_client
):

    first = _copy(changelog_partition(tmp_path / "first" / "t-0"), tmp_path / "ours" / "t-0")
    result1, _, _ = _round(first, monkeypatch)
    # new data rolls a segment; two days later the horizons set in round one have passed
    active = result1.state.active_segment_base_offset
    new_base = result1.state.log_end_offset
    (first / log_file_name(new_base)).write_bytes(
        build_batch([Record(0, NOW + DAY, b"k2", b"v2-new")], base_offset=new_base)
    )
    later = NOW + 2 * DAY
    source = _copy(first, tmp_path / "source2" / "t-0")
    eager = COMPACT.with_overrides({"min.cleanable.dirty.ratio": "0.01"})
    result2, decisions, appends = _round(
        first, monkeypatch, now=later, checkpoint=result1.end_offset, config=eager
    )
    assert result2.state.first_dirty_offset == active > 0
    assert result2.stats.tombstones_removed > result1.stats.tombstones_removed
    kafka = _kafka_round(tmp_path, source, result2, decisions, now=later)
    _same_as_kafka(tmp_path, first, result2, appends, kafka)


@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
)
def test_compressed_batches_match_kafka_after_decompression(
    tmp_path, monkeypatch, kafka_client, codec
):
    source = changelog_partition(tmp_path / "source" / "t-0", codec)
    ours = _copy(source, tmp_path / "ours" / "t-0")
    result, decisions, appends = _round(ours, monkeypatch)
    assert result.stats.batches_rebuilt
    kafka = _kafka_round(tmp_path, source, result, decisions)
    read_theirs = _same_records_as_kafka(tmp_path, ours, result, appends, kafka)
    assert any(b.compression == codec.kafka_name for b in read_theirs.batches)


def _same_records_as_kafka(tmp_path: Path, ours: Path, result, appends, kafka):
    """Each output segment: the same appends as Kafka's chunks, and Kafka's client reads the
    same batch headers and records from both (compressed bytes may differ by codec library)."""
    theirs = tmp_path / f"theirs-{result.end_offset}" / "t-0"
    theirs.mkdir(parents=True)
    for base, chunks in kafka.items():
        assert [a[:3] for a in appends[base]] == [c[:3] for c in chunks]
        (theirs / log_file_name(base)).write_bytes(b"".join(c[3] for c in chunks))
    read_ours = kafka_client_read(ours)
    read_theirs = kafka_client_read(theirs)

    def batch_fields(b):
        return (
            b.segment,
            b.base_offset,
            b.last_offset,
            b.count,
            b.compression,
            b.timestamp_type,
            b.max_timestamp,
            b.producer_id,
            b.producer_epoch,
            b.base_sequence,
            b.partition_leader_epoch,
            b.transactional,
            b.control,
        )

    # the active segment is ours only (Kafka's round does not read it)
    active = log_file_name(result.state.active_segment_base_offset)
    read_ours_batches = [b for b in read_ours.batches if b.segment != active]
    assert [batch_fields(b) for b in read_ours_batches] == [
        batch_fields(b) for b in read_theirs.batches
    ]

    def record_fields(r):
        return (r.segment, r.offset, r.timestamp, r.key, r.value, r.headers, r.control)

    assert [record_fields(r) for r in read_ours.records if r.segment != active] == [
        record_fields(r) for r in read_theirs.records
    ]
    return read_theirs


LEGACY_FIXTURE = "kafkago_v1_v1c_v2_v2c_v2b_v2b_v2b_v2bc_v1b_v1bc.records.bin"


def _legacy_partition(d: Path, fixtures_dir: Path) -> Path:
    """kafka-go's mixed v1/v2 log (0..19), then a segment of every kind of legacy entry
    (20..31), then an active v2 segment."""
    d.mkdir(parents=True)
    (d / log_file_name(0)).write_bytes((fixtures_dir / "batches" / LEGACY_FIXTURE).read_bytes())
    ts = NOW - 2 * DAY
    entries = [
        # v1 gzip: x1 superseded, y's tombstone superseded by 31: rebuilt with 20 and 22
        legacy_wrapper(
            [(20, ts, b"alpha", b"a-new"), (21, ts, b"x", b"x1"), (22, ts + 1, b"x", b"x2"),
             (23, ts, b"y", None)],
            1,
            Compression.GZIP,
        )[0],
        legacy_message(24, 0, 0, -1, b"y0", None),  # a v0 tombstone: the legacy horizon's
        legacy_message(25, 1, 0, ts, None, b"no key"),  # goes
        legacy_wrapper([(26, -1, b"z", b"z1"), (27, -1, b"z", b"z2")], 0, Compression.LZ4)[0],
        legacy_wrapper(  # LogAppendTime: the rebuilt wrapper keeps its time
            [(28, ts, b"w", b"w1"), (29, ts, b"w", b"w2"), (30, ts, b"v", b"v")],
            1,
            Compression.SNAPPY,
            log_append_time=ts + 5,
        )[0],
        legacy_message(31, 1, 0, ts, b"y", b"y-back"),  # ends the round: it stays
    ]  # fmt: skip
    (d / log_file_name(20)).write_bytes(b"".join(entries))
    (d / log_file_name(32)).write_bytes(build_batch([Record(0, NOW, b"v", b"v2")], base_offset=32))
    return d


def test_legacy_entries_are_cleaned_as_kafka_cleans_them(
    tmp_path, monkeypatch, kafka_client, fixtures_dir
):
    source = _legacy_partition(tmp_path / "source" / "t-0", fixtures_dir)
    ours = _copy(source, tmp_path / "ours" / "t-0")
    result, decisions, appends = _round(ours, monkeypatch)
    stats = result.stats
    assert stats.batches_rebuilt == 3 and stats.batches_copied and stats.batches_removed
    assert stats.null_key_removed == 1 and stats.superseded_removed > 4
    kafka = _kafka_round(tmp_path, source, result, decisions)
    read = _same_records_as_kafka(tmp_path, ours, result, appends, kafka)
    kept = {r.offset: r.value for r in read.records}
    assert 21 not in kept and 23 not in kept and 24 in kept and kept[31] == b"y-back"


def test_legacy_tombstones_go_past_the_legacy_horizon_as_kafka_removes_them(
    tmp_path, monkeypatch, kafka_client, fixtures_dir
):
    # the last clean segment (0) is new; the dirty one is 3 days older: past delete.retention.ms
    source = _legacy_partition(tmp_path / "source" / "t-0", fixtures_dir)
    os.utime(source / log_file_name(0), ns=(NOW * 10**6, NOW * 10**6))
    old = (NOW - 3 * DAY) * 10**6
    os.utime(source / log_file_name(20), ns=(old, old))
    ours = _copy(source, tmp_path / "ours" / "t-0")
    eager = COMPACT.with_overrides({"min.cleanable.dirty.ratio": "0.01"})
    result, decisions, appends = _round(ours, monkeypatch, checkpoint=20, config=eager)
    assert result.state.delete_horizon_legacy_ms == NOW - COMPACT.delete_retention_ms
    assert result.stats.tombstones_removed == 1  # y0, the v0 tombstone
    kafka = _kafka_round(tmp_path, source, result, decisions)
    read = _same_records_as_kafka(tmp_path, ours, result, appends, kafka)
    assert 24 not in {r.offset for r in read.records}
