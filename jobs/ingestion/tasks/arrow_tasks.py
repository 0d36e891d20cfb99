"""The arrow reader's write pass as a Spark job: Spark schedules the tasks, each reads files
with pyarrow (`arrow_reader`) and hands the mapped batches to the direct-mode writer.

Two layouts of the tasks (`direct_tasks`, chosen by `jobs.ingest.direct_tasks_choice`):
- splits: a task per input split, each writing its share of every partition; the shares after
  a partition's first are staged as rows and the relayout encodes them (each byte written
  twice, the source read once);
- partitions: a task per group of partitions (`partition_owners`), each reading every split in
  source order and writing its partitions whole, as one writer (each byte written once, the
  source read once per task; no relayout).

Its own module so that reading the source knows nothing of writing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from jobs.ingestion.source.arrow_reader import ArrowReadPlan, mapped_batches
from jobs.ingestion.source.fs import install
from jobs.ingestion.staging.task_staging import TaskManifest
from jobs.ingestion.tasks.planner import OnePassPlan, TopicPartition
from jobs.ingestion.tasks.writer import WriterSettings, write_task_direct
from jobs.spark.tasks import run_tasks, task_attempt

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["write_with_arrow"]


def write_with_arrow(
    spark: SparkSession,
    read: ArrowReadPlan,
    plan: OnePassPlan,
    settings: WriterSettings,
    owners: Sequence[frozenset[TopicPartition]] | None = None,
) -> list[TaskManifest]:
    """The one pass. Without `owners` every task maps its split and hands it to
    `write_task_direct` (task 0 writes in place, the others stage their shares as records: the
    driver places them and the relayout encodes them). With `owners` task k reads every split
    and writes the partitions `owners[k]` holds, each in place from its log end offset."""

    def write_fn(i: int):
        install(read.resolvers)
        if owners is None:
            batches, owned = mapped_batches(read.tasks[i], i, read.columns, read.rules), None
        else:
            batches, owned = every_split(read), owners[i]
        for manifest in write_task_direct(batches, i, task_attempt(), plan, settings, owned):
            yield manifest.to_json()

    rows = run_tasks(spark, len(read.tasks) if owners is None else len(owners), write_fn)
    return [TaskManifest.from_json(r) for r in rows]


def every_split(read: ArrowReadPlan) -> Iterator[pa.RecordBatch]:
    """Every split's mapped records in split order: the source order, each row numbered as
    its split's own task numbers it (so checks name the same rows in either layout)."""
    for index, split in enumerate(read.tasks):
        yield from mapped_batches(split, index, read.columns, read.rules)
