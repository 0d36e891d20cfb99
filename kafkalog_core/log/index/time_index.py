"""The time index (`.timeindex`, KAFKA_LOG_FACTS.md §3): max timestamp so far -> offset.

Layout of one entry, big-endian, no header, no checksum:

    offset  size  field
    0       8     timestamp      (max timestamp seen so far in the segment)
    8       4     relativeOffset (shallow offset of that timestamp - baseOffset)

Kafka reserves the last slot for the entry written at roll/close (`is_full` at maxEntries - 1)
and ignores non-increasing timestamps silently, so an index of v0 data (timestamps -1) stays
empty. In memory like `OffsetIndex`; see offset_index.py for the shared file rules.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kafkalog_core.errors import IndexFullError, InvalidOffsetError
from kafkalog_core.log.index.offset_index import KEY, VALUE, AbstractIndex

NO_TIMESTAMP = -1

_TIME_ENTRY_DTYPE = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])


class TimestampOffset(NamedTuple):
    """A time-index entry: a timestamp and the (absolute) offset it was reached at."""

    timestamp: int
    offset: int


class TimeIndexEntries(NamedTuple):
    """Read-only numpy views of a time index: timestamps and absolute offsets (int64)."""

    timestamps: np.ndarray
    offsets: np.ndarray


class TimeIndex(AbstractIndex):
    """`.timeindex`: sparse map from timestamps to the offsets where they were first reached."""

    ENTRY_SIZE = 12
    DISK_DTYPE = _TIME_ENTRY_DTYPE
    OFFSET_COLUMN = 1
    KIND = "time index"

    @property
    def is_full(self) -> bool:
        """One slot stays free for the final entry written at roll or close."""
        return self._n >= self._max_entries - 1

    def entry(self, n: int) -> TimestampOffset:
        if n < 0 or n >= self._n:
            raise IndexError(
                f"Attempt to fetch the {n}th entry from time index {self._path}, "
                f"which has size {self._n}"
            )
        return TimestampOffset(int(self._cols[0][n]), int(self._cols[1][n]))

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or (-1, baseOffset) when empty."""
        if self._n == 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entry(self._n - 1)

    @property
    def max_timestamp(self) -> int:
        """The last entry's timestamp (-1 when empty): a reopened segment's maxTimestampSoFar."""
        return self.last_entry.timestamp

    def entries_array(self) -> TimeIndexEntries:
        return TimeIndexEntries(self._column_view(0), self._column_view(1))

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Add (timestamp, offset) if timestamp is larger than the last one; True if written.

        Kafka's rules in order: full (unless skip_full_check) -> IndexFullError; offset below
        the last entry's -> InvalidOffsetError (equal is fine); timestamp below the last
        entry's -> InvalidOffsetError (Kafka: IllegalStateException); equal timestamp -> ignored.
        """
        if not skip_full_check and self.is_full:
            raise IndexFullError(
                f"Attempt to append to a full time index (size = {self._n}): {self._path}"
            )
        last = self.last_entry
        if self._n != 0 and offset < last.offset:
            raise InvalidOffsetError(
                f"Attempt to append an offset ({offset}) to slot {self._n} no larger than the "
                f"last offset appended ({last.offset}) to {self._path}"
            )
        if self._n != 0 and timestamp < last.timestamp:
            raise InvalidOffsetError(
                f"Attempt to append a timestamp ({timestamp}) to slot {self._n} no larger than "
                f"the last timestamp appended ({last.timestamp}) to {self._path}"
            )
        if timestamp <= last.timestamp:
            return False
        self.relative_offset(offset)
        if self._n >= self._max_entries:
            # Kafka would hit a BufferOverflowException writing past the mapped file.
            raise IndexFullError(
                f"No room left in time index {self._path} ({self._n} of "
                f"{self._max_entries} slots used)"
            )
        self._put(timestamp, offset)
        return True

    def maybe_append_many(self, timestamps: np.ndarray, offsets: np.ndarray) -> int:
        """`maybe_append` of each (timestamp, offset) in order; returns how many were written.

        One numpy pass when the entries are in order (timestamps and offsets never below the
        index's last entry or an earlier entry) and fit below the full mark; anything else goes
        through `maybe_append` one by one, for its exact error.
        """
        timestamps = np.asarray(timestamps, dtype=np.int64)
        offsets = np.asarray(offsets, dtype=np.int64)
        k = timestamps.shape[0]
        if k == 0:
            return 0
        last = self.last_entry
        ts_floor = np.maximum.accumulate(np.concatenate(([last.timestamp], timestamps)))[:-1]
        keep = timestamps > ts_floor
        # the last entry before each candidate: the latest kept one, else the index's own
        written_at = np.maximum.accumulate(np.where(keep, np.arange(k), -1))
        before = np.concatenate(([-1], written_at[:-1]))
        prior_offsets = np.where(before >= 0, offsets[np.maximum(before, 0)], last.offset)
        checked = (before >= 0) | (self._n != 0)  # maybe_append checks only a non-empty index
        backwards = (timestamps < ts_floor) | (offsets < prior_offsets)
        ordered = not bool(np.any(checked & backwards))
        kept = int(np.count_nonzero(keep))
        written_before_last = kept - int(keep[-1])
        if not ordered or self._n + written_before_last >= self._max_entries - 1:
            return sum(
                self.maybe_append(int(t), int(o))
                for t, o in zip(timestamps.tolist(), offsets.tolist(), strict=True)
            )
        if kept:
            self.relative_offset(int(offsets[keep][0]))
            self.relative_offset(int(offsets[keep][-1]))
            self._put_many(timestamps[keep], offsets[keep])
        return kept

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= target, else (-1, baseOffset)."""
        slot = self._largest_lower_bound_slot(target_timestamp, KEY)
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entry(slot)

    def lookup_many(self, target_timestamps: np.ndarray) -> TimeIndexEntries:
        """Vectorized `lookup` for a valid (strictly increasing) index: (timestamps, offsets)."""
        targets = np.asarray(target_timestamps, dtype=np.int64)
        if self._n == 0:
            return TimeIndexEntries(
                np.full(len(targets), NO_TIMESTAMP, dtype=np.int64),
                np.full(len(targets), self.base_offset, dtype=np.int64),
            )
        timestamps, offsets = self._cols[0][: self._n], self._cols[1][: self._n]
        slots = np.searchsorted(timestamps, targets, side="right") - 1
        found = slots >= 0
        safe = np.where(found, slots, 0)
        return TimeIndexEntries(
            np.where(found, timestamps[safe], NO_TIMESTAMP),
            np.where(found, offsets[safe], self.base_offset),
        )

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with offset >= `offset`, searching the offset column."""
        self._truncate_to_offset(offset, VALUE)

    def sanity_check(self) -> None:
        """TimeIndex.sanityCheck: timestamps/offsets going backwards, or a ragged file length."""
        if self._n != 0:
            last = self.last_entry
            first_timestamp = int(self._cols[0][0])
            if last.timestamp < first_timestamp:
                raise self._corrupt(
                    f"has non-zero size but the last timestamp is {last.timestamp} which is "
                    f"less than the first timestamp {first_timestamp}"
                )
            if last.offset < self.base_offset:
                raise self._corrupt(
                    f"has non-zero size but the last offset is {last.offset} which is less "
                    f"than the first offset {self.base_offset}"
                )
        self._check_length()
