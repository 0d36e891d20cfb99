"""Avro binary values (no framing) of Arrow rows: `encode_avro`, `encode_avro_rows` (the rows
that do not fit the schema left out and listed) and `avro_misfits` (those rows alone).

Both encoders walk one tree of `Slot`s (a bound Avro node, the array it reads, and values made
ready for writing: timestamps in the schema's unit, enum symbols as indexes). With the C module
(`kafkalog_core._native_schema`) each row is written in one pass; without it (or with
KAFKALOG_NATIVE=0) every level is encoded as one Arrow binary column and joined element-wise
(Arrow compute, numpy varints). Both give the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core import native
from kafkalog_core.errors import SchemaError
from kafkalog_core.schema import arrays
from kafkalog_core.schema.arrays import Level
from kafkalog_core.schema.avro_bind import _PER_SECOND, AvroNode, bind_avro, plain_type

__all__ = ["avro_misfits", "encode_avro", "encode_avro_rows"]

# node kinds of _native_schema.c
K_CONST, K_BOOL, K_INT, K_FLOAT, K_BYTES, K_FIXED, K_DECIMAL, K_RECORD, K_ARRAY, K_MAP = range(10)
_INT64_MAX = 2**63 - 1


@dataclass
class Slot:
    node: AvroNode
    level: Level
    ints: np.ndarray | None = None  # int64 values to write, indexed like the buffers
    children: list[Slot] = field(default_factory=list)


# a problem: the slot, the indexes of its array that do not fit, why
Problem = tuple[Slot, np.ndarray, str]


def _slots(node: AvroNode, level: Level) -> Slot:
    array = level.array
    slot = Slot(node, level)
    if node.kind == "record":
        for column in node.columns:
            child = array.field(column) if column is not None else pa.nulls(len(array))
            level.children.append(Level(child, level))
    elif node.kind in ("array", "map"):
        entries = array.values
        parts = [entries] if node.kind == "array" else [entries.field(0), entries.field(1)]
        level.children.extend(Level(part, level, items=True) for part in parts)
    slot.children = [_slots(c, lv) for c, lv in zip(node.children, level.children, strict=True)]
    return slot


def _prepare(slot: Slot, problems: list[Problem], top: bool = False) -> None:
    """Values made ready for writing, and the indexes of values that do not fit."""
    node, array = slot.node, slot.level.array
    t = array.type
    nullable = top or node.null_index is not None or node.kind in ("null", "absent")
    if not nullable and array.null_count:
        problems.append(
            (slot, np.flatnonzero(~arrays.valid_mask(array)), "is null and the schema has no null")
        )
    if node.kind in ("int", "long"):
        _prepare_int(slot, problems)
    elif node.kind == "enum":
        index = pc.index_in(array, pa.array(node.symbols, t)).fill_null(-1)
        codes = np.concatenate(
            [np.zeros(array.offset, np.int64), np.asarray(index, dtype=np.int64)]
        )
        bad = (codes[array.offset :] < 0) & arrays.valid_mask(array)
        if bad.any():
            problems.append((slot, np.flatnonzero(bad), "is not a symbol of the enum"))
        slot.ints = codes
    elif node.kind == "fixed" and not node.decimal and not pa.types.is_fixed_size_binary(t):
        lengths = np.diff(arrays.offsets_of(array))
        bad = (lengths != node.size) & arrays.valid_mask(array)
        if bad.any():
            problems.append(
                (slot, np.flatnonzero(bad), f"is not {node.size} bytes long (the fixed's size)")
            )
    elif node.decimal and node.precision < t.precision:
        bound = pa.scalar(Decimal(10**node.precision).scaleb(-node.scale), t)
        bad = np.asarray(pc.fill_null(pc.greater_equal(pc.abs(array), bound), False))
        if bad.any():
            problems.append(
                (
                    slot,
                    np.flatnonzero(bad),
                    f"has more digits than the decimal's precision {node.precision}",
                )
            )
    for child in slot.children:
        _prepare(child, problems)


def _prepare_int(slot: Slot, problems: list[Problem]) -> None:
    node, array = slot.node, slot.level.array
    t = array.type
    if pa.types.is_date(t):
        slot.ints = arrays.raw_values(array, np.int32).astype(np.int64)
        return
    if pa.types.is_timestamp(t) or pa.types.is_time32(t) or pa.types.is_time64(t):
        values = arrays.raw_values(array, np.int32 if pa.types.is_time32(t) else np.int64)
        values = values.astype(np.int64)
        have, want = _PER_SECOND[t.unit], _PER_SECOND[node.unit or t.unit]
        if want > have:
            k = want // have
            bad = (np.abs(values[array.offset :]) > _INT64_MAX // k) & arrays.valid_mask(array)
            if bad.any():
                problems.append(
                    (slot, np.flatnonzero(bad), "does not fit a long in the schema's unit")
                )
            values = values * k
        elif want < have:
            values = np.floor_divide(values, have // want)
        slot.ints = values
        return
    values = arrays.raw_values(array, t.to_pandas_dtype())
    if node.int_range is not None:
        lo, hi = node.int_range
        seen = values[array.offset :]
        bad = seen > np.uint64(hi) if pa.types.is_uint64(t) else (seen < lo) | (seen > hi)
        bad &= arrays.valid_mask(array)
        if bad.any():
            problems.append((slot, np.flatnonzero(bad), f"does not fit an Avro {node.kind}"))
    slot.ints = values.astype(np.int64)


def _misfits(problems: list[Problem]) -> list[tuple[int, str]]:
    first: dict[int, str] = {}
    for slot, indices, why in problems:
        rows = arrays.top_rows(slot.level, indices)
        for index, row in zip(indices.tolist(), rows.tolist(), strict=True):
            if row >= 0 and row not in first:
                path = slot.node.path
                at = f"field {path}" if path else "the value"
                first[row] = f"{at} {why}" + (f" (item {index})" if slot.level.items else "")
    return sorted(first.items())


def _bound(values: pa.Array | pa.ChunkedArray, schema: dict) -> tuple[Slot, list[tuple[int, str]]]:
    plain = plain_type(values.type)
    node = bind_avro(schema, plain)
    top = _slots(node, Level(arrays.plain_array(values, plain)))
    problems: list[Problem] = []
    _prepare(top, problems, top=True)
    return top, _misfits(problems) if problems else []


def avro_misfits(values: pa.Array | pa.ChunkedArray, schema: dict) -> list[tuple[int, str]]:
    """Every top-level row that does not fit `schema` (row index, the first reason), by row."""
    return _bound(values, schema)[1]


def encode_avro(values: pa.Array | pa.ChunkedArray, schema: dict) -> pa.Array:
    """Each row's Avro binary encoding under `schema` (a struct array of columns, or one
    column); a null row gives a null (a tombstone). A binary array (large_binary past 2 GiB).

    A row that does not fit (a null where the schema has none, a value out of range, ...) is a
    SchemaError naming the first such row and the field; `avro_misfits` lists them all.
    """
    top, misfits = _bound(values, schema)
    if misfits:
        raise SchemaError.of_misfits(misfits)
    return _encoded(top)


def encode_avro_rows(
    values: pa.Array | pa.ChunkedArray, schema: dict
) -> tuple[pa.Array, list[tuple[int, str]]]:
    """`encode_avro` that sets aside the rows that do not fit instead of refusing them all:
    (the bytes, with those rows null; each such row and the first reason, naming the field)."""
    top, misfits = _bound(values, schema)
    if misfits:  # bound again with those rows null: nothing under them is read or written
        top, _ = _bound(arrays.null_rows(values, [row for row, _ in misfits]), schema)
    return _encoded(top), misfits


def _encoded(top: Slot) -> pa.Array:
    array = top.level.array
    if native.schema_module is not None:
        return _finish(*_encode_native(top), array)
    return _finish_arrow(_encode_arrow(top), array)


# -- the C path --------------------------------------------------------------------------------


def _native_node(slot: Slot) -> tuple:
    node, array = slot.node, slot.level.array
    t = array.type
    buffers = array.buffers()
    validity = buffers[0] if array.null_count and buffers else None
    null_index = -1 if node.null_index is None else node.null_index
    value_index = -1 if node.value_index is None else node.value_index
    kids = tuple(_native_node(c) for c in slot.children)
    values = offsets = None
    wide = p1 = p2 = 0
    kind = node.kind
    if kind in ("null", "absent"):  # every row null: the union's null branch (if any) for each
        return (K_CONST, None, 0, None, None, 0, -1, -1, 0, 0, _index_bytes(node.null_index), ())
    if kind == "boolean":
        code, values = K_BOOL, buffers[1]
    elif kind in ("int", "long", "enum"):
        code, values, p1 = K_INT, slot.ints, 8
    elif kind in ("float", "double"):
        width = t.byte_width
        code, values = K_FLOAT, buffers[1]
        p1 = 48 if (kind == "double" and width == 4) else width
    elif node.decimal:
        code, values, p1, p2 = K_DECIMAL, buffers[1], t.byte_width, node.size
    elif kind in ("bytes", "string") or kind == "fixed":
        if pa.types.is_fixed_size_binary(t):
            if kind == "fixed":
                code, values, p1 = K_FIXED, buffers[1], t.byte_width
            else:  # bytes from a fixed-size binary: read it as binary
                return _native_node(
                    Slot(
                        node,
                        Level(array.cast(pa.large_binary()), slot.level.parent, slot.level.items),
                    )
                )
        else:
            code = K_BYTES if kind != "fixed" else K_FIXED
            values, offsets = buffers[2] if buffers[2] is not None else b"", buffers[1]
            wide = int(pa.types.is_large_binary(t) or pa.types.is_large_string(t))
            p1 = node.size
    elif kind == "record":
        code = K_RECORD
    elif kind == "array":
        code, offsets = K_ARRAY, buffers[1]
        wide = int(pa.types.is_large_list(t))
    elif kind == "map":
        code, offsets = K_MAP, buffers[1]
    else:  # pragma: no cover - bind_avro admits only the kinds above
        raise SchemaError(f"no Avro writer for {kind}")
    return (
        code,
        validity,
        array.offset,
        values,
        offsets,
        wide,
        null_index,
        value_index,
        p1,
        p2,
        None,
        kids,
    )


def _encode_native(top: Slot) -> tuple[np.ndarray, bytes]:
    n = len(top.level.array)
    offsets = np.empty(n + 1, dtype=np.int64)
    data = native.schema_module.encode_rows(_native_node(top), n, offsets, False)
    return offsets, data


def _finish(offsets: np.ndarray, data: bytes, array: pa.Array) -> pa.Array:
    n = len(array)
    validity = None
    if array.null_count:
        validity = pc.is_valid(array).buffers()[1]
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(
            pa.binary(), n, [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
        )
    return pa.Array.from_buffers(
        pa.large_binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


# -- the Arrow path ----------------------------------------------------------------------------


def _finish_arrow(encoded: pa.Array, array: pa.Array) -> pa.Array:
    if array.null_count:  # a null row is empty, as the C path leaves it
        encoded = pc.if_else(pa.array(arrays.valid_mask(array)), encoded, arrays.EMPTY)
    offsets = arrays.offsets_of(encoded)
    data = encoded.buffers()[2]
    start = int(offsets[0])
    body = b"" if data is None else data[start : int(offsets[-1])]
    return _finish(offsets - start, body, array)


def _encode_arrow(slot: Slot) -> pa.Array:
    """Every value of the slot's array (all len(array) of them, nulls included) encoded."""
    node, array = slot.node, slot.level.array
    n = len(array)
    t = array.type
    kind = node.kind
    if kind in ("null", "absent"):
        body = arrays.constant(b"", n)
    elif kind == "boolean":
        bits = np.asarray(array.fill_null(False)).astype(np.uint8)
        body = arrays.fixed_binary(bits, n, 1)
    elif kind in ("int", "long", "enum"):
        body = arrays.varints(slot.ints[array.offset :])
    elif kind in ("float", "double"):
        raw = arrays.raw_values(array, np.float32 if t.byte_width == 4 else np.float64)[
            array.offset :
        ]
        if kind == "double":
            raw = raw.astype(np.float64)
        body = arrays.fixed_binary(raw.view(np.uint8), n, raw.dtype.itemsize)
    elif node.decimal:
        body = _decimals(array, node.size)
    elif kind in ("bytes", "string", "fixed"):
        plain = array.cast(pa.large_binary()) if not pa.types.is_large_binary(t) else array
        plain = plain.fill_null(b"") if plain.null_count else plain
        if kind == "fixed":
            body = plain
        else:
            body = arrays.join([arrays.varints(np.diff(arrays.offsets_of(plain))), plain], n)
    elif kind == "record":
        body = arrays.join([_encode_arrow(c) for c in slot.children], n)
    else:  # array, map
        offsets = arrays.offsets_of(array)
        parts = [_encode_arrow(c) for c in slot.children]
        entries = arrays.join(parts, len(slot.children[0].level.array))
        counts = np.diff(offsets)
        count = arrays.varints(counts)
        empty = arrays.constant(b"", n)
        count = pc.if_else(pa.array(counts > 0), count, empty)
        body = arrays.join([count, arrays.spans(entries, offsets), arrays.constant(b"\x00", n)], n)
    if node.value_index is None:
        return body
    value = arrays.join([arrays.constant(_index_bytes(node.value_index), n), body], n)
    if not array.null_count or node.null_index is None:
        return value
    null = arrays.constant(_index_bytes(node.null_index), n)
    return pc.if_else(pa.array(arrays.valid_mask(array)), value, null)


def _index_bytes(index: int | None) -> bytes:
    """A union branch index as Avro writes it (a zig-zag varint); nothing for no union."""
    if index is None:
        return b""
    return arrays.varints(np.array([index]))[0].as_py()


def _decimals(array: pa.Array, size: int) -> pa.Array:
    """Unscaled values, two's complement big-endian: fewest bytes (with their length) for
    bytes, sign-extended to `size` for fixed."""
    n = len(array)
    width = array.type.byte_width
    raw = np.frombuffer(array.buffers()[1], dtype=np.uint8, count=(array.offset + n) * width)
    le = raw.reshape(-1, width)[array.offset :]
    be = le[:, ::-1]
    fill = np.where(be[:, 0] >= 0x80, 0xFF, 0x00).astype(np.uint8)
    if size:
        if size >= width:
            out = np.concatenate([np.repeat(fill[:, None], size - width, axis=1), be], axis=1)
        else:
            out = be[:, width - size :]
        return arrays.fixed_binary(np.ascontiguousarray(out).reshape(-1), n, size)
    # drop leading bytes equal to the sign fill while the next byte keeps the sign
    redundant = (be[:, :-1] == fill[:, None]) & ((be[:, 1:] & 0x80) == (fill[:, None] & 0x80))
    keep_from = np.argmin(np.concatenate([redundant, np.zeros((n, 1), bool)], axis=1), axis=1)
    lengths = width - keep_from
    mask = np.arange(width)[None, :] >= keep_from[:, None]
    data = be[mask]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    body = pa.Array.from_buffers(
        pa.large_binary(),
        n,
        [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))],
    )
    return arrays.join([arrays.varints(lengths), body], n)
