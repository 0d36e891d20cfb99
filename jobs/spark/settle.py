"""A failed block of Spark actions returns only when its tasks have ended.

Spark fails a job at its first failed task while the stage's other tasks are still being
killed, and a killed task's Python worker goes on for seconds (until
`spark.python.task.killTimeout` has passed). Such a task keeps writing into its run's staging
after the driver has seen the failure. A rerun started at once (a retry, Airflow's next try)
drops the stale staging first and would find those files appear behind it. So a block that
fails cancels the jobs it started, which are known by a job tag, and waits, up to
`SETTLE_SECONDS`, until none of their tasks is running.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SETTLE_SECONDS = 120.0  # a bound for a task that ignores its kill: the failure is raised anyway
POLL_SECONDS = 0.1


def _context(spark: SparkSession) -> Any:
    """The session's SparkContext when it tags jobs; None for Spark Connect (no context) and
    for a stand-in that runs tasks in this process (nothing outlives a failure there)."""
    try:
        sc = spark.sparkContext
    except Exception:  # noqa: BLE001 - any session without a SparkContext
        return None
    return sc if hasattr(sc, "addJobTag") and hasattr(sc, "_jsc") else None


def running_tasks(sc: Any, tag: str) -> int:
    """Tasks still running in the jobs tagged `tag` (their stages count a task until it ends,
    killed or not, after the stage itself has failed)."""
    tracker = sc.statusTracker()
    active = 0
    for job_id in sc._jsc.sc().statusTracker().getJobIdsForTag(tag):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            active += stage.numActiveTasks if stage is not None else 0
    return active


@contextlib.contextmanager
def settled_on_failure(spark: SparkSession, timeout: float = SETTLE_SECONDS) -> Iterator[None]:
    """Tag the block's Spark jobs; when the block raises, cancel them and wait until their
    tasks have ended, then let the error go on."""
    sc = _context(spark)
    if sc is None:
        yield
        return
    tag = f"kafkalog-{uuid.uuid4().hex}"
    sc.addJobTag(tag)
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):  # the error in flight is the one to report
            sc.cancelJobsWithTag(tag)
            deadline = time.monotonic() + timeout
            while running_tasks(sc, tag) and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS)
        raise
    finally:
        with contextlib.suppress(Exception):
            sc.removeJobTag(tag)
