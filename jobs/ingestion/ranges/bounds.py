"""Range bounds for the range mode, from a small sample, without Spark's sampling job.

Why. `repartitionByRange` makes Spark's RangePartitioner run a job of its own first: it computes
the whole child plan to sample it, so every source row is read and mapped (the key hashing in
Python included) once more before the shuffle reads and maps them all again. Here the sample is
taken from the source before the mapping (`mapping.sample_keys`): only the sampled rows are
mapped. The driver picks the bounds as quantiles of the sorted sample, and each row's task is a
Spark expression over its own (topic, partition, `_kl_order`) key, given to
`repartitionById` (the value is the target partition: no sampling job, no partitioner).

What a split must give (`planner.OnePassPlan`): task i holds a contiguous run of the sorted
keys, before task i+1's. Task = the number of bounds strictly below the key, found by a
balanced search over the bounds (nested CASE: log2(tasks) struct comparisons per row), so a key
equal to a bound goes to the lower task. Spark itself both sorts the sample and compares the keys
with the bounds (struct ordering: nulls first, NaN greatest, as the sort within tasks), so the
runs are contiguous whatever the types. The bounds are quantiles of the whole key, so a hot
partition spans several tasks; a quantile near a partition's end moves there (`range_cuts`:
the key (topic, partition + 1, null ordering values, pos -1), below all of the next partition's
rows), so the next task starts its partitions and writes them in place (`TaskRouting.
partition_starts`). Offsets follow the sorted order, and a share that continues an earlier
task's is staged as rows and encoded after it by the relayout, as one writer would: which valid
split the sample gives changes no record, offset, batch or segment.

The bounds become SQL literals; ordering values of a type without an exact literal here (arrays,
structs, maps, intervals) keep Spark's range partitioner (`task_routing` returns None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.mapping.rules import ORDER_COLUMN
from jobs.ingestion.mapping.spark_mapping import sample_keys
from jobs.ingestion.ranges.cuts import partition_ends, task_cuts

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType

# Sampled rows per task: a quantile from m sampled rows puts about n/tasks * (1 +- 1/sqrt(m))
# rows in a task; Spark's RangePartitioner takes ~20 (60 with its oversampling).
SAMPLE_ROWS_PER_TASK = 400
# At most this many sampled rows travel to the driver, however many tasks.
MAX_SAMPLE_ROWS = 200_000
SAMPLE_SEED = 0x6B6C  # fixed: the same input gives the same sample, bounds and task shares

KEY_COLUMNS = ("topic", "partition", ORDER_COLUMN)


def sample_fraction(rows: int, tasks: int) -> float:
    """The Bernoulli fraction that samples about `SAMPLE_ROWS_PER_TASK` rows per task (1.0 for
    small inputs: then the sample is every row and the split exact)."""
    if rows <= 0:
        return 1.0
    wanted = min(SAMPLE_ROWS_PER_TASK * max(tasks, 1), MAX_SAMPLE_ROWS)
    return min(1.0, wanted / rows)


@dataclass(frozen=True)
class TaskRouting:
    """Each mapped row's task (0..tasks-1, for `repartitionById`), and the tasks whose lower
    bound is a partition's end (`OnePassPlan.partition_starts`)."""

    task: Column
    partition_starts: frozenset[int] = frozenset()


def task_routing(
    source: DataFrame, config: IngestConfig, tasks: int, key_schema: StructType
) -> TaskRouting | None:
    """The rows' routing to `tasks` tasks, or None when the ordering's types need Spark's range
    partitioner (see the module docstring).

    `key_schema`: the mapped rows' schema (topic, partition and `_kl_order` are read from it).
    Runs one small Spark job when there are rows and more than one task: the source is read,
    a sample of it mapped and sorted in one task, and its bounds collected.
    """
    from pyspark.sql import functions as F

    types = [key_schema[name].dataType for name in KEY_COLUMNS]
    if not all(_has_literal(t) for t in types):
        return None
    if tasks <= 1:
        return TaskRouting(F.lit(0))
    rows = source.count()
    if rows == 0:
        return TaskRouting(F.lit(0))
    keys = sample_keys(source, config, sample_fraction(rows, tasks), SAMPLE_SEED)
    ordered = keys.repartition(1).sortWithinPartitions(*KEY_COLUMNS).toArrow()
    ends = partition_ends(
        ordered.column("topic").to_numpy(zero_copy_only=False),
        ordered.column("partition").to_numpy(zero_copy_only=False),
    )
    cuts = task_cuts(np.ones(ordered.num_rows, np.int64), ends, tasks)
    bounds = [
        _partition_end_literal(ordered.slice(i, 1), types)
        if at_end
        else _key_literal(ordered.slice(i, 1), types)
        for i, at_end in cuts
    ]
    key = F.struct(*[F.col(name) for name in KEY_COLUMNS])
    starts = frozenset(j + 1 for j, (_, at_end) in enumerate(cuts) if at_end)
    return TaskRouting(_search(key, bounds, 0, len(bounds)), starts)


def _search(key: Column, bounds: list[Column], lo: int, hi: int) -> Column:
    """The number of bounds[lo:hi] below `key` plus lo, by halving: `key <= bounds[mid]` sends
    it to the lower half (the bounds are in Spark's order, so this is a binary search)."""
    from pyspark.sql import functions as F

    if lo == hi:
        return F.lit(lo)
    mid = (lo + hi) // 2
    return F.when(key <= bounds[mid], _search(key, bounds, lo, mid)).otherwise(
        _search(key, bounds, mid + 1, hi)
    )


def _has_literal(dtype: DataType) -> bool:
    """Whether `_literal` writes values of this type exactly."""
    from pyspark.sql import types as T

    if isinstance(dtype, T.StructType):
        return all(_has_literal(f.dataType) for f in dtype.fields)
    exact = (
        T.BooleanType,
        T.ByteType,
        T.ShortType,
        T.IntegerType,
        T.LongType,
        T.FloatType,
        T.DoubleType,
        T.DecimalType,
        T.StringType,
        T.BinaryType,
        T.DateType,
        T.TimestampType,
        T.TimestampNTZType,
    )
    return isinstance(dtype, exact)


def _key_literal(row: pa.Table, types: list[DataType]) -> Column:
    """One sampled key (a one-row table of KEY_COLUMNS) as a struct literal of the key's type."""
    from pyspark.sql import functions as F

    fields = [
        _literal(row.column(name)[0], dtype).alias(name)
        for name, dtype in zip(KEY_COLUMNS, types, strict=True)
    ]
    return F.struct(*fields)


def _partition_end_literal(row: pa.Table, types: list[DataType]) -> Column:
    """The key between the last row of a sampled key's (topic, partition) and the next
    partition's first: (topic, partition + 1, every ordering value null, pos -1), below every
    row of partition + 1 (struct ordering: nulls first; a row's `pos` is >= 0)."""
    from pyspark.sql import functions as F

    topic, partition, order = types
    order_fields = [
        (F.lit(-1) if f.name == "pos" else F.lit(None)).cast(f.dataType).alias(f.name)
        for f in order.fields  # type: ignore[attr-defined]
    ]
    return F.struct(
        _literal(row.column("topic")[0], topic).alias("topic"),
        F.lit(row.column("partition")[0].as_py() + 1).cast(partition).alias("partition"),
        F.struct(*order_fields).alias(ORDER_COLUMN),
    )


def _literal(value: pa.Scalar, dtype: DataType) -> Column:
    """An exact Spark literal of `dtype` for an Arrow scalar collected from a column of it."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(dtype, T.StructType):
        return F.struct(*[_literal(value[f.name], f.dataType).alias(f.name) for f in dtype.fields])
    if not value.is_valid:
        return F.lit(None).cast(dtype)
    if isinstance(dtype, T.TimestampType):  # an instant: its microseconds, no time zone
        micros = value.cast(pa.timestamp("us", tz=value.type.tz)).cast(pa.int64())
        return F.timestamp_micros(F.lit(micros.as_py()))
    if isinstance(dtype, T.TimestampNTZType):  # wall-clock time: its text, exact to the us
        text = value.as_py().isoformat(sep=" ")
        return F.expr(f"TIMESTAMP_NTZ '{text}'")
    if isinstance(dtype, T.DateType):
        return F.date_from_unix_date(F.lit(value.cast(pa.date32()).cast(pa.int32()).as_py()))
    if isinstance(dtype, T.BinaryType):
        return F.lit(bytearray(value.as_py()))
    return F.lit(value.as_py()).cast(dtype)
