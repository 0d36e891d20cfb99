"""PartitionLog: append, roll, read, ListOffsets, retention decisions (§5, §7, §13 cases 30-35)."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from kafka.record.memory_records import MemoryRecords

from kafkalog_core.config import LogConfig
from kafkalog_core.errors import InvalidOffsetError, OffsetOutOfRangeError, RecordTooLargeError
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.maintenance.retention import delete_old_segments, log_retention_decisions
from kafkalog_core.record.encoder import BatchOptions, encode_records


def cfg(**kw) -> LogConfig:
    return LogConfig.from_dict({k.replace("_", "."): str(v) for k, v in kw.items()})


def table(
    n: int,
    *,
    start_ts: int = 1000,
    ts: list[int] | None = None,
    value_size: int = 8,
    first: int = 0,
) -> pa.Table:
    stamps = ts if ts is not None else [start_ts + first + i for i in range(n)]
    return pa.table(
        {
            "key": [b"k%07d" % (first + i) for i in range(n)],
            "value": [(b"%08d" % (first + i)) * (value_size // 8) for i in range(n)],
            "timestamp": pa.array(stamps, pa.int64()),
        }
    )


def singles(log: PartitionLog, n: int, **kw):
    """n single-record batches at the LEO (the facts sheet's 'record' = one batch, one record)."""
    leo = log.log_end_offset
    return encode_records(
        table(n, first=leo, **kw), base_offset=leo, options=BatchOptions(max_batch_bytes=62)
    )


def batch_size() -> int:
    return int(encode_records(table(1), options=BatchOptions(max_batch_bytes=62)).sizes[0])


def kafka_python_offsets(path: Path) -> list[int]:
    records = MemoryRecords(path.read_bytes())
    out = []
    while records.has_next():
        batch = records.next_batch()
        out.extend(r.offset for r in batch)
    return out


# ---- §13 case 30, 31: size-based roll ------------------------------------------------------------
def test_case30_roll_by_size(tmp_path: Path) -> None:
    s = batch_size()
    log = PartitionLog.create(tmp_path / "t-0", cfg(segment_bytes=5 * s))
    for _ in range(15):
        log.append_batches(singles(log, 1))
    assert [seg.base_offset for seg in log.segments] == [0, 5, 10]
    assert [seg.size for seg in log.segments] == [5 * s] * 3


def test_case31_size_based_roll_first_segment_holds_9(tmp_path: Path) -> None:
    s = batch_size()
    log = PartitionLog.create(tmp_path / "t-0", cfg(segment_bytes=10 * (s - 1)))
    for _ in range(11):
        log.append_batches(singles(log, 1))
    assert len(log.segments) == 2
    assert log.segments[0].size == 9 * s


@pytest.mark.parametrize("by", ["size", "time"])
def test_roll_in_one_call_equals_roll_per_append(tmp_path: Path, by: str) -> None:
    """Issue 36 item 8: Kafka's maybeRoll runs once per append, with the whole set's size and
    largest timestamp. A Java producer's request holds one batch per partition, so a broker fed
    these batches appends them one by one: `append_batches` of many batches is that sequence
    of one-batch appends, whatever the sizes and timestamps (a time roll here depends on each
    batch's own max timestamp, out of order too)."""
    s = batch_size()
    settings = {"segment_bytes": 7 * s, "index_interval_bytes": 2 * s}
    stamps = None
    if by == "time":
        settings = {"segment_ms": 100, "index_interval_bytes": 2 * s}
        stamps = [(i * 37) % 250 + (i // 9) * 120 for i in range(40)]  # goes back and forth
    one = PartitionLog.create(tmp_path / "a-0", cfg(**settings))
    info = one.append_batches(singles(one, 40, ts=stamps))
    assert len(info.rolled_segments) >= 3
    many = PartitionLog.create(tmp_path / "b-0", cfg(**settings))
    for i in range(40):
        many.append_batches(singles(many, 1, ts=None if stamps is None else stamps[i : i + 1]))
    one.close()
    many.close()
    for x, y in zip(
        sorted((tmp_path / "a-0").iterdir()), sorted((tmp_path / "b-0").iterdir()), strict=True
    ):
        assert x.name == y.name and x.read_bytes() == y.read_bytes(), x.name


# ---- §13 case 32, 33: retention ------------------------------------------------------------------
def _three_segments(tmp_path: Path, **extra) -> PartitionLog:
    s = batch_size()
    log = PartitionLog.create(tmp_path / "t-0", cfg(segment_bytes=5 * s, **extra))
    for _ in range(15):
        log.append_batches(singles(log, 1, start_ts=10, ts=[10]))
    assert len(log.segments) == 3
    return log


@pytest.mark.parametrize("factor,remaining", [(10, 2), (15, 3)])
def test_case32_size_retention(tmp_path: Path, factor: int, remaining: int) -> None:
    s = batch_size()
    log = _three_segments(tmp_path, retention_bytes=factor * s, retention_ms=-1)
    delete_old_segments(log)
    assert len(log.segments) == remaining


@pytest.mark.parametrize(
    "policy,remaining,empty_active",
    [("delete", 1, True), ("compact", 3, False), ("compact,delete", 1, True)],
)
def test_case33_time_retention(
    tmp_path: Path, policy: str, remaining: int, empty_active: bool
) -> None:
    log = _three_segments(tmp_path, retention_ms=10000, cleanup_policy=policy)
    delete_old_segments(log, now_ms=10**12)
    assert len(log.segments) == remaining
    if empty_active:
        assert log.active_segment.size == 0
        assert log.log_start_offset == log.log_end_offset == 15
        assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log.deleted")) == [
            "00000000000000000000.log.deleted",
            "00000000000000000005.log.deleted",
            "00000000000000000010.log.deleted",
        ]


def test_deleting_segments_raises_the_recovery_point_to_the_log_start(tmp_path: Path) -> None:
    s = batch_size()
    log = _three_segments(tmp_path, retention_bytes=10 * s, retention_ms=-1)
    log.recovery_point = 2  # e.g. opened from a checkpoint written before the last flush
    delete_old_segments(log)
    assert log.log_start_offset == 5
    assert log.recovery_point == 5


def test_log_start_offset_retention(tmp_path: Path) -> None:
    log = _three_segments(tmp_path)
    log.log_start_offset = 7
    assert [d.base_offset for d in log_retention_decisions(log, now_ms=10) if d.delete] == [0]
    log.log_start_offset = 10
    assert [d.base_offset for d in log_retention_decisions(log, now_ms=10) if d.delete] == [0, 5]


# ---- §13 case 34: time roll with jitter --------------------------------------------------------------
def test_case34_time_roll_with_jitter(tmp_path: Path) -> None:
    seg_ms, max_jitter = 3600, 1200
    log = PartitionLog.create(
        tmp_path / "t-0", cfg(segment_ms=seg_ms, segment_jitter_ms=max_jitter)
    )
    jitter = log.active_segment.roll_jitter_ms
    assert 0 <= jitter < max_jitter
    t0 = 1_000_000
    log.append_batches(singles(log, 1, ts=[t0]), now_ms=t0)
    t = t0 + seg_ms - max_jitter
    log.append_batches(singles(log, 1, ts=[t]), now_ms=t)
    assert len(log.segments) == 1
    t += max_jitter - jitter + 1
    log.append_batches(singles(log, 1, ts=[t]), now_ms=t)
    assert len(log.segments) == 2


def test_time_roll_uses_record_timestamps_in_one_call(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0", cfg(segment_ms=100))
    info = log.append_batches(singles(log, 10, ts=[0, 50, 100, 101, 150, 201, 202, 300, 302, 400]))
    # rbt 0: 101-0 > 100 rolls at 3; rbt 101: 202-101 > 100 rolls at 6; rbt 202: 400 rolls at 9
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    assert info.rolled_segments == [3, 6, 9]


# ---- §13 case 35: reopen then truncate ---------------------------------------------------------------
def test_case35_reopen_then_truncate(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0", cfg())
    for _ in range(100):
        log.append_batches(singles(log, 1))
    log.flush()
    reopened = PartitionLog.open(tmp_path / "t-0", cfg(), had_clean_shutdown=False)
    reopened.truncate_to(3)
    assert len(reopened.segments) == 1 and reopened.log_end_offset == 3


# ---- append_records, reads, kafka-python cross-check ---------------------------------------------------
def test_append_records_read_back_and_kafka_python(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0", cfg(segment_bytes=20000))
    data = table(1000, value_size=64)
    info = log.append_records(data)
    assert (info.first_offset, info.last_offset) == (0, 999)
    assert log.log_end_offset == 1000 and len(log.segments) > 3
    got = log.read_records()
    assert got.column("offset").to_pylist() == list(range(1000))
    assert got.column("value").to_pylist() == data.column("value").to_pylist()
    assert log.read_records(500, 510).column("offset").to_pylist() == list(range(500, 510))
    log.close()
    offsets = []
    for seg in sorted((tmp_path / "t-0").glob("*.log")):
        offsets += kafka_python_offsets(seg)
    assert offsets == list(range(1000))


def test_log_append_time_and_lz4(tmp_path: Path) -> None:
    config = cfg(message_timestamp_type="LogAppendTime", compression_type="lz4")
    log = PartitionLog.create(tmp_path / "t-0", config)
    log.append_records(table(50), now_ms=123456)
    got = log.read_records()
    assert set(got.column("timestamp").to_pylist()) == {123456}
    log.close()
    batches = MemoryRecords((tmp_path / "t-0" / "00000000000000000000.log").read_bytes())
    batch = batches.next_batch()
    assert batch.compression_type == 3 and batch.timestamp_type == 1


def test_read_and_offset_out_of_range(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0", cfg(segment_bytes=2000))
    log.append_batches(singles(log, 100))
    info = log.read(57, 10**6)
    assert info.records[:8] == (57).to_bytes(8, "big")
    assert log.read(100, 100).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(101, 100)


def test_fetch_offset_by_timestamp(tmp_path: Path) -> None:
    s = batch_size()
    log = PartitionLog.create(tmp_path / "t-0", cfg(segment_bytes=10 * s, index_interval_bytes=s))
    log.append_batches(singles(log, 50, ts=[10 * i for i in range(50)]))
    assert log.fetch_offset_by_timestamp(-2).offset == 0
    assert log.fetch_offset_by_timestamp(-1).offset == 50
    top = log.fetch_offset_by_timestamp(-3)
    assert (top.timestamp, top.offset) == (490, 49)
    for t, expected in [(0, 0), (1, 1), (255, 26), (490, 49)]:
        assert log.fetch_offset_by_timestamp(t).offset == expected
    assert log.fetch_offset_by_timestamp(491) is None


def test_base_offset_must_equal_leo(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0", cfg())
    with pytest.raises(InvalidOffsetError):
        log.append_batches(encode_records(table(3), base_offset=5))


def test_max_message_bytes(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0", cfg(max_message_bytes=500))
    big = encode_records(table(1, value_size=800), options=BatchOptions(max_message_bytes=10**6))
    with pytest.raises(RecordTooLargeError):
        log.append_batches(big)


def test_leader_epoch_stamp_checkpoint_and_partition_metadata(tmp_path: Path) -> None:
    tid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    log = PartitionLog.create(tmp_path / "t-0", cfg(), topic_id=tid, leader_epoch=0)
    log.append_batches(encode_records(table(10)))
    log.close()
    d = tmp_path / "t-0"
    assert (d / "leader-epoch-checkpoint").read_bytes() == b"0\n1\n0 0\n"
    meta = (d / "partition.metadata").read_bytes()
    assert meta.startswith(b"version: 0\ntopic_id: ") and not meta.endswith(b"\n")
    raw = (d / "00000000000000000000.log").read_bytes()
    assert raw[12:16] == b"\x00\x00\x00\x00"
    batch = MemoryRecords(raw).next_batch()
    assert batch.validate_crc()


def test_layout_is_deterministic(tmp_path: Path) -> None:
    data = table(20000, value_size=100)
    for name in ("a-0", "b-0"):
        log = PartitionLog.create(tmp_path / name, cfg(segment_bytes=300000), leader_epoch=0)
        log.append_records(data)
        log.close()
    a = sorted((tmp_path / "a-0").iterdir())
    b = sorted((tmp_path / "b-0").iterdir())
    assert [p.name for p in a] == [p.name for p in b]
    assert len([p for p in a if p.suffix == ".log"]) > 3
    for x, y in zip(a, b, strict=True):
        assert x.read_bytes() == y.read_bytes(), x.name


def test_indexes_of_written_log_equal_recovered(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0", cfg(segment_bytes=200000))
    log.append_records(table(10000, value_size=64), now_ms=0)
    for _ in range(20):
        log.append_batches(singles(log, 3))
    log.close()
    d = tmp_path / "t-0"
    before = {p.name: p.read_bytes() for p in d.iterdir() if p.suffix in (".index", ".timeindex")}
    for p in d.iterdir():
        if p.suffix in (".index", ".timeindex"):
            p.unlink()
    reopened = PartitionLog.open(d, cfg(), had_clean_shutdown=True)
    reopened.close()
    after = {p.name: p.read_bytes() for p in d.iterdir() if p.suffix in (".index", ".timeindex")}
    assert after == before
    assert any(len(v) > 0 for v in before.values())


def test_size_and_segments_api(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path / "t-0", cfg(segment_bytes=3000), base_offset=100)
    log.append_batches(singles(log, 100))
    assert log.size_in_bytes == sum(s.size for s in log.segments)
    assert log.segments[0].base_offset == 100 and log.log_start_offset == 100
    assert np.all(np.diff([s.base_offset for s in log.segments]) > 0)


@pytest.mark.parametrize("write_behind", [True, False])
@pytest.mark.parametrize("chunk", [1, 3000, 1 << 30])
def test_streamed_append_records_writes_the_same_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, write_behind: bool
) -> None:
    """append_records streams the encode in pieces through one buffer; the files (segments,
    rolls, both indexes, checkpoints) are those of one append_batches of the whole encode."""
    from kafkalog_core.record import encoder

    monkeypatch.setattr(encoder, "DEFAULT_CHUNK_BYTES", chunk)
    # max.message.bytes within segment.bytes: append_records may stream (see there)
    config = cfg(segment_bytes=20_000, index_interval_bytes=700, max_message_bytes=5000)
    rows = table(3000, value_size=32)
    pieces = []
    real = PartitionLog.append_batches

    def counting(self, encoded, **kw):
        pieces.append(len(encoded))
        return real(self, encoded, **kw)

    monkeypatch.setattr(PartitionLog, "append_batches", counting)
    streamed = PartitionLog.create(tmp_path / "a-0", config, leader_epoch=2)
    info = streamed.append_records(rows, now_ms=0, max_batch_bytes=900, write_behind=write_behind)
    assert (len(pieces) > 10) == (chunk < 1 << 30)
    whole = PartitionLog.create(tmp_path / "b-0", config, leader_epoch=2)
    expected = whole.append_batches(
        encode_records(rows, options=whole.batch_options(0, 900)), now_ms=0
    )
    assert info == expected
    assert len(streamed.segments) > 3
    streamed.close()
    whole.close()
    a, b = sorted((tmp_path / "a-0").iterdir()), sorted((tmp_path / "b-0").iterdir())
    assert [p.name for p in a] == [p.name for p in b]
    for x, y in zip(a, b, strict=True):
        assert x.read_bytes() == y.read_bytes(), x.name
    first_log = tmp_path / "a-0" / "00000000000000000000.log"
    assert kafka_python_offsets(first_log) == list(range(streamed.segments[1].base_offset))


def test_append_records_too_large_for_segment_appends_nothing(tmp_path: Path) -> None:
    """A record larger than segment.bytes (with max.message.bytes above it) fails the whole
    call before any piece is written, as a single append would."""
    log = PartitionLog.create(tmp_path / "t-0", cfg(segment_bytes=2000, max_message_bytes=50_000))
    rows = pa.table({"value": [b"x" * 100] * 50 + [b"y" * 5000]})
    with pytest.raises(RecordTooLargeError, match="segment.bytes"):
        log.append_records(rows, now_ms=0, max_batch_bytes=500)
    assert log.log_end_offset == 0 and log.size_in_bytes == 0


def test_write_behind_failure_reaches_the_caller_and_leaves_whole_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append failing on the writer thread is raised by append_records; the pieces before
    it are whole and the log stays consistent (LEO = what was appended; it reopens)."""
    from kafkalog_core.record import encoder

    monkeypatch.setattr(encoder, "DEFAULT_CHUNK_BYTES", 4000)
    config = cfg(segment_bytes=50_000, max_message_bytes=10_000)  # pieces: see append_records
    log = PartitionLog.create(tmp_path / "t-0", config, leader_epoch=0)
    real = PartitionLog.append_batches
    calls = []

    def failing(self, encoded, **kw):
        calls.append(len(encoded))
        if len(calls) == 3:
            raise OSError("disk full (injected)")
        return real(self, encoded, **kw)

    monkeypatch.setattr(PartitionLog, "append_batches", failing)
    with pytest.raises(OSError, match="injected"):
        log.append_records(table(2000, value_size=32), now_ms=0, max_batch_bytes=900)
    assert len(calls) == 3
    leo = log.log_end_offset
    assert 0 < leo < 2000
    log.close()
    monkeypatch.setattr(PartitionLog, "append_batches", real)
    reopened = PartitionLog.open(tmp_path / "t-0", config)
    assert reopened.log_end_offset == leo
    assert reopened.read_records(0).num_rows == leo
