"""Offsets and input partitions: the Kafka source's option semantics resolved on one log dir.

Starting/ending bounds resolve per partition as Spark's Kafka source resolves them against a
broker (earliest = log start offset, latest = log end offset or, read_committed, the last
stable offset; timestamps by ListOffsets through the time index). The planned input partitions
are byte ranges found through the offset index, so a narrow read reads only those bytes.
"""

from __future__ import annotations

import logging
import warnings
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
from jobs.datasource.scan import LogSlice, SliceFilter
from kafkalog_core.errors import OffsetOutOfRangeError

__all__ = ["plan_slices", "resolve_offsets"]

LOG = logging.getLogger("kafkalog.datasource")


def _data_loss(message: str, options: ReadOptions) -> None:
    if options.fail_on_data_loss:
        raise OffsetOutOfRangeError(
            f"kafkalog: {message} (set failOnDataLoss=false to read from what is there)"
        )
    LOG.warning("kafkalog: %s", message)
    warnings.warn(f"kafkalog: {message}", stacklevel=3)


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
            _data_loss(
                f"{bound.option}: offset {offset} of {tp[0]}-{tp[1]} is outside the log's "
                f"range [{lo}, {hi}]",
                options,
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


def plan_slices(
    views: list[PartitionView],
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    options: ReadOptions,
    pushed: PushedBounds | None = None,
) -> list[LogSlice]:
    """Input partitions for offsets [start, end) of every partition, narrowed by `pushed`."""
    pushed = pushed or PushedBounds()
    row_filter = SliceFilter(pushed.min_timestamp_us, pushed.max_timestamp_us)
    min_ts_ms = None if pushed.min_timestamp_us is None else -(-pushed.min_timestamp_us // 1000)
    wanted = [v for v in views if pushed.allows(v.topic, v.partition)]
    split = SPLIT_BYTES
    if options.min_partitions:
        total = sum(v.size_in_bytes for v in wanted)
        split = max(1, min(split, -(-total // options.min_partitions)))
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
        for piece in view.byte_ranges(start, end, min_timestamp=min_ts_ms, split_bytes=split):
            slices.append(
                LogSlice(
                    view.topic,
                    view.partition,
                    piece.log_path,
                    piece.start_position,
                    piece.end_position,
                    start,
                    end,
                    aborted,
                    row_filter,
                )
            )
    return slices
