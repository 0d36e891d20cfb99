"""The arrow range mode's key order: one sort order for pyarrow's sort, Python's comparison of
keys and numpy's searches, all as Spark sorts (topic, partition, o0.., pos) ascending.

Why a module of its own: stage 1 sorts runs with `sort_order`, the driver compares sampled keys
(`keys_at`, `comparable`), a write task finds where its sub-range bounds fall in every run
with `counts_at_most` (vectorized: the key columns as numpy structured arrays, no per-probe
Python; `count_at_most`, the per-probe binary search, is the reference the tests hold it to)
and merges the runs' slices with `merge_order` (the C loops' `merge_runs` over the key
columns; `sort_order` is its reference, and its path without the C loops).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core import native

Key = tuple[Any, ...]  # (topic, partition, (rank, o0), .., pos), ordered as Spark sorts
POS = "_kl_pos"
PARTITION_END_POS = -1  # the `pos` of a `partition_end` key: below any row's


class KeyOrder(Protocol):
    """What the key order reads of the range mode's plan (`arrow_range.ArrowRangePlan`): the
    ordering columns as the runs name them, and which of them are floating point."""

    floating: tuple[bool, ...]

    @property
    def order_columns(self) -> list[str]: ...


# The order: pyarrow's sort and Python's comparison of keys agree, and follow Spark's


def sort_order(table: pa.Table, plan: KeyOrder) -> pa.Array:
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
    # the key columns in one chunk each (a copy of the small columns only): pyarrow sorts a
    # table of many chunks (a stage-1 run is many mapped batches) chunk by chunk and merges
    # them, ~1.6x the time of one sort of the combined keys
    combined = pa.table(columns).combine_chunks()
    if _one_value(combined.column("topic")):  # one topic, as usual: ~30% less time
        keys.pop(0)
    return pc.sort_indices(combined, sort_keys=keys)


def _one_value(column: pa.ChunkedArray) -> bool:
    """Whether every row of a one-chunk column holds the same value (null included)."""
    return column.num_chunks == 1 and len(pc.run_end_encode(column.chunk(0)).run_ends) == 1


def comparable(value: Any, floating: bool) -> tuple:
    """An ordering value as Python compares it like Spark: null < values < NaN (and -0.0 ==
    0.0, strings by code point = UTF-8 byte order, bytes unsigned)."""
    if value is None:
        return (0,)
    if floating and math.isnan(value):
        return (2,)
    return (1, value)


def partition_end(key: Key) -> Key:
    """The key just after every row of `key`'s (topic, partition) and before the next
    partition's: that partition + 1, every ordering value null (they sort first) and a `pos`
    no row has (rows' are >= 0). A write task bounded by it splits no partition."""
    return (key[0], key[1] + 1, *[comparable(None, False)] * (len(key) - 3), PARTITION_END_POS)


def is_partition_end(key: Key | None) -> bool:
    """Whether `key` is a `partition_end` bound (the tasks above it start their partitions)."""
    return key is not None and key[-1] == PARTITION_END_POS


def _values(column: pa.ChunkedArray) -> list:
    """Python values that compare as the column sorts: times as their integers (no datetime
    objects, which also could not hold every year a timestamp can)."""
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.int64())
    elif pa.types.is_date32(column.type):
        column = column.cast(pa.int32())
    return column.to_pylist()


def keys_at(table: pa.Table, rows: np.ndarray, plan: KeyOrder) -> list[Key]:
    """The keys of `rows` of a run (few: samples and binary-search probes)."""
    index = pa.array(rows, pa.int64())
    picked = [table.column(n).take(index).to_pylist() for n in ("topic", "partition")]
    orders = [
        [comparable(v, f) for v in _values(table.column(n).take(index))]
        for n, f in zip(plan.order_columns, plan.floating, strict=True)
    ]
    pos = table.column(POS).take(index).to_pylist()
    return [tuple(k) for k in zip(*picked, *orders, pos, strict=True)]


def count_at_most(table: pa.Table, bound: Key, plan: KeyOrder) -> int:
    """How many rows of a sorted run have a key <= `bound` (a binary search probing one row at
    a time: the reference `counts_at_most` is checked against)."""
    lo, hi = 0, table.num_rows
    while lo < hi:
        mid = (lo + hi) // 2
        if keys_at(table, np.array([mid]), plan)[0] <= bound:
            lo = mid + 1
        else:
            hi = mid
    return lo


# Ordering types whose values numpy orders as Spark does (as integers: dates, timestamps, bools);
# the others (strings, binaries, decimals) are searched by their ranks among the values.
_NUMPY_ORDERED = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_boolean,
    pa.types.is_date32,
    pa.types.is_timestamp,
)


def _ranks(column: pa.ChunkedArray, values: list) -> tuple[np.ndarray, np.ndarray]:
    """`column` and `values` (None: no value) as their ranks among the distinct values of both,
    in pyarrow's order (strings and binaries by their bytes, as Python compares str and bytes);
    nulls rank -1."""
    probe = pa.array(values, column.type)
    distinct = pc.unique(pa.chunked_array([*column.chunks, probe], column.type)).drop_null()
    ordered = distinct.take(pc.sort_indices(distinct))
    ranks = [pc.index_in(c, value_set=ordered).fill_null(-1) for c in (column, probe)]
    return ranks[0].to_numpy().astype(np.int64), ranks[1].to_numpy().astype(np.int64)


def _topic_ranks(column: pa.ChunkedArray, topics: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """A run's topic column and `topics` as their ranks among the topics of both: the column is
    sorted, so its few runs of equal topics are ranked (no hashing or search of every row)."""
    encoded = [pc.run_end_encode(chunk) for chunk in column.chunks]
    names = [e.values.to_pylist() for e in encoded]
    rank = {t: i for i, t in enumerate(sorted({*topics, *(t for n in names for t in n)}))}
    ranks = [
        np.repeat([rank[t] for t in n], np.diff(e.run_ends.to_numpy(), prepend=0))
        for e, n in zip(encoded, names, strict=True)
    ]
    return np.concatenate([np.zeros(0, np.int64), *ranks]), np.array([rank[t] for t in topics])


def _valid(column: pa.ChunkedArray) -> np.ndarray:
    """The class of each row as far as nulls go: null 0, value 1 (int8)."""
    return column.is_valid().to_numpy(zero_copy_only=False).astype(np.int8)


def _classes_and_values(column: pa.ChunkedArray, floating: bool) -> tuple[np.ndarray, np.ndarray]:
    """A column of a type numpy orders as Spark does (`_NUMPY_ORDERED`) as two numpy arrays
    that order its rows field by field: the class (null 0, value 1, NaN 2) and the value (0
    unless the class is 1; -0.0 equal to 0.0 as numpy compares floats)."""
    kind = _valid(column)
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.int64())
    elif pa.types.is_date32(column.type):
        column = column.cast(pa.int32())
    elif pa.types.is_boolean(column.type):
        column = column.cast(pa.uint8())
    values = column.fill_null(0).to_numpy()
    if floating:
        nan = np.isnan(values)
        kind[nan] = 2
        values = np.where(nan, 0.0, values)
    return kind, values


def _ordering_fields(
    column: pa.ChunkedArray, bound: list[tuple], floating: bool
) -> list[tuple[np.ndarray, np.ndarray]]:
    """An ordering column and the bounds' `comparable` values of it as numpy fields: the class
    and the value of `_classes_and_values`, or the rank among the values for other types."""
    present = [c[1] if c[0] == 1 else None for c in bound]
    if any(is_type(column.type) for is_type in _NUMPY_ORDERED):
        kind, values = _classes_and_values(column, floating)
        probe = np.array([0 if v is None else v for v in present], values.dtype)
    else:
        kind = _valid(column)
        values, probe = _ranks(column, present)
    probe_kind = np.array([c[0] for c in bound], np.int8)
    return [(kind, probe_kind), (values, probe)]


def _key_arrays(table: pa.Table, bounds: Sequence[Key], plan: KeyOrder) -> tuple:
    """The keys of `table`'s rows and `bounds` as numpy structured arrays whose field-by-field
    order is the keys' order (the topic as its rank, ordering values as `_ordering_fields`)."""
    topics = _topic_ranks(table.column("topic"), [b[0] for b in bounds])
    partition = table.column("partition").to_numpy()
    fields = [topics, (partition, np.array([b[1] for b in bounds], partition.dtype))]
    for i, (name, floating) in enumerate(zip(plan.order_columns, plan.floating, strict=True)):
        fields += _ordering_fields(table.column(name), [b[2 + i] for b in bounds], floating)
    fields.append((table.column(POS).to_numpy(), np.array([b[-1] for b in bounds], np.int64)))
    dtype = np.dtype([(f"f{i}", run.dtype) for i, (run, _) in enumerate(fields)])
    keys = np.empty(table.num_rows, dtype)
    probes = np.empty(len(bounds), dtype)
    for i, (run, probe) in enumerate(fields):
        keys[f"f{i}"] = run
        probes[f"f{i}"] = probe
    return keys, probes


def _rows_of(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """`rows` (ascending) of `table`, taken batch by batch: a take over a column of many chunks
    would first concatenate its chunks, i.e. read every key of the run."""
    parts, start = [], 0
    for batch in table.to_batches():
        lo, hi = np.searchsorted(rows, [start, start + batch.num_rows])
        if hi > lo:
            parts.append(batch.take(pa.array(rows[lo:hi] - start)))
        start += batch.num_rows
    return pa.Table.from_batches(parts, table.schema)


def counts_at_most(table: pa.Table, bounds: Sequence[Key], plan: KeyOrder) -> np.ndarray:
    """How many rows of a sorted run have a key <= each of `bounds`: two vectorized searches
    (`np.searchsorted` over `_key_arrays`) instead of a Python probe per binary-search step.
    Every `stride`-th key puts each bound in a block of `stride` rows, the blocks' keys place
    it: about 2 sqrt(rows) keys read per bound, not the run's every key (each write task
    searches every run that overlaps it)."""
    n = table.num_rows
    stride = max(1, math.isqrt(n))
    keys, probes = _key_arrays(_rows_of(table, np.arange(stride - 1, n, stride)), bounds, plan)
    blocks = np.searchsorted(keys, probes, side="right")  # rows >= stride * block are > bound
    if stride == 1 or not len(blocks):
        return blocks
    wanted = np.unique(blocks)
    starts = wanted * stride
    stops = np.minimum(n, starts + stride - 1)  # the row after a block's is a sampled one
    offsets = np.concatenate([[0], np.cumsum(stops - starts)])
    rows = np.concatenate([np.arange(a, b) for a, b in zip(starts, stops, strict=True)])
    keys, probes = _key_arrays(_rows_of(table, rows), bounds, plan)
    counts = blocks * stride
    for i, w in enumerate(np.searchsorted(wanted, blocks).tolist()):
        block = keys[offsets[w] : offsets[w + 1]]
        counts[i] += np.searchsorted(block, probes[i], side="right")
    return counts


# The merge: a write task's slices of sorted runs in `sort_order`'s order, without a sort


def merge_order(table: pa.Table, lengths: Sequence[int], plan: KeyOrder) -> pa.Array:
    """The indices that sort `table` as `sort_order` does, when `table` is runs of `lengths`
    rows one after the other, each sorted by `sort_order` already: a k-way merge in C
    (`merge_runs`, about log2(runs) key comparisons per row) over the key as `_merge_key`
    gives it; without the C loops, `sort_order` itself (a sort of every row)."""
    if native.module is None:
        return sort_order(table, plan)
    kinds, columns = _merge_key(table, plan)
    starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    order = np.empty(table.num_rows, np.int64)
    native.module.merge_runs(order, starts, kinds, tuple(columns))
    return pa.array(order)


def _merge_key(table: pa.Table, plan: KeyOrder) -> tuple[bytes, list]:
    """The key columns as `merge_runs` compares them, in `sort_order`'s order: the topic as
    its rank, the partition, each ordering column (a class column first when it has nulls or
    NaN: null 0, value 1, NaN 2), pos. Strings and binaries stay Arrow's buffers (compared by
    their bytes, nulls first), decimals their 128-bit integers; other types their ranks."""
    kinds, columns = [b"q", b"q"], [_topic_ranks(table.column("topic"), [])[0]]
    columns.append(table.column("partition").to_numpy().astype(np.int64))
    for name, floating in zip(plan.order_columns, plan.floating, strict=True):
        column = table.column(name)
        dtype = column.type
        if any(is_type(dtype) for is_type in _NUMPY_ORDERED):
            kind, values = _classes_and_values(column, floating)
            if (kind != 1).any():
                kinds.append(b"b")
                columns.append(kind)
            code = b"d" if floating else b"Q" if values.dtype.kind in "ub" else b"q"
            kinds.append(code)
            columns.append(values.astype({b"d": np.float64, b"Q": np.uint64}.get(code, np.int64)))
        elif pa.types.is_string(dtype) or pa.types.is_binary(dtype):
            kinds.append(b"s")
            columns.append(native.column(column.combine_chunks().cast(pa.binary())))
        elif pa.types.is_large_string(dtype) or pa.types.is_large_binary(dtype):
            kinds.append(b"s")
            columns.append(native.column(column.combine_chunks().cast(pa.large_binary())))
        elif pa.types.is_decimal128(dtype):
            kinds += [b"b", b"q", b"Q"]
            valid = _valid(column)
            columns += [valid, *_decimal_halves(column, valid)]
        else:
            kinds.append(b"q")
            columns.append(_ranks(column, [])[0])  # nulls rank -1: first
    kinds.append(b"q")
    columns.append(table.column(POS).to_numpy().astype(np.int64))
    return b"".join(kinds), columns


def _decimal_halves(column: pa.ChunkedArray, valid: np.ndarray) -> list[np.ndarray]:
    """A decimal128 column's values as (high int64, low uint64), whose order is the numbers'
    (one scale throughout the column); 0 where `valid` (`_valid`) says null, so nulls tie."""
    array = column.combine_chunks()
    start = 2 * array.offset
    words = np.frombuffer(array.buffers()[1], np.uint64)[start : start + 2 * len(array)]
    null = valid == 0
    return [np.where(null, 0, words[1::2].view(np.int64)), np.where(null, 0, words[0::2])]
