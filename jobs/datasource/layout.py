"""The driver's read-only view of a log dir: which partitions, their offsets, and byte ranges.

Everything the planner needs comes from the indexes and a few batch headers; no record is
decoded here and nothing on disk is ever written (inputs may be read-only broker copies). The
cleaner's header walk and the partition log's timestamp lookup load only when read_committed
or a timestamp bound needs them: Spark's planning worker pays every import on a cold start. An
index a reader cannot trust (zero-padded by a crash, pointing past its .log, missing) is
forgotten in memory: its segment is then scanned from the start, which is slower, never wrong.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jobs.datasource.options import Subscription, TopicPartition
from kafkalog_core.errors import LogDirError
from kafkalog_core.log.checkpoints import read_log_start_checkpoint
from kafkalog_core.log.names import (
    live_partition_dirs,
    offset_from_file_name,
    segment_log_files,
)
from kafkalog_core.log.segment.log_segment import LogSegment
from kafkalog_core.record.batch import MAGIC_V2, Compression

__all__ = [
    "ByteRange",
    "PartitionView",
    "TransactionState",
    "list_partitions",
    "open_partitions",
    "partition_views",
    "subscribed_partitions",
]

SPLIT_BYTES = (
    128 << 20
)  # one input partition per this many bytes of a segment (Spark's maxPartitionBytes)


def list_partitions(root: str | os.PathLike[str]) -> dict[TopicPartition, Path]:
    """Live `<topic>-<partition>` dirs of a log dir root (`names.live_partition_dirs`: no
    -delete/-future/-stray dirs, no KRaft metadata log)."""
    base = Path(root)
    if not base.is_dir():
        raise LogDirError(f"kafkalog: log dir {base} does not exist or is not a directory")
    return {(topic, partition): path for topic, partition, path in live_partition_dirs(base)}


@dataclass(frozen=True)
class ByteRange:
    """Bytes [start_position, end_position) of one .log holding the wanted batches."""

    log_path: str
    start_position: int
    end_position: int

    @property
    def size(self) -> int:
        return self.end_position - self.start_position


@dataclass(frozen=True)
class TransactionState:
    """What read_committed needs of a partition: aborted (producer id, first, last offset)
    ranges and the last stable offset (first offset of the earliest open transaction)."""

    aborted: tuple[tuple[int, int, int], ...]
    last_stable_offset: int


class PartitionView:
    """One topic-partition dir opened for reading: segments with indexes a reader can trust.

    A segment (its .log, .index and .timeindex) is opened when a question needs it, not when the
    view is made: a narrow read of a partition with a thousand segments opens the few it reads,
    the first (log start) and the last (log end).
    """

    def __init__(
        self, topic: str, partition: int, directory: Path, log_start_checkpoint: int | None = None
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self._log_paths = segment_log_files(directory)
        self._bases = [offset_from_file_name(p.name) for p in self._log_paths]
        self._opened: dict[int, LogSegment | None] = {}
        first = next(self._segments(range(len(self._bases))), None)
        first_base = first.base_offset if first is not None else 0
        self.log_start_offset = max(first_base, log_start_checkpoint or 0)
        self._log_end_offset: int | None = None
        self._txn: TransactionState | None = None

    def _segments(self, order: Iterable[int]) -> Iterator[LogSegment]:
        """The segments at these positions that still exist, each opened once."""
        for k in order:
            if k not in self._opened:
                self._opened[k] = _open_segment(self.directory, self._bases[k])
            seg = self._opened[k]
            if seg is not None:
                yield seg

    @property
    def segments(self) -> list[LogSegment]:
        """Every segment, opened (what a whole-log question such as a timestamp lookup needs)."""
        return list(self._segments(range(len(self._bases))))

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def log_end_offset(self) -> int:
        if self._log_end_offset is None:
            last = next(self._segments(reversed(range(len(self._bases)))), None)
            self._log_end_offset = (
                last.read_next_offset() if last is not None else self.log_start_offset
            )
        return self._log_end_offset

    @property
    def size_in_bytes(self) -> int:
        """Bytes of the .log files, from their sizes (no segment is opened for it)."""
        total = 0
        for path in self._log_paths:
            with suppress(FileNotFoundError):
                total += path.stat().st_size
        return total

    def transaction_state(self) -> TransactionState:
        """Aborted transactions and the last stable offset from one header walk (§4).

        A walk rather than the .txnindex files alone: the last stable offset of a log at rest
        (a transaction still open at its end) is in no index, and a copy may lack .txnindex files.
        """
        if self._txn is None:
            from kafkalog_core.maintenance.cleaner_audit import scan_partition

            scan = scan_partition(self.directory)
            lso = self.log_end_offset
            if scan.first_unstable_offset is not None:
                lso = min(lso, scan.first_unstable_offset)
            aborted = tuple(
                (t.producer_id, t.first_offset, t.last_offset) for t in scan.aborted_txns
            )
            self._txn = TransactionState(aborted, lso)
        return self._txn

    def latest_offset(self, read_committed: bool) -> int:
        """LATEST as a consumer of this isolation level sees it: the LEO, or the LSO."""
        return (
            self.transaction_state().last_stable_offset if read_committed else self.log_end_offset
        )

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """ListOffsets(timestamp): the first offset whose record has ts >= timestamp, or None."""
        from kafkalog_core.log.partition.reads import offset_for_timestamp

        segments = self._segments(range(len(self._bases)))  # opened until the one that has it
        found = offset_for_timestamp(segments, timestamp, self.log_start_offset)
        return None if found is None else found.offset

    def byte_ranges(
        self,
        start: int,
        end: int,
        *,
        min_timestamp: int | None = None,
        split_bytes: int = SPLIT_BYTES,
    ) -> list[ByteRange]:
        """The byte ranges holding offsets [start, end), cut at index entries every `split_bytes`.

        `min_timestamp` (ms) also skips what the time index proves older: whole segments whose
        largest timestamp is below it, and the batches up to its time-index entry below it.
        """
        ranges: list[ByteRange] = []
        if start >= end:
            return ranges
        bases = self._bases
        for k, base in enumerate(bases):
            next_base = bases[k + 1] if k + 1 < len(bases) else None
            if base >= end or (next_base is not None and next_base <= start):
                continue  # decided by the file names: the segment is never opened
            seg = next(self._segments([k]), None)
            if seg is None:
                continue
            if min_timestamp is not None and seg.largest_timestamp < min_timestamp:
                continue
            first = _start_position(seg, start, min_timestamp)
            last = _end_position(seg, end)
            if first is None or last <= first:
                continue
            ranges.extend(_split(seg, first, last, split_bytes))
        return ranges

    def close(self) -> None:
        for seg in self._opened.values():
            if seg is not None:
                seg.release_handles()


def _open_segment(directory: Path, base_offset: int) -> LogSegment | None:
    """The segment with indexes it can trust, or None when retention removed it meanwhile."""
    try:
        seg = LogSegment(directory, base_offset, read_only=True)
    except FileNotFoundError:
        return None
    seg.offset_index.drop_padding()
    seg.time_index.drop_padding()
    if seg.indexes_look_valid() is not None or (seg.size and seg.time_index.entries == 0):
        seg.distrust_indexes()
    return seg


def _start_position(seg: LogSegment, start: int, min_timestamp: int | None) -> int | None:
    """Position of the first batch that can hold an offset >= start (and ts >= min_timestamp)."""
    target = max(start, seg.base_offset)
    if min_timestamp is not None and min_timestamp > 0:
        # every batch up to the entry's offset has a max timestamp <= the entry's < min_timestamp
        entry = seg.time_index.lookup(min_timestamp - 1)
        if entry.timestamp >= 0:
            target = max(target, entry.offset)
    if target == seg.base_offset:
        return 0
    found = seg.translate_offset(target)
    return None if found is None else found.position


def _end_position(seg: LogSegment, end: int) -> int:
    """Position just past the last batch that can hold an offset < end."""
    found = seg.translate_offset(end)
    if found is None:
        return seg.size
    header = next(seg.batches(found.position))
    # A magic 0/1 compressed wrapper carries its *last* inner offset: its first is unknown
    # here, so it is read (and its rows filtered) rather than cut.
    first_known = header.magic >= MAGIC_V2 or header.compression is Compression.NONE
    if first_known and header.base_offset >= end:
        return found.position
    return found.position + found.size


def _split(seg: LogSegment, first: int, last: int, split_bytes: int) -> Iterable[ByteRange]:
    """Cut [first, last) at offset-index positions (batch starts) about every split_bytes."""
    path = str(seg.log_path)
    if last - first <= split_bytes:
        return [ByteRange(path, first, last)]
    positions = seg.offset_index.entries_array().positions
    inside = positions[(positions > first) & (positions < last)]
    cuts = [first]
    if len(inside):
        targets = np.arange(first + split_bytes, last, split_bytes)
        chosen = np.unique(inside[np.clip(np.searchsorted(inside, targets), 0, len(inside) - 1)])
        cuts.extend(int(c) for c in chosen if c > first)
    cuts.append(last)
    return [ByteRange(path, a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]


def subscribed_partitions(
    root: str | os.PathLike[str], subscription: Subscription
) -> dict[TopicPartition, Path]:
    """The subscribed partition dirs of a log dir, sorted by (topic, partition); an assigned
    partition without a dir is an error."""
    found = list_partitions(root)
    if subscription.kind == "assign":
        missing = [tp for tp in subscription.assigned if tp not in found]
        if missing:
            names = ", ".join(f"{t}-{p}" for t, p in missing)
            raise LogDirError(f"kafkalog option assign: no partition dir for {names} in {root}")
    return {tp: found[tp] for tp in sorted(found) if subscription.matches(*tp)}


def open_partitions(
    root: str | os.PathLike[str], subscription: Subscription
) -> list[PartitionView]:
    """Views of the subscribed partitions of a log dir, sorted by (topic, partition)."""
    chosen = subscribed_partitions(root, subscription)
    checkpoint = read_log_start_checkpoint(root)
    return [
        PartitionView(topic, partition, directory, checkpoint.get((topic, partition)))
        for (topic, partition), directory in chosen.items()
    ]


@contextmanager
def partition_views(
    root: str | os.PathLike[str], subscription: Subscription
) -> Iterator[list[PartitionView]]:
    """`open_partitions` whose segment handles are released when the block ends."""
    views = open_partitions(root, subscription)
    try:
        yield views
    finally:
        for view in views:
            view.close()
