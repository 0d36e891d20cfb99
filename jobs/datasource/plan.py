"""Offsets and input partitions: the Kafka source's option semantics resolved on one log dir.

Starting/ending bounds resolve per partition as Spark's Kafka source resolves them against a
broker (earliest = log start offset, latest = log end offset or, read_committed, the last
stable offset; timestamps by ListOffsets through the time index). The planned input partitions
are byte ranges found through the offset index, so a narrow read reads only those bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

from jobs.datasource.filters import PushedBounds
from jobs.datasource.layout import SPLIT_BYTES, PartitionView
from jobs.datasource.options import (
    EARLIEST,
    LATEST,
    DataSourceOptionError,
    OffsetBound,
    ReadOptions,
    TopicPartition,
)
from jobs.datasource.slices import LogSlice, SliceFilter, SlicePack, report_data_loss
from kafkalog_core.errors import OffsetOutOfRangeError

__all__ = [
    "check_start_before_end",
    "pack_slices",
    "plan_partitions",
    "plan_slices",
    "resolve_offsets",
]

OPEN_COST_BYTES = 4 << 20  # what opening one more .log costs, in bytes (Spark's openCostInBytes)


def _resolve(view: PartitionView, bound: OffsetBound, options: ReadOptions, starting: bool) -> int:
    tp = view.topic_partition
    if bound.kind == "earliest":
        return view.log_start_offset
    if bound.kind == "latest":
        return view.latest_offset(options.read_committed)
    if bound.kind in ("offsets", "timestamps") and tp not in bound.per_partition:
        raise DataSourceOptionError(
            f"kafkalog option {bound.option}: no entry for partition {tp[0]}-{tp[1]} "
            "(give every subscribed partition, as Spark's Kafka source requires)"
        )
    if bound.kind == "offsets":
        offset = bound.per_partition[tp]
        if offset == EARLIEST:
            return view.log_start_offset
        if offset == LATEST:
            return view.latest_offset(options.read_committed)
        lo, hi = view.log_start_offset, view.latest_offset(options.read_committed)
        if not lo <= offset <= hi:
            report_data_loss(
                f"{bound.option}: offset {offset} of {tp[0]}-{tp[1]} is outside the log's "
                f"range [{lo}, {hi}]",
                options.fail_on_data_loss,
                OffsetOutOfRangeError,
            )
            return min(max(offset, lo), hi)
        return offset
    timestamp = bound.timestamp if bound.kind == "timestamp" else bound.per_partition[tp]
    assert timestamp is not None
    found = view.offset_for_timestamp(timestamp)
    if found is not None:
        return min(found, view.latest_offset(options.read_committed))
    if starting and options.starting_timestamp_strategy == "error":
        raise DataSourceOptionError(
            f"kafkalog option {bound.option}: no record of {tp[0]}-{tp[1]} has a timestamp >= "
            f"{timestamp} (startingOffsetsByTimestampStrategy=latest starts at the end instead)"
        )
    return view.latest_offset(options.read_committed)


def resolve_offsets(
    views: list[PartitionView], bound: OffsetBound, options: ReadOptions, *, starting: bool
) -> dict[TopicPartition, int]:
    """One end of the range for every partition."""
    return {view.topic_partition: _resolve(view, bound, options, starting) for view in views}


def check_start_before_end(
    starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int]
) -> None:
    """A batch read whose start is after its end is an error, as in Spark's Kafka source (which
    would otherwise read nothing, silently)."""
    for (topic, partition), start in sorted(starts.items()):
        end = ends.get((topic, partition))
        if end is not None and start > end:
            raise DataSourceOptionError(
                f"kafkalog: The specified start offset {start} is greater than the end offset "
                f"{end} for topic {topic} partition {partition}. (startingOffsets / endingOffsets)"
            )


def plan_slices(
    views: list[PartitionView],
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    options: ReadOptions,
    pushed: PushedBounds | None = None,
    split_bytes: int | None = None,
) -> list[LogSlice]:
    """Input partitions for offsets [start, end) of every partition, narrowed by `pushed`."""
    pushed = pushed or PushedBounds()
    row_filter = SliceFilter(pushed.min_timestamp_us, pushed.max_timestamp_us)
    min_ts_ms = None if pushed.min_timestamp_us is None else -(-pushed.min_timestamp_us // 1000)
    wanted = [v for v in views if pushed.allows(v.topic, v.partition)]
    split = split_bytes or _target_bytes(wanted, options)
    slices: list[LogSlice] = []
    for view in wanted:
        tp = view.topic_partition
        start, end = starts.get(tp, view.log_start_offset), ends[tp]
        if pushed.min_offset is not None:
            start = max(start, pushed.min_offset)
        if pushed.max_offset is not None:
            end = min(end, pushed.max_offset + 1)
        if start >= end:
            continue
        aborted: tuple[tuple[int, int, int], ...] = ()
        if options.read_committed:
            aborted = tuple(
                a for a in view.transaction_state().aborted if a[2] >= start and a[1] < end
            )
        for lo, hi in _offset_pieces(start, end, options.max_records_per_partition):
            for piece in view.byte_ranges(lo, hi, min_timestamp=min_ts_ms, split_bytes=split):
                slices.append(
                    LogSlice(
                        view.topic,
                        view.partition,
                        piece.log_path,
                        piece.start_position,
                        piece.end_position,
                        lo,
                        hi,
                        aborted,
                        row_filter,
                    )
                )
    return slices


def _offset_pieces(start: int, end: int, most: int | None) -> list[tuple[int, int]]:
    """[start, end) cut every `most` offsets (Spark's maxRecordsPerPartition), or whole."""
    if not most:
        return [(start, end)]
    return [(lo, min(end, lo + most)) for lo in range(start, end, most)]


def _target_bytes(views: list[PartitionView], options: ReadOptions) -> int:
    if not options.min_partitions:
        return SPLIT_BYTES
    total = sum(v.size_in_bytes for v in views)
    return max(1, min(SPLIT_BYTES, -(-total // options.min_partitions)))


def pack_slices(
    slices: list[LogSlice], target_bytes: int, open_cost: int = OPEN_COST_BYTES
) -> list[SlicePack]:
    """Consecutive slices into input partitions of about `target_bytes` (each slice counted
    with an open cost), as Spark packs small files: many tiny segments, few tasks."""
    packs: list[SlicePack] = []
    current: list[LogSlice] = []
    filled = 0
    for piece in slices:
        cost = piece.end_position - piece.start_position + open_cost
        if current and filled + cost > target_bytes:
            packs.append(SlicePack(tuple(current)))
            current, filled = [], 0
        current.append(piece)
        filled += cost
    if current:
        packs.append(SlicePack(tuple(current)))
    return packs


def plan_partitions(
    views: list[PartitionView],
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    options: ReadOptions,
    pushed: PushedBounds | None = None,
) -> list[SlicePack]:
    """Spark's input partitions: the planned slices, small ones packed together."""
    if pushed is not None:
        views = [v for v in views if pushed.allows(v.topic, v.partition)]
    target = _target_bytes(views, options)
    slices = plan_slices(views, starts, ends, options, pushed, target)
    if options.max_records_per_partition:  # an input partition per piece, none packed
        return [SlicePack((piece,)) for piece in slices]
    open_cost = OPEN_COST_BYTES if target >= SPLIT_BYTES else 0  # minPartitions: exact splits
    return pack_slices(slices, target, open_cost)
