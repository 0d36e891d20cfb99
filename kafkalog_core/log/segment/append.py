"""Appending to a segment: whole batches, with Kafka's offset/time index rule (§3.3).

`SegmentAppends` is a base class of `LogSegment` (segment.py), which owns the files and the
state (segment_state.py). `append` is Kafka's one append of whole batches; `append_batches`
appends many encoded batches with one write and the same index entries, computed with numpy
from the batches' header arrays instead of batch by batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kafkalog_core.errors import LogSegmentOffsetOverflowError
from kafkalog_core.log.segment.scan import INT32_MAX, index_entries_for_appends
from kafkalog_core.log.segment.state import SegmentState

if TYPE_CHECKING:
    from kafkalog_core.record.encoder import EncodedBatches


class SegmentAppends(SegmentState):
    """The append path of `LogSegment`."""

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
