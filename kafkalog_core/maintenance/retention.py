"""Which segments Kafka's retention would delete (§7), decided from plain segment facts.

Pure decisions over `SegmentFacts` (read by `segment_facts.read_segment_facts`), so the Spark
retention job, `delete_old_segments` (an open `PartitionLog`) and the tests share one rule set:

- the log-start-offset breach always: a segment whose successor starts at or below the log
  start offset;
- with `delete` in cleanup.policy, then the size breach (`retention.bytes`, oldest first while
  the excess still covers the whole segment; sizes are what a loaded log holds, whole
  batches) and then the time breach (`now - largest timestamp > retention.ms`; the largest
  timestamp is a broker's, its time index's last entry, or the .log file's modification time
  when that index is empty or missing: `segment_facts`);
- only a prefix of the log goes, and only segments wholly below the high watermark;
- a non-empty active segment that breaches retention goes too: the broker rolls a new empty
  one first, and so does the retention job (`roll_empty_segment`);
- tiered topics (`remote.storage.enable`) by `local.retention.ms` / `local.retention.bytes`
  (-2: the plain setting), and only segments already uploaded (`RetentionLimits`).

After a delete the log start offset rises, and with it any recovery point below it
(`raised_recovery_points`). Quarantine files (rebuild-index's corrupt tails, kafkalog's own) go
when they are older than retention.ms, the unfinished copies a killed rebuild left at once:
`quarantine_decision`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkalog_core.log.checkpoints import LeaderEpochCache, TopicPartition, fsync_dir
from kafkalog_core.log.names import (
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    INDEX_SUFFIXES,
    KRAFT_CHECKPOINT_DELETED,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_FILE_SUFFIX,
    PRODUCER_SNAPSHOT_FILE_SUFFIX,
    QUARANTINE_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    log_file_name,
    offset_from_file_name,
    quarantine_files,
)
from kafkalog_core.log.partition.state import resolve_now
from kafkalog_core.maintenance.segment_facts import (
    FROM_MTIME,
    FROM_RECORDS,
    SegmentFacts,
    load_cut_outcome,
    read_segment_facts,
)

if TYPE_CHECKING:
    from kafkalog_core.log.partition.partition_log import PartitionLog

__all__ = [
    "LOG_START_OFFSET",
    "RETENTION_BYTES",
    "RETENTION_MS",
    "UNFINISHED_QUARANTINE",
    "QuarantineFile",
    "RetentionDecision",
    "RetentionLimits",
    "SegmentFacts",
    "backfill_risk",
    "delete_quarantine_files",
    "mark_segments_deleted",
    "purge_deleted_files",
    "quarantine_decision",
    "raised_recovery_points",
    "read_quarantine_files",
    "read_segment_facts",
    "retention_decisions",
    "roll_empty_segment",
    "truncate_leader_epochs_from_start",
    "unjudged_after_load_cut",
]

LOG_START_OFFSET = "log-start-offset"
RETENTION_BYTES = "retention.bytes"
RETENTION_MS = "retention.ms"
# the rule for a killed rebuild's partial quarantine copy: no data of its own, deleted at once
UNFINISHED_QUARANTINE = "unfinished-quarantine"
# the rule of every segment of a partition left unjudged: a broker's load would cut it first
# (`segment_facts.load_cut`), so its segments are not the ones a broker would judge
LOAD_CUT = "load-cut"


@dataclass(frozen=True)
class RetentionDecision:
    """Keep or delete one segment, and why in plain words."""

    base_offset: int
    delete: bool
    rule: str  # the rule that deletes it ("" when kept; LOAD_CUT: kept, the partition unjudged)
    reason: str


def _days(ms: int) -> str:
    return f"{ms / 86_400_000:.1f} d" if abs(ms) >= 86_400_000 else f"{ms / 3_600_000:.1f} h"


@dataclass(frozen=True)
class RetentionLimits:
    """The limits a broker's retention applies to a topic (UnifiedLog.localRetentionMs/Size).

    With tiered storage (`remote.storage.enable=true` and remote copy on) the local limits
    apply, -2 meaning the plain one, and only segments already uploaded may go."""

    retention_ms: int
    retention_bytes: int
    tiered: bool

    @classmethod
    def of(cls, config: Any) -> RetentionLimits:
        tiered = bool(getattr(config, "remote_storage_enable", False)) and not bool(
            getattr(config, "remote_log_copy_disable", False)
        )
        ms, size = int(config.retention_ms), int(config.retention_bytes)
        if tiered:
            local_ms, local_bytes = (
                int(config.local_retention_ms),
                int(config.local_retention_bytes),
            )
            ms = ms if local_ms == -2 else local_ms
            size = size if local_bytes == -2 else local_bytes
        return cls(ms, size, tiered)

    def names(self) -> tuple[str, str]:
        """The settings' names as the report shows them."""
        if self.tiered:
            return "local.retention.ms", "local.retention.bytes"
        return RETENTION_MS, RETENTION_BYTES


def retention_decisions(
    segments: Sequence[SegmentFacts],
    config: Any,
    *,
    now_ms: int,
    log_start_offset: int,
    high_watermark: int | None = None,
    uploaded_offset: int | None = None,
) -> list[RetentionDecision]:
    """Keep/delete for every segment (oldest first), in Kafka's order of rules
    (UnifiedLog.deleteOldSegments / deletableSegments).

    `config` is a LogConfig (retention.ms, retention.bytes, cleanup.policy, the tiered-storage
    settings). The high watermark defaults to the log end offset. A non-empty active segment
    that breaches retention goes too: the broker rolls a new empty one at the log end offset
    first (the caller does that). Tiered topics (`RetentionLimits`): the local limits, and
    only segments at or below `uploaded_offset` (the highest offset in remote storage) go by
    them; None = unknown, judged as if every closed segment were uploaded; the active segment
    is rolled by a broker but never deleted before its upload.
    """
    segs = list(segments)
    if not segs:
        return []
    leo = segs[-1].next_offset
    hw = leo if high_watermark is None else min(high_watermark, leo)
    limits = RetentionLimits.of(config)
    ms_rule, bytes_rule = limits.names()
    rule_of: dict[int, tuple[str, str]] = {}
    start = 0  # index of the first segment still in the log
    lso = max(log_start_offset, segs[0].base_offset)
    active = len(segs) - 1

    def upper_bound(k: int) -> int:
        return segs[k + 1].base_offset if k + 1 < len(segs) else leo

    def uploaded(k: int) -> bool:
        if k == active:
            return False  # a broker uploads only rolled segments
        return uploaded_offset is None or 0 < upper_bound(k) <= uploaded_offset + 1

    def take(rule: str, predicate: Callable[[int], str | None], remote_check: bool) -> None:
        """Delete the longest prefix of the remaining segments that `predicate` explains."""
        nonlocal start, lso
        k = start
        while k < len(segs):
            if hw < upper_bound(k) or (k == active and segs[k].retained_bytes == 0):
                break
            if remote_check and limits.tiered and not uploaded(k):
                break
            why = predicate(k)
            if why is None:
                break
            if k == active:
                why += f"; the active segment: a broker rolls a new empty one at {leo} first"
            rule_of[k] = (rule, why)
            k += 1
        start = k
        lso = max(lso, upper_bound(k - 1) if k == len(segs) else segs[k].base_offset)

    take(
        LOG_START_OFFSET,
        lambda k: (
            f"below the log start offset {lso} (the next segment starts at "
            f"{segs[k + 1].base_offset})"
            if k + 1 < len(segs) and segs[k + 1].base_offset <= lso
            else None
        ),
        remote_check=False,
    )
    delete_policy = config.delete
    retention_bytes, retention_ms = limits.retention_bytes, limits.retention_ms
    if delete_policy and retention_bytes >= 0:
        log_size = sum(s.retained_bytes for s in segs[start:])
        excess = log_size - retention_bytes
        if log_size >= retention_bytes:

            def by_size(k: int) -> str | None:
                nonlocal excess
                size = segs[k].retained_bytes
                if excess - size < 0:
                    return None
                why = (
                    f"partition size {log_size} B exceeds {bytes_rule}={retention_bytes} "
                    f"by {excess} B, which covers this {size} B segment"
                )
                excess -= size
                return why

            take(bytes_rule, by_size, remote_check=True)
    if delete_policy and retention_ms >= 0:
        take(
            ms_rule,
            lambda k: (
                f"largest timestamp {_timestamp(segs[k])} is "
                f"{_days(now_ms - segs[k].largest_timestamp)} old > {ms_rule}={retention_ms}"
                if now_ms - segs[k].largest_timestamp > retention_ms
                else None
            ),
            remote_check=True,
        )
    out = []
    for k, seg in enumerate(segs):
        if k in rule_of:
            rule, why = rule_of[k]
            out.append(RetentionDecision(seg.base_offset, True, rule, why))
        else:
            out.append(
                RetentionDecision(
                    seg.base_offset,
                    False,
                    "",
                    _why_kept(segs, k, start, hw, config, now_ms, limits),
                )
            )
    return out


def _timestamp(seg: SegmentFacts) -> str:
    """The largest timestamp and where it comes from, as a broker would read it."""
    source = seg.timestamp_source
    if source == FROM_MTIME:
        return f"{seg.largest_timestamp} (the .log's mtime: its time index is empty or missing)"
    if source == FROM_RECORDS:
        why = "no .index" if seg.index_missing else "an unclean shutdown"
        return (
            f"{seg.largest_timestamp} (its records': a broker's load rebuilds this segment's "
            f"indexes first, {why})"
        )
    return str(seg.largest_timestamp)


def _why_kept(
    segs: Sequence[SegmentFacts],
    k: int,
    start: int,
    hw: int,
    config: Any,
    now_ms: int,
    limits: RetentionLimits,
) -> str:
    seg = segs[k]
    active = k == len(segs) - 1
    if active and seg.retained_bytes == 0:
        return "empty active segment (never deleted)"
    upper = segs[k + 1].base_offset if not active else seg.next_offset
    if hw < upper:
        return f"reaches above the high watermark {hw}"
    if k < start:  # pragma: no cover - only deleted segments precede `start`
        return "deleted"
    if not config.delete:
        return f"cleanup.policy={','.join(config.cleanup_policy)} has no delete"
    ms_rule, bytes_rule = limits.names()
    retention_ms = limits.retention_ms
    age = now_ms - seg.largest_timestamp
    time_ok = retention_ms < 0 or age <= retention_ms
    if not time_ok and k > start:
        return "an older segment is retained (only a prefix of the log is deleted)"
    if not time_ok and limits.tiered:
        if active:
            return (
                f"the active segment breaches {ms_rule}={retention_ms}: a broker rolls it and "
                "deletes it once it is uploaded to remote storage"
            )
        return "not uploaded to remote storage (at or below the given uploaded offset)"
    own = (
        f"{ms_rule}=-1 (no time limit)"
        if retention_ms < 0
        else f"largest timestamp {_timestamp(seg)} is {_days(age)} old, within "
        f"{ms_rule}={retention_ms}"
    )
    if limits.retention_bytes >= 0:
        own += f"; partition within {bytes_rule}={limits.retention_bytes}"
    return own


def backfill_risk(seg: SegmentFacts, config: Any, now_ms: int) -> bool:
    """True when the segment was written within retention.ms but the timestamps a broker judges
    it by (its records' CreateTime, through its time index) are older than retention.ms: a
    broker deletes such backfilled data on its next retention check, however recently it was
    written."""
    retention_ms = RetentionLimits.of(config).retention_ms
    largest = seg.broker_max_timestamp
    if retention_ms < 0 or largest < 0 or not config.delete:
        return False
    if config.message_timestamp_type == "LogAppendTime":
        return False
    return now_ms - largest > retention_ms >= now_ms - seg.last_modified_ms


# ---- acting on the decisions: Kafka's two-phase delete ------------------------------------------
StepHook = Callable[[str, Path], None]


def _no_hook(_step: str, _path: Path) -> None:
    return None


def roll_empty_segment(
    partition_dir: str | os.PathLike[str], base_offset: int, *, hook: StepHook = _no_hook
) -> list[str]:
    """The broker's roll before a retention delete that takes every segment
    (UnifiedLog.deleteSegments): a new empty active segment at the log end offset. Its empty
    .index and .timeindex come first and the .log last, so a kill leaves the old log whole
    (with orphan index files the next load deletes) or the new segment whole; a producer
    snapshot at that offset, if any, stays with it. Returns the files created."""
    pdir = Path(partition_dir)
    created = []
    for suffix in (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX):
        path = pdir / f"{base_offset:020d}{suffix}"
        if not path.exists():
            hook("create", path)
            path.touch()
            created.append(path.name)
    if created:
        fsync_dir(pdir)
    return created


def mark_segments_deleted(
    partition_dir: str | os.PathLike[str],
    base_offsets: Sequence[int],
    *,
    hook: StepHook = _no_hook,
) -> list[str]:
    """Phase one of a delete: rename each segment's files (and its producer snapshot) to
    `.deleted`, oldest segment first. Returns the new names.

    Per segment the index files go first and the .log last, so a kill at any point leaves
    either a whole segment (perhaps without some index files, which a broker rebuilds) or a
    deleted one, and the deleted ones are always a prefix of the log. A broker's loader removes
    `.deleted` files at startup; `purge_deleted_files` removes them here.
    """
    pdir = Path(partition_dir)
    renamed = []
    for base in sorted(base_offsets):
        stem = f"{base:020d}"
        for suffix in (*INDEX_SUFFIXES, PRODUCER_SNAPSHOT_FILE_SUFFIX, LOG_FILE_SUFFIX):
            path = pdir / f"{stem}{suffix}"
            if path.exists():
                hook("rename", path)
                os.replace(path, path.with_name(path.name + DELETED_FILE_SUFFIX))
                renamed.append(path.name + DELETED_FILE_SUFFIX)
    if renamed:
        fsync_dir(pdir)
    return renamed


def purge_deleted_files(
    partition_dir: str | os.PathLike[str], *, hook: StepHook = _no_hook
) -> list[str]:
    """Phase two: remove the partition's `*.deleted` segment files (not KRaft snapshots)."""
    pdir = Path(partition_dir)
    removed = []
    for path in sorted(pdir.iterdir()):
        if path.name.endswith(DELETED_FILE_SUFFIX) and not KRAFT_CHECKPOINT_DELETED.match(
            path.name
        ):
            hook("unlink", path)
            path.unlink()
            removed.append(path.name)
    return removed


def truncate_leader_epochs_from_start(
    partition_dir: str | os.PathLike[str],
    log_start_offset: int,
    *,
    log_end_offset: int | None = None,
    hook: StepHook = _no_hook,
) -> bool:
    """Drop leader-epoch entries below the new log start offset, as a broker does after a
    retention delete, and with `log_end_offset` those at or after it, as a broker's load does
    (truncateFromEnd): a delete of every segment leaves none at the empty log's end offset.
    Written atomically; True when the file changed."""
    path = Path(partition_dir) / LEADER_EPOCH_CHECKPOINT_FILE
    if not path.exists():
        return False
    cache = LeaderEpochCache(path)
    changed = bool(cache.truncate_from_start(log_start_offset))
    if log_end_offset is not None:
        changed = bool(cache.truncate_from_end(log_end_offset)) or changed
    if not changed:
        return False
    hook("write", path)
    cache.write()
    return True


def raised_recovery_points(
    recovery_points: Mapping[TopicPartition, int], log_start_offsets: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Recovery points never below the log start offset (UnifiedLog.updateLogStartOffset).

    When retention moves a log start offset past the recovery point, Kafka moves the recovery
    point up to it: nothing below the log start is left to recover. A partition missing from
    the checkpoint has recovery point 0 to a broker, so it gets an entry when its log start is
    above 0.
    """
    raised = dict(recovery_points)
    for tp, start in log_start_offsets.items():
        if raised.get(tp, 0) < start:
            raised[tp] = start
    return raised


# ---- quarantined tails: kafkalog's own files, kept for forensics, then retention.ms ---------------
@dataclass(frozen=True)
class QuarantineFile:
    """A corrupt tail (or a whole later segment) rebuild-index moved aside (`names.py`)."""

    path: Path
    base_offset: int  # of the segment it came from
    size: int
    last_modified_ms: int  # when it was quarantined (rebuild sets it)
    unfinished: bool = False  # `<quarantine name>.tmp`: a copy a killed rebuild never renamed


def read_quarantine_files(
    partition_dir: str | os.PathLike[str], suffix: str = QUARANTINE_FILE_SUFFIX
) -> list[QuarantineFile]:
    """The quarantine files of a partition dir (named with `suffix`, rebuild's
    `quarantine_suffix`), and the unfinished copies a killed rebuild left, oldest segment first."""
    found = []
    for unfinished in (False, True):
        for path in quarantine_files(partition_dir, suffix, unfinished=unfinished):
            stat = path.stat()
            base_offset = offset_from_file_name(path.name)
            mtime_ms = stat.st_mtime_ns // 10**6
            found.append(QuarantineFile(path, base_offset, stat.st_size, mtime_ms, unfinished))
    return sorted(found, key=lambda q: q.base_offset)  # stable: each segment's finished ones first


def quarantine_decision(item: QuarantineFile, config: Any, now_ms: int) -> RetentionDecision:
    """Delete a quarantine file once it is older than its topic's retention.ms.

    Kafka's recovery deletes a truncated tail at once; rebuild-index keeps it so an operator can
    look at what was cut, for as long as the topic keeps its data (whatever its cleanup.policy:
    the file is no part of the log). retention.ms=-1 keeps it forever. An unfinished copy goes
    at once: a killed rebuild renames before it truncates, so its bytes are still in the .log
    (or in a finished quarantine file).
    """
    if item.unfinished:
        why = "unfinished copy of a killed rebuild (its bytes are still in the segment)"
        return RetentionDecision(item.base_offset, True, UNFINISHED_QUARANTINE, why)
    retention_ms = int(config.retention_ms)
    age = now_ms - item.last_modified_ms
    if retention_ms < 0:
        return RetentionDecision(item.base_offset, False, "", "retention.ms=-1 keeps quarantine")
    if age > retention_ms:
        why = f"quarantined {_days(age)} ago, older than retention.ms={retention_ms}"
        return RetentionDecision(item.base_offset, True, RETENTION_MS, why)
    why = f"quarantined {_days(age)} ago, within retention.ms={retention_ms} (kept for forensics)"
    return RetentionDecision(item.base_offset, False, "", why)


def delete_quarantine_files(paths: Sequence[Path]) -> None:
    """Remove quarantine files at once (no `.deleted` phase: nothing reads them)."""
    for path in paths:
        path.unlink(missing_ok=True)
    for directory in {path.parent for path in paths}:
        fsync_dir(directory)


# ---- an open PartitionLog (Kafka's UnifiedLog.deleteOldSegments) ---------------------------


def log_segment_facts(log: PartitionLog) -> list[SegmentFacts]:
    """What the retention rules read about each segment of an open log, from its segments."""
    segments = log.segments
    facts = []
    for k, seg in enumerate(segments):
        nxt = segments[k + 1].base_offset if k + 1 < len(segments) else log.log_end_offset
        facts.append(
            SegmentFacts(
                base_offset=seg.base_offset,
                size=seg.size,
                next_offset=nxt,
                max_timestamp=seg.max_timestamp_so_far,
                last_modified_ms=seg.last_modified_ms,
                batches=-1,  # not needed by the rules
            )
        )
    return facts


def log_retention_decisions(
    log: PartitionLog, now_ms: int | None = None
) -> list[RetentionDecision]:
    """Kafka's deleteOldSegments decisions (§7) for an open log, active segment included."""
    return retention_decisions(
        log_segment_facts(log),
        log.config,
        now_ms=resolve_now(now_ms),
        log_start_offset=log.log_start_offset,
        high_watermark=log.high_watermark,
    )


def delete_old_segments(log: PartitionLog, now_ms: int | None = None) -> list[int]:
    """Kafka's deleteOldSegments: start-offset, size, then time breaches (§7); the log renames
    the victims to `.deleted` and advances its log start offset. Returns their base offsets."""
    victims = {d.base_offset for d in log_retention_decisions(log, now_ms) if d.delete}
    return log.delete_segments([s for s in log.segments if s.base_offset in victims])


def unjudged_after_load_cut(
    segments: Sequence[SegmentFacts], cut: SegmentFacts
) -> list[RetentionDecision]:
    """Every segment kept, for a partition a broker's load would cut at `cut` first (after an
    unclean shutdown: a batch that fails its checks in a segment it recovers). The segments
    after the cut are gone once a broker loads the dir, so judging the ones on disk could
    delete an oldest segment by retention.bytes, or one that becomes the active segment, that a
    broker keeps; rebuild-index --mode rebuild does the load's cut first."""
    reason = (
        f"not judged: a broker's load recovers {log_file_name(cut.base_offset)} (no clean "
        "shutdown) and " + load_cut_outcome(segments, cut)
    )
    return [RetentionDecision(s.base_offset, False, LOAD_CUT, reason) for s in segments]
