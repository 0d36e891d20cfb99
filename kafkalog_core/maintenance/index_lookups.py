"""Whether an offset or time index sends every lookup to the right place (§3.6, §3.7).

A broker never compares an index with the one recovery would build: it trusts any index whose
lookups land at or before the batch they look for (the scan from there finds it). So an index
written at another `index.interval.bytes` than the one we believe in (a real broker's topic
setting, a copy of a log dir without its history), or by a follower's multi-batch appends, or by
a 2.x broker (record-level time-index offsets, §15), is as good as the one we would write.

The rules, checked for every entry at once with numpy over the segment's valid batches (their
start positions, last offsets and max timestamps from recovery's header walk, `SegmentScan`):

- Kafka's sanity checks: whole entries (8 bytes, 12 bytes), offsets not below the base offset;
- offset index: offsets and positions strictly increasing; each position is the start of a
  valid batch, and no batch before it reaches the entry's offset (a lookup lands at or before
  the batch holding its target, never after it); no offset past the segment's last one (Kafka
  reads a segment's next offset from its last entry);
- time index: timestamps strictly increasing, offsets never decreasing; each entry's offset lies
  in the first batch whose running max timestamp reaches the entry's timestamp (earlier batches
  hold only smaller timestamps, so a lookup by time skips no record); the last entry holds the
  segment's largest timestamp (a broker takes it as the segment's largest timestamp for
  retention and ListOffsets), and an index without entries is right only for a segment
  without timestamps.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kafkalog_core.log.index.offset_index import OffsetIndex
from kafkalog_core.log.index.time_index import TimeIndex
from kafkalog_core.log.segment.scan import NO_TIMESTAMP, SegmentScan

__all__ = ["IndexRule", "offset_index_problem", "strip_zero_entries", "time_index_problem"]

# (index bytes, the segment's scan) -> the first problem, or None when every lookup is right
IndexRule = Callable[[bytes, SegmentScan], "str | None"]


def _entries(data: bytes, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Both fields of every entry, as stored (offsets relative to the base offset), as int64."""
    raw = np.frombuffer(data, dtype=dtype)
    names = dtype.names
    assert names is not None
    return raw[names[0]].astype(np.int64), raw[names[1]].astype(np.int64)


def _ragged(data: bytes, size: int) -> str | None:
    if len(data) % size:
        return (
            f"length {len(data)} is not a multiple of the entry size {size} "
            f"(a partial entry of {len(data) % size} bytes at the end)"
        )
    return None


def _first(failures: list[tuple[np.ndarray, Callable[[int], str]]]) -> str | None:
    """The message of the earliest failing entry (the first rule listed wins a tie)."""
    best: tuple[int, int] | None = None
    for rule, (bad, _) in enumerate(failures):
        hits = np.flatnonzero(bad)
        if len(hits) and (best is None or int(hits[0]) < best[0]):
            best = (int(hits[0]), rule)
    if best is None:
        return None
    at, rule = best
    return f"entry {at}: {failures[rule][1](at)}"


def _later(values: np.ndarray, strict: bool) -> np.ndarray:
    """Per entry: whether it fails to follow its predecessor (strictly, or not going back)."""
    step = np.diff(values)
    return np.concatenate(([False], step <= 0 if strict else step < 0))


def offset_index_problem(data: bytes, scan: SegmentScan) -> str | None:
    """Why the offset index `data` could send a lookup past its target, or None."""
    ragged = _ragged(data, OffsetIndex.ENTRY_SIZE)
    if ragged:
        return ragged
    rel, pos = _entries(data, OffsetIndex.DISK_DTYPE)
    offsets = rel + scan.base_offset
    starts, lasts, last = scan.batch_positions, scan.batch_last_offsets, scan.last_offset
    at = np.searchsorted(starts, pos)  # the batch starting at (or after) each position
    is_start = np.zeros(len(pos), dtype=bool)
    inside = at < len(starts)
    is_start[inside] = starts[at[inside]] == pos[inside]
    # the last offset of the batch before that one: if it reaches the entry's offset, a lookup
    # starting at the entry's position has passed its target
    before = np.concatenate(([np.iinfo(np.int64).min], lasts))[at]

    def late(i: int) -> str:
        holder = int(starts[int(np.searchsorted(lasts, offsets[i]))])
        return (
            f"offset {offsets[i]} at position {pos[i]}, but the batch at position {holder} "
            "holds that offset: a lookup would start after it"
        )

    def not_a_start(i: int) -> str:
        if pos[i] >= scan.valid_bytes:
            return f"position {pos[i]} is past the end of the valid log ({scan.valid_bytes} bytes)"
        return f"position {pos[i]} is not the start of a batch"

    return _first(
        [
            (rel < 0, lambda i: f"offset {offsets[i]} below the base offset {scan.base_offset}"),
            (_later(offsets, True), lambda i: f"offset {offsets[i]} not above the entry before"),
            (_later(pos, True), lambda i: f"position {pos[i]} not above the entry before"),
            (
                offsets > last,
                lambda i: f"offset {offsets[i]} past the segment's last offset {last}",
            ),
            (~is_start, not_a_start),
            (is_start & (before >= offsets), late),
        ]
    )


def time_index_problem(data: bytes, scan: SegmentScan) -> str | None:
    """Why the time index `data` could make a lookup by time skip a record, or misstate the
    segment's largest timestamp; None when it does neither."""
    ragged = _ragged(data, TimeIndex.ENTRY_SIZE)
    if ragged:
        return ragged
    stamps, rel = _entries(data, TimeIndex.DISK_DTYPE)
    largest = scan.max_timestamp
    if not len(stamps):
        if largest > NO_TIMESTAMP:
            return f"no entry, but the segment's largest timestamp is {largest}"
        return None
    offsets = rel + scan.base_offset
    lasts = scan.batch_last_offsets
    running = np.maximum.accumulate(scan.batch_max_timestamps)
    holder = np.searchsorted(lasts, offsets)  # the batch holding (or next after) each offset
    reached = np.searchsorted(running, stamps)  # the first batch whose running max reaches it
    last = scan.last_offset

    def where(batch: int) -> str:
        return f"the batch at position {int(scan.batch_positions[batch])}"

    def reach_message(i: int) -> str:
        if reached[i] >= len(lasts):
            return f"timestamp {stamps[i]} is above every timestamp of the segment ({largest})"
        first = where(int(reached[i]))
        if reached[i] < holder[i]:
            return (
                f"timestamp {stamps[i]} at offset {offsets[i]}, but {first}, before that offset, "
                "already holds a timestamp as large: a lookup by time would skip it"
            )
        return f"timestamp {stamps[i]} at offset {offsets[i]}, but no record has it until {first}"

    problem = _first(
        [
            (rel < 0, lambda i: f"offset {offsets[i]} below the base offset {scan.base_offset}"),
            (_later(stamps, True), lambda i: f"timestamp {stamps[i]} not above the entry before"),
            (_later(offsets, False), lambda i: f"offset {offsets[i]} below the entry before"),
            (
                offsets > last,
                lambda i: f"offset {offsets[i]} past the segment's last offset {last}",
            ),
            (reached != holder, reach_message),
        ]
    )
    if problem is None and int(stamps[-1]) != largest:
        return (
            f"the last entry's timestamp {stamps[-1]} is not the segment's largest timestamp "
            f"{largest} (a broker takes the last entry as the segment's largest timestamp)"
        )
    return problem


def strip_zero_entries(data: bytes, entry_size: int) -> bytes:
    """`data` without its trailing all-zero entries (a preallocated or crash-left tail)."""
    nonzero = np.flatnonzero(np.frombuffer(data, dtype=np.uint8))
    end = 0 if not len(nonzero) else int(nonzero[-1]) + 1
    keep = -(-end // entry_size) * entry_size
    return data[: min(keep, len(data))]
