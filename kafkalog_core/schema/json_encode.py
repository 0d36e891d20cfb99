"""JSON values of Arrow rows, byte for byte as Spark's `to_json` of a struct writes them with
its default options (the `format: json` of a column list).

Spark's JacksonGenerator: a null struct field is left out, a null list item or map value is
`null`; strings are escaped as Jackson escapes them; binary is base64; a date is yyyy-MM-dd; a
timestamp yyyy-MM-dd'T'HH:mm:ss.SSS and its zone offset (Z, +05:30, +05:21:10 before zones
were whole minutes), in the zone of the Arrow type (Spark hands its session zone), none for a
timestamp without a zone; decimals as Java's BigDecimal.toString (Arrow's text of a decimal is
the same); floats and doubles as `json_text` says. Map keys are strings or integers.

With the C module each row is written in one pass; without it the same text is assembled with
Arrow compute and numpy, level by level.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core import native
from kafkalog_core.errors import SchemaError
from kafkalog_core.schema import arrays
from kafkalog_core.schema.arrays import Level
from kafkalog_core.schema.avro_bind import plain_type
from kafkalog_core.schema.avro_encode import _finish
from kafkalog_core.schema.json_text import (
    cat,
    escape_char,
    escape_key,
    float_texts,
    java_float_text,
    lit,
)

__all__ = ["encode_json"]

J_BOOL, J_INT, J_STRING, J_BASE64, J_RAW, J_DOUBLE, J_DATE, J_TIMESTAMP = range(20, 28)
J_STRUCT, J_ARRAY, J_MAP = 28, 29, 30
_UTC = {"UTC", "Etc/UTC", "Z", "+00:00", "GMT", "Etc/GMT", "UCT", "Etc/UCT", "Zulu", "Etc/Zulu"}
_UNIT_PER_MS = {"s": 0, "ms": 1, "us": 1_000, "ns": 1_000_000}


@dataclass
class JSlot:
    kind: int
    level: Level
    path: str
    name: bytes = b""  # a struct field's "name": prefix
    text: pa.Array | None = None  # J_RAW / J_DOUBLE: each value's text
    ints: np.ndarray | None = None  # int64 values indexed like the buffers (uint, timestamp millis)
    zone: np.ndarray | None = None  # J_TIMESTAMP: zone offset seconds, indexed like the buffers
    has_zone: bool = False
    children: list[JSlot] = field(default_factory=list)


def _slot(level: Level, path: str, zone: str | None) -> JSlot:
    array = level.array
    t = array.type
    where = f"field {path}" if path else "the value"
    if pa.types.is_struct(t):
        slot = JSlot(J_STRUCT, level, path)
        for i in range(t.num_fields):
            f = t.field(i)
            child = Level(array.field(i), level)
            level.children.append(child)
            sub = _slot(child, f"{path}.{f.name}" if path else f.name, zone)
            sub.name = escape_key(f.name)
            slot.children.append(sub)
        return slot
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        child = Level(array.values, level, items=True)
        level.children.append(child)
        return JSlot(J_ARRAY, level, path, children=[_slot(child, f"{path}[]", zone)])
    if pa.types.is_map(t):
        kt = t.key_type
        if not (pa.types.is_string(kt) or pa.types.is_large_string(kt) or pa.types.is_integer(kt)):
            raise SchemaError(
                f"format json: {where} is a map keyed by {kt}; JSON keys need strings or integers"
            )
        keys = Level(array.values.field(0), level, items=True)
        values = Level(array.values.field(1), level, items=True)
        level.children.extend([keys, values])
        return JSlot(
            J_MAP,
            level,
            path,
            children=[_slot(keys, f"{path}{{key}}", zone), _slot(values, f"{path}{{}}", zone)],
        )
    return _leaf(level, path, where, zone)


def _leaf(level: Level, path: str, where: str, zone: str | None) -> JSlot:
    array = level.array
    t = array.type
    if pa.types.is_null(t):
        return JSlot(J_RAW, level, path, text=pa.nulls(len(array), pa.large_string()))
    if pa.types.is_boolean(t):
        return JSlot(J_BOOL, level, path)
    if pa.types.is_uint64(t):
        return JSlot(J_RAW, level, path, text=pc.cast(array, pa.large_string()))
    if pa.types.is_integer(t):
        slot = JSlot(J_INT, level, path)
        if pa.types.is_unsigned_integer(t):
            slot.ints = arrays.raw_values(array, t.to_pandas_dtype()).astype(np.int64)
        return slot
    if pa.types.is_floating(t):
        return JSlot(J_DOUBLE, level, path, text=java_float_text(array))
    if pa.types.is_decimal(t):
        return JSlot(J_RAW, level, path, text=pc.cast(array, pa.large_string()))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return JSlot(J_STRING, level, path)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return JSlot(J_BASE64, level, path)
    if pa.types.is_fixed_size_binary(t):
        return _leaf(
            Level(array.cast(pa.large_binary()), level.parent, level.items), path, where, zone
        )
    if pa.types.is_date32(t):
        return JSlot(J_DATE, level, path)
    if pa.types.is_timestamp(t):
        return _timestamp(level, path, zone)
    raise SchemaError(f"format json: {where} is an Arrow {t}, which Spark's JSON does not write")


def _timestamp(level: Level, path: str, zone: str | None) -> JSlot:
    array = level.array
    t = array.type
    if t.tz is not None and zone is not None:
        t = pa.timestamp(t.unit, zone)
    raw = arrays.raw_values(array, np.int64)
    per_ms = _UNIT_PER_MS[t.unit]
    millis = raw * 1000 if per_ms == 0 else np.floor_divide(raw, per_ms)
    slot = JSlot(J_TIMESTAMP, level, path, ints=millis, has_zone=t.tz is not None)
    if t.tz is not None and t.tz not in _UTC:
        utc = pa.Array.from_buffers(  # indexed like the buffers; nulls skipped
            pa.timestamp(t.unit),
            len(array) + array.offset,
            [array.buffers()[0], array.buffers()[1]],
        )
        local = pc.local_timestamp(utc.cast(t)).cast(pa.int64())
        diff = np.asarray(local.fill_null(0)) - np.where(np.asarray(utc.is_valid()), raw, 0)
        seconds = diff * 1 if per_ms == 0 else np.floor_divide(diff, per_ms * 1000)
        slot.zone = seconds.astype(np.int32)
    return slot


def _plain(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    plain = plain_type(values.type)
    array = arrays.plain_array(values, plain)
    t = array.type
    if not (
        pa.types.is_struct(t)
        or pa.types.is_map(t)
        or pa.types.is_list(t)
        or pa.types.is_large_list(t)
    ):
        raise SchemaError(
            f"format json needs a struct, map or array (or a list of columns), not {t}"
        )
    return array


def encode_json(values: pa.Array | pa.ChunkedArray, zone: str | None = None) -> pa.Array:
    """Each row as Spark's `to_json` writes it (UTF-8 bytes in a binary array; large_binary
    past 2 GiB); a null row gives a null. Timestamps with a zone are written in `zone` (Spark's
    session zone) when given, else in their type's."""
    array = _plain(values)
    top = _slot(Level(array), "", zone)
    if native.schema_module is not None:
        n = len(array)
        offsets = np.empty(n + 1, dtype=np.int64)
        data = native.schema_module.encode_rows(_native_node(top), n, offsets, True)
        return _finish(offsets, data, array)
    text = _text(top).cast(pa.large_binary())
    if array.null_count:
        text = pc.if_else(pa.array(arrays.valid_mask(array)), text, arrays.EMPTY)
    offsets = arrays.offsets_of(text)
    data = text.buffers()[2]
    body = b"" if data is None else data[int(offsets[0]) : int(offsets[-1])]
    return _finish(offsets - offsets[0], body, array)


# -- the C path --------------------------------------------------------------------------------


def _native_node(slot: JSlot) -> tuple:
    array = slot.level.array
    t = array.type
    buffers = array.buffers()
    validity = buffers[0] if array.null_count else None
    offset = array.offset
    values = offsets = None
    wide = p1 = 0
    kind = slot.kind
    if kind in (J_RAW, J_DOUBLE):  # the text array has its own offset: validity moves to it
        text = slot.text
        values, offsets, wide, offset = text.buffers()[2] or b"", text.buffers()[1], 1, text.offset
        if array.null_count:
            bits = np.concatenate([np.zeros(offset, bool), arrays.valid_mask(array)])
            validity = np.packbits(bits, bitorder="little")
    elif kind == J_BOOL:
        values = buffers[1]
    elif kind == J_INT:
        if slot.ints is not None:
            values, p1 = slot.ints, 8
        else:
            values, p1 = buffers[1], t.bit_width // 8
    elif kind in (J_STRING, J_BASE64):
        values, offsets = buffers[2] or b"", buffers[1]
        wide = int(pa.types.is_large_string(t) or pa.types.is_large_binary(t))
    elif kind == J_DATE:
        values = buffers[1]
    elif kind == J_TIMESTAMP:
        values, offsets, p1 = slot.ints, slot.zone, int(slot.has_zone)
    elif kind in (J_ARRAY, J_MAP):
        offsets = buffers[1]
        wide = int(pa.types.is_large_list(t))
    kids = tuple(_native_node(c) for c in slot.children)
    return (kind, validity, offset, values, offsets, wide, -1, -1, p1, 0, slot.name or None, kids)


# -- the Arrow path ----------------------------------------------------------------------------


def _text(slot: JSlot) -> pa.Array:
    """Every value of the slot's array as JSON text (large_string, nulls as `null`)."""
    array = slot.level.array
    n = len(array)
    kind = slot.kind
    if kind == J_RAW:
        body = slot.text
    elif kind == J_DOUBLE:
        body = float_texts(slot.text)
    elif kind == J_BOOL:
        body = pc.if_else(array, lit("true"), lit("false"))
    elif kind == J_INT:
        source = array if slot.ints is None else pa.array(slot.ints[array.offset :])
        body = pc.cast(source, pa.large_string())
    elif kind == J_STRING:
        body = _quoted(_escaped(array.cast(pa.large_string())))
    elif kind == J_BASE64:
        body = _quoted(_base64(array.cast(pa.large_binary())))
    elif kind == J_DATE:
        days = arrays.raw_values(array, np.int32)[array.offset :].astype(np.int64)
        body = _quoted(_date_text(days))
    elif kind == J_TIMESTAMP:
        body = _quoted(_timestamp_text(slot))
    elif kind == J_STRUCT:
        pieces = []
        for child in slot.children:
            text = cat(",", child.name.decode(), _text(child))
            valid = pa.array(arrays.valid_mask(child.level.array))
            pieces.append(pc.if_else(valid, text, lit("")))
        if pieces:  # every present field's text starts with a comma: drop the first
            joined = pc.utf8_slice_codeunits(cat(*pieces), 1)
        else:
            joined = pa.array([""] * n, pa.large_string())
        body = cat("{", joined, "}")
    else:  # J_ARRAY, J_MAP
        offsets = arrays.offsets_of(array)
        if kind == J_ARRAY:
            items = _text(slot.children[0])
            open_, close = "[", "]"
        else:
            key, value = slot.children
            key_text = _text(key) if key.kind == J_STRING else _quoted(_text(key))
            items = cat(key_text, ":", _text(value))
            open_, close = "{", "}"
        lists = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), items)
        body = cat(open_, pc.binary_join(lists, lit(",")), close)
    body = body.cast(pa.large_string())
    if array.null_count:
        body = pc.if_else(pa.array(arrays.valid_mask(array)), body, lit("null"))
    return body


def _quoted(text: pa.Array) -> pa.Array:
    return cat('"', text, '"')


def _escaped(text: pa.Array) -> pa.Array:
    text = pc.replace_substring(text, "\\", "\\\\")
    text = pc.replace_substring(text, '"', '\\"')
    if pc.any(pc.match_substring_regex(text, "[\\x00-\\x1f]")).as_py():
        for code in range(0x20):
            text = pc.replace_substring(text, chr(code), escape_char(code))
    return text


_ALPHABET = np.frombuffer(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", np.uint8
)


def _base64(binary: pa.Array) -> pa.Array:
    n = len(binary)
    offsets = arrays.offsets_of(binary)
    data = binary.buffers()[2]
    src = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    groups = (lengths + 2) // 3
    padded = groups * 3
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(padded, out=starts[1:])
    total = int(starts[-1])
    row = np.repeat(np.arange(n), padded)
    within = np.arange(total, dtype=np.int64) - starts[:-1][row]
    inside = within < lengths[row]
    take = np.where(inside, offsets[:-1][row] + within, 0)
    raw = np.where(inside, src[take] if src.size else 0, 0).astype(np.uint32).reshape(-1, 3)
    word = (raw[:, 0] << 16) | (raw[:, 1] << 8) | raw[:, 2]
    chars = np.stack([(word >> s) & 63 for s in (18, 12, 6, 0)], axis=1)
    out = _ALPHABET[chars].reshape(-1)
    # '=' for the bytes a row's last group lacks
    ends = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(groups * 4, out=ends[1:])
    missing = padded - lengths
    last = ends[1:]
    out[last[missing >= 1] - 1] = ord("=")
    out[last[missing == 2] - 2] = ord("=")
    return pa.Array.from_buffers(
        pa.large_string(), n, [None, pa.py_buffer(ends), pa.py_buffer(out)]
    )


def _civil(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Days since 1970-01-01 -> proleptic Gregorian (year, month, day), as _native_schema.c."""
    z = days + 719468
    era = np.floor_divide(z, 146097)
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = np.where(mp < 10, mp + 3, mp - 9)
    y = yoe + era * 400 + (m <= 2)
    return y, m, d


def _padded(values: np.ndarray, width: int) -> pa.Array:
    return pc.utf8_lpad(pc.cast(pa.array(values), pa.large_string()), width, "0")


def _date_text(days: np.ndarray) -> pa.Array:
    y, m, d = _civil(days)
    sign = pa.array(np.where(y < 0, "-", np.where(y > 9999, "+", "")), pa.large_string())
    return cat(sign, _padded(np.abs(y), 4), "-", _padded(m, 2), "-", _padded(d, 2))


def _timestamp_text(slot: JSlot) -> pa.Array:
    array = slot.level.array
    millis = slot.ints[array.offset :]
    zone = (
        np.zeros(len(array), np.int64)
        if slot.zone is None
        else slot.zone[array.offset :].astype(np.int64)
    )
    local = millis + zone * 1000
    days = np.floor_divide(local, 86_400_000)
    ms = local - days * 86_400_000
    parts = [
        _date_text(days),
        "T",
        _padded(ms // 3_600_000, 2),
        ":",
        _padded(ms // 60_000 % 60, 2),
        ":",
        _padded(ms // 1000 % 60, 2),
        ".",
        _padded(ms % 1000, 3),
    ]
    if slot.has_zone:
        a = np.abs(zone)
        hhmm = cat(
            pa.array(np.where(zone < 0, "-", "+"), pa.large_string()),
            _padded(a // 3600, 2),
            ":",
            _padded(a // 60 % 60, 2),
        )
        secs = pc.if_else(pa.array(a % 60 != 0), cat(":", _padded(a % 60, 2)), lit(""))
        offset = pc.if_else(pa.array(zone == 0), lit("Z"), cat(hhmm, secs))
        parts.append(offset)
    return cat(*parts)
