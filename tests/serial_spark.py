"""A maintenance job's tasks run one after another in this process, as local[1] Spark runs them
but without a JVM: for the many short runs a kill test forks (`tests.killer.killed_run`).

It provides only what `jobs.spark.tasks.run_tasks` and the jobs' `run` use of a SparkSession
(`range(...).mapInArrow(f, schema).toArrow()`, `conf.get` of the master); a job that needs
more fails with an AttributeError, never with a silent difference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa

from jobs.spark.tasks import ITEM


class _Frame:
    """Spark's partitions of a DataFrame as lists of Arrow batches, mapped in this process."""

    def __init__(self, partitions: list[list[pa.RecordBatch]]) -> None:
        self.partitions = partitions

    def mapInArrow(  # noqa: N802
        self, f: Callable[[Iterator[pa.RecordBatch]], Iterable[pa.RecordBatch]], schema: str
    ) -> _Frame:
        if schema != ITEM:
            raise AttributeError(f"SerialSpark maps only to {ITEM!r}, not {schema!r}")
        return _Frame([list(f(iter(p))) for p in self.partitions])

    def toArrow(self) -> pa.Table:  # noqa: N802
        batches = [b for p in self.partitions for b in p]
        return pa.Table.from_batches(batches, schema=pa.schema([("item", pa.binary())]))


class _Conf:
    _settings = {"spark.master": "local[1]"}

    def get(self, key: str) -> str:
        return self._settings[key]  # a KeyError, as a session's for a setting it has not


class SerialSpark:
    """Stands in for the `spark` argument of a maintenance job's `run`."""

    conf = _Conf()

    def range(self, start: int, end: int, step: int, partitions: int) -> _Frame:
        ids = list(range(start, end, step))
        size = -(-len(ids) // max(1, partitions))
        return _Frame(
            [
                [pa.record_batch([pa.array(ids[k : k + size], pa.int64())], names=["id"])]
                for k in range(0, len(ids), max(1, size))
            ]
        )
