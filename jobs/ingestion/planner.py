"""Offset planning: which task writes which offsets of which partition.

The ingest job range-partitions the mapped rows by (topic, partition, ordering columns), so a
Kafka partition's rows are spread over consecutive Spark tasks in order, and a hot partition is
split over several tasks instead of landing on one. Where a counting pass tells the driver how
many rows each task holds per Kafka partition (the direct mode), prefix sums over task order,
starting at each partition's log end offset, give every task the exact base offset of its
range (`plan_offsets`). The range mode skips that pass (`OnePassPlan`): only a task's first
partition can have started in an earlier task, so only that range is staged provisionally and
placed by the driver. Nothing here touches Spark, so the arithmetic is unit-tested on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kafkalog_core.errors import KafkaLogError

TopicPartition = tuple[str, int]


class PlanError(KafkaLogError):
    """The counting pass and the existing log dir do not fit together."""


@dataclass(frozen=True, slots=True)
class RangeAssignment:
    """One contiguous offset range of one partition, written by one Spark task.

    `record_count` = PROVISIONAL: the task writes whatever its rows hold (no counting pass).
    `provisional`: staged from offset 0, moved into place by the driver at commit
    (`commit.place_ranges`); its range index only orders the partition's ranges (the task
    index). The data-source writer, whose tasks cannot count first, stages every range so; the
    range mode only the ranges whose start it cannot know (see `OnePassPlan`).
    """

    topic: str
    partition: int
    task_index: int
    range_index: int  # 0 for the first range of the partition in this run
    first_offset: int
    record_count: int
    provisional: bool = False

    @property
    def starts_partition(self) -> bool:
        """Whether this range is known to start the run's part of its partition (it continues
        the published last segment when there is one to continue)."""
        return self.range_index == 0 and not self.provisional

    @property
    def next_offset(self) -> int:
        return self.first_offset + self.record_count

    @property
    def key(self) -> tuple[int, str, int]:
        return (self.task_index, self.topic, self.partition)


PROVISIONAL = -1


class ProvisionalPlan(Mapping):
    """Every (task, topic, partition) gets a provisional range at offset 0 (range index = the
    task index, which orders a partition's ranges at commit)."""

    def __getitem__(self, key: tuple[int, str, int]) -> RangeAssignment:
        task_index, topic, partition = key
        return RangeAssignment(topic, partition, task_index, task_index, 0, PROVISIONAL, True)

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0


@dataclass(frozen=True)
class OnePassPlan:
    """The range mode's plan without a counting pass: where a task's share of a partition goes.

    Range partitioning gives each task a run of the sorted (topic, partition, order) keys, in
    task order. So a partition that is not the first one in a task's rows (or any partition of
    task 0) starts in that task: range 0, written in place from the partition's log end offset,
    continuing the published last segment as the counted plan does. Only a task's first
    partition may continue a range of earlier tasks: it is staged provisionally from offset 0
    (range index = task index) and the driver places it (`commit.place_ranges`).
    """

    log_end_offsets: Mapping[TopicPartition, int]

    def assignment(
        self, task_index: int, topic: str, partition: int, *, first_in_task: bool
    ) -> RangeAssignment:
        if first_in_task and task_index > 0:
            return RangeAssignment(topic, partition, task_index, task_index, 0, PROVISIONAL, True)
        start = int(self.log_end_offsets.get((topic, partition), 0))
        return RangeAssignment(topic, partition, task_index, 0, start, PROVISIONAL)


@dataclass(frozen=True, slots=True)
class OffsetPlan:
    """Every range of a run, addressable by (task index, topic, partition)."""

    ranges: tuple[RangeAssignment, ...]

    def for_task(self, task_index: int, topic: str, partition: int) -> RangeAssignment:
        for assignment in self.ranges:
            if assignment.key == (task_index, topic, partition):
                return assignment
        raise PlanError(
            f"task {task_index} found rows for {topic}-{partition} that the counting pass did not "
            "see; the input changed between passes (is the source being written to?)"
        )

    def as_lookup(self) -> dict[tuple[int, str, int], RangeAssignment]:
        return {a.key: a for a in self.ranges}

    def partitions(self) -> dict[TopicPartition, tuple[int, int]]:
        """(first offset, next offset) per partition written by this run."""
        spans: dict[TopicPartition, tuple[int, int]] = {}
        for a in self.ranges:
            tp = (a.topic, a.partition)
            first, nxt = spans.get(tp, (a.first_offset, a.first_offset))
            spans[tp] = (min(first, a.first_offset), max(nxt, a.next_offset))
        return spans

    @property
    def total_records(self) -> int:
        return sum(a.record_count for a in self.ranges)


def plan_offsets(
    counts: Iterable[tuple[int, str, int, int]],
    log_end_offsets: Mapping[TopicPartition, int],
) -> OffsetPlan:
    """Turn (task index, topic, partition, row count) rows into contiguous offset ranges.

    Ranges of a partition follow task order (the range partitioner's order), the first one
    starting at the partition's log end offset (0 for a new partition).
    """
    by_partition: dict[TopicPartition, list[tuple[int, int]]] = {}
    for task_index, topic, partition, count in counts:
        if count < 0:
            raise PlanError(
                f"negative row count {count} for {topic}-{partition} in task {task_index}"
            )
        if count == 0:
            continue
        by_partition.setdefault((topic, int(partition)), []).append((int(task_index), int(count)))

    ranges: list[RangeAssignment] = []
    for (topic, partition), tasks in sorted(by_partition.items()):
        tasks.sort()
        seen = [t for t, _ in tasks]
        if len(seen) != len(set(seen)):
            raise PlanError(f"task counted twice for {topic}-{partition}: {seen}")
        next_offset = int(log_end_offsets.get((topic, partition), 0))
        for range_index, (task_index, count) in enumerate(tasks):
            ranges.append(
                RangeAssignment(topic, partition, task_index, range_index, next_offset, count)
            )
            next_offset += count
    return OffsetPlan(tuple(ranges))
