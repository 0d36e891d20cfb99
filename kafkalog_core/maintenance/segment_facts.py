"""What a segment's batch headers say about it, read without changing a byte (§7, §8.1).

Retention (`retention.py`) and the cleaner manager's view (`cleaner_audit.py`) ask the same
questions of each `.log`: its size and mtime, where its offsets end, how many batches it holds,
the first batch's and the largest max timestamp. `read_segment_facts` answers them with one
header walk (`iter_batch_headers`, FileLogInputStream's walk) over a read-only map, touching
only the pages that hold headers.

Why not recovery's walk (`segment_scan.scan_segment`)? It CRC-checks every byte of every batch
and builds index entries, which recovery needs but a scan of a whole log dir for retention or
an audit must not pay for. A caller that wants the CRC check asks for it (`verify=True`).

The segment's largest timestamp is a broker's (`LogSegment.largestTimestamp`): its time
index's last entry, which is what a loaded segment's `maxTimestampSoFar` reads, else the .log's
mtime (an empty time index, or a missing one, which the broker's load creates empty). Only a
segment the broker's load recovers first (a missing .index; after an unclean shutdown, from the
recovery point on: `as_loaded`) gets its time index rebuilt from the batches, and so its
largest batch timestamp; `timestamp_source` says which one decided. The size retention counts
is what recovery keeps (`valid_bytes`): a partial tail or a crashed preallocated segment's
zeros are no part of a loaded log.

What the two callers still do differently, they say through arguments: retention keeps going
on a corrupt header (it records where, `corrupt_at`, and judges the segment on what it read),
the audit refuses it (`strict=True`); the audit also replays transactions, so it hands in
`on_batch` to see each producer's batch.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.log.mapped import mapped_file
from kafkalog_core.log.names import (
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    offset_from_file_name,
)
from kafkalog_core.record.batch import NO_TIMESTAMP, BatchHeader, iter_batch_headers

__all__ = [
    "BatchCallback",
    "SegmentFacts",
    "as_loaded",
    "load_cut",
    "load_cut_outcome",
    "read_as_loaded",
    "read_segment_facts",
    "recovered_at_load",
]

TIME_INDEX_ENTRY = struct.Struct(">qi")  # timestamp, relative offset

# where a segment's largest timestamp comes from (SegmentFacts.timestamp_source)
FROM_TIME_INDEX = "time index"
FROM_RECORDS = "records"  # the batches' max timestamps: a broker's load rebuilds the time index
FROM_MTIME = "mtime"

# (the mapped .log, one batch's header) for every batch the walk passes
BatchCallback = Callable[[memoryview, BatchHeader], None]


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    """One segment as retention and the cleaner manager see it: size, offsets, timestamps."""

    base_offset: int
    size: int  # bytes of the .log (Kafka's segment.size; indexes do not count)
    next_offset: int  # last offset + 1 of its last complete batch (base offset when empty)
    max_timestamp: int  # the largest batch max timestamp, or -1 when no batch carries one
    last_modified_ms: int  # the .log file's mtime
    batches: int
    corrupt_at: int | None = None  # position where the header walk met a corrupt batch
    first_batch_timestamp: int = NO_TIMESTAMP  # getFirstBatchTimestamp: the first batch's max
    valid_bytes: int | None = None  # where the last whole batch ends (< size: a partial tail)
    # read from the files: the .timeindex's last timestamp (None: no .timeindex) and whether
    # the .index is missing (a broker's load recovers the segment then, whatever the shutdown)
    time_index_timestamp: int | None = None
    index_missing: bool = False
    rebuilt_at_load: bool = False  # a broker's recoverLog rebuilds it first (see `as_loaded`)

    @property
    def _indexes_from_batches(self) -> bool:
        """A loaded segment's time index holds the batches' max (recovery rebuilt it), or these
        facts come from an open log (`valid_bytes` None: `max_timestamp` is its own)."""
        return self.valid_bytes is None or self.rebuilt_at_load or self.index_missing

    @property
    def broker_max_timestamp(self) -> int:
        """maxTimestampSoFar of the segment a broker loads: -1 when it knows none (an empty
        time index, or a missing one, which the load creates empty)."""
        if self._indexes_from_batches:
            return self.max_timestamp
        return NO_TIMESTAMP if self.time_index_timestamp is None else self.time_index_timestamp

    @property
    def largest_timestamp(self) -> int:
        """LogSegment.largestTimestamp: maxTimestampSoFar if >= 0, else the .log's mtime (§7)."""
        ts = self.broker_max_timestamp
        return ts if ts >= 0 else self.last_modified_ms

    @property
    def timestamp_source(self) -> str:
        """Where `largest_timestamp` comes from: FROM_TIME_INDEX, FROM_RECORDS or FROM_MTIME."""
        if self.broker_max_timestamp < 0:
            return FROM_MTIME
        if self.valid_bytes is not None and (self.rebuilt_at_load or self.index_missing):
            return FROM_RECORDS
        return FROM_TIME_INDEX

    @property
    def retained_bytes(self) -> int:
        """The bytes a loaded log holds of it (Kafka recovers first): the whole batches."""
        return self.size if self.valid_bytes is None else self.valid_bytes


def recovered_at_load(bases: Sequence[int], recovery_point: int | None) -> list[bool]:
    """Per segment (by ascending base offset), whether a broker's load recovers it: after an
    unclean shutdown (`recovery_point` not None) recoverLog CRC-checks and re-indexes every
    segment from the one holding the recovery point on. None: a clean shutdown, none."""
    if recovery_point is None:
        return [False] * len(bases)
    uppers = [*bases[1:], None]
    return [upper is None or upper > recovery_point for upper in uppers]


def as_loaded(segments: Sequence[SegmentFacts], recovery_point: int | None) -> list[SegmentFacts]:
    """The segments as a broker's load leaves their time indexes: rebuilt for the segments it
    recovers (`recovered_at_load`). None: a clean shutdown, nothing rebuilt but a missing
    .index."""
    recovered = recovered_at_load([s.base_offset for s in segments], recovery_point)
    return [
        replace(seg, rebuilt_at_load=True) if again else seg
        for seg, again in zip(segments, recovered, strict=True)
    ]


def read_as_loaded(
    log_paths: Sequence[Path],
    recovery_point: int | None,
    *,
    verify: bool = False,
    strict: bool = False,
    on_batch: BatchCallback | None = None,
) -> list[SegmentFacts]:
    """The facts of a partition's .log files (ascending base offsets), as a broker's load
    judges them: the segments it recovers (`recovered_at_load`) CRC-checked as its recovery
    checks them (`load_cut` then finds where it would cut), their time indexes rebuilt
    (`as_loaded`). `verify`, `strict` and `on_batch` as for `read_segment_facts`."""
    again = recovered_at_load([offset_from_file_name(p.name) for p in log_paths], recovery_point)
    facts = (
        read_segment_facts(path, verify=verify or check, strict=strict, on_batch=on_batch)
        for path, check in zip(log_paths, again, strict=True)
    )
    return [
        replace(f, rebuilt_at_load=True) if check else f
        for f, check in zip(facts, again, strict=True)
    ]


def load_cut(segments: Sequence[SegmentFacts]) -> SegmentFacts | None:
    """The first segment before the last that a broker's load would cut (recovered at load,
    `as_loaded`, and read with `verify`: a batch that fails its CRC or header checks, or bytes
    after the last whole batch), None if there is none. recoverLog truncates the log there and
    deletes every later segment, so a job that judged the segments as they are on disk would
    decide on records a broker no longer has."""
    for seg in segments[:-1]:
        if seg.rebuilt_at_load and (seg.corrupt_at is not None or seg.retained_bytes < seg.size):
            return seg
    return None


def load_cut_outcome(segments: Sequence[SegmentFacts], cut: SegmentFacts) -> str:
    """What a broker's load does at `load_cut`'s segment, and the way out, in words the jobs
    that leave such a partition alone all print."""
    later = sum(1 for s in segments if s.base_offset > cut.base_offset)
    return (
        f"would cut it at position {cut.retained_bytes}, deleting the {later} segments after "
        "it; run rebuild-index --mode rebuild first"
    )


def read_time_index_last(path: Path) -> int | None:
    """The last entry's timestamp of a .timeindex as Kafka opens it (entries = length // 12,
    -1 when empty), None when the file is missing."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    entries = size // TIME_INDEX_ENTRY.size
    if entries == 0:
        return NO_TIMESTAMP
    with open(path, "rb") as f:
        f.seek((entries - 1) * TIME_INDEX_ENTRY.size)
        return TIME_INDEX_ENTRY.unpack(f.read(TIME_INDEX_ENTRY.size))[0]


def read_segment_facts(
    log_path: str | os.PathLike[str],
    *,
    verify: bool = False,
    strict: bool = False,
    on_batch: BatchCallback | None = None,
) -> SegmentFacts:
    """The facts of one .log from a walk of its batch headers (a partial tail batch ends it).

    A corrupt header (or, with `verify`, a CRC mismatch) raises CorruptRecordError naming the
    file when `strict`; otherwise the walk stops there, what was read is kept and `corrupt_at`
    says where.
    """
    path = Path(log_path)
    base = offset_from_file_name(path.name)
    stat = path.stat()
    next_offset, count, first_ts, max_ts = base, 0, NO_TIMESTAMP, NO_TIMESTAMP
    position, corrupt_at = 0, None
    with mapped_file(path) as view:
        try:
            for header in iter_batch_headers(view, verify=verify):
                if count == 0:
                    first_ts = header.max_timestamp
                count += 1
                max_ts = max(max_ts, header.max_timestamp)
                next_offset = header.next_offset
                position = header.position + header.size
                if on_batch is not None:
                    on_batch(view, header)
        except CorruptRecordError as error:
            if strict:
                raise CorruptRecordError(f"{path}: {error}") from None
            corrupt_at = position
    return SegmentFacts(
        base_offset=base,
        size=stat.st_size,
        next_offset=next_offset,
        max_timestamp=max_ts,
        last_modified_ms=stat.st_mtime_ns // 10**6,
        batches=count,
        corrupt_at=corrupt_at,
        first_batch_timestamp=first_ts,
        valid_bytes=position,
        time_index_timestamp=read_time_index_last(_sibling(path, TIME_INDEX_FILE_SUFFIX)),
        index_missing=not _sibling(path, INDEX_FILE_SUFFIX).exists(),
    )


def _sibling(log_path: Path, suffix: str) -> Path:
    return log_path.with_name(log_path.name[: -len(LOG_FILE_SUFFIX)] + suffix)
