"""PartitionLog: one `<topic>-<partition>` directory of segments (Kafka's UnifiedLog + LocalLog,
§5-§7, §9.3-§9.4; loading an existing directory is `log_loader`'s job).

Typical use inside a Spark task (one log per partition the task writes):

    log = PartitionLog.create(dir, config, base_offset=0, topic_id=tid, leader_epoch=0)
    log.append_batches(encode_records(table, base_offset=log.log_end_offset, options=...))
    log.close()

`open()` loads an existing directory the way a broker does at startup (§6, passes 1-12),
including crash leftovers, and says what it did in `load_report`.

This module holds the log's segments and state: create/open, roll, truncation, retention,
flush/close. Its other jobs are base classes of `PartitionLog`, so every method is still
called on the log: appends in partition_log_append.py, the read side (fetch read, records as
Arrow, ListOffsets) in partition_log_reads.py, the attributes both use in
partition_log_state.py. Their public names are re-exported here.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from kafkalog_core.errors import InvalidOffsetError, KafkaLogError, LogDirError
from kafkalog_core.log.checkpoints import (
    LeaderEpochCache,
    LeaderEpochCheckpointFile,
    PartitionMetadataFile,
)
from kafkalog_core.log.log_loader import LoadReport, LogLoader
from kafkalog_core.log.names import (
    DELETED_FILE_SUFFIX,
    INDEX_SUFFIXES,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_FILE_SUFFIX,
    PARTITION_METADATA_FILE,
)
from kafkalog_core.log.partition.append import AppendInfo, PartitionLogAppends, batch_options_for
from kafkalog_core.log.partition.reads import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    PartitionLogReads,
    offset_for_timestamp,
    read_all_headers,
)
from kafkalog_core.log.segment.log_segment import LogSegment, segment_file_name

if TYPE_CHECKING:
    from kafkalog_core.config import LogConfig

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendInfo",
    "PartitionLog",
    "batch_options_for",
    "offset_for_timestamp",
    "read_all_headers",
]


class PartitionLog(PartitionLogAppends, PartitionLogReads):
    """The segments of one topic-partition directory, oldest first; the last one is active."""

    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        leader_epoch: int | None = None,
        topic_id: uuid.UUID | None = None,
        load_report: LoadReport | None = None,
    ) -> None:
        self.dir = Path(dir)
        self.config = config
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.leader_epoch = leader_epoch
        self.topic_id = topic_id
        self.load_report = load_report or LoadReport(self.dir)
        checkpoint = LeaderEpochCheckpointFile(self.dir / LEADER_EPOCH_CHECKPOINT_FILE)
        try:
            epoch_entries = checkpoint.read()
        except (KafkaLogError, ValueError):
            epoch_entries = []  # the loader reported it; recovery rebuilt what it could
        self.leader_epoch_cache = LeaderEpochCache(checkpoint, entries=epoch_entries)
        self._epoch_dirty = False
        self._next_offset = segments[-1].read_next_offset() if segments else log_start_offset
        self._closed = False

    # ---- construction ---------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        dir: str | os.PathLike[str],
        config: LogConfig,
        *,
        base_offset: int = 0,
        topic_id: uuid.UUID | None = None,
        leader_epoch: int | None = None,
    ) -> PartitionLog:
        """A new, empty partition directory whose first segment starts at `base_offset`.

        Refuses a directory that already holds segments (open it instead). Writes
        `partition.metadata` (when topic_id is given) and an empty leader-epoch-checkpoint, as a
        broker does when it creates a replica.
        """
        path = Path(dir)
        path.mkdir(parents=True, exist_ok=True)
        existing = [p.name for p in path.iterdir() if p.name.endswith(LOG_FILE_SUFFIX)]
        if existing:
            raise LogDirError(
                f"{path} already holds segments ({existing[0]}); use PartitionLog.open"
            )
        if base_offset < 0:
            raise InvalidOffsetError(f"base offset {base_offset} for {path} must be >= 0")
        if topic_id is not None:
            PartitionMetadataFile(path / PARTITION_METADATA_FILE).write(topic_id)
        LeaderEpochCheckpointFile(path / LEADER_EPOCH_CHECKPOINT_FILE).write([])
        segment = LogSegment.open(path, base_offset, config)
        log = cls(
            path,
            config,
            [segment],
            log_start_offset=base_offset,
            recovery_point=base_offset,
            leader_epoch=leader_epoch,
            topic_id=topic_id,
        )
        log._next_offset = base_offset
        return log

    @classmethod
    def open(
        cls,
        dir: str | os.PathLike[str],
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
        had_clean_shutdown: bool = False,
        now_ms: int | None = None,
        leader_epoch: int | None = None,
    ) -> PartitionLog:
        """Load a partition directory like LogLoader.load (§6), crash leftovers included.

        Differences from Kafka (both make the result *more* trustworthy): a missing
        `.timeindex` is rebuilt from the .log (Kafka creates it empty), and offset/time indexes
        failing a sanity check (ragged, zero-padded, pointing past the log) are rebuilt (Kafka
        ≥ 2.3 trusts them).
        """
        del now_ms  # accepted for symmetry; segment creation times use the wall clock
        path = Path(dir)
        if not path.is_dir():
            raise LogDirError(f"partition directory {path} does not exist")
        loader = LogLoader(path, config, recovery_point, log_start_offset or 0, had_clean_shutdown)
        segments, report = loader.load()
        topic_id = None
        meta = path / PARTITION_METADATA_FILE
        if meta.exists():
            try:
                topic_id = PartitionMetadataFile(meta).read()
            except KafkaLogError as e:
                report.warnings.append(f"unreadable {meta}: {e}")
        log = cls(
            path,
            config,
            segments,
            log_start_offset=loader.log_start_offset,
            recovery_point=loader.recovery_point,
            leader_epoch=leader_epoch,
            topic_id=topic_id,
            load_report=report,
        )
        log._next_offset = loader.log_end_offset
        # pass 11: the leader-epoch cache follows the log's range
        cache = log.leader_epoch_cache
        if loader.epoch_entries is not None:
            cache.clear()
            for entry in loader.epoch_entries:
                cache.assign(*entry)
        before = cache.entries
        cache.truncate_from_end(log._next_offset)
        cache.truncate_from_start(log.log_start_offset)
        if cache.entries != before or loader.epoch_entries is not None:
            cache.write()
        report.log_start_offset = log.log_start_offset
        report.log_end_offset = log._next_offset
        report.recovery_point = log.recovery_point
        return log

    # ---- basic properties -----------------------------------------------------------------------
    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def size_in_bytes(self) -> int:
        """Sum of the segments' .log sizes (what retention.bytes measures)."""
        return sum(s.size for s in self._segments)

    @property
    def high_watermark(self) -> int:
        """Offline logs are fully replicated: HW = LEO."""
        return self._next_offset

    def __repr__(self) -> str:
        return (
            f"PartitionLog({str(self.dir)!r}, segments={len(self._segments)}, "
            f"log_start_offset={self.log_start_offset}, log_end_offset={self._next_offset})"
        )

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, LEO) (§5 roll actions)."""
        self._check_open()
        new_offset = max(expected_next_offset or 0, self._next_offset)
        active = self.active_segment
        if new_offset in self._bases:
            if active.base_offset == new_offset and active.size == 0:
                self._segments.pop()
                self._bases.pop()
                active.delete()
                active = self._segments[-1] if self._segments else None  # type: ignore[assignment]
            else:
                raise KafkaLogError(
                    f"Trying to roll a new log segment for {self.dir} with start offset "
                    f"{new_offset} which already exists"
                )
        elif new_offset < active.base_offset:
            raise KafkaLogError(
                f"Trying to roll a new log segment for {self.dir} with start offset {new_offset} "
                f"lower than the active segment's base offset {active.base_offset}"
            )
        for suffix in (LOG_FILE_SUFFIX, *INDEX_SUFFIXES):
            with contextlib.suppress(FileNotFoundError):
                (self.dir / segment_file_name(new_offset, suffix)).unlink()
        if active is not None:
            active.on_become_inactive_segment()
            active.flush()
            active.offset_index.close()
            active.time_index.close()
            active.release_handles()
        segment = LogSegment.open(self.dir, new_offset, self.config)
        self._segments.append(segment)
        self._bases.append(new_offset)
        self.recovery_point = max(self.recovery_point, new_offset)
        return segment

    # ---- truncation -----------------------------------------------------------------------------
    def truncate_to(self, target_offset: int) -> bool:
        """Drop everything at and above `target_offset` (UnifiedLog.truncateTo); True if anything went."""
        self._check_open()
        if target_offset < 0:
            raise InvalidOffsetError(
                f"cannot truncate {self.dir} to negative offset {target_offset}"
            )
        if target_offset >= self._next_offset:
            return False
        if target_offset < self._bases[0]:
            # truncate everything: one fresh segment at target
            for seg in self._segments:
                seg.delete()
            seg = LogSegment.open(self.dir, target_offset, self.config)
            self._segments, self._bases = [seg], [target_offset]
            self.log_start_offset = target_offset
        else:
            while len(self._segments) > 1 and self._bases[-1] > target_offset:
                seg = self._segments.pop()
                self._bases.pop()
                seg.delete()
            self.active_segment.truncate_to(target_offset)
        self._next_offset = self.active_segment.read_next_offset()
        self.recovery_point = min(self.recovery_point, self._next_offset)
        self.log_start_offset = min(self.log_start_offset, self._next_offset)
        self.leader_epoch_cache.truncate_from_end(self._next_offset)
        self.leader_epoch_cache.write(sync=False)
        return True

    # ---- retention (the rules are `kafkalog_core.maintenance.retention`; this acts) --------
    def delete_segments(self, segments: Iterable[LogSegment]) -> list[int]:
        """Remove `segments` (a prefix): roll first if all would go, rename files to .deleted,
        advance the log start offset. Returns the deleted base offsets."""
        self._check_open()
        victims = list(segments)
        if not victims:
            return []
        if len(victims) == len(self._segments):
            new_active = self.roll()
            victims = [s for s in victims if s is not new_active]
        ids = {id(s) for s in victims}
        keep = [s for s in self._segments if id(s) not in ids]
        self._segments = keep
        self._bases = [s.base_offset for s in keep]
        self.log_start_offset = max(self.log_start_offset, self._bases[0])
        # Kafka's updateLogStartOffset: nothing below the log start is left to recover
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        for seg in victims:
            seg.close()
            seg.change_file_suffixes("", DELETED_FILE_SUFFIX)
        if self.leader_epoch_cache.truncate_from_start(self.log_start_offset):
            self.leader_epoch_cache.write(sync=False)
        return [s.base_offset for s in victims]

    # ---- lifecycle -------------------------------------------------------------------------------
    def start_writeback(self) -> None:
        """Ask the OS to start writing the active segment's appended bytes to disk, without
        waiting: for a writer that will fsync at the end (a staged log), the disk then works
        while it encodes the next records. (A segment rolled since the last call is left to
        the OS and the final fsync.)"""
        self.active_segment.start_writeback()

    def flush(self, fsync: bool = True) -> None:
        """Write buffered bytes and index entries of every segment (fsync those written since
        their last fsync); advance the recovery point to the LEO."""
        for seg in self._segments:
            seg.flush(fsync=fsync)  # only segments written since their last fsync do work
        if self._epoch_dirty:
            self.leader_epoch_cache.write(sync=fsync)
            self._epoch_dirty = False
        self.recovery_point = self._next_offset

    def close(self, fsync: bool = True) -> None:
        """Kafka's close: every segment gets its final time-index entry and trimmed indexes."""
        if self._closed:
            return
        for seg in self._segments:
            seg.close(fsync=fsync)  # rolled segments written since the open are fsynced too
        if self._epoch_dirty:
            self.leader_epoch_cache.write(sync=fsync)
            self._epoch_dirty = False
        self.recovery_point = self._next_offset
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaLogError(f"log {self.dir} is closed")

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
