"""Streaming reads: `spark.readStream.format("kafkalog")`, offsets as Spark's Kafka source writes.

An offset is `{"topic": {"partition": next offset to read}}`. Each micro-batch lists the log dir
again, so segments (and partitions) added by a later ingest run are picked up; a restarted
query continues from its checkpointed offset, reading each record exactly once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from jobs.datasource.layout import partition_views
from jobs.datasource.options import (
    OffsetBound,
    ReadOptions,
    TopicPartition,
    offsets_from_json,
    offsets_json,
)
from jobs.datasource.plan import plan_partitions, resolve_offsets
from jobs.datasource.reader import SliceReading

if TYPE_CHECKING:
    from jobs.datasource.decoded import DecodedColumns

__all__ = ["KafkaLogStreamReader", "rate_limit"]


def rate_limit(
    start: dict[TopicPartition, int], latest: dict[TopicPartition, int], max_offsets: int
) -> dict[TopicPartition, int]:
    """Spark's maxOffsetsPerTrigger: split the budget over partitions by what each has waiting."""
    tps = sorted(latest)
    waiting = np.array([max(0, latest[tp] - start[tp]) for tp in tps], np.int64)
    total = int(waiting.sum())
    if total <= max_offsets:
        return dict(latest)
    share = np.floor(waiting * (max_offsets / total)).astype(np.int64)
    if share.sum() == 0:  # always make progress
        share[int(np.argmax(waiting))] = 1
    return {tp: start[tp] + int(s) for tp, s in zip(tps, share, strict=True)}


class KafkaLogStreamReader(SliceReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of offset ranges; maxOffsetsPerTrigger and Trigger.AvailableNow."""

    def __init__(self, options: ReadOptions, decoded: DecodedColumns | None = None) -> None:
        self.options = options
        self.decoded = decoded
        self._target: dict[TopicPartition, tuple[int, int]] | None = None  # AvailableNow's end

    def _ranges(self) -> dict[TopicPartition, tuple[int, int]]:
        """(log start offset, latest offset) of every subscribed partition, listed afresh."""
        with partition_views(self.options.path, self.options.subscription) as views:
            latest = {
                v.topic_partition: v.latest_offset(self.options.read_committed) for v in views
            }
            return {
                v.topic_partition: (v.log_start_offset, latest[v.topic_partition]) for v in views
            }

    def initialOffset(self) -> dict:  # noqa: N802 (Spark's names)
        with partition_views(self.options.path, self.options.subscription) as views:
            starts = resolve_offsets(views, self.options.starting, self.options, starting=True)
        return offsets_json(starts)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = self._ranges()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        begin = offsets_from_json(start)
        ranges = self._target if self._target is not None else self._ranges()
        # a partition that appeared since the last micro-batch is read from its log start
        first = {tp: begin.get(tp, log_start) for tp, (log_start, _) in ranges.items()}
        latest = {tp: max(end, first[tp]) for tp, (_, end) in ranges.items()}
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(first, latest, limit.max_rows)
        return offsets_json(latest)

    def reportLatestOffset(self) -> dict | None:  # noqa: N802
        return offsets_json({tp: end for tp, (_, end) in self._ranges().items()})

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, finish = offsets_from_json(start), offsets_from_json(end)
        with partition_views(self.options.path, self.options.subscription) as listed:
            views = [v for v in listed if v.topic_partition in finish]
            starts = {}
            for view in views:
                tp = view.topic_partition
                starts[tp] = begin.get(tp, view.log_start_offset)
                if starts[tp] < view.log_start_offset:  # deleted by retention meanwhile
                    lost = OffsetBound(
                        "offsets", per_partition={tp: starts[tp]}, option="checkpoint"
                    )
                    starts[tp] = resolve_offsets([view], lost, self.options, starting=True)[tp]
            return plan_partitions(views, starts, finish, self.options)

    def commit(self, end: dict) -> None:
        """Nothing to release: the log dir is read, never consumed."""
