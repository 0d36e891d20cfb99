"""A failed block of Spark actions returns only when its tasks have ended.

Spark fails a job at its first failed task while the stage's other tasks are still being
killed, and a killed task's Python worker goes on for seconds (until
`spark.python.task.killTimeout` has passed). Such a task keeps writing into its run's staging
after the driver has seen the failure. A rerun started at once (a retry, Airflow's next try)
drops the stale staging first and would find those files appear behind it. So a block that
fails cancels the jobs it started, which are known by a job tag, and waits, up to
`SETTLE_SECONDS`, until none of their tasks is running.

The jobs carry an operation tag of the session (`spark.addTag`; cancelled by
`spark.interruptTag`), which a classic session and a Spark Connect client both have. Counting
running tasks needs Spark's status tracker, which only a classic session's SparkContext has;
there the tasks are waited for. A Connect client cannot see tasks, so it waits for
`spark.python.task.killTimeout`, after which an executor kills a killed task's Python worker
that is still running.
"""

from __future__ import annotations

import contextlib
import re
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
    from jobs.spark.tasks import is_connect

    if is_connect(spark):
        return None
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


def kill_timeout(spark: SparkSession) -> float:
    """`spark.python.task.killTimeout` in seconds (Spark's default 2s)."""
    try:
        text = str(spark.conf.get("spark.python.task.killTimeout", "2s")).strip().lower()
    except Exception:  # noqa: BLE001 - a server that does not say: Spark's default
        return 2.0
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|m|min)?", text)
    if m is None:
        return 2.0
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, None: 1.0}[m[2]]
    return float(m[1]) * scale


@contextlib.contextmanager
def settled_on_failure(spark: SparkSession, timeout: float = SETTLE_SECONDS) -> Iterator[None]:
    """Tag the block's Spark jobs; when the block raises, cancel them and wait until their
    tasks have ended, then let the error go on."""
    tag = f"kafkalog-{uuid.uuid4().hex}"
    try:
        spark.addTag(tag)
    except Exception:  # noqa: BLE001 - a stand-in session: its tasks run in this process
        yield
        return
    sc = _context(spark)
    if sc is not None:
        sc.addJobTag(tag)  # the status tracker knows jobs by their SparkContext tags
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):  # the error in flight is the one to report
            spark.interruptTag(tag)
            if sc is None:
                time.sleep(min(timeout, kill_timeout(spark) + POLL_SECONDS))
            else:
                deadline = time.monotonic() + timeout
                while running_tasks(sc, tag) and time.monotonic() < deadline:
                    time.sleep(POLL_SECONDS)
        raise
    finally:
        with contextlib.suppress(Exception):
            spark.removeTag(tag)
        if sc is not None:
            with contextlib.suppress(Exception):
                sc.removeJobTag(tag)
