"""Python work in Spark tasks through DataFrame operations: one path for a classic session and a
Spark Connect client (which has no SparkContext, no RDDs and no JVM handles).

A job's work goes to tasks as task numbers: `spark.range(n, numPartitions=n)` hands task i
exactly the number i, and `mapInArrow` runs the job's function on it there. The function and
what it closes over (the work units) travel pickled with the plan, as an RDD closure did; what
a task yields comes back pickled, one binary row per item, in task order. A stage that needs a
shuffle passes (key, kind, payload) rows (`PAIRS`) through `repartition` on the key.

How many tasks a session runs at once comes from its settings (`default_parallelism`), read
through `spark.conf`, which both kinds of session answer.
"""

from __future__ import annotations

import os
import pickle
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "PAIRS",
    "byte_setting",
    "count_setting",
    "default_parallelism",
    "from_pairs",
    "input_splits",
    "is_connect",
    "missing_on_workers",
    "require_kafkalog_on_workers",
    "run_tasks",
    "shuffled",
    "task_attempt",
    "to_pairs",
]

T = TypeVar("T")

ITEM = "item binary"
PAIRS = "key long, kind string, payload binary"  # a shuffled stage's rows
_PAIRS_BATCH = 64  # pairs per Arrow batch a task yields (payloads are whole Arrow IPC blobs)
# Spark's own floor for a cluster's default parallelism (CoarseGrainedSchedulerBackend)
_CLUSTER_MIN = 2


def is_connect(spark: SparkSession) -> bool:
    """Whether `spark` is a Spark Connect client session (no SparkContext in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _setting(spark: SparkSession, key: str) -> str | None:
    """A setting as the session resolves it, its default included (None when it has none).
    No default is passed: a classic session would return that one for any setting not set."""
    try:
        value = spark.conf.get(key)
    except Exception:  # noqa: BLE001 - unset without a default, or a server that will not say
        return None
    return None if value in (None, "") else str(value)


def default_parallelism(spark: SparkSession) -> int:
    """The tasks the session's cluster runs at once, as Spark's default parallelism: the
    `spark.default.parallelism` setting, else what the master gives (`local[N]` N threads,
    `local[*]` this machine's cores, a cluster its executors' cores when the settings say, at
    least 2)."""
    chosen = _setting(spark, "spark.default.parallelism")
    if chosen is not None and chosen.isdigit() and int(chosen) > 0:
        return int(chosen)
    master = _setting(spark, "spark.master") or ""
    local = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master)
    if local is not None:
        threads = local[1] or "1"
        return (os.cpu_count() or 1) if threads == "*" else max(1, int(threads))
    cluster = re.fullmatch(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,.*\]", master)
    if cluster is not None:
        return max(_CLUSTER_MIN, int(cluster[1]) * int(cluster[2]))
    instances = _setting(spark, "spark.executor.instances")
    cores = _setting(spark, "spark.executor.cores")
    if instances and cores and instances.isdigit() and cores.isdigit():
        return max(_CLUSTER_MIN, int(instances) * int(cores))
    most = _setting(spark, "spark.cores.max")
    if most and most.isdigit():
        return max(_CLUSTER_MIN, int(most))
    return _CLUSTER_MIN


_BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def byte_setting(spark: SparkSession, key: str, default: int) -> int:
    """A size setting in bytes, read as Spark reads one (`128m`, `64MB`, `1g`, a plain number:
    bytes); `default` when unset or unreadable."""
    value = _setting(spark, key)
    m = re.fullmatch(r"\s*(\d+)\s*([kmgtp]?)b?\s*", (value or "").lower())
    if m is None:
        return default
    return int(m[1]) * _BYTE_UNITS[m[2]]


def count_setting(spark: SparkSession, key: str) -> int | None:
    """A positive count setting (`spark.sql.files.minPartitionNum`), None when unset or not
    a positive integer."""
    value = (_setting(spark, key) or "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def input_splits(frame: DataFrame) -> int | None:
    """How many partitions Spark reads `frame` in (planning only, no job), or None where the
    session cannot say without running one (Spark Connect has no planned RDD to ask)."""
    if is_connect(frame.sparkSession):
        return None
    return frame.rdd.getNumPartitions()


KAFKALOG_PACKAGES = ("kafkalog_core", "jobs", "pyspark_kafkalog")


def missing_on_workers(spark: SparkSession, modules: Sequence[str] = KAFKALOG_PACKAGES) -> str:
    """The first of `modules` the session's Python workers cannot import ("" when they import
    all): a Spark Connect server's workers need kafkalog installed where they run. One task,
    whose function travels by value (it names none of our modules)."""
    names = tuple(modules)

    def probe(batches):
        import importlib.util

        import pyarrow as pa

        for _ in batches:
            pass
        missing = next((m for m in names if importlib.util.find_spec(m) is None), "")
        yield pa.record_batch([pa.array([missing], pa.string())], names=["missing"])

    found = spark.range(0, 1, 1, 1).mapInArrow(probe, "missing string").toArrow()
    return str(found.column("missing")[0].as_py() or "")


def require_kafkalog_on_workers(
    spark: SparkSession, modules: Sequence[str] = KAFKALOG_PACKAGES
) -> None:
    """ConfigError (one line: what to install where) when the workers cannot import kafkalog."""
    from jobs.spark.errors import missing_package_line
    from kafkalog_core.errors import ConfigError

    missing = missing_on_workers(spark, modules)
    if missing:
        raise ConfigError(missing_package_line(missing))


def task_attempt() -> str:
    """This task attempt's id (unique within the application): its staging dir's name."""
    from pyspark import TaskContext

    return str(TaskContext.get().taskAttemptId())


def _items_batches(items: Iterable[Any]) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa

    for item in items:
        yield pa.record_batch([pa.array([pickle.dumps(item)], pa.binary())], names=["item"])


def run_tasks(spark: SparkSession, count: int, task: Callable[[int], Iterable[T]]) -> list[T]:
    """Run `task(i)` for every i in range(count), each in a Spark task of its own; everything
    the tasks yield, collected in task order (an item is pickled: any picklable value)."""
    if count <= 0:
        return []

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield from _items_batches(task(i))

    frame = spark.range(0, count, 1, count).mapInArrow(run, ITEM)
    return [pickle.loads(b) for b in frame.toArrow().column("item").to_pylist()]


def to_pairs(pairs: Iterable[tuple[int, tuple[str, bytes]]]) -> Iterator[pa.RecordBatch]:
    """(key, (kind, payload)) pairs as `PAIRS` batches."""
    import pyarrow as pa

    schema = pa.schema([("key", pa.int64()), ("kind", pa.string()), ("payload", pa.binary())])
    keys: list[int] = []
    kinds: list[str] = []
    payloads: list[bytes] = []
    for key, (kind, payload) in pairs:
        keys.append(key)
        kinds.append(kind)
        payloads.append(payload)
        if len(keys) == _PAIRS_BATCH:
            yield pa.record_batch([keys, kinds, payloads], schema=schema)
            keys, kinds, payloads = [], [], []
    if keys:
        yield pa.record_batch([keys, kinds, payloads], schema=schema)


def from_pairs(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[int, tuple[str, bytes]]]:
    """`PAIRS` batches as (key, (kind, payload)) pairs."""
    for batch in batches:
        columns = [batch.column(name).to_pylist() for name in ("key", "kind", "payload")]
        for key, kind, payload in zip(*columns, strict=True):
            yield key, (kind, payload)


def shuffled(frame: DataFrame, partitions: int) -> DataFrame:
    """A `PAIRS` frame with all rows of one key in one of `partitions` tasks."""
    return frame.repartition(partitions, "key")
