"""LogManager: loading roots in parallel, checkpoints, clean-shutdown marker, placement (§2, §6, §9)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from kafkalog_core.config import LogConfig
from kafkalog_core.errors import InvalidTopicError
from kafkalog_core.log.checkpoints import CleanShutdownFile, OffsetCheckpointFile
from kafkalog_core.log.log_manager import LogManager
from kafkalog_core.maintenance.retention import delete_old_segments


def records(n: int, first: int = 0) -> pa.Table:
    return pa.table(
        {
            "key": [b"k%d" % (first + i) for i in range(n)],
            "value": [b"v" * 50 for _ in range(n)],
            "timestamp": pa.array([1000 + first + i for i in range(n)], pa.int64()),
        }
    )


def test_create_close_reload_roundtrip(tmp_path: Path) -> None:
    roots = [tmp_path / "d1", tmp_path / "d2"]
    config = LogConfig.from_dict({"segment.bytes": "4000"})
    mgr = LogManager(roots, config)
    mgr.load()
    for p in range(4):
        log = mgr.get_or_create_log("orders", p, leader_epoch=0)
        log.append_records(records(100 + p))
    # placement: fewest partitions first -> 2 per root
    assert sorted(len(list(r.iterdir())) for r in roots) == [2, 2]
    mgr.get_log("orders", 0).log_start_offset = 50  # as if retention moved it
    delete_old_segments(mgr.get_log("orders", 0), now_ms=0)
    mgr.close()
    for root in roots:
        assert CleanShutdownFile(root).exists
        assert (root / "meta.properties").exists()
        rp = OffsetCheckpointFile(root / "recovery-point-offset-checkpoint").read()
        hw = OffsetCheckpointFile(root / "replication-offset-checkpoint").read()
        assert all(rp[tp] == hw[tp] for tp in rp)
    starts = {}
    for root in roots:
        starts.update(OffsetCheckpointFile(root / "log-start-offset-checkpoint").read())
    assert starts == {("orders", 0): 50}

    again = LogManager(roots, config)
    reports = again.load(threads=2)
    assert all(r.had_clean_shutdown for r in reports.values())
    assert not any(CleanShutdownFile(r).exists for r in roots)  # deleted while loading
    for p in range(4):
        log = again.get_log("orders", p)
        assert log.log_end_offset == 100 + p
        assert not log.load_report.recovered_segments
    assert again.get_log("orders", 0).log_start_offset == 50
    assert again.get_log("orders", 0).read_records().column("offset")[0].as_py() >= 50


def test_unclean_load_recovers_from_recovery_point(tmp_path: Path) -> None:
    config = LogConfig.from_dict({"segment.bytes": "3000"})
    mgr = LogManager([tmp_path], config)
    mgr.load()
    log = mgr.get_or_create_log("t", 0)
    log.append_records(records(200))
    log.flush()
    mgr.checkpoint()
    log.append_records(records(10, first=200))
    log.flush()
    # no close(): no marker, recovery from the checkpointed recovery point
    again = LogManager([tmp_path], config)
    report = again.load()[tmp_path]
    assert not report.had_clean_shutdown
    reloaded = again.get_log("t", 0)
    assert reloaded.log_end_offset == 210
    recovered = reloaded.load_report.recovered_segments
    assert recovered and min(recovered) > 0  # only from the recovery point's segment on


def test_unreadable_checkpoint_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "recovery-point-offset-checkpoint").write_text("7\n")
    (tmp_path / "t-0").mkdir()
    mgr = LogManager([tmp_path], LogConfig())
    report = mgr.load()[tmp_path]
    assert any("recovery-point-offset-checkpoint" in w for w in report.warnings)
    assert mgr.get_log("t", 0).log_end_offset == 0


def test_skipped_directories(tmp_path: Path) -> None:
    for name in (
        "t-0",
        "t-1.0123456789abcdef0123456789abcdef-delete",
        "t-2.0123456789abcdef0123456789abcdef-future",
        "remote-log-index-cache",
        "__cluster_metadata-0",
    ):
        (tmp_path / name).mkdir()
    mgr = LogManager([tmp_path], LogConfig())
    report = mgr.load()[tmp_path]
    assert list(mgr.logs) == [("t", 0)]
    assert report.scheduled_for_deletion == ["t-1.0123456789abcdef0123456789abcdef-delete"]
    assert set(report.skipped_dirs) >= {"remote-log-index-cache", "__cluster_metadata-0"}
    assert mgr.delete_scheduled_dirs() == [tmp_path / "t-1.0123456789abcdef0123456789abcdef-delete"]
    assert not (tmp_path / "t-1.0123456789abcdef0123456789abcdef-delete").exists()


@pytest.mark.parametrize("topic", ["..", "a/b", "../../etc", "", "x" * 300])
def test_topic_cannot_escape_root(tmp_path: Path, topic: str) -> None:
    mgr = LogManager([tmp_path / "root"], LogConfig())
    mgr.load()
    with pytest.raises(InvalidTopicError):
        mgr.get_or_create_log(topic, 0)


def test_cleaner_checkpoint_entries_preserved(tmp_path: Path) -> None:
    OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").write({("other", 3): 17})
    mgr = LogManager([tmp_path], LogConfig())
    mgr.load()
    mgr.get_or_create_log("t", 0).append_records(records(5))
    mgr.close()
    assert OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").read() == {("other", 3): 17}
    assert OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint").read() == {("t", 0): 5}


def test_topic_configs_apply(tmp_path: Path) -> None:
    small = LogConfig.from_dict({"segment.bytes": "1000"})
    mgr = LogManager([tmp_path], LogConfig(), {"small": small})
    mgr.load()
    mgr.get_or_create_log("small", 0).append_records(records(100), max_batch_bytes=200)
    mgr.get_or_create_log("big", 0).append_records(records(100), max_batch_bytes=200)
    assert len(mgr.get_log("small", 0).segments) > 1
    assert len(mgr.get_log("big", 0).segments) == 1
