"""Streaming reads: `spark.readStream.format("kafkalog")`, offsets as Spark's Kafka source writes.

An offset is `{"topic": {"partition": next offset to read}}`. Each micro-batch lists the log dir
again, so segments (and partitions) added by a later ingest run are picked up; a restarted
query continues from its checkpointed offset, reading each record exactly once.

Where a query starts is in its checkpoint before its first micro-batch runs, as Spark's Kafka
source writes its initial offsets to the checkpoint first. A Python source is given no
checkpoint path, and Spark asks `initialOffset` again when batch 0 is replayed; so a start that
depends on when it is resolved (`latest`, a -1 in the JSON, a timestamp) is resolved by batch 0
instead: `initialOffset` returns `{PENDING_START: <how>}`, and batch 0 reads nothing and ends at
the resolved starting offsets, which Spark's offset log holds before the batch runs. `earliest`
and explicit offsets resolve the same after a restart, and batch 0 reads from them as Spark's.

Data loss is reported as Spark's KafkaMicroBatchStream reports it (an error, or a warning with
failOnDataLoss=false): a partition that is gone, a new partition whose log start is above 0 or
that is gone before its first batch, and an end offset below the start (a topic deleted and
created again).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from jobs.datasource.layout import PartitionView, partition_views
from jobs.datasource.options import (
    LATEST,
    OffsetBound,
    ReadOptions,
    TopicPartition,
    offsets_from_json,
    offsets_json,
)
from jobs.datasource.plan import plan_partitions, resolve_offsets
from jobs.datasource.reader import SliceReading
from jobs.datasource.slices import report_data_loss

if TYPE_CHECKING:
    from jobs.datasource.decoded import DecodedColumns

__all__ = ["PENDING_START", "KafkaLogStreamReader", "rate_limit"]

# No Kafka topic can be named so (topics are [a-zA-Z0-9._-]): the offset of a stream whose start
# batch 0 resolves
PENDING_START = "<startingOffsets>"


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
    """Micro-batches of offset ranges; maxOffsetsPerTrigger, minOffsetsPerTrigger with
    maxTriggerDelay, and Trigger.AvailableNow."""

    def __init__(self, options: ReadOptions, decoded: DecodedColumns | None = None) -> None:
        self.options = options
        self.decoded = decoded
        self._target: dict[TopicPartition, tuple[int, int]] | None = None  # AvailableNow's end
        self._last_trigger_ms = 0  # minOffsetsPerTrigger: when the last micro-batch was let go

    def _ranges(self) -> dict[TopicPartition, tuple[int, int]]:
        """(log start offset, latest offset) of every subscribed partition, listed afresh."""
        with partition_views(self.options.path, self.options.subscription) as views:
            latest = {
                v.topic_partition: v.latest_offset(self.options.read_committed) for v in views
            }
            return {
                v.topic_partition: (v.log_start_offset, latest[v.topic_partition]) for v in views
            }

    def _starting_offsets(self) -> dict[TopicPartition, int]:
        """startingOffsets (or the timestamps) resolved on the log dir as it is now."""
        with partition_views(self.options.path, self.options.subscription) as views:
            return resolve_offsets(views, self.options.starting, self.options, starting=True)

    def _start_is_fixed(self) -> bool:
        """Whether the starting offsets resolve the same whenever asked (earliest, offsets)."""
        bound = self.options.starting
        return bound.kind == "earliest" or (
            bound.kind == "offsets" and LATEST not in bound.per_partition.values()
        )

    def initialOffset(self) -> dict:  # noqa: N802 (Spark's names)
        if self._start_is_fixed():
            return offsets_json(self._starting_offsets())
        return {PENDING_START: self.options.starting.option or self.options.starting.kind}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        """Spark's: minOffsetsPerTrigger as ReadMinRows (PySpark has no composite limit, so a
        maxOffsetsPerTrigger beside it is applied from the options), else maxOffsetsPerTrigger."""
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def _delay(
        self, begin: dict[TopicPartition, int], latest: dict[TopicPartition, int], min_rows: int
    ) -> bool:
        """Spark's delayBatch: wait for min_rows new records, at most maxTriggerDelay since the
        last micro-batch."""
        now = int(time.time() * 1000)
        if now - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        waiting = sum(end - begin.get(tp, 0) for tp, end in latest.items())
        if waiting < min_rows:
            return True
        self._last_trigger_ms = now
        return False

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = self._ranges()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        if PENDING_START in start:  # batch 0 fixes the start (in Spark's offset log)
            starts = self._starting_offsets()
            if self._target is not None:  # Trigger.AvailableNow: what is there once started
                self._target = self._ranges()
            return offsets_json(starts)
        begin = offsets_from_json(start)
        ranges = self._target if self._target is not None else self._ranges()
        # a partition that appeared since the last micro-batch is read from its log start; an
        # end below the start stays so: `partitions` reports it
        first = {tp: begin.get(tp, log_start) for tp, (log_start, _) in ranges.items()}
        latest = {tp: end for tp, (_, end) in ranges.items()}
        max_rows = self.options.max_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            # Trigger.AvailableNow reads what is there, never waiting for more
            if self._target is None and self._delay(begin, latest, limit.min_rows):
                return start
        elif isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        else:
            max_rows = None
        if max_rows is not None:
            latest = rate_limit(first, latest, max_rows)
        return offsets_json(latest)

    def reportLatestOffset(self) -> dict | None:  # noqa: N802
        return offsets_json({tp: end for tp, (_, end) in self._ranges().items()})

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if PENDING_START in start:
            return []  # batch 0 of a stream whose start it fixed: nothing to read
        begin, finish = offsets_from_json(start), offsets_from_json(end)
        with partition_views(self.options.path, self.options.subscription) as listed:
            views = [v for v in listed if v.topic_partition in finish]
            self._check_data_loss(begin, finish, {v.topic_partition: v for v in views})
            views = [
                v for v in views if finish[v.topic_partition] >= begin.get(v.topic_partition, 0)
            ]
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

    def _check_data_loss(
        self,
        begin: dict[TopicPartition, int],
        finish: dict[TopicPartition, int],
        views: dict[TopicPartition, PartitionView],
    ) -> None:
        """Spark's rules (KafkaOffsetReader.getOffsetRangesFromResolvedOffsets), its words."""
        fail = self.options.fail_on_data_loss
        new = sorted(set(finish) - set(begin))
        missing = [tp for tp in new if tp not in views]
        if missing:
            report_data_loss(
                f"Cannot find earliest offsets of {_tp_set(missing)}. Some data may have been "
                "missed",
                fail,
            )
        for tp in new:
            if tp in views and views[tp].log_start_offset != 0:
                report_data_loss(
                    f"Added partition {_tp(tp)} starts from {views[tp].log_start_offset} "
                    "instead of 0. Some data may have been missed",
                    fail,
                )
        gone = sorted(
            (set(begin) - set(finish)) | {tp for tp in begin if tp in finish and tp not in views}
        )
        if gone:
            report_data_loss(f"{_tp_set(gone)} are gone. Some data may have been missed.", fail)
        for tp in sorted(set(begin) & set(finish)):
            if finish[tp] < begin[tp]:
                report_data_loss(
                    f"Partition {_tp(tp)}'s offset was changed from {begin[tp]} to {finish[tp]}. "
                    "This could be either 1) a user error that the start offset is set beyond "
                    "available offset when starting query, or 2) the kafka topic-partition is "
                    "deleted and re-created.",
                    fail,
                )

    def commit(self, end: dict) -> None:
        """Nothing to release: the log dir is read, never consumed."""


def _tp(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _tp_set(tps: list[TopicPartition]) -> str:
    """As Spark prints a set of TopicPartitions."""
    return "Set(" + ", ".join(_tp(tp) for tp in tps) + ")"
