"""The arrow reader's write pass as a Spark job: Spark schedules the tasks, each reads its files
with pyarrow (`arrow_reader`) and hands the mapped batches to the direct-mode writer.

Its own module so that reading the source knows nothing of writing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobs.ingestion.source.arrow_reader import ArrowReadPlan, mapped_batches
from jobs.ingestion.source.fs import install
from jobs.ingestion.staging.task_staging import TaskManifest
from jobs.ingestion.tasks.planner import OnePassPlan
from jobs.ingestion.tasks.writer import WriterSettings, write_task_direct
from jobs.spark.tasks import run_tasks, task_attempt

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["write_with_arrow"]


def write_with_arrow(
    spark: SparkSession, read: ArrowReadPlan, plan: OnePassPlan, settings: WriterSettings
) -> list[TaskManifest]:
    """The one pass: every task maps its files and hands them to `write_task_direct` (task 0
    writes in place, the others stage their shares as records: the driver places them and the
    relayout encodes them)."""

    def write_fn(i: int):
        install(read.resolvers)
        batches = mapped_batches(read.tasks[i], i, read.columns, read.rules)
        for manifest in write_task_direct(batches, i, task_attempt(), plan, settings):
            yield manifest.to_json()

    rows = run_tasks(spark, len(read.tasks), write_fn)
    return [TaskManifest.from_json(r) for r in rows]
