"""The offset index (`.index`, KAFKA_LOG_FACTS.md §3) and the base class shared with the time index.

Kafka memory-maps a preallocated file; we keep the entries in memory (two int64 numpy columns)
and write the file on `flush()`/`close()` at exactly `entries * ENTRY_SIZE` bytes, so a closed
index is never zero-padded. The observable behaviour -- which entries exist, what lookups,
truncation and sanity checks return -- follows Kafka's `AbstractIndex`/`OffsetIndex`.

Layout of one `.index` entry, big-endian, no header, no checksum:

    offset  size  field
    0       4     relativeOffset (offset - baseOffset, 0..Int.MAX)
    4       4     position       (byte position of a batch start in the .log)

Opening an existing file trusts its length (`floor(len / 8)` entries), exactly like Kafka: a
zero-padded file left by a crash reads as full of `(baseOffset, 0)` entries. Lookups replay
Kafka's binary search (including its warm section) so results match even on such files.
"""

from __future__ import annotations

import os
from typing import ClassVar, NamedTuple

import numpy as np

from kafkalog_core.errors import (
    ConfigError,
    CorruptIndexError,
    IndexFullError,
    InvalidOffsetError,
    LogSegmentOffsetOverflowError,
)
from kafkalog_core.log.index.index_file import IndexFile

DEFAULT_MAX_INDEX_SIZE = 10485760  # segment.index.bytes default
INT32_MAX = 2**31 - 1
WARM_SECTION_BYTES = 8192  # AbstractIndex: the tail of the index kept "hot" in the page cache

_OFFSET_ENTRY_DTYPE = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])

# which column a search compares against (Kafka's IndexSearchType)
KEY = 0
VALUE = 1


class OffsetPosition(NamedTuple):
    """An offset-index entry: an absolute offset and a byte position in the .log."""

    offset: int
    position: int


class OffsetIndexEntries(NamedTuple):
    """Read-only numpy views of an offset index: absolute offsets and positions (int64)."""

    offsets: np.ndarray
    positions: np.ndarray


class AbstractIndex(IndexFile):
    """In-memory sparse index with Kafka's size, search, truncation and file-length rules.

    Subclasses define the on-disk dtype (two big-endian fields) and which of the two columns
    holds an offset (stored relative to `base_offset` on disk, absolute in memory).
    """

    ENTRY_SIZE: ClassVar[int]
    DISK_DTYPE: ClassVar[np.dtype]
    OFFSET_COLUMN: ClassVar[int]  # 0 or 1: the column stored as a relative offset
    KIND: ClassVar[str] = "index"

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        *,
        load: bool = True,
    ) -> None:
        super().__init__(path, base_offset)
        if max_index_size < self.ENTRY_SIZE:
            raise ConfigError(
                f"Invalid max index size: {max_index_size} for {self.KIND} {self._path} "
                f"(segment.index.bytes must be at least {self.ENTRY_SIZE})"
            )
        self._max_index_size = int(max_index_size)
        self._max_entries = self._max_index_size // self.ENTRY_SIZE
        # Kafka's `length`: what the sanity check's "multiple of entry size" rule looks at.
        self._length = self._max_entries * self.ENTRY_SIZE
        self._cols = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
        self._n = 0
        self._disk_length: int | None = None  # bytes of the file as we last saw/wrote it
        self._synced = 0  # entries [0, _synced) are known to be on disk as they are in memory
        self._deleted = False
        if self._path.exists():
            self._disk_length = self._path.stat().st_size
            if load:
                self._load()

    # ---- loading / columns ---------------------------------------------------------------------
    def _load(self) -> None:
        data = self._path.read_bytes()
        count = len(data) // self.ENTRY_SIZE
        raw = np.frombuffer(data, dtype=self.DISK_DTYPE, count=count)
        names = self.DISK_DTYPE.names
        assert names is not None
        first = raw[names[0]].astype(np.int64)
        second = raw[names[1]].astype(np.int64)
        cols = [first, second]
        cols[self.OFFSET_COLUMN] += self.base_offset
        self._cols = (cols[0], cols[1])
        self._n = count
        self._synced = count
        self._length = len(data)

    def _reserve(self, need: int) -> None:
        capacity = len(self._cols[0])
        if need <= capacity:
            return
        new_capacity = max(64, capacity * 2, need)
        grown = []
        for col in self._cols:
            bigger = np.empty(new_capacity, dtype=np.int64)
            bigger[: self._n] = col[: self._n]
            grown.append(bigger)
        self._cols = (grown[0], grown[1])

    def _put(self, first: int, second: int) -> None:
        self._reserve(self._n + 1)
        self._cols[0][self._n] = first
        self._cols[1][self._n] = second
        self._n += 1

    def _put_many(self, first: np.ndarray, second: np.ndarray) -> None:
        k = len(first)
        self._reserve(self._n + k)
        self._cols[0][self._n : self._n + k] = first
        self._cols[1][self._n : self._n + k] = second
        self._n += k

    def _column_view(self, column: int) -> np.ndarray:
        """A read-only view of the first `entries` values: valid until the next truncation
        (a later append may reuse the truncated slots); copy it to keep it longer."""
        view = self._cols[column][: self._n]
        view.flags.writeable = False
        return view

    def relative_offset(self, offset: int) -> int:
        """offset - base_offset, refused unless it fits 0..Int.MAX (IndexOffsetOverflowException)."""
        relative = offset - self.base_offset
        if relative < 0 or relative > INT32_MAX:
            raise LogSegmentOffsetOverflowError(
                f"Integer overflow for offset: {offset} ({self._path}): relative offset "
                f"{relative} to base offset {self.base_offset} does not fit 0..{INT32_MAX}"
            )
        return relative

    # ---- size ----------------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        return self._n

    def __len__(self) -> int:
        return self._n

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def max_index_size(self) -> int:
        return self._max_index_size

    @property
    def length(self) -> int:
        """Kafka's index `length`: the (virtual) preallocated size, or a loaded file's size."""
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """Bytes the file has after flush/close: exactly `entries * ENTRY_SIZE`."""
        return self._n * self.ENTRY_SIZE

    @property
    def is_full(self) -> bool:
        return self._n >= self._max_entries

    def resize(self, new_size: int) -> bool:
        """Change the capacity to floor(new_size / ENTRY_SIZE) entries; True if it changed.

        In Kafka this resizes the mmap'ed file; here only `max_entries` (and `length`) change.
        Shrinking below the current entries is refused, as Kafka's buffer positioning would.
        """
        rounded = (int(new_size) // self.ENTRY_SIZE) * self.ENTRY_SIZE
        if rounded < self._n * self.ENTRY_SIZE:
            raise ValueError(
                f"cannot resize {self._path} to {new_size} bytes: it holds {self._n} entries "
                f"({self._n * self.ENTRY_SIZE} bytes)"
            )
        changed = rounded != self._length
        self._length = rounded
        self._max_entries = rounded // self.ENTRY_SIZE
        return changed

    def trim_to_valid_size(self) -> None:
        """Shrink the capacity to the entries present (roll, close, end of recovery)."""
        self.resize(self._n * self.ENTRY_SIZE)

    # ---- truncation ----------------------------------------------------------------------------
    def _truncate_to_entries(self, count: int) -> None:
        count = max(0, min(count, self._n))
        self._n = count
        self._synced = min(self._synced, count)

    def truncate(self) -> None:
        """Remove every entry."""
        self._truncate_to_entries(0)

    def reset(self) -> None:
        """Empty the index and give it back its full capacity (used by segment recovery)."""
        self.truncate()
        self.resize(self._max_index_size)

    def _truncate_to_offset(self, offset: int, column: int) -> None:
        """Kafka's truncateTo: keep entries whose offset is < `offset` (searching `column`)."""
        slot = self._largest_lower_bound_slot(offset, column)
        if slot < 0:
            keep = 0
        elif int(self._cols[column][slot]) == offset:
            keep = slot
        else:
            keep = slot + 1
        self._truncate_to_entries(keep)

    # ---- Kafka's search --------------------------------------------------------------------------
    def _slot_for(self, target: int, column: int, smallest_upper: bool) -> int:
        """AbstractIndex.indexSlotRangeFor: the binary search with its warm section, verbatim in effect.

        Replayed exactly (rather than np.searchsorted) so that answers match Kafka even on files
        whose entries are not monotonic, e.g. a crash-left zero-padded index.
        """
        n = self._n
        if n == 0:
            return -1
        col = self._cols[column]
        warm_entries = WARM_SECTION_BYTES // self.ENTRY_SIZE
        first_hot = max(0, n - 1 - warm_entries)
        if int(col[first_hot]) < target:
            return self._binary_search(col, target, first_hot, n - 1, smallest_upper)
        if int(col[0]) > target:
            return 0 if smallest_upper else -1
        return self._binary_search(col, target, 0, first_hot, smallest_upper)

    def _binary_search(
        self, col: np.ndarray, target: int, lo: int, hi: int, smallest_upper: bool
    ) -> int:
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            found = int(col[mid])
            if found > target:
                hi = mid - 1
            elif found < target:
                lo = mid
            else:
                return mid
        if not smallest_upper:
            return lo
        return -1 if lo == self._n - 1 else lo + 1

    def _largest_lower_bound_slot(self, target: int, column: int = KEY) -> int:
        return self._slot_for(target, column, smallest_upper=False)

    def _smallest_upper_bound_slot(self, target: int, column: int = KEY) -> int:
        return self._slot_for(target, column, smallest_upper=True)

    # ---- file ----------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The exact file content: `entries * ENTRY_SIZE` big-endian bytes."""
        return self._encode(0, self._n)

    def _encode(self, start: int, stop: int) -> bytes:
        out = np.empty(stop - start, dtype=self.DISK_DTYPE)
        names = self.DISK_DTYPE.names
        assert names is not None
        for column, name in enumerate(names):
            values = self._cols[column][start:stop]
            if column == self.OFFSET_COLUMN:
                values = values - self.base_offset
            out[name] = values
        return out.tobytes()

    @property
    def is_dirty(self) -> bool:
        """True when the file on disk differs from the entries in memory (or is missing)."""
        return self._disk_length != self._n * self.ENTRY_SIZE or self._synced != self._n

    def flush(self, *, sync: bool = True) -> None:
        """Write the file at exactly `entries * ENTRY_SIZE` bytes (in place), fsync if `sync`.

        Only the entries appended since the last flush are written when the on-disk prefix is
        known to be intact. A file that already matches is left untouched (read-only inputs).
        """
        if self._deleted:
            return
        size = self._n * self.ENTRY_SIZE
        if not self.is_dirty:
            return
        if self._synced > 0 and self._disk_length is not None and self._path.exists():
            with open(self._path, "r+b") as f:
                f.seek(self._synced * self.ENTRY_SIZE)
                f.write(self._encode(self._synced, self._n))
                f.truncate(size)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
        else:
            with open(self._path, "wb") as f:
                f.write(self._encode(0, self._n))
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
        self._disk_length = size
        self._synced = self._n

    def close(self) -> None:
        """Kafka's close: trim to the valid size and write the file (no fsync; call flush() first)."""
        if self._deleted:
            return
        self.trim_to_valid_size()
        self.flush(sync=False)

    def _forget(self) -> None:
        """A deleted index: later flush/close do nothing."""
        self._deleted = True
        self._disk_length = None
        self._synced = 0

    def _corrupt(self, reason: str) -> CorruptIndexError:
        return CorruptIndexError(f"Corrupt {self.KIND} {self._path}: {reason}")

    def _check_length(self) -> None:
        if self._length % self.ENTRY_SIZE != 0:
            raise self._corrupt(
                f"found {self._length} bytes which is neither positive nor a multiple of "
                f"{self.ENTRY_SIZE}"
            )

    def entries_before_padding(self) -> int:
        """Entries before the first crash-left zero entry (DumpLogSegments: i > 0 and offset == base)."""
        if self._n <= 1:
            return self._n
        offsets = self._cols[self.OFFSET_COLUMN][1 : self._n]
        hits = np.flatnonzero(offsets == self.base_offset)
        return int(hits[0]) + 1 if len(hits) else self._n

    def drop_padding(self) -> None:
        """Forget crash-left zero entries in memory (a reader that never writes the file)."""
        self._truncate_to_entries(self.entries_before_padding())

    def forget_entries(self) -> None:
        """Forget every entry in memory, e.g. an index a reader cannot trust (the file stays)."""
        self._truncate_to_entries(0)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({str(self._path)!r}, base_offset={self.base_offset}, "
            f"entries={self._n}, max_entries={self._max_entries})"
        )


class OffsetIndex(AbstractIndex):
    """`.index`: sparse map from offsets to byte positions in the segment's .log."""

    ENTRY_SIZE = 8
    DISK_DTYPE = _OFFSET_ENTRY_DTYPE
    OFFSET_COLUMN = 0
    KIND = "offset index"

    def entry(self, n: int) -> OffsetPosition:
        if n < 0 or n >= self._n:
            raise IndexError(
                f"Attempt to fetch the {n}th entry from offset index {self._path}, "
                f"which has size {self._n}"
            )
        return OffsetPosition(int(self._cols[0][n]), int(self._cols[1][n]))

    @property
    def last_entry(self) -> OffsetPosition:
        """The last entry, or (baseOffset, 0) when empty."""
        if self._n == 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(self._n - 1)

    @property
    def last_offset(self) -> int:
        return self.last_entry.offset

    def entries_array(self) -> OffsetIndexEntries:
        return OffsetIndexEntries(self._column_view(0), self._column_view(1))

    def append(self, offset: int, position: int) -> None:
        """Add (offset, position); offsets must strictly increase and the index must have room."""
        if self.is_full:
            raise IndexFullError(
                f"Attempt to append to a full index (size = {self._n}): {self._path}"
            )
        if self._n > 0 and offset <= int(self._cols[0][self._n - 1]):
            raise InvalidOffsetError(
                f"Attempt to append an offset {offset} to position {self._n} no larger than the "
                f"last offset appended ({self.last_offset}) to {self._path}"
            )
        self.relative_offset(offset)
        if position < 0 or position > INT32_MAX:
            raise InvalidOffsetError(
                f"position {position} for offset {offset} does not fit an int32 in {self._path}"
            )
        self._put(offset, position)

    def append_many(self, offsets: np.ndarray, positions: np.ndarray) -> None:
        """Vectorized `append` of many entries; all-or-nothing (nothing is added on error)."""
        offsets = np.asarray(offsets, dtype=np.int64)
        positions = np.asarray(positions, dtype=np.int64)
        if offsets.shape != positions.shape or offsets.ndim != 1:
            raise ValueError("offsets and positions must be 1-d arrays of the same length")
        k = len(offsets)
        if k == 0:
            return
        if self._n + k > self._max_entries:
            raise IndexFullError(
                f"Attempt to append {k} entries to an index with {self._n} of "
                f"{self._max_entries} slots used: {self._path}"
            )
        previous = np.concatenate(
            ([int(self._cols[0][self._n - 1])] if self._n else [offsets[0] - 1], offsets[:-1])
        )
        bad = np.flatnonzero(offsets <= previous)
        if len(bad):
            i = int(bad[0])
            raise InvalidOffsetError(
                f"Attempt to append an offset {int(offsets[i])} to position {self._n + i} no "
                f"larger than the last offset appended ({int(previous[i])}) to {self._path}"
            )
        self.relative_offset(int(offsets[0]))
        self.relative_offset(int(offsets[-1]))
        if int(positions.min()) < 0 or int(positions.max()) > INT32_MAX:
            raise InvalidOffsetError(f"positions must fit 0..{INT32_MAX} in {self._path}")
        self._put_many(offsets, positions)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= target, else (baseOffset, 0)."""
        slot = self._largest_lower_bound_slot(target_offset, KEY)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(slot)

    def lookup_many(self, target_offsets: np.ndarray) -> OffsetIndexEntries:
        """Vectorized `lookup` for a valid (strictly increasing) index: (offsets, positions)."""
        targets = np.asarray(target_offsets, dtype=np.int64)
        if self._n == 0:
            return OffsetIndexEntries(
                np.full(len(targets), self.base_offset, dtype=np.int64),
                np.zeros(len(targets), dtype=np.int64),
            )
        offsets, positions = self._cols[0][: self._n], self._cols[1][: self._n]
        slots = np.searchsorted(offsets, targets, side="right") - 1
        found = slots >= 0
        safe = np.where(found, slots, 0)
        return OffsetIndexEntries(
            np.where(found, offsets[safe], self.base_offset),
            np.where(found, positions[safe], 0),
        )

    def fetch_upper_bound_offset(
        self, fetch_start: OffsetPosition, fetch_size: int
    ) -> OffsetPosition | None:
        """The first entry whose position is >= start.position + fetch_size, else None."""
        slot = self._smallest_upper_bound_slot(fetch_start.position + fetch_size, VALUE)
        if slot < 0:
            return None
        return self.entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with offset >= `offset` (Kafka's OffsetIndex.truncateTo)."""
        self._truncate_to_offset(offset, KEY)

    def sanity_check(self) -> None:
        """OffsetIndex.sanityCheck: last offset below the base offset, or a ragged file length."""
        if self._n != 0 and self.last_offset < self.base_offset:
            raise self._corrupt(
                f"has non-zero size but the last offset is {self.last_offset} which is less "
                f"than the base offset {self.base_offset}"
            )
        self._check_length()
