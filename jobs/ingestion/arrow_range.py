"""The range mode on the arrow task reader: a sample sort exchanged through the run's staging.

Why: the Spark range mode maps the rows in Spark, routes them through Spark's shuffle and sorts
them there, so every record goes through UnsafeRows and two row <-> Arrow conversions (3.2x the
time of Spark's own Parquet write). When the source qualifies for the arrow task reader and the
ordering names plain columns, the records never need to leave Arrow:

1. Stage 1 (`sort_runs`, one Spark task per arrow read split): read with pyarrow, map and check
   with the arrow reader's mapping (`map_batch`), and sort every `chunk_rows` rows by the range
   key (topic, partition, o0.., pos) into a sorted run: an Arrow IPC file in the task attempt's
   staging dir (`exchange-<split>`). A task returns its runs and every k-th key of each (each
   sampled key stands for the rows since the previous one), never its rows.
2. The driver picks the write tasks' bounds as quantiles of those keys weighted by the rows
   they stand for (`pick_bounds`): tasks balanced by rows, a hot partition spread over several
   tasks, and no sampling or counting job.
3. Stage 2 (one Spark task per range): task j memory-maps every run, takes the rows with
   bound[j-1] < key <= bound[j] (a binary search of each sorted run), sorts them and hands them
   to `write_task` with the `OnePassPlan`: the function the Spark range mode calls, so offsets,
   batches, segments, manifests, placement and relayout are those of the Spark range mode.

The order is Spark's ascending sort: nulls first, NaN greatest, -0.0 equal to 0.0, strings and
binaries by their bytes; `pos` (the source row id, split << 33 | row, as `mapping_input` gives
it) breaks ties as in the Spark range mode when the splits match. Ordering columns of other
types (nested, intervals, ...) keep the Spark range mode (`plan_arrow_range` says why).

Crash safety: the runs are the run's staging (`task_staging_dir`), never fsynced: a killed run
re-runs both stages under the same run id (each attempt writes a fresh directory and only the
runs the driver collected are read). The driver removes them once the writes are done; the
publish, or the next run's stale-staging cleanup, removes what a killed run left. Until then
they take about the records' size (uncompressed) on the output root's file system.
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.ingestion.arrow_mapping import checked, map_batch
from jobs.ingestion.arrow_reader import (
    BATCH_ROWS,
    ArrowReadPlan,
    column_types,
    ordered_inputs,
)
from jobs.ingestion.commit import staging_root, task_staging_dir
from jobs.ingestion.config import IngestConfig
from jobs.ingestion.mapping import ORDER_COLUMN
from jobs.ingestion.planner import OnePassPlan
from jobs.ingestion.source_fs import install
from jobs.ingestion.writer import WriterSettings, write_task

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.ingestion.commit import TaskManifest

__all__ = [
    "ArrowRangePlan",
    "Run",
    "SortedRuns",
    "pick_bounds",
    "plan_arrow_range",
    "range_batches",
    "sort_runs",
    "write_range_with_arrow",
]

# Rows per sorted run: a stage-1 task holds about this many mapped rows (and their sort) at once.
CHUNK_ROWS = 1 << 18
# Sampled keys per sorted run: a write task's share is off by about 1 / (this) of a run's rows.
SAMPLES_PER_RUN = 256
EXCHANGE_KEY = "exchange"  # stage 1's staging dirs: <run staging>/exchange-<split>/attempt-<id>
RUN_FILE = "run-{:05d}.arrow"
POS = "_kl_pos"
WRITTEN = ("topic", "partition", "key", "value", "timestamp")
HEADERS = "headers"  # written too when the mapping has headers
_PLAIN = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*|`[^`]+`)$")

Key = tuple[Any, ...]  # (topic, partition, (rank, o0), .., pos), ordered as Spark sorts


@dataclass(frozen=True)
class ArrowRangePlan:
    """The arrow reader's plan plus the ordering: what both stages need (small, picklable)."""

    read: ArrowReadPlan
    ordering: tuple[str, ...]  # source column names, ascending
    floating: tuple[bool, ...]  # per ordering column: floating point (NaN sorts greatest)
    chunk_rows: int = CHUNK_ROWS

    @property
    def order_columns(self) -> list[str]:
        return [f"_kl_o{i}" for i in range(len(self.ordering))]


@dataclass(frozen=True)
class Run:
    """A sorted run file, with its first and last keys (a write task skips the runs that end
    before its range or start after it: most of them when the source is already in order)."""

    path: str
    rows: int
    first: Key
    last: Key


@dataclass(frozen=True)
class SortedRuns:
    """What a stage-1 task returns: its runs and (sampled key, rows it stands for)."""

    runs: tuple[Run, ...]
    samples: tuple[tuple[Key, int], ...]


# ---------------------------------------------------------------------------------------------
# Planning (driver, no Spark)


# Ordering column types pyarrow sorts as Spark does (floats with `_sort_order`'s NaN handling).
_SORTED_AS_IN_SPARK = (
    pa.types.is_integer,
    pa.types.is_float32,
    pa.types.is_float64,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_boolean,
    pa.types.is_date32,
    pa.types.is_decimal,
)


def _sortable(dtype: pa.DataType) -> bool:
    if pa.types.is_timestamp(dtype):
        return dtype.unit != "ns"  # Spark reads no nanoseconds
    return any(is_type(dtype) for is_type in _SORTED_AS_IN_SPARK)


def plan_arrow_range(
    read: ArrowReadPlan,
    config: IngestConfig,
    files: Sequence[str],
    partition_columns: Sequence[str] = (),
) -> tuple[ArrowRangePlan | None, str]:
    """The range mode's plan over the arrow reader's `read`, or (None, why not): every ordering
    entry must be a plain column of a type pyarrow sorts as Spark does."""
    names = []
    for i, expr in enumerate(config.ordering):
        if not _PLAIN.match(expr.strip()):
            return None, f"ordering[{i}]={expr!r} is not a plain column"
        names.append(expr.strip().strip("`"))
    shadowed = sorted(set(names) & set(partition_columns))
    if shadowed:
        return None, f"the ordering reads Delta partition column(s) {shadowed}"
    types, why = column_types(files, sorted(set(names))) if names else ({}, "")
    if types is None:
        return None, why
    for name in names:
        if not _sortable(types[name]):
            return None, f"ordering column {name!r} is {types[name]}, not sorted here as in Spark"
    floating = tuple(pa.types.is_floating(types[n]) for n in names)
    return ArrowRangePlan(read, tuple(names), floating), ""


# ---------------------------------------------------------------------------------------------
# The order: pyarrow's sort and Python's comparison of keys agree, and follow Spark's


def _sort_order(table: pa.Table, plan: ArrowRangePlan) -> pa.Array:
    """The indices that sort `table` (a run's columns) by (topic, partition, o0.., pos) as Spark
    sorts ascending: nulls first, NaN greatest (pyarrow places NaN with the nulls, so a float
    column sorts on its validity first, then on its values with NaN and nulls at the end)."""
    columns = {"topic": table.column("topic"), "partition": table.column("partition")}
    keys = [("topic", "ascending", "at_start"), ("partition", "ascending", "at_start")]
    for name, floating in zip(plan.order_columns, plan.floating, strict=True):
        column = table.column(name)
        if floating:
            columns[f"{name}_valid"] = pc.is_valid(column)
            keys.append((f"{name}_valid", "ascending", "at_start"))
        columns[name] = column
        keys.append((name, "ascending", "at_end" if floating else "at_start"))
    columns[POS] = table.column(POS)
    keys.append((POS, "ascending", "at_start"))
    return pc.sort_indices(pa.table(columns), sort_keys=keys)


def _comparable(value: Any, floating: bool) -> tuple:
    """An ordering value as Python compares it like Spark: null < values < NaN (and -0.0 ==
    0.0, strings by code point = UTF-8 byte order, bytes unsigned)."""
    if value is None:
        return (0,)
    if floating and math.isnan(value):
        return (2,)
    return (1, value)


def _values(column: pa.ChunkedArray) -> list:
    """Python values that compare as the column sorts: times as their integers (no datetime
    objects, which also could not hold every year a timestamp can)."""
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.int64())
    elif pa.types.is_date32(column.type):
        column = column.cast(pa.int32())
    return column.to_pylist()


def _keys(table: pa.Table, rows: np.ndarray, plan: ArrowRangePlan) -> list[Key]:
    """The keys of `rows` of a run (few: samples and binary-search probes)."""
    index = pa.array(rows, pa.int64())
    picked = [table.column(n).take(index).to_pylist() for n in ("topic", "partition")]
    orders = [
        [_comparable(v, f) for v in _values(table.column(n).take(index))]
        for n, f in zip(plan.order_columns, plan.floating, strict=True)
    ]
    pos = table.column(POS).take(index).to_pylist()
    return [tuple(k) for k in zip(*picked, *orders, pos, strict=True)]


def _count_at_most(table: pa.Table, bound: Key, plan: ArrowRangePlan) -> int:
    """How many rows of a sorted run have a key <= `bound` (binary search)."""
    lo, hi = 0, table.num_rows
    while lo < hi:
        mid = (lo + hi) // 2
        if _keys(table, np.array([mid]), plan)[0] <= bound:
            lo = mid + 1
        else:
            hi = mid
    return lo


# ---------------------------------------------------------------------------------------------
# Stage 1: sorted runs (task side, no Spark)


def _run_columns(mapped: pa.RecordBatch, plan: ArrowRangePlan) -> pa.RecordBatch:
    """A mapped batch as a run holds it: the written columns, the ordering values, pos."""
    order = mapped.column(ORDER_COLUMN)
    fields = [order.field(i) for i in range(len(plan.ordering))]
    written = _written(mapped.schema)
    return pa.RecordBatch.from_arrays(
        [*(mapped.column(n) for n in written), *fields, order.field("pos")],
        names=[*written, *plan.order_columns, POS],
    )


def _written(schema: pa.Schema) -> list[str]:
    """The record columns a run holds: `WRITTEN`, and the headers when they are mapped."""
    return [*WRITTEN, HEADERS] if HEADERS in schema.names else list(WRITTEN)


def _write_run(rows: pa.Table, path: Path, plan: ArrowRangePlan) -> tuple[Run, list]:
    """Sort `rows` into an Arrow IPC file; (the run, [(sampled key, rows it stands for)])."""
    ordered = rows.take(_sort_order(rows, plan))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, ordered.schema) as writer:
        writer.write_table(ordered, max_chunksize=BATCH_ROWS)
    n = ordered.num_rows
    step = max(1, -(-n // SAMPLES_PER_RUN))
    picks = np.arange(step - 1, n, step, dtype=np.int64)
    if picks.size == 0 or picks[-1] != n - 1:
        picks = np.append(picks, n - 1)
    weights = np.diff(picks, prepend=-1).tolist()
    keys = _keys(ordered, picks, plan)
    first = _keys(ordered, np.array([0]), plan)[0]
    return Run(str(path), n, first, keys[-1]), list(zip(keys, weights, strict=True))


def sort_runs(plan: ArrowRangePlan, split: int, directory: Path) -> SortedRuns:
    """Stage 1 for one read split: its records mapped, checked and written in sorted runs of
    `plan.chunk_rows` rows to `directory` (so a task holds one run's rows at a time, whatever
    the split's size)."""
    read = plan.read
    cache: dict[str, Any] = {}
    runs: list[Run] = []
    samples: list[tuple[Key, int]] = []
    pending: list[pa.RecordBatch] = []
    held = 0

    def flush(rows: pa.Table) -> None:
        run, sampled = _write_run(rows, directory / RUN_FILE.format(len(runs)), plan)
        runs.append(run)
        samples.extend(sampled)

    inputs = ordered_inputs(read.tasks[split], split, read.columns, plan.ordering)
    for batch in inputs:
        pending.append(_run_columns(checked(map_batch(batch, read.rules, cache)), plan))
        held += batch.num_rows
        while held >= plan.chunk_rows:
            table = pa.Table.from_batches(pending)
            flush(table.slice(0, plan.chunk_rows))
            rest = table.slice(plan.chunk_rows)
            pending, held = rest.to_batches(), rest.num_rows
    if held:
        flush(pa.Table.from_batches(pending))
    return SortedRuns(tuple(runs), tuple(samples))


# ---------------------------------------------------------------------------------------------
# The bounds (driver)


def pick_bounds(samples: Sequence[tuple[Key, int]], tasks: int) -> list[Key]:
    """The upper bound keys of write tasks 0..: weighted quantiles of the sampled keys, so each
    task gets about 1/tasks of the rows; no repeats (fewer tasks when the samples are few)."""
    ordered = sorted(samples, key=lambda s: s[0])
    total = sum(w for _, w in ordered)
    bounds: list[Key] = []
    seen, i = 0, 1
    for key, weight in ordered:
        seen += weight
        while i < tasks and seen * tasks >= i * total:
            if not bounds or bounds[-1] != key:
                bounds.append(key)
            i += 1
    if bounds and ordered and bounds[-1] == ordered[-1][0]:
        bounds.pop()  # nothing above the greatest key: no empty last task
    return bounds


# ---------------------------------------------------------------------------------------------
# Stage 2: a range's rows from every run (task side, no Spark)


def _open_run(path: str) -> pa.Table:
    """A run file, memory-mapped (the rows are read only where they are sliced)."""
    return pa.ipc.open_file(pa.memory_map(path)).read_all()


def range_batches(
    runs: Sequence[Run], lower: Key | None, upper: Key | None, plan: ArrowRangePlan
) -> Iterator[pa.RecordBatch]:
    """The written columns of the rows with lower < key <= upper (None: unbounded) from every
    run, sorted, in batches of `BATCH_ROWS`."""
    pieces = []
    for run in runs:
        if (lower is not None and run.last <= lower) or (upper is not None and run.first > upper):
            continue  # nothing of this run in the range
        table = _open_run(run.path)
        lo = 0 if lower is None else _count_at_most(table, lower, plan)
        hi = run.rows if upper is None else _count_at_most(table, upper, plan)
        if hi > lo:
            pieces.append(table.slice(lo, hi - lo))
    if not pieces:
        return
    combined = pa.concat_tables(pieces)
    records = combined.select(_written(combined.schema))
    if len(pieces) == 1:  # a run is sorted already
        yield from records.to_batches(max_chunksize=BATCH_ROWS)
        return
    order = _sort_order(combined, plan)
    for start in range(0, len(order), BATCH_ROWS):
        part = records.take(order.slice(start, BATCH_ROWS)).combine_chunks()
        yield from part.to_batches()


# ---------------------------------------------------------------------------------------------
# The Spark jobs: schedule the tasks, collect small results


def write_range_with_arrow(
    spark: SparkSession,
    plan: ArrowRangePlan,
    tasks: int | None,
    one_pass: OnePassPlan,
    settings: WriterSettings,
) -> list[TaskManifest]:
    """Both stages: sorted runs per read split, bounds on the driver, then one `write_task` per
    range (`tasks` of them, default: the default parallelism or the split count if more)."""
    from jobs.ingestion.commit import TaskManifest

    root, run_id = settings.output_root, settings.run_id
    splits = len(plan.read.tasks)

    def sort_fn(indices):
        from pyspark import TaskContext

        attempt = str(TaskContext.get().taskAttemptId())
        install(plan.read.resolvers)
        for i in indices:
            yield sort_runs(plan, i, task_staging_dir(root, run_id, f"{EXCHANGE_KEY}-{i}", attempt))

    sc = spark.sparkContext
    sorted_runs = sc.parallelize(range(splits), splits).mapPartitions(sort_fn).collect()
    runs = [run for s in sorted_runs for run in s.runs]
    wanted = tasks or max(sc.defaultParallelism, splits)
    bounds = pick_bounds([k for s in sorted_runs for k in s.samples], wanted)

    def write_fn(indices):
        from pyspark import TaskContext

        attempt = str(TaskContext.get().taskAttemptId())
        for j in indices:
            lower = bounds[j - 1] if j > 0 else None
            upper = bounds[j] if j < len(bounds) else None
            batches = range_batches(runs, lower, upper, plan)
            for manifest in write_task(batches, j, attempt, one_pass, settings):
                yield manifest.to_json()

    ranges = len(bounds) + 1
    rows = sc.parallelize(range(ranges), ranges).mapPartitions(write_fn).collect()
    drop_exchange(root, run_id)
    return [TaskManifest.from_json(r) for r in rows]


def drop_exchange(output_root: str, run_id: str) -> None:
    """Remove the run's sorted runs (staging the writes no longer need)."""
    for path in staging_root(output_root, run_id).glob(f"{EXCHANGE_KEY}-*"):
        shutil.rmtree(path, ignore_errors=True)
