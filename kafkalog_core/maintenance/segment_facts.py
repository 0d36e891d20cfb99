"""What a segment's batch headers say about it, read without changing a byte (§7, §8.1).

Retention (`retention.py`) and the cleaner manager's view (`cleaner_audit.py`) ask the same
questions of each `.log`: its size and mtime, where its offsets end, how many batches it holds,
the first batch's and the largest max timestamp. `read_segment_facts` answers them with one
header walk (`iter_batch_headers`, FileLogInputStream's walk) over a read-only map, touching
only the pages that hold headers.

Why not recovery's walk (`segment_scan.scan_segment`)? It CRC-checks every byte of every batch
and builds index entries, which recovery needs but a scan of a whole log dir for retention or
an audit must not pay for. A caller that wants the CRC check asks for it (`verify=True`).

What the two callers still do differently, they say through arguments: retention keeps going
on a corrupt header (it records where, `corrupt_at`, and judges the segment on what it read),
the audit refuses it (`strict=True`); the audit also replays transactions, so it hands in
`on_batch` to see each producer's batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.log.mapped import mapped_file
from kafkalog_core.log.names import offset_from_file_name
from kafkalog_core.record.batch import NO_TIMESTAMP, BatchHeader, iter_batch_headers

__all__ = ["BatchCallback", "SegmentFacts", "read_segment_facts"]

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

    @property
    def largest_timestamp(self) -> int:
        """LogSegment.largestTimestamp: the max record timestamp, else the file's mtime (§7)."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms


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
    )
