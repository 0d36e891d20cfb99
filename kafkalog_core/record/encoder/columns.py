"""Reading the input columns of `encode_records`: key/value/timestamp as Arrow arrays and numpy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core.errors import InvalidRecordError
from kafkalog_core.record.batch import NO_TIMESTAMP


def record_column(records: Any, name: str) -> pa.Array | None:
    """Column `name` of a Table / RecordBatch / mapping as one Array, or None when absent."""
    if isinstance(records, pa.Table | pa.RecordBatch):
        if name not in records.schema.names:
            return None
        column = records.column(name)
    elif isinstance(records, Mapping):
        if name not in records:
            return None
        column = records[name]
    else:
        raise TypeError(
            f"records must be a pyarrow Table/RecordBatch or a mapping, not {type(records)!r}"
        )
    if isinstance(column, pa.ChunkedArray):
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if not isinstance(column, pa.Array):
        column = pa.array(column)
    return column


def as_binary(column: pa.Array, name: str, *, large: bool = True) -> pa.Array:
    """Key/value/header bytes as large_binary, or with `large=False` as binary or large_binary
    whichever is zero-copy (strings are reinterpreted, not copied)."""
    t = column.type
    if pa.types.is_null(t):
        return pa.nulls(len(column), pa.large_binary())
    if pa.types.is_large_binary(t):
        return column
    if not large:
        if pa.types.is_binary(t):
            return column
        if pa.types.is_string(t):
            return column.view(pa.binary())
        if pa.types.is_large_string(t):
            return column.view(pa.large_binary())
    if (
        pa.types.is_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_string_view(t)
    ):
        return column.cast(pa.large_binary())
    raise InvalidRecordError(f"column {name!r} has type {t}; expected binary or string")


def binary_lengths(column: pa.Array) -> np.ndarray:
    """Byte length of each element, -1 for null (the varint Kafka writes for a null)."""
    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        return (
            pc.binary_length(column).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        )
    offsets = binary_offsets(column)
    lengths = np.subtract(offsets[1:], offsets[:-1], dtype=np.int64)
    if column.null_count:
        lengths[column.is_null().to_numpy(zero_copy_only=False)] = -1
    return lengths


_TIMESTAMP_MS_DIVISOR = {"s": None, "ms": 1, "us": 1000, "ns": 1000000}


def timestamps_ms(column: pa.Array | None, n: int) -> np.ndarray:
    """Timestamps in ms as int64; missing column or null = -1 (NO_TIMESTAMP)."""
    if column is None:
        return np.full(n, NO_TIMESTAMP, dtype=np.int64)
    t = column.type
    if pa.types.is_timestamp(t):
        raw = column.cast(pa.int64()).fill_null(NO_TIMESTAMP).to_numpy(zero_copy_only=False)
        nulls = column.is_null().to_numpy(zero_copy_only=False)
        values = raw * 1000 if t.unit == "s" else raw // _TIMESTAMP_MS_DIVISOR[t.unit]
        values = values.astype(np.int64)
        values[nulls] = NO_TIMESTAMP
        return values
    if pa.types.is_integer(t):
        column = column.cast(pa.int64())
        if column.null_count:
            column = column.fill_null(NO_TIMESTAMP)
        return column.to_numpy(zero_copy_only=False)
    raise InvalidRecordError(f"column 'timestamp' has type {t}; expected int64 ms or a timestamp")


def binary_offsets(column: pa.Array) -> np.ndarray:
    """The n+1 offsets of a binary (int32) or large_binary (int64) array, honouring slicing."""
    dtype = np.int64 if pa.types.is_large_binary(column.type) else np.int32
    return np.frombuffer(column.buffers()[1], dtype=dtype)[
        column.offset : column.offset + len(column) + 1
    ]


def as_large_binary(column: pa.Array) -> pa.Array:
    return column if pa.types.is_large_binary(column.type) else column.cast(pa.large_binary())


def data_bytes(joined: pa.Array) -> np.ndarray:
    """The data of a large_binary array as a uint8 numpy array (writable when Arrow allows)."""
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64)
    first = int(offsets[joined.offset])
    last = int(offsets[joined.offset + len(joined)])
    return np.frombuffer(joined.buffers()[2], dtype=np.uint8, count=last - first, offset=first)
