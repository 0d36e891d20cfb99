"""Spark's task-failure log lines, held back while a job's Spark actions run.

A data error that a task finds (an invalid record, a corrupt segment) fails the task, and Spark
logs it before our driver sees the failure: `ERROR Executor: Exception in task ...`, `WARN
TaskSetManager: Lost task ...` (both with the whole Python traceback) and `ERROR TaskSetManager:
Task 0 in stage 2.0 failed 1 times; aborting job`. For a data error the job's one `kafkalog:
error:` line says everything, so those lines are noise in front of it; for any other failure
(an executor lost, out of memory, a bug) they are what the user needs.

Which one it is is only known after the failure, so `task_failure_log` sends the loggers that
write those lines (`TASK_FAILURE_LOGGERS`) to a temporary file while the block runs, and
afterwards drops the file (success or a data error) or copies it to stderr, verbatim and before
the caller prints its error line (any other failure). Uses log4j2 through the driver's JVM; a
session without one (Spark Connect) is left as it is. The loggers are process-wide: a failure
of another thread's job during the block is replayed only if this block fails too.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO

from jobs.spark.errors import is_data_error
from jobs.spark.settle import settled_on_failure

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TASK_FAILURE_LOGGERS = (
    "org.apache.spark.scheduler.TaskSetManager",  # Lost task ..., ... failed N times; aborting job
    "org.apache.spark.executor.Executor",  # Exception in task ... (local mode: in the driver)
)
APPENDER_NAME = "kafkalog-task-failures"
# conf/log4j2.properties' console pattern, so replayed lines look like the rest
PATTERN = "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"


class _Diversion:
    """The file appender and the logger configs that route the task-failure loggers to it."""

    def __init__(self, jvm: Any, path: str) -> None:
        core = jvm.org.apache.logging.log4j.core
        self.path = path
        self.context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
        self.config = self.context.getConfiguration()
        layout = (
            core.layout.PatternLayout.newBuilder()
            .withPattern(PATTERN)
            .withConfiguration(self.config)
            .build()
        )
        self.appender = (
            core.appender.FileAppender.newBuilder()
            .setName(APPENDER_NAME)
            .withFileName(path)
            .setLayout(layout)
            .setConfiguration(self.config)
            .build()
        )
        self.appender.start()
        self.config.addAppender(self.appender)
        self.replaced: dict[str, Any] = {}
        for name in TASK_FAILURE_LOGGERS:
            self.replaced[name] = self.config.getLoggers().get(name)  # None: not configured
            level = self.context.getLogger(name).getLevel()
            logger = core.config.LoggerConfig(name, level, False)
            logger.addAppender(self.appender, None, None)
            self.config.addLogger(name, logger)
        self.context.updateLoggers()

    def replay(self, err: TextIO) -> None:
        with contextlib.suppress(OSError), open(self.path, encoding="utf-8", errors="replace") as f:
            err.write(f.read())
            err.flush()

    def close(self) -> None:
        for name, previous in self.replaced.items():
            self.config.removeLogger(name)
            if previous is not None:
                self.config.addLogger(name, previous)
        self.context.updateLoggers()
        self.appender.stop()
        self.config.getAppenders().remove(APPENDER_NAME)
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def _divert(spark: SparkSession) -> _Diversion | None:
    jvm = getattr(getattr(spark, "sparkContext", None), "_jvm", None)
    if jvm is None:
        return None
    try:
        context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
        if context.getConfiguration().getAppenders().containsKey(APPENDER_NAME):
            return None  # an enclosing block already holds the lines back
        fd, path = tempfile.mkstemp(prefix="kafkalog-task-failures-", suffix=".log")
        os.close(fd)
        return _Diversion(jvm, path)
    except Exception:  # not log4j2-core (another logging backend): leave logging alone
        return None


@contextlib.contextmanager
def task_failure_log(spark: SparkSession, err: TextIO | None = None) -> Iterator[None]:
    """Hold Spark's task-failure lines back for the block; replay them to `err` (stderr) when
    it fails with anything but a data error (see `errors.is_data_error`). A failed block
    returns once its tasks have ended (`settle.settled_on_failure`), so their lines are in."""
    diversion = _divert(spark)
    try:
        with settled_on_failure(spark):
            yield
    except Exception as error:
        if diversion is not None and not is_data_error(error):
            diversion.replay(err or sys.stderr)
        raise
    finally:
        if diversion is not None:
            diversion.close()
