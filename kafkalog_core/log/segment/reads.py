"""Reading a segment: the batch-header walk, offset and timestamp lookups, Kafka's read (§3.6).

`SegmentReads` is a base class of `LogSegment` (segment.py), which owns the files and the
state (segment_state.py); it holds the segment's read side: `batches`, `translate_offset`,
`read`, `read_next_offset`, `find_offset_by_timestamp`, `find_max_timestamp_record`, and the
value types they return. Headers come from a few `pread`s per batch, records are decoded only for
the batch a timestamp lookup lands in.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.log.segment.scan import NO_TIMESTAMP, header_at
from kafkalog_core.log.segment.state import SegmentState
from kafkalog_core.record.batch import (
    HEADER_SIZE_UP_TO_MAGIC,
    LEGACY_RECORD_OVERHEAD_V0,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
)

_I32 = struct.Struct(">i")


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


class SegmentReads(SegmentState):
    """The read side of `LogSegment`: header walks and lookups over its .log and indexes."""

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
