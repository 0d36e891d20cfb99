"""Producer state and `.snapshot` files (KAFKA_LOG_FACTS.md §9.6, §3.5, §4).

Recovery replays batches through `ProducerStateManager.update`, which tracks each producer's
last batch and the ongoing transactions (sorted by first offset). When an ABORT marker
completes a transaction that had data, `update` returns the `AbortedTxn` that belongs in the
`.txnindex` of the segment holding the marker, with Kafka's last stable offset.

Snapshot file layout (`<20-digit map end offset>.snapshot`), big-endian:

    offset  size  field
    0       2     version = 1
    2       4     crc (uint32): CRC-32C of bytes [6, end)
    6       4     entry count
    10      46*n  entries: producerId i64, epoch i16, lastSequence i32, lastOffset i64,
                  offsetDelta i32, timestamp i64, coordinatorEpoch i32, currentTxnFirstOffset i64

Producer expiration (producer.id.expiration.ms) is not modelled: every producer is kept.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from crc32c import crc32c

from kafkalog_core.errors import CorruptSnapshotError
from kafkalog_core.log.checkpoints import atomic_write
from kafkalog_core.log.index.txn_index import AbortedTxn
from kafkalog_core.record.batch import (
    MAGIC_V2,
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    decrement_sequence,
)
from kafkalog_core.record.control import ControlRecordType

SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
VERSION_OFFSET = 0
CRC_OFFSET = 2
ENTRIES_OFFSET = 6  # the CRC covers [6, end): count + entries
_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
ENTRY_SIZE = _ENTRY.size
assert ENTRY_SIZE == 46
NO_OFFSET = -1
_SNAPSHOT_NAME = re.compile(r"^(\d+)\.snapshot$")


# The end-transaction marker types, under the name `update` has always accepted.
ControlType = ControlRecordType


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """One producer's state as a snapshot stores it: last batch + epochs + open transaction.

    `last_offset < 0` means no batch metadata (e.g. after an epoch bump by a marker).
    `current_txn_first_offset` is -1 when the producer has no transaction in progress.
    """

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_sequence: int = NO_SEQUENCE
    last_offset: int = NO_OFFSET
    offset_delta: int = 0
    timestamp: int = NO_TIMESTAMP
    coordinator_epoch: int = -1
    current_txn_first_offset: int = NO_OFFSET

    @property
    def has_batch_metadata(self) -> bool:
        return self.last_offset >= 0

    @property
    def first_sequence(self) -> int:
        """The base sequence of the last batch (DumpLogSegments' firstSequence)."""
        if self.last_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return decrement_sequence(self.last_sequence, self.offset_delta)

    @property
    def first_offset(self) -> int:
        """The base offset of the last batch, or -1 without batch metadata."""
        return self.last_offset - self.offset_delta if self.has_batch_metadata else NO_OFFSET

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(
            self.producer_id, self.producer_epoch, self.last_sequence, self.last_offset,
            self.offset_delta, self.timestamp, self.coordinator_epoch,
            self.current_txn_first_offset,
        )  # fmt: skip

    def dump_line(self) -> str:
        """kafka-dump-log.sh's line for one snapshot entry (§12.7), without the newline."""
        txn = (
            f"OptionalLong[{self.current_txn_first_offset}]"
            if self.current_txn_first_offset >= 0
            else "OptionalLong.empty"
        )
        line = (
            f"producerId: {self.producer_id} producerEpoch: {self.producer_epoch} "
            f"coordinatorEpoch: {self.coordinator_epoch} currentTxnFirstOffset: {txn} "
            f"lastTimestamp: {self.timestamp} "
        )
        if self.has_batch_metadata:
            line += (
                f"firstSequence: {self.first_sequence} lastSequence: {self.last_sequence} "
                f"lastOffset: {self.last_offset} offsetDelta: {self.offset_delta} "
                f"timestamp: {self.timestamp}"
            )
        return line


# ---- snapshot files ------------------------------------------------------------------------------
def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offset(path: str | os.PathLike[str]) -> int:
    """The offset in a snapshot file name (the map end offset the snapshot covers)."""
    name = Path(path).name
    match = _SNAPSHOT_NAME.match(name)
    if not match:
        raise CorruptSnapshotError(f"not a producer snapshot file name: {name}")
    return int(match.group(1))


def list_snapshots(directory: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """(offset, path) of every `<digits>.snapshot` in a partition dir, by offset."""
    found = []
    for entry in os.scandir(directory):
        match = _SNAPSHOT_NAME.match(entry.name)
        if match and entry.is_file():
            found.append((int(match.group(1)), Path(entry.path)))
    return sorted(found)


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """Snapshot bytes for `entries`, sorted by producer id (Kafka's order is a hash order)."""
    ordered = sorted(entries, key=lambda e: e.producer_id)
    body = struct.pack(">i", len(ordered)) + b"".join(e.to_bytes() for e in ordered)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body


def decode_snapshot(data: bytes, source: str = "snapshot") -> list[ProducerStateEntry]:
    """Parse snapshot bytes; a bad version, CRC or length is a CorruptSnapshotError."""
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(
            f"Snapshot failed schema validation: {source} has only {len(data)} bytes"
        )
    version, stored_crc, count = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(
            f"Snapshot contained an unknown file version {version}: {source}"
        )
    computed = crc32c(memoryview(data)[ENTRIES_OFFSET:])
    if computed != stored_crc:
        raise CorruptSnapshotError(
            f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored_crc}. "
            f"Computed crc: {computed}: {source}"
        )
    if count < 0 or len(data) != _HEADER.size + count * ENTRY_SIZE:
        raise CorruptSnapshotError(
            f"Snapshot failed schema validation: {source} declares {count} entries but has "
            f"{len(data) - _HEADER.size} bytes of entries"
        )
    return [
        ProducerStateEntry(*_ENTRY.unpack_from(data, _HEADER.size + i * ENTRY_SIZE))
        for i in range(count)
    ]


def write_snapshot(
    path: str | os.PathLike[str], entries: Iterable[ProducerStateEntry], *, sync: bool = True
) -> None:
    atomic_write(path, encode_snapshot(entries), sync=sync)


def read_snapshot(path: str | os.PathLike[str]) -> list[ProducerStateEntry]:
    p = Path(path)
    return decode_snapshot(p.read_bytes(), str(p))


# ---- the manager -------------------------------------------------------------------------------
class ProducerStateManager:
    """Producer state of one partition, rebuilt by replaying batch headers (recovery).

    `map_end_offset` is the next offset the state has not seen; snapshots are named by it.
    """

    def __init__(self, map_end_offset: int = 0) -> None:
        self.map_end_offset = int(map_end_offset)
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}  # first offset -> producer id, kept sorted on read

    # ---- state ----
    @property
    def entries(self) -> list[ProducerStateEntry]:
        """Every producer's entry, by producer id."""
        return [self._producers[pid] for pid in sorted(self._producers)]

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def ongoing_txns(self) -> list[tuple[int, int]]:
        """(first offset, producer id) of the open transactions, by first offset."""
        return sorted(self._ongoing.items())

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open transaction (the LSO bound), if any."""
        return min(self._ongoing) if self._ongoing else None

    def is_empty(self) -> bool:
        return not self._producers

    def clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()

    def load_entry(self, entry: ProducerStateEntry) -> None:
        """Install a producer's state (from a snapshot); an open transaction becomes ongoing."""
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset >= 0:
            self._ongoing[entry.current_txn_first_offset] = entry.producer_id

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = int(offset)

    def last_stable_offset(self, producer_id: int, marker_offset: int) -> int:
        """LSO when `producer_id`'s txn completes at `marker_offset`: the first offset of the
        earliest open transaction of another producer, else marker + 1."""
        for first, pid in sorted(self._ongoing.items()):
            if pid != producer_id:
                return first
        return marker_offset + 1

    # ---- replay ----
    def update(
        self,
        header: BatchHeader,
        control_type: ControlRecordType | int | None = None,
        coordinator_epoch: int | None = None,
        *,
        marker_timestamp: int | None = None,
    ) -> AbortedTxn | None:
        """Apply one batch as LogSegment.recover does; returns the AbortedTxn to index, if any.

        For a control batch pass the marker's `control_type` and `coordinator_epoch` (from
        its single record); `control_type=None` on a control batch means an empty batch whose
        marker was cleaned away, which changes nothing. Batches below magic 2 are ignored
        (Kafka only replays v2), batches without a producer id only move `map_end_offset`.
        Epoch and sequence checks are those of replication: nothing is refused.
        """
        if header.magic < MAGIC_V2:
            return None
        aborted: AbortedTxn | None = None
        if header.has_producer_id:
            pid = header.producer_id
            current = self._producers.get(pid) or ProducerStateEntry(pid)
            if header.is_control:
                if control_type is not None:
                    control_type = ControlRecordType(control_type)
                    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
                        raise ValueError(
                            f"batch at offset {header.base_offset}: {control_type.name} is not "
                            f"an end-transaction marker"
                        )
                    aborted = self._end_txn(
                        current,
                        header,
                        control_type,
                        coordinator_epoch if coordinator_epoch is not None else -1,
                        header.max_timestamp if marker_timestamp is None else marker_timestamp,
                    )
                else:
                    self._producers[pid] = current
            else:
                self._data_batch(current, header)
        self.map_end_offset = header.last_offset + 1
        return aborted

    def _data_batch(self, current: ProducerStateEntry, header: BatchHeader) -> None:
        entry = replace(
            current,
            producer_epoch=header.producer_epoch,
            last_sequence=header.last_sequence,
            last_offset=header.last_offset,
            offset_delta=header.last_offset - header.base_offset,
            timestamp=header.max_timestamp,
        )
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry = replace(entry, current_txn_first_offset=header.base_offset)
            self._ongoing[header.base_offset] = header.producer_id
        # Kafka refuses non-transactional data inside an open transaction
        # (InvalidTxnStateException); a log that contains it cannot be recovered by Kafka
        # either, so we keep the state as is rather than invent a rule.
        self._producers[header.producer_id] = entry

    def _end_txn(
        self,
        current: ProducerStateEntry,
        header: BatchHeader,
        control_type: ControlRecordType,
        coordinator_epoch: int,
        timestamp: int,
    ) -> AbortedTxn | None:
        marker_offset = header.base_offset
        first = current.current_txn_first_offset
        entry = current
        if entry.producer_epoch != header.producer_epoch:  # epoch bump drops batch metadata
            entry = replace(
                entry,
                producer_epoch=header.producer_epoch,
                last_sequence=NO_SEQUENCE,
                last_offset=NO_OFFSET,
                offset_delta=0,
            )
        entry = replace(
            entry,
            coordinator_epoch=coordinator_epoch,
            timestamp=timestamp,
            current_txn_first_offset=NO_OFFSET,
        )
        self._producers[current.producer_id] = entry
        if first < 0:
            return None  # a marker for an empty transaction writes nothing
        lso = self.last_stable_offset(current.producer_id, marker_offset)
        self._ongoing.pop(first, None)
        if control_type is ControlRecordType.ABORT:
            return AbortedTxn(current.producer_id, first, marker_offset, lso)
        return None

    # ---- snapshots ----
    def take_snapshot(self, directory: str | os.PathLike[str], *, sync: bool = True) -> Path:
        """Write `<map_end_offset>.snapshot` in `directory` and return its path."""
        path = Path(directory) / snapshot_file_name(self.map_end_offset)
        write_snapshot(path, self._producers.values(), sync=sync)
        return path

    def load_snapshot(self, path: str | os.PathLike[str]) -> None:
        """Replace the state with a snapshot's; map_end_offset becomes the file's offset."""
        entries = read_snapshot(path)
        offset = snapshot_offset(path)
        self.clear()
        for entry in entries:
            self.load_entry(entry)
        self.map_end_offset = offset

    def __repr__(self) -> str:
        return (
            f"ProducerStateManager(map_end_offset={self.map_end_offset}, "
            f"producers={len(self._producers)}, ongoing_txns={len(self._ongoing)})"
        )
