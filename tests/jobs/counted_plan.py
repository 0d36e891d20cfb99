"""The counted reference plan: rows counted per task first, exact offsets per task share.

The ingest job no longer counts (every mode writes in one pass and the driver places what the
tasks staged, `planner.OnePassPlan`). The tests keep the counted plan as an oracle independent
of that placement: prefix sums over task order, from each partition's log end offset, give
every share its exact first offset, so its writer writes in place and nothing is moved after.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyarrow as pa

from jobs.ingestion.tasks.planner import RangeAssignment, TopicPartition
from jobs.ingestion.tasks.writer import partition_runs

Lookup = dict[tuple[int, str, int], RangeAssignment]


def count_task(batches: Iterable[pa.RecordBatch]) -> dict[TopicPartition, int]:
    """Rows per (topic, partition) in one task's rows (grouped or not)."""
    counts: dict[TopicPartition, int] = {}
    for batch in batches:
        for topic, partition, start, stop in partition_runs(batch):
            counts[(topic, partition)] = counts.get((topic, partition), 0) + stop - start
    return counts


def counted_plan(
    counts: Iterable[tuple[int, str, int, int]], log_end_offsets: Mapping[TopicPartition, int]
) -> Lookup:
    """(task index, topic, partition, rows) -> each share's exact range, keyed as the writers
    look it up; a partition's shares follow task order from its log end offset."""
    by_partition: dict[TopicPartition, list[tuple[int, int]]] = {}
    for task_index, topic, partition, count in counts:
        if count > 0:
            by_partition.setdefault((topic, partition), []).append((task_index, count))
    lookup: Lookup = {}
    for (topic, partition), shares in sorted(by_partition.items()):
        offset = int(log_end_offsets.get((topic, partition), 0))
        for range_index, (task_index, count) in enumerate(sorted(shares)):
            a = RangeAssignment(topic, partition, task_index, range_index, offset, count)
            lookup[a.key] = a
            offset += count
    return lookup
