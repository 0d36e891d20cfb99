"""Retention decisions (§7) from segment facts, and the two-phase delete on files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kafkalog_core.config import LogConfig
from kafkalog_core.errors import LogDirError
from kafkalog_core.log.checkpoints import EpochEntry, LeaderEpochCheckpointFile
from kafkalog_core.log.names import segment_log_files
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.maintenance.cleaner_audit import partition_cleaning_state
from kafkalog_core.maintenance.rebuild import rebuild_partition
from kafkalog_core.maintenance.retention import (
    UNFINISHED_QUARANTINE,
    QuarantineFile,
    SegmentFacts,
    backfill_risk,
    delete_quarantine_files,
    mark_segments_deleted,
    purge_deleted_files,
    quarantine_decision,
    raised_recovery_points,
    read_quarantine_files,
    read_segment_facts,
    retention_decisions,
    truncate_leader_epochs_from_start,
)
from kafkalog_core.maintenance.segment_facts import as_loaded
from tests.log.test_partition_log import batch_size, singles

DAY = 86_400_000
NOW = 100 * DAY


def cfg(**kw) -> LogConfig:
    return LogConfig.from_dict({k.replace("_", "."): str(v) for k, v in kw.items()})


def seg(base: int, nxt: int, *, size: int = 100, ts: int = NOW, mtime: int = NOW) -> SegmentFacts:
    return SegmentFacts(base, size, nxt, ts, mtime, batches=nxt - base)


def decide(segs, config, **kw):
    kw.setdefault("now_ms", NOW)
    kw.setdefault("log_start_offset", 0)
    return [(d.delete, d.rule) for d in retention_decisions(segs, config, **kw)]


def test_time_breach_deletes_a_prefix() -> None:
    segs = [
        seg(0, 10, ts=NOW - 9 * DAY),
        seg(10, 20, ts=NOW - 8 * DAY),
        seg(20, 30, ts=NOW - 6 * DAY),
    ]
    assert decide(segs, cfg()) == [(True, "retention.ms"), (True, "retention.ms"), (False, "")]
    # a young segment in between protects everything after it (only a prefix goes)
    segs = [
        seg(0, 10, ts=NOW - 9 * DAY),
        seg(10, 20, ts=NOW - DAY),
        seg(20, 30, ts=NOW - 9 * DAY),
        seg(30, 31),
    ]
    decisions = retention_decisions(segs, cfg(), now_ms=NOW, log_start_offset=0)
    assert [d.delete for d in decisions] == [True, False, False, False]
    assert "within retention.ms" in decisions[1].reason
    assert "only a prefix" in decisions[2].reason
    assert "within retention.ms" in decisions[3].reason


def test_time_uses_file_mtime_when_no_timestamp() -> None:
    segs = [seg(0, 10, ts=-1, mtime=NOW - 8 * DAY), seg(10, 20, ts=-1, mtime=NOW), seg(20, 21)]
    assert decide(segs, cfg()) == [(True, "retention.ms"), (False, ""), (False, "")]
    assert decide(segs, cfg(retention_ms=-1)) == [(False, "")] * 3


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        (250, [True, False, False, False]),  # excess 150 covers one 100 B segment, then 50 < 100
        (300, [True, False, False, False]),  # excess 100: exactly one segment
        (301, [False, False, False, False]),  # excess 99 covers no whole segment
        (400, [False, False, False, False]),
        (0, [True, True, True, True]),  # everything: a broker rolls a new active segment first
    ],
)
def test_size_breach_the_way_kafka_counts_the_excess(limit: int, expected: list[bool]) -> None:
    segs = [seg(0, 10), seg(10, 20), seg(20, 30), seg(30, 40)]
    got = decide(segs, cfg(retention_bytes=limit))
    assert [d for d, _ in got] == expected
    assert {r for d, r in got if d} <= {"retention.bytes"}


def test_log_start_offset_breach_even_for_compact_only() -> None:
    segs = [seg(0, 10, ts=0), seg(10, 20, ts=0), seg(20, 30, ts=0)]
    compact = cfg(cleanup_policy="compact")
    assert decide(segs, compact, log_start_offset=15) == [
        (True, "log-start-offset"),
        (False, ""),
        (False, ""),
    ]
    assert decide(segs, compact, log_start_offset=0) == [(False, "")] * 3
    d = retention_decisions(segs, compact, now_ms=NOW, log_start_offset=0)
    assert "has no delete" in d[0].reason


def test_rules_apply_in_kafka_order() -> None:
    segs = [
        seg(0, 10, ts=NOW - 9 * DAY),
        seg(10, 20, ts=NOW - 9 * DAY),
        seg(20, 30, ts=NOW - 9 * DAY),
        seg(30, 31),
    ]
    got = decide(segs, cfg(retention_bytes=200), log_start_offset=10)
    assert got == [
        (True, "log-start-offset"),
        (True, "retention.bytes"),
        (True, "retention.ms"),
        (False, ""),
    ]


def test_high_watermark_bounds_deletion() -> None:
    segs = [seg(0, 10, ts=0), seg(10, 20, ts=0), seg(20, 30, ts=0)]
    got = retention_decisions(segs, cfg(), now_ms=NOW, log_start_offset=0, high_watermark=15)
    assert [d.delete for d in got] == [True, False, False]
    assert "high watermark 15" in got[1].reason


def test_a_breached_active_segment_goes_as_a_broker_rolls_it() -> None:
    """Issue 37 item 2: Kafka's deletableSegments takes a non-empty active segment that breaches
    retention (HW = LEO); deleteSegments rolls a new empty one first. An empty one stays."""
    segs = [seg(0, 10, ts=0), seg(10, 20, ts=0)]
    got = retention_decisions(segs, cfg(), now_ms=NOW, log_start_offset=0)
    assert [(d.delete, d.rule) for d in got] == [(True, "retention.ms"), (True, "retention.ms")]
    assert "rolls a new empty one at 20" in got[1].reason
    empty_active = [seg(0, 10, ts=0), seg(10, 10, size=0, ts=-1, mtime=0)]
    got = retention_decisions(empty_active, cfg(), now_ms=NOW, log_start_offset=0)
    assert [(d.delete, d.rule) for d in got] == [(True, "retention.ms"), (False, "")]
    assert got[1].reason == "empty active segment (never deleted)"
    # above the high watermark it stays
    got = retention_decisions(segs, cfg(), now_ms=NOW, log_start_offset=0, high_watermark=15)
    assert [d.delete for d in got] == [True, False]


def test_backfill_risk_only_for_fresh_files_with_old_create_times() -> None:
    old_fresh = seg(0, 10, ts=NOW - 30 * DAY, mtime=NOW - DAY)
    assert backfill_risk(old_fresh, cfg(), NOW)
    assert not backfill_risk(seg(0, 10, ts=NOW - 30 * DAY, mtime=NOW - 29 * DAY), cfg(), NOW)
    assert not backfill_risk(old_fresh, cfg(message_timestamp_type="LogAppendTime"), NOW)
    assert not backfill_risk(old_fresh, cfg(retention_ms=-1), NOW)
    assert not backfill_risk(old_fresh, cfg(cleanup_policy="compact"), NOW)


def _log(tmp_path: Path) -> Path:
    log = PartitionLog.create(tmp_path / "t-0", cfg(segment_bytes=5 * batch_size()))
    for _ in range(3):
        log.append_batches(singles(log, 5, start_ts=10))
    log.close()
    return tmp_path / "t-0"


def test_read_segment_facts_matches_the_log(tmp_path: Path) -> None:
    pdir = _log(tmp_path)
    facts = [read_segment_facts(p) for p in segment_log_files(pdir)]
    assert [f.base_offset for f in facts][:2] == [0, facts[1].base_offset]
    assert all(a.next_offset == b.base_offset for a, b in zip(facts, facts[1:], strict=False))
    assert facts[-1].next_offset == 15
    assert sum(f.batches for f in facts) == 15
    assert facts[0].max_timestamp == max(10 + i for i in range(facts[0].next_offset))
    assert all(f.corrupt_at is None for f in facts)


def test_two_phase_delete_and_epochs(tmp_path: Path) -> None:
    pdir = _log(tmp_path)
    LeaderEpochCheckpointFile(pdir / "leader-epoch-checkpoint").write(
        [EpochEntry(0, 0), EpochEntry(3, 12)]
    )
    logs = segment_log_files(pdir)
    victim = int(logs[0].name[:20])
    nxt = int(logs[1].name[:20])
    renamed = mark_segments_deleted(pdir, [victim])
    assert f"{victim:020d}.log.deleted" in renamed and not logs[0].exists()
    assert truncate_leader_epochs_from_start(pdir, nxt)
    assert LeaderEpochCheckpointFile(pdir / "leader-epoch-checkpoint").read() == [
        EpochEntry(0, nxt),
        EpochEntry(3, 12),
    ]
    assert sorted(purge_deleted_files(pdir)) == sorted(renamed)
    assert not list(pdir.glob("*.deleted"))
    reopened = PartitionLog.open(pdir, cfg(segment_bytes=5 * batch_size()))
    assert reopened.segments[0].base_offset == nxt and reopened.log_end_offset == 15


# ---- quarantine files (rebuild-index's corrupt tails) -----------------------------------------
def test_quarantine_files_are_found_by_name(tmp_path: Path) -> None:
    names = [
        "00000000000000000005.log.2.quarantine",
        "00000000000000000005.log.quarantine",
        "00000000000000000000.log.quarantine",
        "00000000000000000005.log.10.quarantine",
        "00000000000000000005.log.1.quarantine",
    ]
    unfinished = "00000000000000000000.log.quarantine.tmp"  # a copy a killed rebuild left
    decoys = [
        "00000000000000000000.log",
        "00000000000000000000.index.quarantine",
        "00000000000000000000.index.quarantine.tmp",
        "x.log.quarantine",
        "00000000000000000000.log.0.quarantine",
        "00000000000000000000.log.bad",  # another suffix: not asked for
    ]
    for name in [*names, unfinished, *decoys]:
        (tmp_path / name).write_bytes(b"x" * len(name))
    found = read_quarantine_files(tmp_path)
    assert [(q.path.name, q.unfinished) for q in found] == [
        ("00000000000000000000.log.quarantine", False),
        (unfinished, True),
        ("00000000000000000005.log.quarantine", False),
        ("00000000000000000005.log.1.quarantine", False),
        ("00000000000000000005.log.2.quarantine", False),
        ("00000000000000000005.log.10.quarantine", False),
    ]
    assert [q.base_offset for q in found] == [0, 0, 5, 5, 5, 5]
    assert found[0].size == len(found[0].path.name)
    decision = quarantine_decision(found[1], cfg(retention_ms=-1), NOW)  # even kept-forever topics
    assert (decision.delete, decision.rule) == (True, UNFINISHED_QUARANTINE)


def test_retention_reads_the_suffix_rebuild_wrote(tmp_path: Path) -> None:
    pdir = _log(tmp_path)
    first = segment_log_files(pdir)[0]
    data = bytearray(first.read_bytes())
    data[-5] ^= 0xFF  # the last batch's CRC no longer matches
    first.write_bytes(bytes(data))
    rebuild_partition(pdir, 4096, quarantine_suffix=".bad")
    assert read_quarantine_files(pdir) == []  # the default suffix finds none of them
    found = read_quarantine_files(pdir, ".bad")
    assert [q.path.name for q in found] == sorted(p.name for p in pdir.glob("*.log.bad"))
    assert len(found) == 3  # the corrupt tail and the two segments after it
    (pdir / (first.name + ".bad.tmp")).write_bytes(b"partial")
    assert [q.unfinished for q in read_quarantine_files(pdir, ".bad")] == [
        False,
        True,
        False,
        False,
    ]


@pytest.mark.parametrize("suffix", ["", ".", ".log", ".index", ".deleted", ".tmp", ".1", "bad"])
def test_a_suffix_that_could_name_a_segment_file_is_refused(tmp_path: Path, suffix: str) -> None:
    pdir = _log(tmp_path)
    before = sorted(p.name for p in pdir.iterdir())
    with pytest.raises(LogDirError, match="quarantine suffix"):
        read_quarantine_files(pdir, suffix)
    with pytest.raises(LogDirError, match="quarantine suffix"):
        rebuild_partition(pdir, 4096, quarantine_suffix=suffix)
    assert sorted(p.name for p in pdir.iterdir()) == before


def _quarantined(tmp_path: Path, age_ms: int) -> QuarantineFile:
    path = tmp_path / "00000000000000000007.log.quarantine"
    path.write_bytes(b"tail")
    os.utime(path, ns=((NOW - age_ms) * 10**6,) * 2)
    (item,) = read_quarantine_files(tmp_path)
    assert item.last_modified_ms == NOW - age_ms
    return item


@pytest.mark.parametrize(
    ("settings", "age", "delete"),
    [
        ({"retention_ms": 10 * DAY}, 11 * DAY, True),
        ({"retention_ms": 10 * DAY}, 9 * DAY, False),
        ({"retention_ms": 10 * DAY, "cleanup_policy": "compact"}, 11 * DAY, True),
        ({"retention_ms": -1}, 1000 * DAY, False),
    ],
)
def test_quarantine_goes_after_retention_ms(
    tmp_path: Path, settings: dict, age: int, delete: bool
) -> None:
    item = _quarantined(tmp_path, age)
    decision = quarantine_decision(item, cfg(**settings), NOW)
    assert (decision.delete, decision.rule) == (delete, "retention.ms" if delete else "")
    assert decision.base_offset == 7
    assert ("older than" if delete else "keep" if age > 100 * DAY else "within") in decision.reason
    delete_quarantine_files([item.path] if decision.delete else [])
    assert item.path.exists() is not delete


def test_rebuild_starts_the_quarantine_clock(tmp_path: Path) -> None:
    pdir = _log(tmp_path)
    old_s = (NOW - 40 * DAY) / 1000
    for path in pdir.iterdir():
        os.utime(path, (old_s, old_s))
    first = segment_log_files(pdir)[0]
    data = bytearray(first.read_bytes())
    data[-5] ^= 0xFF  # the last batch's CRC no longer matches
    first.write_bytes(bytes(data))
    rebuild_partition(pdir, 4096)
    items = read_quarantine_files(pdir)
    assert len(items) == len(list(tmp_path.glob("t-0/*.log.quarantine"))) == 3  # tail + 2 whole
    wall = time.time() * 1000
    assert all(abs(q.last_modified_ms - wall) < 60_000 for q in items)  # not the 40-day mtime
    assert not any(
        quarantine_decision(q, cfg(retention_ms=7 * DAY), int(wall)).delete for q in items
    )
    later = int(wall) + 8 * DAY
    assert all(quarantine_decision(q, cfg(retention_ms=7 * DAY), later).delete for q in items)


def test_recovery_point_never_below_the_log_start_offset() -> None:
    recovery = {("a", 0): 5, ("a", 1): 30, ("b", 0): 0}
    starts = {("a", 0): 12, ("a", 1): 20, ("c", 0): 9, ("c", 1): 0}
    raised = raised_recovery_points(recovery, starts)
    # raised to the log start; never lowered; a missing entry (0 to a broker) gets one if needed
    assert raised == {("a", 0): 12, ("a", 1): 30, ("b", 0): 0, ("c", 0): 9}
    assert recovery == {("a", 0): 5, ("a", 1): 30, ("b", 0): 0}  # the input is left alone


# ---- issue 36: the largest timestamp and the size a broker judges by -----------------------------
def _restored(tmp_path: Path, *, record_ts: int) -> Path:
    """A 3-segment log whose records carry `record_ts`, its .log files touched now (a restore)."""
    log = PartitionLog.create(tmp_path / "t-0", cfg(segment_bytes=5 * batch_size()))
    for _ in range(3):
        log.append_batches(singles(log, 5, ts=[record_ts] * 5))
    log.close()
    now_s = NOW / 1000
    for path in segment_log_files(tmp_path / "t-0"):
        os.utime(path, (now_s, now_s))
    return tmp_path / "t-0"


def _judged(pdir: Path, recovery_point: int | None = None, **settings):
    facts = as_loaded([read_segment_facts(p) for p in segment_log_files(pdir)], recovery_point)
    return retention_decisions(facts, cfg(**settings), now_ms=NOW, log_start_offset=0)


def test_largest_timestamp_is_the_time_index_last_entry_else_the_mtime(tmp_path: Path) -> None:
    """Issue 36 item 5: a restore without .timeindex files, 10-day-old records, the .log's mtime
    now and retention.ms of 7 days. A broker creates the time indexes empty and judges by the
    mtime: nothing goes for 7 days. With the time indexes it goes now."""
    pdir = _restored(tmp_path, record_ts=NOW - 10 * DAY)
    assert [d.delete for d in _judged(pdir)] == [True, True, True]
    for path in pdir.glob("*.timeindex"):
        path.unlink()
    kept = _judged(pdir)
    assert [d.delete for d in kept] == [False, False, False]
    assert "mtime" in kept[0].reason
    facts = read_segment_facts(segment_log_files(pdir)[0])
    assert facts.largest_timestamp == NOW and facts.max_timestamp == NOW - 10 * DAY
    # the broker's load rebuilds the time index first: after an unclean shutdown from the
    # recovery point's segment on, and for a segment without .index whatever the shutdown
    second = segment_log_files(pdir)[1]
    unclean = _judged(pdir, recovery_point=int(second.name[:20]))
    assert [d.delete for d in unclean] == [False, False, False]  # only a prefix goes
    unclean = _judged(pdir, recovery_point=0)
    assert [d.delete for d in unclean] == [True, True, True]
    assert "rebuilds this segment's indexes first" in unclean[0].reason
    segment_log_files(pdir)[0].with_suffix(".index").unlink()
    assert [d.delete for d in _judged(pdir)] == [True, False, False]


def test_min_compaction_lag_reads_the_broker_timestamp(tmp_path: Path) -> None:
    """Issue 36 item 5 for min.compaction.lag.ms: the cleaner manager asks the same largest
    timestamp; with the time indexes gone, the mtime (now) keeps every segment too young."""
    pdir = _restored(tmp_path, record_ts=NOW - 10 * DAY)
    compact = cfg(cleanup_policy="compact", min_compaction_lag_ms=7 * DAY)
    assert partition_cleaning_state(pdir, compact, None, NOW).min_lag_offset is None
    for path in pdir.glob("*.timeindex"):
        path.unlink()
    assert partition_cleaning_state(pdir, compact, None, NOW).min_lag_offset == 0


def test_min_compaction_lag_after_an_unclean_shutdown_reads_the_rebuilt_time_index(
    tmp_path: Path,
) -> None:
    """After an unclean shutdown a broker's load rebuilds the time indexes from the recovery
    point's segment on, so its cleaner judges min.compaction.lag.ms there by the records, not by
    a missing time index's mtime: records an hour old, restored without .timeindex files into
    .log files dated 10 days back, stay out of the cleaning round for a day's lag. Read as after
    a clean shutdown (the mtime), the round would take them now and drop superseded values a
    broker keeps."""
    pdir = _restored(tmp_path, record_ts=NOW - DAY // 24)
    old_s = (NOW - 10 * DAY) / 1000
    for path in segment_log_files(pdir):
        os.utime(path, (old_s, old_s))
    for path in pdir.glob("*.timeindex"):
        path.unlink()
    compact = cfg(cleanup_policy="compact", min_compaction_lag_ms=DAY)
    second = int(segment_log_files(pdir)[1].name[:20])

    def lag_bound(recovery_from: int | None) -> int | None:
        state = partition_cleaning_state(pdir, compact, None, NOW, recovery_from=recovery_from)
        return state.min_lag_offset

    assert lag_bound(None) is None  # a clean shutdown: the mtime, 10 days old
    assert lag_bound(0) == 0  # every segment rebuilt: an hour old
    assert lag_bound(second) == second  # the first segment is below the recovery point


def test_size_retention_counts_what_recovery_keeps(tmp_path: Path) -> None:
    """Issue 36 item 9: a crashed preallocated active segment's zeros (and a partial tail) are
    no part of a loaded log; counted by st_size they would delete one oldest segment too many."""
    pdir = _restored(tmp_path, record_ts=NOW)
    logs = segment_log_files(pdir)
    sizes = [p.stat().st_size for p in logs]
    limit = sum(sizes) - sizes[0]  # exactly the oldest segment over
    assert [d.delete for d in _judged(pdir, retention_bytes=limit)] == [True, False, False]
    with open(logs[-1], "ab") as f:
        f.write(bytes(4096))  # preallocated zeros after a crash
    assert [d.delete for d in _judged(pdir, retention_bytes=limit)] == [True, False, False]
    with open(logs[-1], "ab") as f:
        f.write(logs[0].read_bytes()[: batch_size() // 2])  # a partial batch
    facts = read_segment_facts(logs[-1])
    assert facts.retained_bytes == sizes[-1] < facts.size


def test_tiered_topics_use_the_local_limits_and_uploaded_segments_only() -> None:
    """Issue 36 item 3: remote.storage.enable topics are judged by local.retention.ms/bytes (-2:
    the plain setting) and only uploaded segments go; the active one is rolled, never deleted
    before its upload."""
    segs = [seg(0, 10, ts=NOW - 3 * DAY), seg(10, 20, ts=NOW - 3 * DAY), seg(20, 30, ts=0)]
    tiered = {"remote_storage_enable": "true", "retention_ms": 30 * DAY}
    assert decide(segs, cfg(**tiered)) == [(False, "")] * 3  # -2: retention.ms, 30 days
    local = cfg(local_retention_ms=2 * DAY, **tiered)
    assert decide(segs, local) == [
        (True, "local.retention.ms"),
        (True, "local.retention.ms"),
        (False, ""),
    ]
    got = retention_decisions(segs, local, now_ms=NOW, log_start_offset=0, uploaded_offset=9)
    assert [d.delete for d in got] == [True, False, False]
    assert "not uploaded" in got[1].reason
    unknown = retention_decisions(segs, local, now_ms=NOW, log_start_offset=0)
    assert "rolls it and deletes it once it is uploaded" in unknown[2].reason
    copy_off = cfg(local_retention_ms=2 * DAY, remote_log_copy_disable="true", **tiered)
    assert decide(segs, copy_off) == [(False, "")] * 3  # no copy: the plain 30 days
