"""Loading a partition directory the way a broker does at startup (Kafka's LogLoader, §6 passes
1-12): crash leftovers, swaps, index rebuilds and recovery of the unflushed tail.

`PartitionLog.open` runs a `LogLoader` and keeps its `LoadReport`; tools show the report.
"""

from __future__ import annotations

import bisect
import contextlib
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
from kafkalog_core.log.segment.scan import TxnTracker, control_type_of
from kafkalog_core.log.swap import complete_interrupted_swaps


@dataclass
class LoadReport:
    """What `PartitionLog.open` found and changed, for logs and job reports."""

    dir: Path
    had_clean_shutdown: bool = False
    deleted_files: list[str] = field(default_factory=list)
    swaps_completed: list[str] = field(default_factory=list)
    replaced_by_swap: list[str] = field(default_factory=list)
    rebuilt_indexes: list[tuple[int, str]] = field(default_factory=list)  # (base, reason)
    recovered_segments: list[int] = field(default_factory=list)
    truncated_bytes: int = 0
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
            or self.truncated_bytes
            or self.dropped_segments
            or self.created_segment is not None
        )


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
        self.pass4_truncated: dict[int, int] = {}
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

    def load(self) -> tuple[list[LogSegment], LoadReport]:
        swaps = complete_interrupted_swaps(self.dir)  # passes 1-3
        self.report.deleted_files += swaps.deleted_files
        self.report.replaced_by_swap += swaps.replaced_by_swap
        self.report.swaps_completed += swaps.swaps_completed
        segments = self._load_segments()
        is_delete_dir = self.dir.name.endswith("-delete")
        if not self.clean and not is_delete_dir:
            segments = self._recover_log(segments)
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
    def _load_segments(self) -> list[LogSegment]:
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
        segments = []
        for base in sorted(logs):
            seg = LogSegment.open(self.dir, base, self.config)
            reason = None
            if not seg.index_path.exists():
                reason = "missing .index"
            elif seg.time_index_newly_created:
                reason = "missing .timeindex"
            else:
                try:
                    seg.sanity_check(False)
                    reason = seg.indexes_look_valid()
                except KafkaLogError as e:
                    reason = str(e)
            if reason is not None:
                truncated = self._recover_segment(seg, segments)
                self.pass4_truncated[base] = truncated
                self.report.rebuilt_indexes.append((base, reason))
                self.report.truncated_bytes += truncated
            segments.append(seg)
        return segments

    def _recover_segment(self, seg: LogSegment, earlier: list[LogSegment]) -> int:
        """Recover one segment with txn state rebuilt from the segments before it."""
        tracker = TxnTracker.empty()
        for prev in earlier:
            _replay_txns(prev, tracker)
        try:
            truncated = seg.recover(tracker, self.epoch_cache)
        except (InvalidOffsetError, LogSegmentOffsetOverflowError, OSError) as e:
            self.report.warnings.append(
                f"{seg.log_path}: recovery failed ({e}); truncated to empty"
            )
            truncated = seg.truncate_to(seg.base_offset)
        seg.flush_indexes_if_dirty()
        self.report.recovered_segments.append(seg.base_offset)
        self.epoch_entries = [tuple(e) for e in self.epoch_cache.entries]  # type: ignore[misc]
        return truncated

    # pass 5
    def _recover_log(self, segments: list[LogSegment]) -> list[LogSegment]:
        if not segments:
            return segments
        bases = [s.base_offset for s in segments]
        first = max(0, bisect.bisect_right(bases, self.recovery_point_checkpoint) - 1)
        already = set(self.report.recovered_segments)
        for k in range(first, len(segments)):
            seg = segments[k]
            if seg.base_offset in already:
                truncated = self.pass4_truncated.get(seg.base_offset, 0)
            else:
                truncated = self._recover_segment(seg, segments[:k])
                self.report.truncated_bytes += truncated
            if truncated > 0:
                for later in segments[k + 1 :]:
                    later.change_file_suffixes("", DELETED_FILE_SUFFIX)
                    later.delete()
                    self.report.dropped_segments.append(later.base_offset)
                return segments[: k + 1]
        return segments

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


def _replay_txns(seg: LogSegment, tracker: TxnTracker) -> None:
    """Feed a segment's transactional batches to `tracker` (producer state up to its end)."""
    for header in seg.batches():
        if header.producer_id >= 0:
            control = None
            if header.is_control:
                control = control_type_of(memoryview(seg.read_batch_bytes(header)), header)
            tracker.on_batch(header, control)
        tracker.map_end_offset = header.last_offset + 1
