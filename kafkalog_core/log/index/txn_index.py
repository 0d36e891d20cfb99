"""The transaction index (`.txnindex`, KAFKA_LOG_FACTS.md §4): one AbortedTxn per ABORT marker.

Entry, 34 bytes, big-endian, appended at the end of the file, no header, no preallocation:

    offset  size  field
    0       2     version (int16) = 0
    2       8     producerId
    10      8     firstOffset       first offset of the aborted transaction (maybe an earlier segment)
    18      8     lastOffset        offset of the ABORT marker
    26      8     lastStableOffset  the LSO when the abort completed

Unlike the offset/time indexes this one is written through on every `append` (aborts are rare)
and the file only comes into existence with its first entry, so most segments have none.
Kafka's reader looks at only the *first byte* of the version (signed) and refuses values > 0;
we reproduce that so files Kafka rejects are rejected here too.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from kafkalog_core.errors import CorruptIndexError, InvalidOffsetError
from kafkalog_core.log.index.index_file import IndexFile

ENTRY_SIZE = 34
CURRENT_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
assert _ENTRY.size == ENTRY_SIZE
_PAYLOAD = struct.Struct(">qqqq")  # the four longs after the version


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction: its producer, its offset range and the LSO when it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = CURRENT_VERSION

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(
            self.version, self.producer_id, self.first_offset, self.last_offset,
            self.last_stable_offset,
        )  # fmt: skip

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, at: int = 0) -> AbortedTxn:
        """Decode one entry; `version` is the signed first byte, as Kafka's reader sees it."""
        version = struct.unpack_from(">b", data, at)[0]
        producer_id, first, last, lso = _PAYLOAD.unpack_from(data, at + 2)
        return cls(producer_id, first, last, lso, version)

    def __str__(self) -> str:
        """DumpLogSegments' line for a .txnindex entry."""
        return (
            f"version: {self.version} producerId: {self.producer_id} firstOffset: "
            f"{self.first_offset} lastOffset: {self.last_offset} lastStableOffset: "
            f"{self.last_stable_offset}"
        )


class TxnIndexSearchResult(NamedTuple):
    """collectAbortedTxns' answer: the matching txns and whether later segments can be skipped."""

    aborted_transactions: list[AbortedTxn]
    is_complete: bool


class TransactionIndex(IndexFile):
    """`.txnindex` of one segment: aborted transactions whose ABORT marker lies in the segment."""

    def __init__(self, path: str | os.PathLike[str], base_offset: int) -> None:
        super().__init__(path, base_offset)
        self._cache: list[AbortedTxn] | None = None  # entries as on disk, read lazily
        # Kafka only tracks the last offset of entries appended (or kept by truncate_to)
        # since this object was opened; a reopened index does not check against the file.
        self._last_offset: int | None = None

    # ---- reading -------------------------------------------------------------------------------
    def _read_file(self) -> list[AbortedTxn]:
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return []
        entries = []
        for at in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):  # a ragged tail is ignored
            txn = AbortedTxn.from_bytes(data, at)
            if txn.version > CURRENT_VERSION:
                raise CorruptIndexError(
                    f"Unexpected aborted transaction version {txn.version} in transaction index "
                    f"{self._path} at position {at}, current version is {CURRENT_VERSION}"
                )
            entries.append(txn)
        return entries

    def _entries(self) -> list[AbortedTxn]:
        if self._cache is None:
            self._cache = self._read_file()
        return self._cache

    def all_entries(self) -> list[AbortedTxn]:
        """Every entry in file order (Kafka's allAbortedTxns)."""
        return list(self._entries())

    def __iter__(self) -> Iterator[AbortedTxn]:
        return iter(self.all_entries())

    @property
    def entries(self) -> int:
        return len(self._entries())

    def __len__(self) -> int:
        return self.entries

    @property
    def is_empty(self) -> bool:
        return not self._entries()

    @property
    def last_offset(self) -> int | None:
        """lastOffset of the most recent entry appended through this object, if any."""
        return self._last_offset

    def to_bytes(self) -> bytes:
        return b"".join(txn.to_bytes() for txn in self._entries())

    # ---- writing -------------------------------------------------------------------------------
    def append(self, aborted_txn: AbortedTxn) -> None:
        """Write one entry at the end of the file (creating it); lastOffset must increase."""
        if self._last_offset is not None and self._last_offset >= aborted_txn.last_offset:
            raise InvalidOffsetError(
                f"The last offset of appended transactions must increase sequentially, but "
                f"{aborted_txn.last_offset} is not greater than current last offset "
                f"{self._last_offset} of index {self._path}"
            )
        with open(self._path, "ab") as f:
            f.write(aborted_txn.to_bytes())
        if self._cache is not None:
            self._cache.append(aborted_txn)
        self._last_offset = aborted_txn.last_offset

    def flush(self) -> None:
        """fsync the file if it exists (appends are already written through)."""
        if self._path.exists():
            with open(self._path, "rb+") as f:
                os.fsync(f.fileno())

    def close(self) -> None:
        """Nothing is buffered; kept for symmetry with the other indexes."""

    def reset(self) -> None:
        """Remove every entry (truncate an existing file to 0 bytes; never creates one)."""
        if self._path.exists():
            with open(self._path, "r+b") as f:
                f.truncate(0)
        self._cache = []
        self._last_offset = None

    truncate = reset

    def truncate_to(self, offset: int) -> None:
        """Cut the file at the first entry whose lastOffset >= offset (Kafka's truncateTo)."""
        entries = self._entries()
        kept_last: int | None = None
        for i, txn in enumerate(entries):
            if txn.last_offset >= offset:
                with open(self._path, "r+b") as f:
                    f.truncate(i * ENTRY_SIZE)
                del entries[i:]
                self._last_offset = kept_last
                return
            kept_last = txn.last_offset

    def _forget(self) -> None:
        self._cache = []
        self._last_offset = None

    # ---- queries -------------------------------------------------------------------------------
    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """Aborted txns overlapping [fetch_offset, upper_bound_offset); complete once an
        entry's LSO reaches the upper bound (no later segment can hold a relevant abort)."""
        found: list[AbortedTxn] = []
        for txn in self._entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def sanity_check(self) -> None:
        """Corrupt if an entry's lastOffset lies below the segment base offset (or a bad version)."""
        for txn in self._entries():
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"Last offset of aborted transaction {txn} in index {self._path} is less "
                    f"than start offset {self.base_offset}"
                )

    def __repr__(self) -> str:
        return f"TransactionIndex({str(self._path)!r}, base_offset={self.base_offset})"
