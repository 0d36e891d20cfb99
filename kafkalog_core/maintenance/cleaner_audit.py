"""What Kafka's log cleaner would do with a partition, read from its files (§8.1, §8.9).

The compaction audit asks, per partition, the questions `LogCleanerManager` asks before it
cleans: where the dirty part starts (the `cleaner-offset-checkpoint`), where the cleanable
range ends (active segment, last stable offset, min.compaction.lag.ms), the dirty ratio, and
whether the oldest dirty record is overdue under max.compaction.lag.ms. Everything here comes
from one header walk per segment (`segment_facts`, the walk retention reads too): no record is
decoded but control records, so a partition costs a few reads even when its segments are
large. Per-record facts live in `cleaner_facts.py`.

Nothing here writes a byte: segments are memory-mapped read-only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from kafkalog_core.config import LogConfig
from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.log.checkpoints import TopicPartition
from kafkalog_core.log.index.txn_index import AbortedTxn
from kafkalog_core.log.names import (
    log_file_name,
    segment_log_files,
)
from kafkalog_core.log.producer_state import ProducerStateManager
from kafkalog_core.log.segment.scan import TxnTracker
from kafkalog_core.maintenance.segment_facts import SegmentFacts, read_as_loaded
from kafkalog_core.record.batch import (
    MAGIC_V2,
    BatchHeader,
)
from kafkalog_core.record.control import ControlRecordType
from kafkalog_core.record.decoder import RecordBatch

__all__ = [
    "BOUND_ACTIVE_SEGMENT",
    "BOUND_HIGH_WATERMARK",
    "BOUND_MIN_COMPACTION_LAG",
    "BOUND_OPEN_TRANSACTION",
    "CleaningState",
    "PartitionScan",
    "SegmentSummary",
    "TopicPartition",
    "floor_segment",
    "partition_cleaning_state",
    "scan_partition",
    "verdict",
]

# what ends the cleanable range (CleaningState.uncleanable_bound)
BOUND_ACTIVE_SEGMENT = "active segment"
BOUND_OPEN_TRANSACTION = "open transaction"  # the last stable offset, below the high watermark
BOUND_HIGH_WATERMARK = "high watermark"
BOUND_MIN_COMPACTION_LAG = "min.compaction.lag.ms"


# ---------------------------------------------------------------------------------------------
# the header walk (segment_facts.py, shared with retention) plus the transactions it replays
# ---------------------------------------------------------------------------------------------

SegmentSummary = SegmentFacts  # this module's name for the facts, kept for its importers


@dataclass(frozen=True, slots=True)
class PartitionScan:
    """Every segment's summary plus the transactions the walk saw end or stay open."""

    segments: tuple[SegmentSummary, ...]
    aborted_txns: tuple[AbortedTxn, ...]  # what recovery would put in the .txnindex files
    first_unstable_offset: int | None  # first offset of the earliest still-open transaction


def segment_path(partition_dir: str | os.PathLike[str], base_offset: int) -> Path:
    return Path(partition_dir) / log_file_name(base_offset)


def scan_partition(
    partition_dir: str | os.PathLike[str],
    *,
    verify: bool = False,
    strict: bool = True,
    producers: ProducerStateManager | None = None,
    recovery_from: int | None = None,
) -> PartitionScan:
    """Walk every batch header of a partition once (control batches: their one record too).

    Transactions are replayed with recovery's `TxnTracker`, so aborted transactions come out as
    the `.txnindex` entries a broker would rebuild, whether or not the index files exist.
    `verify` CRC-checks each batch (a corrupt batch raises CorruptRecordError naming the file).
    Without `strict` a corrupt header ends its segment's walk instead (`corrupt_at` says where):
    the cleaner refuses it only in the segments its round reads.
    `producers` is replayed too (the producer state a broker holds for the log: the cleaner
    keeps each active producer's last batch).
    `recovery_from` is the recovery point after an unclean shutdown (None: a clean one): the
    segments a broker's load recovers are CRC-checked as it checks them (`load_cut` finds where
    it would cut), and their largest timestamps are the ones it leaves (`as_loaded`), as its
    cleaner reads them for min.compaction.lag.ms.
    """
    tracker = TxnTracker.empty()
    aborted: list[AbortedTxn] = []

    def replay(view: memoryview, header: BatchHeader) -> None:
        if header.producer_id >= 0 or header.is_transactional:
            control = RecordBatch(view, header).control_record()
            kind = None if control is None else control.type
            ended = tracker.on_batch(header, kind)
            if ended is not None:
                aborted.append(ended)
            if producers is not None and header.magic >= MAGIC_V2:
                marker = kind in (ControlRecordType.ABORT, ControlRecordType.COMMIT)
                producers.update(header, kind if header.is_control and marker else None)

    segments = read_as_loaded(
        segment_log_files(partition_dir),
        recovery_from,
        verify=verify,
        strict=strict,
        on_batch=replay,
    )
    first_unstable = min(tracker.open_txns.values()) if tracker.open_txns else None
    return PartitionScan(tuple(segments), tuple(aborted), first_unstable)


# ---------------------------------------------------------------------------------------------
# the cleaner manager's decision (§8.1)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CleaningState:
    """Kafka's LogToClean for one partition, with the bounds that produced it."""

    compacted: bool
    segments: tuple[SegmentSummary, ...]
    aborted_txns: tuple[AbortedTxn, ...]
    log_start_offset: int
    log_end_offset: int
    active_segment_base_offset: int
    cleaner_checkpoint: int | None  # as read; None = never cleaned
    checkpoint_reset: bool  # checkpoint outside [log start, log end]: Kafka resets it to log start
    first_dirty_offset: int
    last_stable_offset: int
    min_lag_offset: int | None  # first dirty segment too young for min.compaction.lag.ms
    first_uncleanable_dirty_offset: int  # min of the three bounds, at least first_dirty_offset
    uncleanable_bound: str  # which bound won: one of the UNCLEANABLE_* names
    first_uncleanable_offset: int  # rounded down to a segment base: end of the cleanable range
    clean_bytes: int
    cleanable_bytes: int
    dirty_ratio: float
    min_cleanable_dirty_ratio: float
    oldest_dirty_timestamp: int | None  # earliest positive first-batch timestamp, dirty segments
    oldest_dirty_age_ms: int | None
    max_compaction_lag_ms: int
    compaction_delay_ms: int  # how far past max.compaction.lag.ms (0 = not overdue)
    delete_horizon_legacy_ms: int  # tombstone rule for magic 0/1 batches (§8.4)
    now_ms: int
    # where the cleaning round the cleaner would run now ends, when that round was run (a dry
    # run of `cleaner.clean_partition`: its offset map may fill first); the log start offset
    # when the cleaner would not clean the partition now
    round_end_offset: int | None = None

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleaning_round_end(self) -> int:
        """End (exclusive) of the offsets a cleaning round would rewrite now.

        The round's own end when it was run (`round_end_offset`); otherwise the first
        uncleanable offset when there are cleanable bytes (the round's end when its offset map
        does not fill), else the log start: the cleaner does not pick a log with nothing
        cleanable.
        """
        if self.round_end_offset is not None:
            return self.round_end_offset
        return self.first_uncleanable_offset if self.cleanable_bytes > 0 else self.log_start_offset

    @property
    def above_min_ratio(self) -> bool:
        """Kafka compares strictly: a ratio equal to the threshold does not qualify."""
        return self.dirty_ratio > self.min_cleanable_dirty_ratio

    @property
    def needs_compaction_now(self) -> bool:
        return self.compaction_delay_ms > 0

    @property
    def eligible(self) -> bool:
        """The filter of grabFilthiestCompactedLog: the cleaner would pick this log up."""
        return (
            self.compacted
            and self.total_bytes > 0
            and ((self.needs_compaction_now and self.cleanable_bytes > 0) or self.above_min_ratio)
        )


def floor_segment(segments: tuple[SegmentSummary, ...], offset: int) -> int:
    """Index of the segment holding `offset` (the last base <= offset; 0 below the first)."""
    bases = [s.base_offset for s in segments]
    return max(0, int(np.searchsorted(bases, offset, side="right")) - 1)


def partition_cleaning_state(
    partition_dir: str | os.PathLike[str],
    config: LogConfig,
    cleaner_checkpoint: int | None,
    now_ms: int,
    *,
    log_start_checkpoint: int | None = None,
    high_watermark: int | None = None,
    scan: PartitionScan | None = None,
    recovery_from: int | None = None,
) -> CleaningState:
    """LogCleanerManager.cleanableOffsets + LogToClean + maxCompactionDelay for one partition.

    `log_start_checkpoint` / `high_watermark` are the log dir's checkpoints for the partition
    (None: the first segment's base offset / the log end offset, as for a broker without them);
    `recovery_from` is `scan_partition`'s, for the scan made here when none is given.
    """
    if scan is None:
        scan = scan_partition(partition_dir, recovery_from=recovery_from)
    segments = scan.segments
    if not segments:
        raise CorruptRecordError(f"{partition_dir}: no .log segment")
    active = segments[-1]
    log_end = active.next_offset
    log_start = segments[0].base_offset
    if log_start_checkpoint is not None:
        log_start = max(log_start, log_start_checkpoint)

    # the first dirty offset: the checkpoint, reset to log start when out of range
    first_dirty = log_start if cleaner_checkpoint is None else cleaner_checkpoint
    reset = cleaner_checkpoint is not None and not log_start <= cleaner_checkpoint <= log_end
    if reset:
        first_dirty = log_start

    # the first uncleanable dirty offset: LSO, active segment, min.compaction.lag.ms
    hw = log_end if high_watermark is None else max(log_start, min(high_watermark, log_end))
    lso = hw if scan.first_unstable_offset is None else min(hw, scan.first_unstable_offset)
    dirty_from = floor_segment(segments, first_dirty)
    # Kafka's nonActiveLogSegmentsFrom(firstDirty): from the segment holding it to the active one
    dirty_non_active = segments[dirty_from:-1] if first_dirty < active.base_offset else ()
    min_lag_offset = None
    if config.min_compaction_lag_ms > 0:
        young = now_ms - config.min_compaction_lag_ms
        min_lag_offset = next(
            (s.base_offset for s in dirty_non_active if s.largest_timestamp > young), None
        )
    open_txn = scan.first_unstable_offset is not None and scan.first_unstable_offset <= hw
    bounds = [  # on a tie the first name wins: the active segment is the usual reason
        (BOUND_ACTIVE_SEGMENT, active.base_offset),
        (BOUND_OPEN_TRANSACTION if open_txn else BOUND_HIGH_WATERMARK, lso),
    ]
    if min_lag_offset is not None:
        bounds.append((BOUND_MIN_COMPACTION_LAG, min_lag_offset))
    bound_name, uncleanable_dirty = min(bounds, key=lambda b: b[1])
    uncleanable_dirty = max(uncleanable_dirty, first_dirty)

    # LogToClean: round down to a segment base, then sum segment sizes
    if uncleanable_dirty >= active.base_offset:
        first_uncleanable = active.base_offset
    else:
        first_uncleanable = segments[floor_segment(segments, uncleanable_dirty)].base_offset
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
    end = max(first_dirty, first_uncleanable)
    cleanable_bytes = 0
    if end > first_dirty:
        cleanable_bytes = sum(s.size for s in segments[dirty_from:] if s.base_offset < end)
    total = clean_bytes + cleanable_bytes
    ratio = cleanable_bytes / total if total else 0.0

    # max.compaction.lag.ms: the earliest positive first-batch timestamp of dirty segments
    stamps = [s.first_batch_timestamp for s in dirty_non_active if s.first_batch_timestamp > 0]
    oldest = min(stamps) if stamps else None
    clean_until = now_ms - max(config.max_compaction_lag_ms, 0)
    delay = clean_until - oldest if oldest is not None and oldest < clean_until else 0

    # the legacy tombstone horizon: mtime of the last segment below the first dirty offset
    below = [s for s in segments if s.base_offset < first_dirty]
    legacy_horizon = below[-1].last_modified_ms - config.delete_retention_ms if below else 0

    return CleaningState(
        compacted=config.compact,
        segments=segments,
        aborted_txns=scan.aborted_txns,
        log_start_offset=log_start,
        log_end_offset=log_end,
        active_segment_base_offset=active.base_offset,
        cleaner_checkpoint=cleaner_checkpoint,
        checkpoint_reset=reset,
        first_dirty_offset=first_dirty,
        last_stable_offset=lso,
        min_lag_offset=min_lag_offset,
        first_uncleanable_dirty_offset=uncleanable_dirty,
        uncleanable_bound=bound_name,
        first_uncleanable_offset=first_uncleanable,
        clean_bytes=clean_bytes,
        cleanable_bytes=cleanable_bytes,
        dirty_ratio=ratio,
        min_cleanable_dirty_ratio=config.min_cleanable_dirty_ratio,
        oldest_dirty_timestamp=oldest,
        oldest_dirty_age_ms=None if oldest is None else now_ms - oldest,
        max_compaction_lag_ms=config.max_compaction_lag_ms,
        compaction_delay_ms=delay,
        delete_horizon_legacy_ms=legacy_horizon,
        now_ms=now_ms,
    )


# ---------------------------------------------------------------------------------------------
# the verdict in plain words
# ---------------------------------------------------------------------------------------------


def _ms(ms: int) -> str:
    """A duration a person reads: the largest whole unit."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if abs(ms) >= size:
            return f"{ms / size:.1f} {unit}"
    return f"{ms} ms"


@dataclass(frozen=True, slots=True)
class RecordCounts:
    """Per-partition counts from the facts alone; `+` merges chunks."""

    records: int = 0  # data records (markers excluded)
    record_bytes: int = 0  # their encoded bytes
    batches: int = 0  # batches holding at least one record (data or marker)
    null_key_records: int = 0
    tombstones: int = 0
    tombstones_past_retention: int = 0  # now - timestamp > delete.retention.ms
    tombstones_past_horizon: int = 0  # Kafka may remove them now (§8.5 / legacy rule)
    oldest_tombstone_timestamp: int = -1  # -1: none with a timestamp
    transaction_markers: int = 0
    commit_markers: int = 0
    abort_markers: int = 0
    aborted_records: int = 0
    aborted_bytes: int = 0
    transactional_records: int = 0
    dirty_records: int = 0  # in the range the cleaner maps
    cleaning_round_records: int = 0  # in the segments the round rewrites

    def __add__(self, other: RecordCounts) -> RecordCounts:
        merged = {}
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if f.name == "oldest_tombstone_timestamp":
                merged[f.name] = min((x for x in (a, b) if x >= 0), default=-1)
            else:
                merged[f.name] = a + b
        return RecordCounts(**merged)


def verdict(state: CleaningState, counts: RecordCounts | None, config: LogConfig) -> str:
    """What Kafka's cleaner manager would decide for this partition now, in plain words (§8.1).

    `counts` is the partition's RecordCounts (cleaner_facts) or None when records were not
    read; it adds what the round would do to null-key records.
    """
    if not config.compact:
        return f"not compacted (cleanup.policy={','.join(config.cleanup_policy)})"
    ratio = f"{state.dirty_ratio:.2f}"
    threshold = f"{state.min_cleanable_dirty_ratio:g}"
    if state.total_bytes == 0 and state.segments[-1].size == 0:
        words = "nothing to clean (empty log)"
    elif state.cleanable_bytes == 0:
        if state.first_dirty_offset >= state.active_segment_base_offset:
            if len(state.segments) == 1:
                words = "nothing to clean (active segment only)"
            else:
                words = "nothing to clean (everything below the active segment is clean)"
        elif state.uncleanable_bound == BOUND_OPEN_TRANSACTION:
            words = (
                "nothing to clean: held back by an open transaction "
                f"(last stable offset {state.last_stable_offset})"
            )
        elif state.uncleanable_bound == BOUND_HIGH_WATERMARK:
            words = (
                "nothing to clean: held back by the high watermark "
                f"({state.last_stable_offset}, replication-offset-checkpoint)"
            )
        else:
            words = (
                "nothing to clean: the dirty segments are younger than "
                f"min.compaction.lag.ms ({_ms(config.min_compaction_lag_ms)})"
            )
    elif state.needs_compaction_now:
        words = (
            "overdue: oldest dirty record older than max.compaction.lag.ms "
            f"(by {_ms(state.compaction_delay_ms)}); would be cleaned now"
        )
    elif state.above_min_ratio:
        words = f"would be cleaned now (dirty ratio {ratio} > {threshold})"
    else:
        words = f"below min.cleanable.dirty.ratio ({ratio} <= {threshold})"
    null_keys = 0 if counts is None else counts.null_key_records
    if null_keys:
        words += (
            f"; {null_keys} null-key records (a compacted topic rejects them; "
            "the cleaner drops those it reaches)"
        )
    if state.checkpoint_reset:
        words += (
            f"; cleaner checkpoint {state.cleaner_checkpoint} is outside the log "
            f"[{state.log_start_offset}, {state.log_end_offset}]: Kafka resets it to the log start"
        )
    return words
