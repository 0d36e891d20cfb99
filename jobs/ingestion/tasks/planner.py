"""Offset planning: where each task's share of a partition goes, without a counting pass.

A run writes in one pass: no task knows how many rows earlier tasks hold of a partition. The
range mode range-partitions the mapped rows by (topic, partition, ordering columns), so a Kafka
partition's rows are spread over consecutive Spark tasks in order, and only a task's first
partition can have started in an earlier task. The direct mode has no shuffle: every input
split holds a share of any partition, so every partition of a task after the first may continue
earlier ones. Either way (`OnePassPlan`) a share that surely starts the partition is written in
place from its log end offset; every other share is staged provisionally from offset 0 (range
index = task index) and the driver places them in task order at commit
(`commit.place_ranges`). A share that may continue an earlier task's (range index > 0) is staged
as records, not segments (`RangeAssignment.continues_share`). The arrow reader's
partition-owning tasks (`partition_owners`) each read every split and hold whole partitions, so
every share of theirs starts its partition. Nothing here touches Spark, so the rules are
unit-tested on their own.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class RangeAssignment:
    """One contiguous offset range of one partition, written by one Spark task.

    `record_count` = PROVISIONAL: the task writes whatever its rows hold (no counting pass).
    `provisional`: staged from offset 0, moved into place by the driver at commit
    (`commit.place_ranges`); its range index only orders the partition's ranges (the task
    index). The data-source writer, whose tasks cannot count first, stages every range so; the
    ingest job only the ranges whose start it cannot know (see `OnePassPlan`).
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
    def continues_share(self) -> bool:
        """Whether this range may continue an earlier task's share of its partition: it is
        staged as records, and the relayout encodes them after that share as one writer does
        (so batch boundaries never depend on where a task's share ends)."""
        return self.provisional and self.range_index > 0

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
    """The plan without a counting pass: where a task's share of a partition goes.

    Any partition of task 0 starts in it: range 0, written in place from the partition's log
    end offset, continuing the published last segment as a counted plan would. In the range
    mode range partitioning gives each task a run of the sorted (topic, partition, order) keys,
    in task order, so also a partition that is not the first one in a task's rows starts there;
    only a task's first partition may continue a range of earlier tasks. In the direct mode
    every split holds any partition, so every partition of a later task counts as its first
    (`write_task_direct`). Those are staged provisionally from offset 0 (range index = task
    index) and the driver places them in task order (`commit.place_ranges`).

    `partition_starts`: the range mode's tasks whose lower bound lies between two partitions
    (`range_cuts`): no earlier task holds any partition they hold, so their first one starts
    there too, and their predecessor's last one is never continued (it keeps no carry).
    """

    log_end_offsets: Mapping[TopicPartition, int]
    partition_starts: frozenset[int] = frozenset()

    def assignment(
        self, task_index: int, topic: str, partition: int, *, first_in_task: bool
    ) -> RangeAssignment:
        if first_in_task and task_index > 0 and task_index not in self.partition_starts:
            return RangeAssignment(topic, partition, task_index, task_index, 0, PROVISIONAL, True)
        start = int(self.log_end_offsets.get((topic, partition), 0))
        return RangeAssignment(topic, partition, task_index, 0, start, PROVISIONAL)

    def may_be_continued(self, task_index: int) -> bool:
        """Whether the next task's first partition may continue this task's last one."""
        return task_index + 1 not in self.partition_starts


def partition_owners(
    pairs: Collection[TopicPartition], tasks: int
) -> tuple[frozenset[TopicPartition], ...]:
    """The partitions each of at most `tasks` partition-owning tasks writes (the direct mode's
    `direct_tasks: partitions`): the sorted pairs dealt out in turn. No partition's size is
    known before the read; murmur2 spreads keys evenly, and a hot partition is one writer's
    work in any layout (the relayout also gives each partition to one task)."""
    ordered = sorted(pairs)
    count = max(1, min(tasks, len(ordered)))
    return tuple(frozenset(ordered[k::count]) for k in range(count))
