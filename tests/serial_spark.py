"""A maintenance job's tasks run one after another in this process, as local[1] Spark runs them
but without a JVM: for the many short runs a kill test forks (`tests.killer.killed_run`).

It provides only what `jobs.maintenance.common.run_units` and the jobs' `run` use of a
SparkSession (parallelize, mapPartitions, collect, defaultParallelism); a job that needs more
fails with an AttributeError, never with a silent difference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any


class _Partitions:
    def __init__(self, partitions: list[list[Any]]) -> None:
        self.partitions = partitions

    def mapPartitions(self, f: Callable[[Iterator[Any]], Iterable[Any]]) -> _Partitions:  # noqa: N802
        return _Partitions([list(f(iter(p))) for p in self.partitions])

    def collect(self) -> list[Any]:
        return [item for p in self.partitions for item in p]


class _Context:
    defaultParallelism = 1  # noqa: N815

    def parallelize(self, items: list[Any], slices: int) -> _Partitions:
        items = list(items)
        size = -(-len(items) // max(1, slices))
        return _Partitions([items[k : k + size] for k in range(0, len(items), max(1, size))])


class SerialSpark:
    """Stands in for the `spark` argument of a maintenance job's `run`."""

    sparkContext = _Context()  # noqa: N815
