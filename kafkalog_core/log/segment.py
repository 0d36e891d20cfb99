"""LogSegment: one `.log` file and its `.index`/`.timeindex`/`.txnindex` (§2, §3, §5).

Behaves like Kafka's `LogSegment`: the same index placement rule on append (§3.3), the same
entries at roll, close and recovery (§3.5), the same lookups (§3.6) and roll conditions (§5).
A segment we wrote and a segment rebuilt by `recover()` have byte-identical indexes as long as
every append was one batch (the producer path; `append_batches` appends batch by batch).

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
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kafkalog_core.errors import (
    CorruptIndexError,
    CorruptRecordError,
    KafkaLogError,
    LogSegmentOffsetOverflowError,
)
from kafkalog_core.log.offset_index import DEFAULT_MAX_INDEX_SIZE, OffsetIndex
from kafkalog_core.log.segment_scan import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    INT32_MAX,
    NO_TIMESTAMP,
    header_at,
    index_entries_for_appends,
    scan_segment,
)
from kafkalog_core.log.time_index import TimeIndex
from kafkalog_core.log.txn_index import TransactionIndex
from kafkalog_core.log.writeback import start_writeback
from kafkalog_core.record.batch import (
    HEADER_SIZE_UP_TO_MAGIC,
    LEGACY_RECORD_OVERHEAD_V0,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
)

if TYPE_CHECKING:
    from kafkalog_core.record.encoder import EncodedBatches

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
# small value types
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """What `read` returns: the requested offset, where the returned bytes start, and the bytes."""

    start_offset: int
    segment_base_offset: int
    position: int
    records: bytes
    first_entry_incomplete: bool = False


@dataclass(frozen=True, slots=True)
class LogOffsetPosition:
    """translateOffset's answer: the first batch whose last offset is >= the target."""

    offset: int  # the batch's last offset
    position: int
    size: int


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """A ListOffsets answer: a record timestamp, its offset and the batch's leader epoch."""

    timestamp: int
    offset: int
    leader_epoch: int | None = None


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


class LogSegment:
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
        os.utime(self.log_path, ns=(ms * 1_000_000, ms * 1_000_000))

    def _load_first_batch_timestamp(self) -> None:
        if self._rolling_based_timestamp is None and self._size > 0:
            first = next(self._headers_from(0), None)
            if first is not None:
                self._rolling_based_timestamp = first.max_timestamp

    def get_first_batch_timestamp(self) -> int:
        """The first batch's max timestamp, or Long.MAX for an empty segment (§13 case 29)."""
        self._load_first_batch_timestamp()
        return LONG_MAX if self._rolling_based_timestamp is None else self._rolling_based_timestamp

    # ---- append --------------------------------------------------------------------------------
    def _check_offset_in_range(self, offset: int) -> None:
        relative = offset - self.base_offset
        if relative < 0 or relative > INT32_MAX:
            raise LogSegmentOffsetOverflowError(
                f"Detected offset overflow at offset {offset} in segment {self.log_path}: "
                f"relative offset {relative} to base offset {self.base_offset} does not fit "
                f"0..{INT32_MAX}"
            )

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        if self._preallocated:
            # a preallocated file has zeros after the batches: write in place
            fh = self._handle()
            fh.seek(self._size)
        self._handle().write(data)
        self._dirty = True
        self._needs_fsync = True

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        shallow_offset_of_max_timestamp: int,
        records: bytes | bytearray | memoryview,
    ) -> None:
        """One append of whole batches, with Kafka's index rule (§3.3)."""
        n = len(records)
        if n == 0:
            return
        position = self._size
        if position == 0:
            self._rolling_based_timestamp = largest_timestamp
        self._check_offset_in_range(largest_offset)
        self._write(records)
        self._size += n
        max_ts, _ = self._max_ts()
        if largest_timestamp > max_ts:
            self._max_ts_and_offset = (largest_timestamp, shallow_offset_of_max_timestamp)
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            ts, off = self._max_ts_and_offset  # type: ignore[misc]
            self.time_index.maybe_append(ts, off)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += n

    def append_batches(
        self, encoded: EncodedBatches, start: int = 0, stop: int | None = None
    ) -> None:
        """Append batches `[start, stop)` of `encoded`, each as its own append (producer path).

        One write for all bytes; the index rule runs per batch on the numpy header arrays, so
        the result equals calling `append` once per batch.
        """
        stop = len(encoded) if stop is None else stop
        if stop <= start:
            return
        positions = encoded.positions
        sizes = encoded.sizes
        first_pos = int(positions[start])
        end_pos = int(positions[stop - 1]) + int(sizes[stop - 1])
        last_offsets = encoded.last_offsets[start:stop]
        max_timestamps = encoded.max_timestamps[start:stop]
        batch_sizes = sizes[start:stop]
        self._check_offset_in_range(int(last_offsets[-1]))
        self._check_offset_in_range(int(encoded.base_offsets[start]))
        if self._size == 0:
            self._rolling_based_timestamp = int(max_timestamps[0])
        self._write(memoryview(encoded.buffer)[first_pos:end_pos])
        max_ts, max_off = self._max_ts()
        # the segment's (max timestamp, its offset) after each batch: a running max that keeps
        # the first offset reaching it, as `append` does batch by batch
        before = np.maximum.accumulate(np.concatenate(([max_ts], max_timestamps)))
        raised = max_timestamps > before[:-1]
        owner = np.maximum.accumulate(np.where(raised, np.arange(raised.shape[0]), -1))
        running_off = np.where(owner >= 0, last_offsets[np.maximum(owner, 0)], max_off)
        entries, since = index_entries_for_appends(
            batch_sizes, self._bytes_since_last_index_entry, self.index_interval_bytes
        )
        positions_in = self._size + np.concatenate(([0], np.cumsum(batch_sizes[:-1])))
        if entries.size:
            self.offset_index.append_many(last_offsets[entries], positions_in[entries])
            self.time_index.maybe_append_many(before[1:][entries], running_off[entries])
        self._bytes_since_last_index_entry = since
        self._max_ts_and_offset = (int(before[-1]), int(running_off[-1]))
        self._size = end_pos - first_pos + self._size

    # ---- header walking --------------------------------------------------------------------------
    def _headers_from(self, position: int, end: int | None = None) -> Iterator[BatchHeader]:
        """Batch headers from `position` with FileLogInputStream semantics (§1.8), file positions."""
        limit = self._size if end is None else min(end, self._size)
        while position < limit - HEADER_SIZE_UP_TO_MAGIC:
            head = self._pread(position, RECORD_BATCH_OVERHEAD)
            length = _I32.unpack_from(head, 8)[0]
            if length < LEGACY_RECORD_OVERHEAD_V0:
                raise CorruptRecordError(
                    f"{self.log_path}: batch at position {position}: record size {length} is "
                    f"smaller than the minimum record overhead ({LEGACY_RECORD_OVERHEAD_V0})"
                )
            if position > limit - LOG_OVERHEAD - length:
                return
            yield header_at(head, 0, position, self.log_path)
            position += length + LOG_OVERHEAD

    def batches(self, start_position: int = 0) -> Iterator[BatchHeader]:
        """Headers of every batch from `start_position` (no CRC check)."""
        return self._headers_from(start_position)

    def read_batch_bytes(self, header: BatchHeader) -> bytes:
        return self._pread(header.position, header.size)

    # ---- lookups ---------------------------------------------------------------------------------
    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """The first batch at or after the index hint whose last offset is >= `offset` (§3.6)."""
        hint = self.offset_index.lookup(offset)
        start = max(hint.position, starting_position)
        for header in self._headers_from(start):
            if header.last_offset >= offset:
                return LogOffsetPosition(header.last_offset, header.position, header.size)
        return None

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> FetchDataInfo | None:
        """Kafka's LogSegment.read: bytes from the batch holding `start_offset`, at most max_size."""
        if max_size < 0:
            raise ValueError(
                f"Invalid max size {max_size} for log read from segment {self.log_path}"
            )
        mapping = self.translate_offset(start_offset)
        if mapping is None:
            return None
        max_position = self._size if max_position is None else max_position
        adjusted = max(max_size, mapping.size) if min_one_message else max_size
        if adjusted == 0:
            return FetchDataInfo(start_offset, self.base_offset, mapping.position, b"")
        fetch_size = min(max_position - mapping.position, adjusted)
        data = self._pread(mapping.position, max(0, fetch_size))
        return FetchDataInfo(
            start_offset, self.base_offset, mapping.position, data, adjusted < mapping.size
        )

    def read_next_offset(self) -> int:
        """Next offset after the last batch (scans from the last offset-index entry)."""
        start = self.offset_index.lookup(self.offset_index.last_offset).position
        next_offset = self.base_offset
        found = False
        for header in self._headers_from(start):
            next_offset = header.next_offset
            found = True
        if not found and start > 0:  # the index pointed past the data: scan everything
            for header in self._headers_from(0):
                next_offset = header.next_offset
        return next_offset

    def find_offset_by_timestamp(
        self, timestamp: int, start_offset: int | None = None
    ) -> TimestampAndOffset | None:
        """First record with ts >= `timestamp` and offset >= `start_offset` in this segment (§3.6)."""
        start_offset = self.base_offset if start_offset is None else start_offset
        entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(entry.offset, start_offset)).position
        from kafkalog_core.record.decoder import RecordBatch

        for header in self._headers_from(position):
            if header.max_timestamp < timestamp:
                continue
            data = self._pread(header.position, header.size)
            table = RecordBatch(data, replace(header, position=0)).records()
            ts = table.column("timestamp").to_numpy(zero_copy_only=False)
            offsets = table.column("offset").to_numpy(zero_copy_only=False)
            hits = np.flatnonzero((ts >= timestamp) & (offsets >= start_offset))
            if len(hits):
                i = int(hits[0])
                epoch = header.partition_leader_epoch
                return TimestampAndOffset(
                    int(ts[i]), int(offsets[i]), epoch if epoch >= 0 else None
                )
        return None

    def find_max_timestamp_record(self) -> TimestampAndOffset | None:
        """The first record carrying this segment's max timestamp (ListOffsets MAX_TIMESTAMP)."""
        max_ts, shallow = self._max_ts()
        if max_ts < 0 and self._size == 0:
            return None
        position = self.offset_index.lookup(shallow).position
        from kafkalog_core.record.decoder import RecordBatch

        for start in (position, 0):
            for header in self._headers_from(start):
                if header.max_timestamp != max_ts:
                    continue
                data = self._pread(header.position, header.size)
                table = RecordBatch(data, replace(header, position=0)).records()
                ts = table.column("timestamp").to_numpy(zero_copy_only=False)
                hits = np.flatnonzero(ts == max_ts)
                if len(hits):
                    i = int(hits[0])
                    epoch = header.partition_leader_epoch
                    return TimestampAndOffset(
                        max_ts,
                        int(table.column("offset")[i].as_py()),
                        epoch if epoch >= 0 else None,
                    )
        return None

    def _largest_timestamp_after(self, position: int) -> tuple[int, int]:
        max_ts, off = NO_TIMESTAMP, -1
        for header in self._headers_from(position):
            if header.max_timestamp > max_ts:
                max_ts, off = header.max_timestamp, header.last_offset
        return max_ts, off

    def _load_largest_timestamp(self) -> None:
        """maxTimestampSoFar after truncation: time index last entry, then scan past it."""
        last = self.time_index.last_entry
        self._max_ts_and_offset = (last.timestamp, last.offset)
        position = self.offset_index.lookup(last.offset).position
        ts, off = self._largest_timestamp_after(position)
        if ts > last.timestamp:
            self._max_ts_and_offset = (ts, off)

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

    # ---- recovery --------------------------------------------------------------------------------
    def recover(self, producer_state: Any = None, leader_epoch_cache: Any = None) -> int:
        """Rebuild indexes from the .log, cut the first invalid batch and all after it (§3.5).

        `producer_state` may be a `TxnTracker` (default: a fresh one), a
        `ProducerStateManager` (its `update(header, control_type)`), or any object with
        `on_batch(header, control_type) -> AbortedTxn | None`. `leader_epoch_cache` needs
        `latest_epoch` and `assign(epoch, start_offset)`. Returns the bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        fh = self._handle()
        if self._dirty:
            fh.flush()
            self._dirty = False
        scan = scan_segment(
            self.log_path,
            fd=fh.fileno(),
            size=self._size,
            base_offset=self.base_offset,
            index_interval_bytes=self.index_interval_bytes,
            producer_state=producer_state,
            leader_epoch_cache=leader_epoch_cache,
        )
        for aborted in scan.aborted_txns:
            self.txn_index.append(aborted)
        truncated = scan.truncated_bytes
        if truncated:
            self._truncate_log(scan.valid_bytes)
        self.offset_index.append_many(scan.index_offsets, scan.index_positions)
        if len(scan.walk_timestamps):
            self.time_index.maybe_append_many(scan.walk_timestamps, scan.walk_offsets)
        self.offset_index.trim_to_valid_size()
        max_ts = (scan.max_timestamp, scan.offset_of_max_timestamp)
        self._max_ts_and_offset = max_ts
        self.time_index.maybe_append(max_ts[0], max_ts[1], skip_full_check=True)
        self.time_index.trim_to_valid_size()
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp = None
        self._needs_fsync = True
        return truncated

    # ---- verification ------------------------------------------------------------------------------
    def indexes_look_valid(self) -> str | None:
        """Why this segment's .index/.timeindex cannot be trusted, or None.

        Stronger than Kafka ≥ 2.3 (which trusts them): Kafka's sanity checks, plus strictly
        increasing offsets (catches crash-left zero padding), positions inside the .log and
        offsets not past the last batch (catches an index longer than its log).
        """
        try:
            self.offset_index.sanity_check()
            self.time_index.sanity_check()
        except CorruptIndexError as e:
            return str(e)
        off, pos = self.offset_index.entries_array()
        if len(off):
            if np.any(np.diff(off) <= 0) or np.any(np.diff(pos) <= 0):
                return f"{self.offset_index.path}: entries not strictly increasing (zero padding?)"
            if int(pos[-1]) >= self._size or int(pos[0]) < 0:
                return f"{self.offset_index.path}: position {int(pos[-1])} beyond the .log size {self._size}"
            header = next(self._headers_from(int(pos[-1])), None)
            if (
                header is None
                or header.position != int(pos[-1])
                or header.last_offset < int(off[-1])
            ):
                return f"{self.offset_index.path}: last entry does not point at its batch"
        ts, toff = self.time_index.entries_array()
        if len(ts):
            if np.any(np.diff(ts) <= 0) or np.any(np.diff(toff) < 0):
                return f"{self.time_index.path}: entries not increasing (zero padding?)"
            if int(toff[0]) < self.base_offset:
                return f"{self.time_index.path}: offset below the base offset"
        if len(ts) or len(off):
            next_offset = self.read_next_offset()
            if (len(off) and int(off[-1]) >= next_offset) or (
                len(ts) and int(toff[-1]) >= next_offset
            ):
                return (
                    f"index of {self.log_path} refers to offsets at or past the end {next_offset}"
                )
        return None

    def distrust_indexes(self) -> None:
        """For readers that must not write: forget the .index/.timeindex entries in memory, so
        lookups scan the .log from its start and the max timestamp comes from a header walk."""
        self.offset_index.forget_entries()
        self.time_index.forget_entries()
        self._max_ts_and_offset = self._largest_timestamp_after(0)

    def sanity_check(self, time_index_newly_created: bool | None = None) -> None:
        """Kafka's load-time check: a missing .index is an error; a missing .timeindex is created
        empty; the txn index is checked. Raises FileNotFoundError / CorruptIndexError."""
        newly = (
            self.time_index_newly_created
            if time_index_newly_created is None
            else time_index_newly_created
        )
        if not self.offset_index.path.exists():
            raise FileNotFoundError(
                f"{self.offset_index.path} (offset index of {self.log_path}) does not exist"
            )
        if newly:
            self.time_index.resize(0)
            self.time_index.flush(sync=False)
        self.txn_index.sanity_check()

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
