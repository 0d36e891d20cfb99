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
   tasks, and no sampling or counting job. A quantile near a partition's end moves there
   (`range_cuts`), so the next task starts its partitions in place and the relayout has no
   share of them to encode. Finer quantiles split each task's range into sub-ranges of about
   `chunk_rows` rows (`pick_ranges`).
3. Stage 2 (one Spark task per range): task j finds where its range's and sub-ranges' bounds
   fall in each overlapping run (one vectorized search per run, `counts_at_most`), then for
   one sub-range after another memory-maps the runs and takes their slices, merges them (each
   slice is sorted: a k-way merge in C, `merge_order`, not a second sort), takes the records
   in that order and hands them to `write_task` with the `OnePassPlan`: the function the Spark
   range mode calls, so offsets, batches, segments, manifests, placement and relayout are
   those of the Spark range mode. A task holds about `chunk_rows` rows at a time, whatever
   the data's size.

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

import bisect
import mmap
import re
import shutil
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.mapping.arrow_mapping import checked, map_batch
from jobs.ingestion.mapping.rules import ORDER_COLUMN
from jobs.ingestion.ranges.cuts import partition_ends, task_cuts
from jobs.ingestion.source.arrow_reader import (
    BATCH_ROWS,
    ArrowReadPlan,
    column_types,
    ordered_inputs,
)
from jobs.ingestion.source.fs import install
from jobs.ingestion.staging.task_staging import staging_root, task_staging_dir
from jobs.ingestion.tasks.arrow_range_keys import (
    POS,
    Key,
    counts_at_most,
    is_partition_end,
    keys_at,
    merge_order,
    partition_end,
    sort_order,
)
from jobs.ingestion.tasks.planner import OnePassPlan
from jobs.ingestion.tasks.writer import WriterSettings, write_task
from jobs.spark.tasks import default_parallelism, run_tasks, task_attempt
from kafkalog_core.errors import KafkaLogError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.ingestion.staging.task_staging import TaskManifest

__all__ = [
    "ArrowRangePlan",
    "Run",
    "SortedRuns",
    "WriteRange",
    "pick_bounds",
    "pick_ranges",
    "splits_gain_nothing",
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
WRITTEN = ("topic", "partition", "key", "value", "timestamp")
HEADERS = "headers"  # written too when the mapping has headers
_PLAIN = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*|`[^`]+`)$")


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


# Ordering column types pyarrow sorts as Spark does (floats with `sort_order`'s NaN handling).
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
    pa.types.is_decimal128,  # decimal32/64 (pyarrow keeps them in its own Parquet) do not sort
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
    ordered = rows.take(sort_order(rows, plan))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, ordered.schema) as writer:
        # batch i holds rows [i * BATCH_ROWS, (i + 1) * BATCH_ROWS): `RunFiles` finds a slice's
        # batches by arithmetic, without reading the others
        for start in range(0, ordered.num_rows, BATCH_ROWS):
            writer.write_table(ordered.slice(start, BATCH_ROWS).combine_chunks())
    n = ordered.num_rows
    step = max(1, -(-n // SAMPLES_PER_RUN))
    picks = np.arange(step - 1, n, step, dtype=np.int64)
    if picks.size == 0 or picks[-1] != n - 1:
        picks = np.append(picks, n - 1)
    weights = np.diff(picks, prepend=-1).tolist()
    keys = keys_at(ordered, picks, plan)
    first = keys_at(ordered, np.array([0]), plan)[0]
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


def pick_bounds(
    samples: Sequence[tuple[Key, int]], tasks: int, *, whole_partitions: bool = False
) -> list[Key]:
    """The upper bound keys of write tasks 0..: weighted quantiles of the sampled keys, so each
    task gets about 1/tasks of the rows, or a partition's end near one (`range_cuts.task_cuts`:
    no share of the next task continues this one's, so the relayout has nothing to encode); no
    repeats (fewer tasks when the samples are few). `whole_partitions`: partition ends only."""
    ordered = sorted(samples, key=lambda s: s[0])
    keys = [k for k, _ in ordered]
    ends = partition_ends([k[0] for k in keys], [k[1] for k in keys])
    cuts = task_cuts([w for _, w in ordered], ends, tasks, whole_partitions=whole_partitions)
    if cuts and cuts[-1] == (len(keys) - 1, False):
        cuts.pop()  # nothing above the greatest key: no empty last task
    return [partition_end(keys[i]) if at_end else keys[i] for i, at_end in cuts]


@dataclass(frozen=True)
class WriteRange:
    """A write task's keys, lower < key <= upper (None: unbounded), read in the sub-ranges that
    the keys `inner` (ascending, strictly inside) split it into."""

    lower: Key | None
    upper: Key | None
    inner: tuple[Key, ...]


def pick_ranges(
    samples: Sequence[tuple[Key, int]],
    tasks: int,
    chunk_rows: int,
    *,
    whole_partitions: bool = False,
) -> list[WriteRange]:
    """The write tasks' ranges (`pick_bounds(samples, tasks, whole_partitions=...)`), each split
    at finer bounds into sub-ranges of about `chunk_rows` rows: a task's memory then follows
    `chunk_rows`, not the data's size, and its rows and their order stay those of its whole
    range (so a task of whole partitions needs no more memory than a quantile's)."""
    bounds = pick_bounds(samples, tasks, whole_partitions=whole_partitions)
    total = sum(w for _, w in samples)
    fine = pick_bounds(samples, max(tasks, -(-total // chunk_rows)))
    edges = [None, *bounds, None]
    ranges = []
    for lower, upper in zip(edges, edges[1:], strict=False):
        start = 0 if lower is None else bisect.bisect_right(fine, lower)
        stop = len(fine) if upper is None else bisect.bisect_left(fine, upper)
        ranges.append(WriteRange(lower, upper, tuple(fine[start:stop])))
    return ranges


# ---------------------------------------------------------------------------------------------
# Stage 2: a range's rows from every run (task side, no Spark)


def _cuts(
    run: Run, edges: Sequence[Key | None], plan: ArrowRangePlan, files: RunFiles
) -> list[int]:
    """How many rows of `run` have a key <= each edge (None: 0 as the first edge, every row as
    the last): the run is read only if an edge falls inside it, then searched for all at once
    (only the sampled keys the search reads are paged in)."""
    cuts, inside = [], []
    for i, edge in enumerate(edges):
        if edge is None:
            cuts.append(0 if i == 0 else run.rows)
        elif edge < run.first:
            cuts.append(0)
        elif edge >= run.last:
            cuts.append(run.rows)
        else:
            cuts.append(-1)
            inside.append(i)
    if inside:
        keys = files.table(run.path).select(["topic", "partition", *plan.order_columns, POS])
        found = counts_at_most(keys, [edges[i] for i in inside], plan)  # type: ignore[misc]
        for i, count in zip(inside, found.tolist(), strict=True):
            cuts[i] = count
    return cuts


class RunFiles:
    """A write task's run files, each memory-mapped once (its footer read once) and kept while
    the task searches its edges in them and reads its sub-ranges, at most `limit` at a time
    (least recently used dropped).

    Why: every run holds every partition, so each sub-range reads a slice of nearly every run;
    opening the runs again per sub-range made stage 2 quadratic in the data (runs x sub-ranges:
    ~36,000 opens at 50M rows). Slices are zero-copy views of the map, so only the pages a
    slice touches are read; `release` drops those pages from the process after each sub-range
    (`MADV_DONTNEED` on a read-only file map: they stay in the page cache and fault back in if
    a view is read again), so a task holds about one sub-range's pages, whatever its size."""

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._open: OrderedDict[str, tuple[mmap.mmap, pa.ipc.RecordBatchFileReader]] = OrderedDict()

    def slice(self, path: str, start: int, stop: int) -> pa.Table:
        """Rows [start, stop) of the run at `path` (written by `_write_run`)."""
        reader = self._reader(path)
        first, last = start // BATCH_ROWS, (stop - 1) // BATCH_ROWS
        batches = [reader.get_batch(i) for i in range(first, last + 1)]
        rows = pa.Table.from_batches(batches, reader.schema).slice(
            start - first * BATCH_ROWS, stop - start
        )
        if rows.num_rows != stop - start:
            raise KafkaLogError(
                f"sorted run {path}: rows [{start}, {stop}) not where its batches of "
                f"{BATCH_ROWS} rows put them (a run file from another version?)"
            )
        return rows

    def table(self, path: str) -> pa.Table:
        """The whole run at `path`, as zero-copy views of its map."""
        return self._reader(path).read_all()

    def release(self) -> None:
        """Drop the mapped pages read so far from this process (not from the page cache)."""
        if not hasattr(mmap, "MADV_DONTNEED"):  # not a Unix: the pages go with the maps
            return
        for mapped, _ in self._open.values():
            mapped.madvise(mmap.MADV_DONTNEED)

    def _reader(self, path: str) -> pa.ipc.RecordBatchFileReader:
        if path in self._open:
            self._open.move_to_end(path)
            return self._open[path][1]
        while len(self._open) >= self.limit:
            self._open.popitem(last=False)  # unmapped once no view of it is left
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        reader = pa.ipc.open_file(pa.py_buffer(mapped))
        self._open[path] = (mapped, reader)
        return reader

    def close(self) -> None:
        self.release()
        self._open.clear()


def _merged(
    pieces: Sequence[tuple[str, int, int]], plan: ArrowRangePlan, files: RunFiles
) -> Iterator[pa.RecordBatch]:
    """The written columns of the run slices `pieces` ((path, start, stop)) in key order: the
    slices' merged order (`merge_order`), then their records taken in it."""
    tables = [files.slice(path, start, stop) for path, start, stop in pieces]
    if len(tables) == 1:  # a run is sorted already
        only = tables[0]
        yield from only.select(_written(only.schema)).to_batches(max_chunksize=BATCH_ROWS)
        return
    if not tables:
        return
    combined = pa.concat_tables(tables)
    order = merge_order(combined, [t.num_rows for t in tables], plan)
    # One copy of the records: a take from a table of many chunks would concatenate its
    # binary chunks again for every batch taken.
    records = combined.select(_written(combined.schema)).combine_chunks()
    del tables, combined  # the runs' pages: only the copy is held from here on
    for start in range(0, len(order), BATCH_ROWS):
        yield from records.take(order.slice(start, BATCH_ROWS)).to_batches()


def range_batches(
    runs: Sequence[Run],
    lower: Key | None,
    upper: Key | None,
    plan: ArrowRangePlan,
    inner: Sequence[Key] = (),
) -> Iterator[pa.RecordBatch]:
    """The written columns of the rows with lower < key <= upper (None: unbounded) from every
    run, sorted, in batches of at most `BATCH_ROWS`: one sub-range (split at `inner`, ascending
    keys inside the range) at a time, so a task holds about one sub-range's rows whatever the
    size of its range."""
    edges = [lower, *inner, upper]
    files = RunFiles()  # each run mapped once for the task: its search and its slices
    try:
        cuts = [
            (run.path, _cuts(run, edges, plan, files))
            for run in runs
            if (lower is None or run.last > lower) and (upper is None or run.first <= upper)
        ]
        for i in range(len(edges) - 1):
            files.release()  # the last sub-range's pages: its rows were handed on
            pieces = [(p, c[i], c[i + 1]) for p, c in cuts if c[i + 1] > c[i]]
            yield from _merged(pieces, plan, files)
    finally:
        files.close()


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
    from jobs.ingestion.staging.task_staging import TaskManifest

    root, run_id = settings.output_root, settings.run_id
    splits = len(plan.read.tasks)

    def sort_fn(i: int):
        install(plan.read.resolvers)
        yield sort_runs(
            plan, i, task_staging_dir(root, run_id, f"{EXCHANGE_KEY}-{i}", task_attempt())
        )

    sorted_runs = run_tasks(spark, splits, sort_fn)
    runs = [run for s in sorted_runs for run in s.runs]
    cores = default_parallelism(spark)
    wanted = tasks or max(cores, splits)
    samples = [k for s in sorted_runs for k in s.samples]
    whole = tasks is None and splits_gain_nothing(samples, cores)
    ranges = pick_ranges(samples, wanted, plan.chunk_rows, whole_partitions=whole)
    starts = frozenset(j for j, r in enumerate(ranges) if is_partition_end(r.lower))
    one_pass = replace(one_pass, partition_starts=starts)

    def write_fn(j: int):
        r = ranges[j]
        batches = range_batches(runs, r.lower, r.upper, plan, r.inner)
        for manifest in write_task(batches, j, task_attempt(), one_pass, settings):
            yield manifest.to_json()

    rows = run_tasks(spark, len(ranges), write_fn)
    drop_exchange(root, run_id)
    return [TaskManifest.from_json(r) for r in rows]


def splits_gain_nothing(samples: Sequence[tuple[Key, int]], cores: int) -> bool:
    """Whether the write tasks should hold whole partitions: when the sampled keys span at least
    as many partitions as `cores`. A partition split over tasks is encoded by the relayout in
    one task after the write stage (its later shares are staged as rows), so splitting it buys
    no encode parallelism, only a staged copy of those rows; it pays only while there are fewer
    partitions than cores to keep busy with the sorting and merging. Memory is no reason to
    split: a write task reads its range in sub-ranges of `chunk_rows`."""
    return len({(k[0], k[1]) for k, _ in samples}) >= max(1, cores)


def drop_exchange(output_root: str, run_id: str) -> None:
    """Remove the run's sorted runs (staging the writes no longer need)."""
    for path in staging_root(output_root, run_id).glob(f"{EXCHANGE_KEY}-*"):
        shutil.rmtree(path, ignore_errors=True)
