"""Reading a partition log: Kafka's fetch read, records as Arrow, ListOffsets by timestamp (§3.6).

`PartitionLogReads` is a base class of `PartitionLog` (partition_log.py), which owns the
segments and the state (partition_log_state.py); every method is still called on the log. The
special ListOffsets timestamps and `offset_for_timestamp` (the rule for a timestamp >= 0, also
used on segments outside a log) live here too.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkalog_core.errors import OffsetOutOfRangeError
from kafkalog_core.log.partition.state import PartitionLogState
from kafkalog_core.log.segment.log_segment import LogSegment
from kafkalog_core.log.segment.reads import FetchDataInfo, TimestampAndOffset
from kafkalog_core.record.batch import iter_batch_headers

if TYPE_CHECKING:
    import pyarrow as pa

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


class PartitionLogReads(PartitionLogState):
    """The read side of `PartitionLog`."""

    def read(
        self, start_offset: int, max_size: int, *, min_one_message: bool = False
    ) -> FetchDataInfo:
        """Kafka's LocalLog.read: batches from the one holding `start_offset`, at most max_size bytes."""
        if start_offset == self._next_offset:
            seg = self.active_segment
            return FetchDataInfo(start_offset, seg.base_offset, seg.size, b"")
        if start_offset > self._next_offset or start_offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"Received request for offset {start_offset} for {self.dir}, but we only have "
                f"log segments in the range {self.log_start_offset} to {self._next_offset}"
            )
        i = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        for seg in self._segments[i:]:
            info = seg.read(start_offset, max_size, None, min_one_message)
            if info is not None:
                return info
        seg = self.active_segment
        return FetchDataInfo(start_offset, seg.base_offset, seg.size, b"")

    def read_records(
        self,
        start_offset: int | None = None,
        end_offset: int | None = None,
        *,
        include_control: bool = False,
    ) -> pa.Table:
        """Records with start_offset <= offset < end_offset (default: the whole log) as Arrow."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from kafkalog_core.record.decoder import RECORD_SCHEMA, decode_records

        start = (
            self.log_start_offset
            if start_offset is None
            else max(start_offset, self.log_start_offset)
        )
        end = self._next_offset if end_offset is None else min(end_offset, self._next_offset)
        if start >= end:
            return RECORD_SCHEMA.empty_table()
        parts = []
        first = max(0, bisect.bisect_right(self._bases, start) - 1)
        for k, seg in enumerate(self._segments[first:], start=first):
            if seg.base_offset >= end:
                break
            nxt = self._bases[k + 1] if k + 1 < len(self._bases) else None
            if nxt is not None and nxt <= start:
                continue
            mapping = seg.translate_offset(start)
            if mapping is None:
                continue
            data = seg._pread(mapping.position, seg.size - mapping.position)
            table = decode_records(data, include_control=include_control)
            if table.num_rows:
                offs = table.column("offset")
                mask = pc.and_(pc.greater_equal(offs, start), pc.less(offs, end))
                table = table.filter(mask)
                parts.append(table)
        if not parts:
            return RECORD_SCHEMA.empty_table()
        return pa.concat_tables(parts)

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: -2 earliest, -1 latest, -3 max timestamp, else first record with ts >= T."""
        cache = self.leader_epoch_cache
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return TimestampAndOffset(
                -1, self.log_start_offset, cache.epoch_for_offset(self.log_start_offset)
            )
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, self._next_offset, cache.latest_epoch)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return TimestampAndOffset(-1, -1, None)  # no tiered storage offline
        if timestamp == MAX_TIMESTAMP:
            best = None
            for seg in self._segments:
                if best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far:
                    best = seg
            if best is None or best.max_timestamp_so_far < 0:
                return None
            return best.find_max_timestamp_record()
        return offset_for_timestamp(self._segments, timestamp, self.log_start_offset)


def offset_for_timestamp(
    segments: Iterable[LogSegment], timestamp: int, log_start_offset: int
) -> TimestampAndOffset | None:
    """ListOffsets for a timestamp >= 0 (§3.6): the first segment whose largest timestamp
    reaches it, then the first record there with ts >= timestamp; None when there is none."""
    if timestamp < 0:
        raise ValueError(f"unsupported special timestamp {timestamp}")
    for seg in segments:
        if seg.largest_timestamp >= timestamp:
            return seg.find_offset_by_timestamp(timestamp, log_start_offset)
    return None


def read_all_headers(path: Path) -> list[Any]:
    """Headers of every batch in a .log file (tests, tools)."""
    return list(iter_batch_headers(path.read_bytes()))
