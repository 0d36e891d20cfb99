"""encode_json without Spark: the C rows and the Arrow twin give the same bytes on random nested
columns, every row is JSON that reads back to the row's values, and what JSON cannot write is
refused. (test_json_spark.py holds the text to Spark's own to_json.)"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from kafkalog_core.errors import SchemaError
from kafkalog_core.schema import encode_json
from tests.schema.columns import columns
from tests.schema.helpers import both_paths


def _expected(value, t: pa.DataType):
    """What a JSON reader gets back for an Arrow value as Spark writes it."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        return {f.name: _expected(value[f.name], f.type) for f in t if value[f.name] is not None}
    if pa.types.is_list(t):
        return [_expected(v, t.value_type) for v in value]
    if pa.types.is_map(t):
        return {k: _expected(v, t.item_type) for k, v in value}
    if pa.types.is_binary(t):
        return base64.b64encode(value).decode()
    if pa.types.is_decimal(t):
        return float(value)
    if pa.types.is_floating(t):  # Jackson quotes the infinities (no NaN is drawn)
        return value if math.isfinite(value) else ("Infinity" if value > 0 else "-Infinity")
    if pa.types.is_date(t):
        return value
    if pa.types.is_timestamp(t):
        return value
    return value


def _loaded(text: bytes, t: pa.DataType):
    return _normalized(json.loads(text, parse_float=float), t)


def _normalized(value, t):
    if value is None:
        return None
    if pa.types.is_struct(t):
        return {k: _normalized(v, t.field(k).type) for k, v in value.items()}
    if pa.types.is_list(t):
        return [_normalized(v, t.value_type) for v in value]
    if pa.types.is_map(t):
        return {k: _normalized(v, t.item_type) for k, v in value.items()}
    if pa.types.is_date(t):
        return datetime.date.fromisoformat(value)
    if pa.types.is_timestamp(t):
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return parsed
    if pa.types.is_decimal(t):
        return float(decimal.Decimal(str(value)))
    if pa.types.is_floating(t) and isinstance(value, float) and pa.types.is_float32(t):
        return float(pa.scalar(value, pa.float32()).as_py())
    return value


def _truncated(value, t):
    """Spark writes timestamps to the millisecond."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        return {k: _truncated(v, t.field(k).type) for k, v in value.items()}
    if pa.types.is_list(t):
        return [_truncated(v, t.value_type) for v in value]
    if pa.types.is_map(t):
        return {k: _truncated(v, t.item_type) for k, v in value.items()}
    if pa.types.is_timestamp(t):
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    return value


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(array=columns())
def test_random_columns_same_on_both_paths_and_read_back(monkeypatch, array):
    with_c, without_c = both_paths(monkeypatch, lambda: encode_json(array))
    assert with_c.equals(without_c)
    for value, text in zip(array.to_pylist(), with_c.to_pylist(), strict=True):
        if value is None:
            assert text is None
            continue
        expected = _truncated(_expected(value, array.type), array.type)
        loaded = _loaded(text, array.type)
        assert loaded == expected or _close(loaded, expected)


def _close(a, b) -> bool:
    """Floats compare by value (float32 texts are the float's shortest, read as a double)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-6)
    return a == b


def test_escapes_as_jackson_writes_them(monkeypatch):
    array = pa.array([{"s\n": 'a"\\\b\f\n\r\t\x00\x1f\x7f é'}], pa.struct([("s\n", pa.string())]))
    with_c, without_c = both_paths(monkeypatch, lambda: encode_json(array))
    assert with_c.to_pylist() == [b'{"s\\n":"a\\"\\\\\\b\\f\\n\\r\\t\\u0000\\u001F\x7f \xc3\xa9"}']
    assert with_c.equals(without_c)


def test_maps_keyed_by_integers_and_wide_unsigned_values(monkeypatch):
    t = pa.struct([("m", pa.map_(pa.int32(), pa.uint64())), ("u", pa.uint32())])
    array = pa.array([{"m": [(1, 2**64 - 1), (-2, None)], "u": 2**32 - 1}], t)
    with_c, without_c = both_paths(monkeypatch, lambda: encode_json(array))
    assert with_c.to_pylist() == [b'{"m":{"1":18446744073709551615,"-2":null},"u":4294967295}']
    assert with_c.equals(without_c)


def test_what_json_cannot_write_is_refused():
    with pytest.raises(SchemaError, match="needs a struct, map or array"):
        encode_json(pa.array([1, 2]))
    with pytest.raises(SchemaError, match="field t is an Arrow time64"):
        encode_json(pa.array([{"t": 1}], pa.struct([("t", pa.time64("us"))])))
