"""LogSegment: one `.log` file and its `.index`/`.timeindex`/`.txnindex` (§2, §3, §5).

Behaves like Kafka's `LogSegment`: the same index placement rule on append (§3.3), the same
entries at roll, close and recovery (§3.5), the same lookups (§3.6) and roll conditions (§5).
A segment we wrote and a segment rebuilt by `recover()` have byte-identical indexes as long as
every append was one batch (the producer path; `append_batches` appends batch by batch).

This module holds the segment's files and state: open/create, roll, truncation,
flush/close/rename/delete. Its other jobs are base classes of `LogSegment`, so every method is
still called on the segment: appends in segment_append.py, the read side (header walks,
lookups, `read`) in segment_reads.py, recovery and the load-time index checks in
segment_recovery.py.

Writes go through a buffered handle; reads `pread` the file after pushing that buffer out, so
a reader always sees every appended byte. Recovery walks batch headers over a few large reads,
CRC-32C-checks every batch on memoryviews and parses no records except control batches: it
runs at memory speed, not at Python-per-record speed.
"""

from __future__ import annotations

import contextlib
import os
import random
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkalog_core.errors import (
    KafkaLogError,
)
from kafkalog_core.log.index.offset_index import DEFAULT_MAX_INDEX_SIZE, OffsetIndex
from kafkalog_core.log.index.time_index import TimeIndex
from kafkalog_core.log.index.txn_index import TransactionIndex
from kafkalog_core.log.segment.append import SegmentAppends
from kafkalog_core.log.segment.reads import (
    FetchDataInfo,
    LogOffsetPosition,
    SegmentReads,
    TimestampAndOffset,
)
from kafkalog_core.log.segment.recovery import SegmentRecovery
from kafkalog_core.log.segment.scan import DEFAULT_INDEX_INTERVAL_BYTES, InvalidBatch
from kafkalog_core.log.writeback import start_writeback

if TYPE_CHECKING:
    pass

__all__ = [
    "CLEANED_SUFFIX",
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "LONG_MAX",
    "SWAP_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "FetchDataInfo",
    "LogOffsetPosition",
    "LogSegment",
    "RollParams",
    "TimestampAndOffset",
    "now_ms",
    "random_segment_jitter",
    "segment_file_name",
]

LONG_MAX = 2**63 - 1

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

_I32 = struct.Struct(">i")


def segment_file_name(base_offset: int, suffix: str) -> str:
    """`<20-digit zero-padded base offset><suffix>` (§2)."""
    return f"{base_offset:020d}{suffix}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------------------------------------
# roll inputs
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RollParams:
    """Inputs of `should_roll` for one incoming append (Kafka's RollParams)."""

    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now: int


# ---------------------------------------------------------------------------------------------
# the segment
# ---------------------------------------------------------------------------------------------


class LogSegment(SegmentAppends, SegmentReads, SegmentRecovery):
    """A `.log` file plus its indexes, named by the base offset (Kafka's LogSegment).

    Build with `LogSegment.open(dir, base_offset, ...)`. All offsets are absolute. Timestamps are
    epoch milliseconds. Nothing here knows about neighbouring segments: rolling, recovery order
    and retention live in `PartitionLog`.
    """

    def __init__(
        self,
        dir: str | os.PathLike[str],
        base_offset: int,
        *,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        roll_jitter_ms: int = 0,
        file_suffix: str = "",
        created_ms: int | None = None,
        preallocate_bytes: int = 0,
        read_only: bool = False,
    ) -> None:
        """`read_only`: never create the .log (FileNotFoundError if it is gone), for readers."""
        self.dir = Path(dir)
        self.base_offset = int(base_offset)
        self.index_interval_bytes = int(index_interval_bytes)
        self.max_index_size = int(max_index_size)
        self.roll_jitter_ms = int(roll_jitter_ms)
        self._suffix = file_suffix
        self.log_path = self.dir / segment_file_name(self.base_offset, LOG_SUFFIX + file_suffix)
        self.time_index_newly_created = not self._path(TIME_INDEX_SUFFIX).exists()
        self.offset_index = OffsetIndex(
            self._path(INDEX_SUFFIX), self.base_offset, self.max_index_size
        )
        self.time_index = TimeIndex(
            self._path(TIME_INDEX_SUFFIX), self.base_offset, self.max_index_size
        )
        self.txn_index = TransactionIndex(self._path(TXN_INDEX_SUFFIX), self.base_offset)
        self.created_ms = now_ms() if created_ms is None else int(created_ms)
        self._fh: Any = None  # buffered r+b handle, opened lazily
        self._needs_fsync = False  # bytes or index entries written since the last fsync
        self._dirty = False  # bytes sit in the write buffer
        if not self.log_path.exists():
            if read_only:
                raise FileNotFoundError(f"segment {self.log_path} does not exist")
            with open(self.log_path, "wb"):
                pass
        self._size = self.log_path.stat().st_size
        self._preallocated = False
        if preallocate_bytes > 0 and self._size == 0:
            os.truncate(self.log_path, preallocate_bytes)  # Kafka's preallocate=true
            self._preallocated = True
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None  # None = not loaded yet
        self._max_ts_and_offset: tuple[int, int] | None = None  # None = not loaded yet
        self.recovery_cut: InvalidBatch | None = None

    @classmethod
    def open(
        cls,
        dir: str | os.PathLike[str],
        base_offset: int,
        config: Any = None,
        *,
        file_suffix: str = "",
        created_ms: int | None = None,
        preallocate: bool | None = None,
    ) -> LogSegment:
        """Open or create a segment with a LogConfig's index settings and a fresh roll jitter."""
        interval, max_index, jitter, prealloc = (
            DEFAULT_INDEX_INTERVAL_BYTES,
            DEFAULT_MAX_INDEX_SIZE,
            0,
            0,
        )
        if config is not None:
            interval = config.index_interval_bytes
            max_index = config.segment_index_bytes
            jitter = random_segment_jitter(config)
            if preallocate if preallocate is not None else getattr(config, "preallocate", False):
                prealloc = config.segment_bytes
        return cls(
            dir,
            base_offset,
            index_interval_bytes=interval,
            max_index_size=max_index,
            roll_jitter_ms=jitter,
            file_suffix=file_suffix,
            created_ms=created_ms,
            preallocate_bytes=prealloc,
        )

    # ---- names ---------------------------------------------------------------------------------
    def _path(self, kind: str) -> Path:
        return self.dir / segment_file_name(self.base_offset, kind + self._suffix)

    @property
    def index_path(self) -> Path:
        return self.offset_index.path

    @property
    def time_index_path(self) -> Path:
        return self.time_index.path

    @property
    def txn_index_path(self) -> Path:
        return self.txn_index.path

    def __repr__(self) -> str:
        return (
            f"LogSegment({str(self.log_path)!r}, base_offset={self.base_offset}, size={self._size})"
        )

    # ---- file access ---------------------------------------------------------------------------
    def _handle(self) -> Any:
        if self._fh is None:
            try:
                self._fh = open(self.log_path, "r+b", buffering=1 << 20)  # noqa: SIM115
            except PermissionError:
                # read-only input (fixtures, archived logs): reads work, writes will fail
                self._fh = open(self.log_path, "rb")  # noqa: SIM115
            self._fh.seek(self._size)
        return self._fh

    def _pread(self, position: int, size: int) -> bytes:
        """Up to `size` bytes at `position` of the .log, including bytes still buffered."""
        size = max(0, min(size, self._size - position))
        if size == 0:
            return b""
        fh = self._handle()
        if self._dirty:
            fh.flush()
            self._dirty = False
        return os.pread(fh.fileno(), size, position)

    @property
    def size(self) -> int:
        """Bytes of batches in the .log (Kafka's log.sizeInBytes)."""
        return self._size

    # ---- lazily loaded state -------------------------------------------------------------------
    def _max_ts(self) -> tuple[int, int]:
        if self._max_ts_and_offset is None:
            last = self.time_index.last_entry  # a reopened segment trusts its time index
            self._max_ts_and_offset = (last.timestamp, last.offset)
        return self._max_ts_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_ts()[0]

    @property
    def shallow_offset_of_max_timestamp_so_far(self) -> int:
        return self._max_ts()[1]

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the .log mtime when no timestamp >= 0 is known (§7)."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return self.log_path.stat().st_mtime_ns // 1_000_000

    def set_last_modified(self, ms: int) -> None:
        """Kafka's setLastModified: the .log, .index and .timeindex get mtime `ms`."""
        self.flush()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            if path.exists():
                os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))

    def _load_first_batch_timestamp(self) -> None:
        if self._rolling_based_timestamp is None and self._size > 0:
            first = next(self._headers_from(0), None)
            if first is not None:
                self._rolling_based_timestamp = first.max_timestamp

    def get_first_batch_timestamp(self) -> int:
        """The first batch's max timestamp, or Long.MAX for an empty segment (§13 case 29)."""
        self._load_first_batch_timestamp()
        return LONG_MAX if self._rolling_based_timestamp is None else self._rolling_based_timestamp

    # ---- roll --------------------------------------------------------------------------------------
    def time_waited_for_roll(self, now: int, message_timestamp: int) -> int:
        self._load_first_batch_timestamp()
        rbt = self._rolling_based_timestamp
        if rbt is not None and rbt >= 0:
            return message_timestamp - rbt
        return now - self.created_ms

    def should_roll(self, params: RollParams) -> bool:
        """Kafka's four roll conditions (§5): size, time (with jitter), full index, overflow."""
        reached_roll_ms = (
            self.time_waited_for_roll(params.now, params.max_timestamp_in_messages)
            > params.max_segment_ms - self.roll_jitter_ms
        )
        return (
            self.rolls_by_size(self._size, params.messages_size, params.max_segment_bytes)
            or (self._size > 0 and reached_roll_ms)
            or self.offset_index.is_full
            or self.time_index.is_full
            or not self.can_convert_to_relative_offset(params.max_offset_in_messages)
        )

    @staticmethod
    def rolls_by_size(size: int, messages_size: int, max_segment_bytes: int) -> bool:
        """The size condition of `should_roll`: a segment of `size` bytes cannot take
        `messages_size` more. It alone decides a roll, so a caller that knows only sizes (the
        ingest's relayout of staged segments) can tell a roll for certain."""
        return size > max_segment_bytes - messages_size

    @property
    def rolling_based_timestamp(self) -> int | None:
        self._load_first_batch_timestamp()
        return self._rolling_based_timestamp

    def on_become_inactive_segment(self) -> None:
        """Roll: final time-index entry for the max timestamp, trim both indexes and the .log."""
        max_ts, off = self._max_ts()
        self.time_index.maybe_append(max_ts, off, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._trim_log()

    def _trim_log(self) -> None:
        if self._preallocated:
            fh = self._handle()
            fh.flush()
            fh.truncate(self._size)
            self._preallocated = False

    # ---- truncation ----------------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= `offset`; returns the bytes removed."""
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.offset_index.resize(self.max_index_size)
        self.time_index.resize(self.max_index_size)
        truncated = 0
        if mapping is not None:
            truncated = self._truncate_log(mapping.position)
        if self._size == 0:
            self.created_ms = now_ms()
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        if self.max_timestamp_so_far >= 0:
            self._load_largest_timestamp()
        return truncated

    def cut_before(self, offset: int) -> None:
        """Drop the batch that starts at `offset` and every later one, leaving the files as its
        writer would have left them closing the segment just before appending that batch: the
        indexes lose the entries of the dropped batches, and `close` adds the final time-index
        entry for the running max of what remains (read back from the headers). Then
        `resume_as_active` takes it back to that writer's live state.

        Kafka's `truncate_to` keeps its running max only when the time index holds one; this
        always reads it back, as the writer had it.
        """
        at = self.translate_offset(offset)
        if at is not None:
            first = next(self._headers_from(at.position), None)
            if first is None or first.base_offset != offset:
                raise KafkaLogError(f"{self.log_path}: no batch starts at offset {offset}")
        self.truncate_to(offset)
        self._load_largest_timestamp()

    def _truncate_log(self, target: int) -> int:
        original = self._size
        if target > original or target < 0:
            raise KafkaLogError(
                f"Attempt to truncate log segment {self.log_path} to {target} bytes failed: "
                f"size of this log segment is {original} bytes"
            )
        fh = self._handle()
        fh.flush()
        self._dirty = False
        fh.truncate(target)
        fh.seek(target)
        self._size = target
        self._preallocated = False
        self._needs_fsync = True
        return original - target

    # ---- lifecycle --------------------------------------------------------------------------------
    def flush(self, fsync: bool = False) -> None:
        """Push buffered bytes and index entries to the files; with `fsync`, make every file
        written since the last fsync durable (also after the handle was released at roll)."""
        if self._fh is not None:
            self._fh.flush()
            self._dirty = False
        self.offset_index.flush(sync=False)
        self.time_index.flush(sync=False)
        if fsync and self._needs_fsync:
            for path in (
                self.log_path,
                self.offset_index.path,
                self.time_index.path,
                self.txn_index.path,
            ):
                _fsync_file(path)
            self._needs_fsync = False

    @property
    def needs_fsync(self) -> bool:
        return self._needs_fsync

    def start_writeback(self) -> None:
        """Hand buffered .log bytes to the OS and ask it to start writing them to disk now,
        without waiting (see `writeback`), so that a later fsync has little left to do."""
        if self._fh is not None and self._needs_fsync:
            self._fh.flush()
            self._dirty = False
            start_writeback(self._fh.fileno())

    def release_handles(self) -> None:
        """Flush and close the .log handle; the segment reopens it on the next access."""
        if self._fh is not None:
            self._fh.flush()
            self._fh.close()
            self._fh = None
            self._dirty = False

    def close(self, fsync: bool = False) -> None:
        """Kafka's close: final time-index entry, indexes written trimmed, .log trimmed."""
        if self._max_ts_and_offset is not None:
            ts, off = self._max_ts_and_offset
            self.time_index.maybe_append(ts, off, skip_full_check=True)
        self._trim_log()
        if fsync:
            self.flush(fsync=True)
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self.release_handles()

    def close_handlers(self) -> None:
        self.release_handles()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename all four files from `old_suffix` to `new_suffix` (e.g. '' -> '.deleted')."""
        self.release_handles()
        self.flush_indexes_if_dirty()

        def renamed(path: Path) -> Path:
            name = path.name
            if old_suffix and name.endswith(old_suffix):
                name = name[: -len(old_suffix)]
            return path.with_name(name + new_suffix)

        new_log = renamed(self.log_path)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        self.offset_index.rename_to(renamed(self.offset_index.path))
        self.time_index.rename_to(renamed(self.time_index.path))
        self.txn_index.rename_to(renamed(self.txn_index.path))
        self._suffix = new_suffix

    def flush_indexes_if_dirty(self) -> None:
        self.offset_index.flush(sync=False)
        self.time_index.flush(sync=False)

    def has_suffix(self, suffix: str) -> bool:
        return self.log_path.name.endswith(suffix)

    def delete(self) -> None:
        """Delete the .log and the three index files (missing ones are fine)."""
        self.release_handles()
        with contextlib.suppress(FileNotFoundError):
            self.log_path.unlink()
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def random_segment_jitter(config: Any) -> int:
    """`abs(randomInt) % min(segment.jitter.ms, segment.ms)`, 0 when jitter is off (§5)."""
    jitter = int(getattr(config, "segment_jitter_ms", 0) or 0)
    if jitter == 0:
        return 0
    bound = min(jitter, int(config.segment_ms))
    if bound <= 0:
        return 0
    value = random.randint(-(2**31), 2**31 - 1)
    return 0 if value == -(2**31) else abs(value) % bound


def _fsync_file(path: Path) -> None:
    """fsync one file if it exists (index files may be absent, e.g. no .txnindex)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
