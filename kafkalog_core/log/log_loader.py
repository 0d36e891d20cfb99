"""Loading a partition directory the way a broker does at startup (Kafka's LogLoader, §6 passes
1-12): crash leftovers, swaps, index rebuilds and recovery of the unflushed tail.

Only Kafka's own reasons cut bytes, where Kafka's load cuts them:
- pass 4 recovers a segment whose .index is missing or whose .txnindex fails its sanity check,
  cutting its first invalid batch and all after it; it fails the load with a LogDirError naming
  the file where that recovery fails (offsets out of order, an I/O error). What pass 4 cut drops
  no other segment: Kafka ignores it, and its second recovery in pass 5 cuts nothing;
- pass 5 (after an unclean shutdown, from the recovery point's segment on) cuts the first
  invalid batch and drops the segments after it; the errors above empty the segment there, as
  Kafka's recoverLog does.
A missing .timeindex is created empty, as Kafka's sanityCheck does (the segment's age is then
its .log's mtime to a broker, and so to every reader of this dir). Indexes that only kafkalog's
stricter checks distrust (`indexes_look_valid`), and the pieces of a split, get their indexes
rebuilt from the whole .log without cutting a byte; where even that fails, the segment is loaded
with its indexes as they are, as Kafka loads it (a warning).

A segment whose offsets overflow it (recovery raises LogSegmentOffsetOverflowError: a batch's
last offset below its base offset or more than Int.MAX above it, e.g. a flipped bit in a base
offset, which the CRC does not cover) is split as a broker's load splits it (`split.py`), and
the load goes over the directory again; batches a split can place nowhere (a double fault: see
`split.py`) are cut, and the other segments stay, as the pieces were placed among them.
Nothing else is dropped that Kafka would keep. Every cut is in the report: file, position,
bytes, why (`LoadReport.truncations`).

`PartitionLog.open` runs a `LogLoader` and keeps its `LoadReport`; tools show the report.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkalog_core.errors import (
    InvalidOffsetError,
    KafkaLogError,
    LogDirError,
    LogSegmentOffsetOverflowError,
)
from kafkalog_core.log.checkpoints import (
    LeaderEpochCache,
    LeaderEpochCheckpointFile,
)
from kafkalog_core.log.names import (
    DELETED_FILE_SUFFIX,
    INDEX_SUFFIXES,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_FILE_SUFFIX,
    PRODUCER_SNAPSHOT_FILE_SUFFIX,
    parse_segment_file_name,
)
from kafkalog_core.log.segment.log_segment import LogSegment
from kafkalog_core.log.segment.scan import TxnTracker, replay_batches
from kafkalog_core.log.split import SplitPlan, offset_ranges, split_overflowed
from kafkalog_core.log.swap import complete_interrupted_swaps


@dataclass(frozen=True)
class Truncation:
    """Bytes the load cut from a segment's .log: from `position` on, `bytes` of them."""

    file: str
    position: int
    bytes: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: cut {self.bytes} bytes at position {self.position} ({self.reason})"


@dataclass
class LoadReport:
    """What `PartitionLog.open` found and changed, for logs and job reports."""

    dir: Path
    had_clean_shutdown: bool = False
    deleted_files: list[str] = field(default_factory=list)
    swaps_completed: list[str] = field(default_factory=list)
    replaced_by_swap: list[str] = field(default_factory=list)
    rebuilt_indexes: list[tuple[int, str]] = field(default_factory=list)  # (base, reason)
    splits: list[str] = field(default_factory=list)  # what each split of an overflowing segment did
    recovered_segments: list[int] = field(default_factory=list)  # by the last pass over the dir
    empty_time_indexes: list[int] = field(default_factory=list)  # missing, created empty as Kafka
    truncated_bytes: int = 0
    truncations: list[Truncation] = field(default_factory=list)  # where, how much and why
    dropped_segments: list[int] = field(default_factory=list)  # deleted after a truncation
    created_segment: int | None = None
    deleted_snapshots: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    log_start_offset: int = 0
    log_end_offset: int = 0
    recovery_point: int = 0

    @property
    def changed_anything(self) -> bool:
        return bool(
            self.deleted_files
            or self.swaps_completed
            or self.rebuilt_indexes
            or self.empty_time_indexes
            or self.splits
            or self.truncated_bytes
            or self.dropped_segments
            or self.created_segment is not None
        )


class _Overflow(Exception):
    """Recovery met a batch that does not fit its segment: split it, then load again."""


class LogLoader:
    """LogLoader.load passes 1-12 for one directory, recording what it did."""

    def __init__(
        self, dir: Path, config: Any, recovery_point: int, log_start_offset: int, clean: bool
    ) -> None:
        self.dir = dir
        self.config = config
        self.recovery_point_checkpoint = recovery_point
        self.log_start_offset_checkpoint = log_start_offset
        self.clean = clean
        self.report = LoadReport(dir, had_clean_shutdown=clean)
        self.log_start_offset = log_start_offset
        self.log_end_offset = 0
        self.recovery_point = recovery_point
        self.epoch_entries: list[tuple[int, int]] | None = None
        self._split_bases: set[int] = set()
        self._pieces: set[int] = set()  # bases of the segments the splits made (no index yet)
        try:
            self.epoch_cache = LeaderEpochCache(
                entries=LeaderEpochCheckpointFile(self.dir / LEADER_EPOCH_CHECKPOINT_FILE).read()
            )
        except (KafkaLogError, ValueError) as e:
            self.report.warnings.append(f"unreadable leader-epoch-checkpoint in {dir}: {e}")
            self.epoch_cache = LeaderEpochCache(entries=[])
            self.epoch_entries = []

    def _delete(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self.report.deleted_files.append(path.name)

    def _cut(self, file: str, position: int, length: int, reason: str) -> None:
        self.report.truncated_bytes += length
        self.report.truncations.append(Truncation(file, position, length, reason))

    def load(self) -> tuple[list[LogSegment], LoadReport]:
        swaps = complete_interrupted_swaps(self.dir)  # passes 1-3
        self.report.deleted_files += swaps.deleted_files
        self.report.replaced_by_swap += swaps.replaced_by_swap
        self.report.swaps_completed += swaps.swaps_completed
        is_delete_dir = self.dir.name.endswith("-delete")
        # Kafka's retryOnOffsetOverflow: split the segment, then go over the directory again
        while True:
            self.report.recovered_segments = []
            segments, overflowed = self._load_segments()
            if not overflowed and not self.clean and not is_delete_dir:
                segments, overflowed = self._recover_log(segments)
            if not overflowed:
                break
            self._split(overflowed, segments)
        if segments:
            self.log_end_offset = segments[-1].read_next_offset()
        # pass 6: log start offset checkpoint above the LEO -> start over at it
        if segments and self.log_end_offset < self.log_start_offset_checkpoint:
            for seg in segments:
                seg.delete()
                self.report.dropped_segments.append(seg.base_offset)
            segments = []
        if not segments:
            start = 0 if is_delete_dir else self.log_start_offset_checkpoint
            segments = [LogSegment.open(self.dir, start, self.config)]
            self.report.created_segment = start
            self.log_end_offset = start
        # pass 7
        self.recovery_point = (
            self.log_end_offset
            if self.clean
            else min(self.recovery_point_checkpoint, self.log_end_offset)
        )
        # pass 9: active segment indexes back to full capacity
        segments[-1].resize_indexes(segments[-1].max_index_size)
        # pass 10
        self.log_start_offset = max(self.log_start_offset_checkpoint, segments[0].base_offset)
        self._delete_stray_snapshots(segments)
        return segments, self.report

    # pass 4
    def _load_segments(self) -> tuple[list[LogSegment], list[LogSegment]]:
        """The segments, and those whose recovery found offsets that overflow them. Loading
        goes on past an overflow, so that the split knows every other segment's offsets."""
        files = sorted(p for p in self.dir.iterdir() if p.is_file())
        logs: set[int] = set()
        for p in files:
            if p.name.endswith(LOG_FILE_SUFFIX):
                with contextlib.suppress(LogDirError):
                    logs.add(parse_segment_file_name(p.name).base_offset)
        for p in files:
            if any(p.name.endswith(s) for s in INDEX_SUFFIXES):
                try:
                    base = parse_segment_file_name(p.name).base_offset
                except LogDirError:
                    continue
                if base not in logs:
                    self._delete(p)  # orphan index
        segments: list[LogSegment] = []
        overflowed: list[LogSegment] = []
        for base in sorted(logs):
            seg = LogSegment.open(self.dir, base, self.config)
            kafka_reason, reason = _why_recover(seg, base in self._pieces)
            try:
                if kafka_reason is not None:
                    self._recover_in_load(seg, segments, kafka_reason)
                else:
                    if seg.time_index_newly_created:  # created empty by the sanity check
                        self.report.empty_time_indexes.append(base)
                    if reason is not None:
                        seg = self._rebuild_indexes(seg, segments, reason, base in self._pieces)
            except _Overflow:
                overflowed.append(seg)
            segments.append(seg)
        return segments, overflowed

    def _recover_in_load(self, seg: LogSegment, earlier: list[LogSegment], reason: str) -> None:
        """Kafka's loadSegmentFiles recovers a segment for a missing .index or a corrupt
        .txnindex, cutting its invalid tail, and fails where that recovery fails. What it cut
        decides nothing more: Kafka ignores recoverSegment's result there, and recoverLog's
        second recovery of the segment cuts nothing, so no later segment is dropped for it."""
        try:
            self._recover_segment(seg, earlier, in_recovery=False)
        except (InvalidOffsetError, OSError) as e:
            raise LogDirError(
                f"cannot load {seg.log_path}: recovering it ({reason}) failed: "
                f"{e}; a broker's load fails on it too"
            ) from e
        self.report.rebuilt_indexes.append((seg.base_offset, reason))

    def _rebuild_indexes(
        self, seg: LogSegment, earlier: list[LogSegment], reason: str, piece: bool
    ) -> LogSegment:
        """Indexes only kafkalog distrusts (Kafka's load trusts them) or a split's piece (Kafka's
        split writes its indexes): rebuilt from the .log without cutting a byte, which only
        Kafka's own reasons may do. A piece also gets its .txnindex (Kafka's has none)."""
        try:
            tracker = None
            if piece:
                tracker = TxnTracker.empty()
                for prev in earlier:
                    replay_batches(prev.batches(), prev.read_batch_bytes, tracker)
            # an empty .timeindex (Kafka creates a missing one so) stays empty: a broker judges
            # the segment's age by the .log's mtime then, and so must every later reader
            seg.rebuild_indexes(tracker, txn=piece, time=piece or len(seg.time_index) > 0)
        except LogSegmentOffsetOverflowError as e:
            raise _Overflow(seg.log_path) from e
        except (KafkaLogError, OSError) as e:
            return self._load_as_kafka_does(seg, reason, e)
        seg.flush_indexes_if_dirty()
        self.report.rebuilt_indexes.append((seg.base_offset, reason))
        return seg

    def _load_as_kafka_does(self, seg: LogSegment, reason: str, error: Exception) -> LogSegment:
        """A segment only our stricter checks distrust, whose indexes could not be rebuilt:
        loaded with its indexes as they are (a missing .timeindex created empty), as Kafka's
        load trusts them; pass 5 recovers it as Kafka's would when it is in its range."""
        seg.release_handles()
        if not seg.index_path.exists():  # a split's piece: Kafka's split wrote it one
            seg.index_path.touch()
        seg = LogSegment.open(self.dir, seg.base_offset, self.config)
        seg.sanity_check(seg.time_index_newly_created)
        self.report.warnings.append(
            f"{seg.log_path}: its indexes look wrong ({reason}) and recovery could not rebuild "
            f"them ({error}); loaded as they are, as a broker's load trusts them"
        )
        return seg

    def _recover_segment(
        self, seg: LogSegment, earlier: list[LogSegment], in_recovery: bool
    ) -> int:
        """Recover one segment with txn state rebuilt from the segments before it; returns the
        bytes cut. Raises `_Overflow` for a segment to split. An index append refusing offsets
        out of order or an I/O error empties the segment `in_recovery` (pass 5, as Kafka's
        recoverLog) and is raised otherwise (pass 4: Kafka's load fails)."""
        tracker = TxnTracker.empty()
        for prev in earlier:
            replay_batches(prev.batches(), prev.read_batch_bytes, tracker)
        try:
            truncated = seg.recover(tracker, self.epoch_cache)
        except LogSegmentOffsetOverflowError as e:
            raise _Overflow(seg.log_path) from e
        except (InvalidOffsetError, OSError) as e:
            if not in_recovery:
                raise
            truncated = seg.truncate_to(seg.base_offset)
            if truncated:
                self._cut(
                    seg.log_path.name,
                    seg.size,
                    truncated,
                    f"recovery failed ({e}); Kafka's recovery empties the segment",
                )
        else:
            cut = seg.recovery_cut
            if truncated and cut is not None:
                self._cut(seg.log_path.name, cut.position, truncated, f"{cut.reason}: {cut.detail}")
        seg.flush_indexes_if_dirty()
        self.report.recovered_segments.append(seg.base_offset)
        self.epoch_entries = [tuple(e) for e in self.epoch_cache.entries]  # type: ignore[misc]
        return truncated

    # pass 5
    def _recover_log(self, segments: list[LogSegment]) -> tuple[list[LogSegment], list[LogSegment]]:
        """Recover from the recovery point's segment on; stops at a segment that overflows
        (returned with all the segments, for the split)."""
        if not segments:
            return segments, []
        bases = [s.base_offset for s in segments]
        first = max(0, bisect.bisect_right(bases, self.recovery_point_checkpoint) - 1)
        already = set(self.report.recovered_segments)
        for k in range(first, len(segments)):
            seg = segments[k]
            if seg.base_offset in already:
                # recovered by pass 4 (Kafka's reasons): Kafka's second recovery cuts 0 bytes
                continue
            try:
                truncated = self._recover_segment(seg, segments[:k], in_recovery=True)
            except _Overflow:
                return segments, [seg]
            if truncated > 0:
                for later in segments[k + 1 :]:
                    later.change_file_suffixes("", DELETED_FILE_SUFFIX)
                    later.delete()
                    self.report.dropped_segments.append(later.base_offset)
                return segments[: k + 1], []
        return segments, []

    def _split(self, overflowed: list[LogSegment], segments: list[LogSegment]) -> None:
        """Split the first segment that overflows (LocalLog.splitOverflowedSegment, kill-safe:
        `split.py`) among the other segments of this pass, which are closed first; the next
        pass opens the pieces and writes their indexes. What no piece can hold is cut; the
        other segments stay, as the pieces were placed among them."""
        target = overflowed[0]
        if target.base_offset in self._split_bases:  # a split leaves no batch that overflows
            raise LogDirError(
                f"cannot load {target.log_path}: its offsets overflow it after a split"
            )
        self._split_bases.add(target.base_offset)
        known = [(s.base_offset, None if s in overflowed else _next_offset(s)) for s in segments]
        for seg in segments:
            seg.release_handles()
        others = offset_ranges(known, segments.index(target))
        before = set(_segment_bases(self.dir))
        self.report.splits += split_overflowed(
            target.log_path, others, functools.partial(self._cut_split_tail, others)
        )
        self._pieces |= set(_segment_bases(self.dir)) - before | {target.base_offset}

    def _cut_split_tail(
        self, others: list[tuple[int, int]], plan: SplitPlan
    ) -> list[tuple[int, int]]:
        """Cut the bytes of `plan`'s .log that no piece can hold (a double fault); the other
        segments are unchanged."""
        with open(plan.log_path, "r+b") as f:
            f.truncate(plan.valid_bytes)
            os.fsync(f.fileno())
        self._cut(
            plan.log_path.name,
            plan.valid_bytes,
            plan.tail_bytes,
            f"no segment of its split can hold it: {plan.stop}",
        )
        return others

    # pass 12 (file part): stray producer snapshots
    def _delete_stray_snapshots(self, segments: list[LogSegment]) -> None:
        bases = {s.base_offset for s in segments}
        snapshots = []
        for p in self.dir.iterdir():
            if p.is_file() and p.name.endswith(PRODUCER_SNAPSHOT_FILE_SUFFIX):
                with contextlib.suppress(LogDirError):
                    snapshots.append((parse_segment_file_name(p.name).base_offset, p))
        snapshots.sort()
        strays = [(off, p) for off, p in snapshots if off not in bases]
        if strays and strays[-1][0] > max(bases):
            strays.pop()  # the largest stray is kept when beyond the last segment base
        for _off, p in strays:
            p.unlink()
            self.report.deleted_snapshots.append(p.name)
        for off, p in snapshots:
            if off > self.log_end_offset and p.exists():
                p.unlink()
                self.report.deleted_snapshots.append(p.name)


def _why_recover(seg: LogSegment, piece: bool) -> tuple[str | None, str | None]:
    """Why pass 4 recovers or rebuilds `seg`: (Kafka's reason, ours). Kafka recovers a segment
    whose .index is missing or whose .txnindex fails its sanity check; a missing .timeindex it
    creates empty (done here, as its sanityCheck does). We also rebuild, without cutting, indexes
    that fail `indexes_look_valid` (Kafka >= 2.3 trusts them) and the indexes of a split's
    `piece` (Kafka's split writes them). The second item is the reason given, None when nothing
    is wrong."""
    if not seg.index_path.exists():
        if piece:
            return None, "a piece of a split: no .index yet"
        return "missing .index", "missing .index"
    try:
        seg.sanity_check(seg.time_index_newly_created)
    except KafkaLogError as e:
        return str(e), str(e)
    try:
        return None, seg.indexes_look_valid()
    except KafkaLogError as e:  # e.g. a header the check reads is corrupt
        return None, str(e)


def _segment_bases(dir: Path) -> list[int]:
    bases = []
    for p in dir.iterdir():
        if p.name.endswith(LOG_FILE_SUFFIX):
            with contextlib.suppress(LogDirError):
                bases.append(parse_segment_file_name(p.name).base_offset)
    return bases


def _next_offset(seg: LogSegment) -> int | None:
    """The segment's next offset, or None when unknown: its last batch does not fit it (it
    overflows too) or its batches cannot be walked."""
    try:
        next_offset = seg.read_next_offset()
    except KafkaLogError:
        return None
    if next_offset == seg.base_offset or seg.can_convert_to_relative_offset(next_offset - 1):
        return next_offset
    return None
