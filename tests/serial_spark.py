"""A job's tasks run one after another in this process, as local[1] Spark runs them but without a
JVM: for the many short runs a kill test forks (`tests.killer.killed_run`).

It provides only what `jobs.spark.tasks.run_tasks` and the jobs' `run` use of a SparkSession
(`range(...).mapInArrow(f, schema).toArrow()`, `conf.get`, each task's `TaskContext`) and, for
the ingest job with the arrow task reader, a Parquet source's schema and files
(`read.format("parquet").load(path)`: the reader's rows are never asked for). A job that needs
more fails with an AttributeError, never with a silent difference.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from jobs.spark.tasks import ITEM

_ATTEMPTS = itertools.count()  # task attempt ids, unique within this process (an application)
_UNSET = object()


def _in_task(partition: int, run: Callable[[], list[pa.RecordBatch]]) -> list[pa.RecordBatch]:
    """`run()` with a TaskContext of task `partition`, as a Spark Python worker has one."""
    from pyspark import TaskContext

    context = TaskContext._getOrCreate()
    context._partitionId = partition
    context._taskAttemptId = next(_ATTEMPTS)
    context._attemptNumber = 0
    context._stageId = 0
    context._localProperties = {}
    context._resources = {}
    context._cpus = 1
    try:
        return run()
    finally:
        TaskContext._setTaskContext(None)


class _Frame:
    """Spark's partitions of a DataFrame as lists of Arrow batches, mapped in this process."""

    def __init__(self, partitions: list[list[pa.RecordBatch]]) -> None:
        self.partitions = partitions

    def mapInArrow(  # noqa: N802
        self, f: Callable[[Iterator[pa.RecordBatch]], Iterable[pa.RecordBatch]], schema: str
    ) -> _Frame:
        if schema != ITEM:
            raise AttributeError(f"SerialSpark maps only to {ITEM!r}, not {schema!r}")
        return _Frame(
            [_in_task(i, lambda p=p: list(f(iter(p)))) for i, p in enumerate(self.partitions)]
        )

    def toArrow(self) -> pa.Table:  # noqa: N802
        batches = [b for p in self.partitions for b in p]
        return pa.Table.from_batches(batches, schema=pa.schema([("item", pa.binary())]))


class _ParquetFrame:
    """A Parquet source as the ingest's arrow task reader sees it: its schema and its files."""

    def __init__(self, spark: SerialSpark, path: str) -> None:
        from pyspark.sql.pandas.types import from_arrow_schema

        self.sparkSession = spark
        self._dataset = ds.dataset(path, format="parquet")
        self.schema = from_arrow_schema(self._dataset.schema)
        self.columns = list(self.schema.names)

    def inputFiles(self) -> list[str]:  # noqa: N802
        return [Path(f).absolute().as_uri() for f in self._dataset.files]


class _Reader:
    def __init__(self, spark: SerialSpark) -> None:
        self.spark = spark

    def format(self, name: str) -> _Reader:
        if name != "parquet":
            raise AttributeError(f"SerialSpark reads only Parquet, not {name!r}")
        return self

    def options(self, **options: str) -> _Reader:
        if options:
            raise AttributeError(f"SerialSpark reads Parquet without options, not {options}")
        return self

    def load(self, path: str) -> _ParquetFrame:
        return _ParquetFrame(self.spark, path)


class _Conf:
    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self._settings = {
            "spark.master": "local[1]",
            "spark.sql.session.timeZone": "UTC",
            **(settings or {}),
        }

    def get(self, key: str, default: Any = _UNSET) -> Any:
        if key in self._settings:
            return self._settings[key]
        if default is _UNSET:
            raise KeyError(key)  # as a session's for a setting it has not, without a default
        return default


class SerialSpark:
    """Stands in for the `spark` argument of a maintenance job's or an arrow-read ingest's
    `run`."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.conf = _Conf(settings)  # a session's settings, as `spark.conf.get` answers

    @property
    def read(self) -> _Reader:
        return _Reader(self)

    def range(self, start: int, end: int, step: int, partitions: int) -> _Frame:
        ids = list(range(start, end, step))
        size = -(-len(ids) // max(1, partitions))
        return _Frame(
            [
                [pa.record_batch([pa.array(ids[k : k + size], pa.int64())], names=["id"])]
                for k in range(0, len(ids), max(1, size))
            ]
        )
