"""The Schema Registry's wire format around a value (Confluent's serializers and deserializers):
magic byte 0, the schema id as a 4-byte big-endian int, for Protobuf the message indexes, then
the payload.

The message indexes name the message within the .proto file: a zig-zag varint count, then
each index as a zig-zag varint; the first message (`[0]`) is the single byte 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core.errors import SchemaError
from kafkalog_core.record.varint import decode_varints_at, encode_varint

__all__ = ["ConfluentFrames", "frame_confluent", "message_index_bytes", "read_confluent_frame"]

MAGIC = 0
_HEADER = 5  # magic + schema id


def message_index_bytes(message_indexes: Sequence[int]) -> bytes:
    """The Protobuf message-index list as Confluent writes it."""
    if list(message_indexes) == [0]:
        return b"\x00"
    if any(i < 0 for i in message_indexes):
        raise SchemaError(f"message indexes must be >= 0, not {list(message_indexes)}")
    return encode_varint(len(message_indexes)) + b"".join(encode_varint(i) for i in message_indexes)


def frame_confluent(
    payloads: pa.Array, schema_id: int, message_indexes: Sequence[int] | None = None
) -> pa.Array:
    """Each payload framed for the registry's deserializers; null payloads (tombstones) stay
    null. The result has the payloads' type (binary or large_binary)."""
    if not -(2**31) <= schema_id < 2**31:
        raise SchemaError(f"schema id {schema_id} does not fit the 4-byte id of the framing")
    header = bytes([MAGIC]) + schema_id.to_bytes(4, "big", signed=True)
    if message_indexes is not None:
        header += message_index_bytes(message_indexes)
    t = payloads.type
    if not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        payloads = payloads.cast(pa.large_binary())
        t = payloads.type
    return pc.binary_join_element_wise(pa.scalar(header, t), payloads, pa.scalar(b"", t))


@dataclass(frozen=True)
class ConfluentFrames:
    """Framed values taken apart: per row the schema id (null for a null value or one that is
    not framed), the payload (a zero-copy slice), the Protobuf message indexes when asked for,
    and the rows that are not framed, with why."""

    schema_ids: pa.Array
    payloads: pa.Array
    message_indexes: pa.Array | None
    problems: list[tuple[int, str]]


def read_confluent_frame(
    values: pa.Array, *, protobuf: bool = False, strict: bool = True
) -> ConfluentFrames:
    """The inverse of `frame_confluent`, for all rows at once. `strict` raises a SchemaError
    naming the first row that is not framed (too short, a magic byte other than 0, message
    indexes running past the value); otherwise such rows get null ids and payloads."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not pa.types.is_large_binary(values.type):
        values = values.cast(pa.large_binary())
    n = len(values)
    raw_offsets = np.frombuffer(values.buffers()[1], dtype=np.int64)[
        values.offset : values.offset + n + 1
    ]
    data_buf = values.buffers()[2]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    )
    starts, ends = raw_offsets[:-1], raw_offsets[1:]
    valid = np.asarray(values.is_valid()) if values.null_count else np.ones(n, bool)
    ok = valid & (ends - starts >= _HEADER)
    problems: list[tuple[int, str]] = []
    for row in np.flatnonzero(valid & ~ok)[:1000].tolist():
        problems.append((row, f"is {int(ends[row] - starts[row])} bytes, shorter than the framing"))
    safe = np.where(ok, starts, 0)
    magic = data[safe] if data.size else np.zeros(n, np.uint8)
    bad_magic = ok & (magic != MAGIC)
    for row in np.flatnonzero(bad_magic)[:1000].tolist():
        problems.append(
            (row, f"starts with byte {int(magic[row])}, not the framing's magic byte 0")
        )
    ok &= ~bad_magic
    ids = np.zeros(n, dtype=np.int32)
    if data.size:
        pos = safe[:, None] + np.arange(1, 5)
        be = data[np.where(ok[:, None], pos, 0)].astype(np.uint32)
        ids = ((be[:, 0] << 24) | (be[:, 1] << 16) | (be[:, 2] << 8) | be[:, 3]).view(np.int32)
    body = np.where(ok, starts + _HEADER, starts)
    indexes = None
    if protobuf:
        body, indexes = _message_indexes(data, body, ends, ok, problems)
    problems.sort()
    if strict and problems:
        row, why = problems[0]
        raise SchemaError(f"row {row}: the value {why}")
    mask = pa.array(~ok)
    id_array = pa.array(ids, pa.int32(), mask=~ok)
    bounds = np.empty(n + 1, dtype=np.int64)
    # payload i spans body[i]..ends[i]; spans may not chain, so give each its own offsets
    lengths = np.where(ok, ends - body, 0)
    bounds[0] = 0
    np.cumsum(lengths, out=bounds[1:])
    if n and np.array_equal(body[1:], ends[:-1]) and ok.all():
        payloads = pa.Array.from_buffers(
            pa.large_binary(), n, [None, pa.py_buffer(np.concatenate([body[:1], ends])), data_buf]
        )
    else:
        index = np.repeat(body - bounds[:-1], lengths) + np.arange(bounds[-1], dtype=np.int64)
        payloads = pa.Array.from_buffers(
            pa.large_binary(), n, [None, pa.py_buffer(bounds), pa.py_buffer(data[index])]
        )
    payloads = pc.if_else(mask, pa.scalar(None, pa.large_binary()), payloads)
    return ConfluentFrames(id_array, payloads, indexes, problems)


def _message_indexes(data, body, ends, ok, problems):
    """Each row's message-index list (zig-zag varints: count, then the indexes), and where
    the payload starts after it."""
    n = len(body)
    count, size = _varints(data, body, ends, ok, problems)
    pos = body + size
    counts = np.where(ok, count, 0)
    counts = np.where(counts == 0, 1, counts) * ok  # a lone 0 stands for [0]
    single = ok & (count == 0)
    out_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=out_offsets[1:])
    values = np.zeros(int(out_offsets[-1]), dtype=np.int64)
    step = 0
    while True:
        active = ok & ~single & (counts > step)
        if not active.any():
            break
        v, s = _varints(data, pos, ends, active, problems)
        values[out_offsets[:-1][active] + step] = v[active]
        pos = np.where(active, pos + s, pos)
        ok &= ~(active & (v < 0))
        step += 1
    lists = pa.LargeListArray.from_arrays(
        pa.array(out_offsets), pa.array(values), mask=pa.array(~ok)
    )
    return pos, lists


def _varints(data, positions, ends, active, problems):
    """Varints at `positions` of the active rows; a row whose varint runs past its value is
    a problem and leaves `active` (updated in place)."""
    values = np.zeros(len(positions), dtype=np.int64)
    sizes = np.zeros(len(positions), dtype=np.int64)
    rows = np.flatnonzero(active)
    if rows.size == 0:
        return values, sizes
    inside = positions[rows] < ends[rows]
    for row in rows[~inside][:1000].tolist():
        problems.append((int(row), "ends inside its message indexes"))
        active[row] = False
    rows = rows[inside]
    if rows.size:
        v, s = decode_varints_at(data, positions[rows])
        past = positions[rows] + s > ends[rows]
        for row in rows[past][:1000].tolist():
            problems.append((int(row), "ends inside its message indexes"))
            active[row] = False
        values[rows], sizes[rows] = v, s
    return values, sizes
