"""task_failure_log: Spark's task-failure lines are dropped for our data errors and replayed,
verbatim and first, for any other failure; logging is restored afterwards."""

from __future__ import annotations

import io
import time

import pytest

from jobs.spark.errors import is_data_error
from jobs.spark.task_log import APPENDER_NAME, task_failure_log
from kafkalog_core.errors import InvalidRecordError

pytestmark = pytest.mark.spark


def _failing_job(spark, error: Exception) -> None:
    def fail(_):
        raise error

    spark.sparkContext.parallelize([1], 1).map(fail).collect()


def _appenders(spark) -> list[str]:
    jvm = spark.sparkContext._jvm
    config = jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration()
    return list(config.getAppenders().keySet())


def test_a_data_error_in_a_task_leaves_no_spark_lines(spark) -> None:
    err = io.StringIO()
    with pytest.raises(Exception) as info, task_failure_log(spark, err):
        _failing_job(spark, InvalidRecordError("kafkalog: invalid record: null key"))
    assert is_data_error(info.value)
    assert err.getvalue() == ""
    assert APPENDER_NAME not in _appenders(spark)


def test_any_other_task_failure_is_replayed_with_sparks_own_lines(spark) -> None:
    err = io.StringIO()
    with pytest.raises(Exception) as info, task_failure_log(spark, err):
        _failing_job(spark, ZeroDivisionError("not ours"))
    assert not is_data_error(info.value)
    replayed = err.getvalue()
    assert "ERROR TaskSetManager: Task 0 in stage" in replayed and "aborting job" in replayed
    assert "ZeroDivisionError: not ours" in replayed
    assert APPENDER_NAME not in _appenders(spark)


def test_success_prints_nothing_and_nested_blocks_share_one_diversion(spark) -> None:
    err = io.StringIO()
    with task_failure_log(spark, err):
        with task_failure_log(spark, err):
            assert _appenders(spark).count(APPENDER_NAME) == 1
        assert spark.sparkContext.parallelize(range(4), 2).sum() == 6
    assert err.getvalue() == "" and APPENDER_NAME not in _appenders(spark)


def test_a_failed_block_returns_when_its_other_tasks_have_ended(spark, tmp_path) -> None:
    """One task fails while the other writes a file every 20 ms: once the block has raised,
    no task of it writes any more (Spark's failure alone returns while the other runs on)."""
    marks = tmp_path / "marks"
    marks.mkdir()

    def task(index: int, rows):
        if index == 0:  # fail once the writer runs, so the job fails under it
            deadline = time.monotonic() + 60
            while not any(marks.iterdir()) and time.monotonic() < deadline:
                time.sleep(0.01)
            raise InvalidRecordError("kafkalog: invalid record: the first task's")
        for k in range(3000):  # 60 s, far past Spark's kill of it
            (marks / f"{k:05d}").touch()
            time.sleep(0.02)
        yield from rows

    with pytest.raises(Exception) as info, task_failure_log(spark, io.StringIO()):
        spark.sparkContext.parallelize([0, 1], 2).mapPartitionsWithIndex(task).collect()
    assert is_data_error(info.value)
    written = len(list(marks.iterdir()))
    assert written > 0  # the writer ran beside the failing task
    time.sleep(1.0)
    assert len(list(marks.iterdir())) == written
