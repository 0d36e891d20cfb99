"""Real broker data (§15): read it all, rebuild its indexes byte for byte, load a whole log dir."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from kafkalog_core.config import LogConfig
from kafkalog_core.log.checkpoints import OffsetCheckpointFile
from kafkalog_core.log.log_manager import LogManager
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.log.segment.log_segment import LogSegment
from kafkalog_core.maintenance.verify import verify_time_index
from kafkalog_core.record.batch import Compression, TimestampType


def copy_writable(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for p in [dst, *dst.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    return dst


def kafka_python_records(log_files: list[Path]) -> tuple[list[int], list[tuple]]:
    """(record offsets, batch facts) decoded by kafka-python, an independent implementation."""
    offsets: list[int] = []
    facts: list[tuple] = []
    for f in log_files:
        mr = MemoryRecords(f.read_bytes())
        while mr.has_next():
            batch = mr.next_batch()
            facts.append(
                (
                    batch.base_offset + batch.last_offset_delta,
                    batch.compression_type,
                    batch.timestamp_type,
                )
            )
            offsets.extend(r.offset for r in batch)
    return offsets, facts


@pytest.fixture
def broker2x(fixtures_dir: Path, tmp_path: Path) -> Path:
    return copy_writable(
        fixtures_dir / "segments/broker-2x-interval4096/test_topic_a-0", tmp_path / "test_topic_a-0"
    )


def test_broker2x_read_every_record(broker2x: Path) -> None:
    log = PartitionLog.open(broker2x, LogConfig(), had_clean_shutdown=True)
    expected, _ = kafka_python_records(sorted(broker2x.glob("*.log")))
    got = log.read_records()
    assert got.column("offset").to_pylist() == expected
    assert log.log_end_offset == expected[-1] + 1
    assert not log.load_report.rebuilt_indexes  # the broker's indexes are valid


def test_broker2x_rebuilt_indexes_match_broker(broker2x: Path) -> None:
    original = {p.name: p.read_bytes() for p in broker2x.iterdir()}
    bases = sorted(int(p.name[:20]) for p in broker2x.glob("*.log"))
    assert len(bases) > 30
    for base in bases:
        broker_seg = LogSegment(broker2x, base)
        assert verify_time_index(broker_seg) == []  # broker convention: record-level offset
        broker_ts = broker_seg.time_index.entries_array().timestamps.copy()
        broker_seg.release_handles()
        seg = LogSegment(broker2x, base, index_interval_bytes=4096)
        assert seg.recover() == 0
        seg.close()
        name = f"{base:020d}"
        assert (broker2x / f"{name}.index").read_bytes() == original[f"{name}.index"], base
        rebuilt = LogSegment(broker2x, base)
        assert verify_time_index(rebuilt) == []  # current convention: batch last offset
        assert list(rebuilt.time_index.entries_array().timestamps) == list(broker_ts)
        rebuilt.release_handles()


def test_read_only_fixture_reads_in_place(fixtures_dir: Path) -> None:
    src = fixtures_dir / "segments/broker-2x-interval4096/test_topic_a-0"
    seg = LogSegment(src, 0)
    assert seg.read(0, 100, min_one_message=True).position == 0
    assert verify_time_index(seg) == []
    seg.release_handles()


def test_verify_time_index_rejects_wrong_offsets(broker2x: Path) -> None:
    seg = LogSegment(broker2x, 0)
    ts, off = seg.time_index.entries_array()
    seg.time_index.truncate()
    seg.time_index.maybe_append(int(ts[0]), int(off[0]) + 1)  # neither convention
    assert verify_time_index(seg)


def test_broker2x_indexes_deleted_are_rebuilt_on_open(broker2x: Path) -> None:
    original = {p.name: p.read_bytes() for p in broker2x.glob("*.index")}
    for p in broker2x.glob("*.index"):
        p.unlink()
    for p in broker2x.glob("*.timeindex"):
        p.unlink()
    log = PartitionLog.open(broker2x, LogConfig(), had_clean_shutdown=True)
    log.close()
    assert len(log.load_report.rebuilt_indexes) == len(original)
    assert {p.name: p.read_bytes() for p in broker2x.glob("*.index")} == original


def test_confluent_logdir_loads(fixtures_dir: Path, tmp_path: Path) -> None:
    src = fixtures_dir / "logdirs/confluent-5.1.2"
    root = copy_writable(src, tmp_path / "logs")
    hw = OffsetCheckpointFile(src / "replication-offset-checkpoint").read()
    rp = OffsetCheckpointFile(src / "recovery-point-offset-checkpoint").read()
    mgr = LogManager([root], LogConfig())
    report = mgr.load(threads=4)[root]
    dirs = sorted(p.name for p in src.iterdir() if p.is_dir())
    assert len(mgr.logs) == len(dirs) == 102
    assert not report.warnings and not report.had_clean_shutdown
    saw_lz4 = saw_log_append_time = False
    for (topic, partition), log in mgr.logs.items():
        src_dir = src / f"{topic}-{partition}"
        logs = sorted(src_dir.glob("*.log"))
        offsets, facts = kafka_python_records(logs)
        assert log.load_report.truncated_bytes == 0
        if not logs:  # retention emptied it: Kafka starts an empty segment at the log start
            assert (log.log_start_offset, log.log_end_offset) == (0, 0)
            continue
        assert all(reason == "missing .index" for _, reason in log.load_report.rebuilt_indexes)
        assert len(log.load_report.rebuilt_indexes) == len(logs)  # no index files at all upstream
        leo = facts[-1][0] + 1 if facts else int(logs[-1].name[:20])
        assert log.log_end_offset == leo
        assert log.log_start_offset == int(logs[0].name[:20])
        assert hw[(topic, partition)] == leo  # single broker: HW = LEO
        assert log.recovery_point == min(rp.get((topic, partition), 0), leo)
        got = log.read_records()
        assert got.column("offset").to_pylist() == offsets
        saw_lz4 |= any(c == Compression.LZ4 for _, c, _ in facts)
        saw_log_append_time |= any(t == TimestampType.LOG_APPEND_TIME for _, _, t in facts)
        if offsets:
            first = log.read(offsets[0], 10**6)
            assert int.from_bytes(first.records[:8], "big") == log.log_start_offset
    assert saw_lz4 and saw_log_append_time
    # reading from our rebuilt indexes works the same after a clean close and reload
    mgr.close()
    again = LogManager([root], LogConfig())
    again.load()
    for tp, log in again.logs.items():
        assert log.log_end_offset == mgr.logs[tp].log_end_offset
        assert not log.load_report.rebuilt_indexes
    # note: this dir's compacted topics were never compacted (no offset gaps); gaps are
    # covered with synthetic cleaned batches in test_recovery.py
