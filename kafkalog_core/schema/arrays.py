"""What both value encoders (Avro, JSON) need of Arrow arrays: plain arrays, a level's raw
buffers, numpy views of validity and offsets, binary arrays built from numpy, element-wise joins,
and where a nested value lies (which top-level row holds it, and whether it is reached at all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core.record.encoder.varints import varint_fields_binary, varint_size_array

__all__ = [
    "Level",
    "fixed_binary",
    "join",
    "null_rows",
    "offsets_of",
    "plain_array",
    "raw_values",
    "top_rows",
    "valid_mask",
    "varints",
]

EMPTY = pa.scalar(b"", pa.large_binary())


def plain_array(values: pa.Array | pa.ChunkedArray, plain: pa.DataType) -> pa.Array:
    """One contiguous array of the encoders' plain type."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return values if values.type == plain else values.cast(plain)


def null_rows(values: pa.Array | pa.ChunkedArray, rows: list[int]) -> pa.Array:
    """`values` with the given top-level rows null: rows left out of an encoding, so nothing
    under them is read."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    mask = np.zeros(len(values), dtype=bool)
    mask[rows] = True
    return pc.if_else(pa.array(mask), pa.scalar(None, values.type), values)


@dataclass
class Level:
    """One array of a value's type as the encoders walk it: `parent` and how it indexes this
    array (`items`: a list/map's entries, by offsets; else the same index as the parent)."""

    array: pa.Array
    parent: Level | None = None
    items: bool = False
    children: list[Level] = field(default_factory=list)


def valid_mask(array: pa.Array) -> np.ndarray:
    """Row i valid (index i of the array, not of its buffers)."""
    if array.null_count == 0:
        return np.ones(len(array), dtype=bool)
    if pa.types.is_null(array.type):
        return np.zeros(len(array), dtype=bool)
    return np.asarray(array.is_valid())


def offsets_of(array: pa.Array) -> np.ndarray:
    """A list/map/binary array's n + 1 offsets as int64 (into its raw values or data)."""
    wide = (
        pa.types.is_large_list(array.type)
        or pa.types.is_large_binary(array.type)
        or pa.types.is_large_string(array.type)
    )
    raw = np.frombuffer(array.buffers()[1], dtype=np.int64 if wide else np.int32)
    return raw[array.offset : array.offset + len(array) + 1].astype(np.int64, copy=False)


def raw_values(array: pa.Array, dtype: Any) -> np.ndarray:
    """A fixed-width array's values buffer as numpy, indexed like its buffers (offset + i)."""
    n = array.offset + len(array)
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=n)


def top_rows(level: Level, indices: np.ndarray) -> np.ndarray:
    """The top-level row of each of `indices` of `level`, or -1 where no valid row reaches it
    (under a null struct or list, or outside every list's range)."""
    rows = indices.astype(np.int64, copy=True)
    reached = np.ones(rows.shape, dtype=bool)
    at = level
    while at.parent is not None:
        parent = at.parent
        if at.items:
            offsets = offsets_of(parent.array)
            owner = np.searchsorted(offsets, rows, side="right") - 1
            reached &= (rows >= offsets[0]) & (rows < offsets[-1])
            rows = np.clip(owner, 0, max(len(parent.array) - 1, 0))
        valid = valid_mask(parent.array)
        reached &= valid[rows] if len(valid) else False
        at = parent
    return np.where(reached, rows, -1)


def varints(values: np.ndarray) -> pa.Array:
    """Each int64 value's zig-zag varint as a large_binary array."""
    values = np.asarray(values, dtype=np.int64)
    return varint_fields_binary([(values, varint_size_array(values))], len(values))


def fixed_binary(data: np.ndarray, n: int, width: int) -> pa.Array:
    """n values of `width` bytes each, back to back in `data`, as a large_binary array."""
    offsets = np.arange(n + 1, dtype=np.int64) * width
    return pa.Array.from_buffers(
        pa.large_binary(),
        n,
        [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))],
    )


def constant(value: bytes, n: int) -> pa.Array:
    """`value` in each of n rows."""
    return fixed_binary(np.tile(np.frombuffer(value, dtype=np.uint8), n), n, len(value))


def join(parts: list[pa.Array], n: int) -> pa.Array:
    """Row i of each part, concatenated (parts are large_binary without nulls)."""
    if not parts:
        return constant(b"", n)
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, EMPTY)


def spans(data: pa.Array, item_offsets: np.ndarray) -> pa.Array:
    """Row i = data's rows item_offsets[i]..item_offsets[i + 1] back to back (a list's items,
    encoded one per row of `data`, a large_binary array), zero-copy."""
    bounds = offsets_of(data)[item_offsets]
    n = len(item_offsets) - 1
    return pa.Array.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(np.ascontiguousarray(bounds)), data.buffers()[2]]
    )
