"""Random Arrow columns of every type the value encoders support (Hypothesis strategies), with
nulls and nesting, as Arrow arrays and as the Python values independent libraries take."""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa
from hypothesis import strategies as st

UTC = datetime.timezone.utc
_TS_MIN = datetime.datetime(1, 1, 1)
_TS_MAX = datetime.datetime(9999, 12, 31, 23, 59, 59)

LEAVES = [
    pa.bool_(),
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.float32(),
    pa.float64(),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.decimal128(9, 2),
    pa.decimal128(38, 10),
    pa.date32(),
    pa.timestamp("us", tz="UTC"),
    pa.timestamp("us"),
]


def _leaf_values(t: pa.DataType) -> st.SearchStrategy:
    if pa.types.is_boolean(t):
        return st.booleans()
    if pa.types.is_integer(t):
        bits = t.bit_width
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if pa.types.is_float32(t):
        return st.floats(width=32, allow_nan=False)
    if pa.types.is_float64(t):
        return st.floats(allow_nan=False)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return st.text(max_size=12)
    if pa.types.is_binary(t):
        return st.binary(max_size=12)
    if pa.types.is_decimal(t):
        bound = 10**t.precision - 1
        return st.integers(-bound, bound).map(lambda u: decimal.Decimal(f"{u}E-{t.scale}"))
    if pa.types.is_date32(t):
        return st.dates()
    if pa.types.is_timestamp(t):
        naive = st.datetimes(min_value=_TS_MIN, max_value=_TS_MAX)
        return naive.map(lambda d: d.replace(tzinfo=UTC)) if t.tz else naive
    raise AssertionError(t)


def _name() -> st.SearchStrategy:
    return st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)


def types(max_depth: int = 2) -> st.SearchStrategy:
    """A random Arrow type: leaves, lists, string-keyed maps and structs, nested."""
    leaf = st.sampled_from(LEAVES)
    if max_depth == 0:
        return leaf
    inner = types(max_depth - 1)
    return st.one_of(
        leaf,
        st.tuples(inner, st.booleans()).map(lambda a: pa.list_(pa.field("item", a[0], a[1]))),
        st.tuples(inner, st.booleans()).map(
            lambda a: pa.map_(pa.string(), pa.field("value", a[0], a[1]))
        ),
        structs(inner),
    )


def structs(inner: st.SearchStrategy) -> st.SearchStrategy:
    fields = st.lists(
        st.tuples(_name(), inner, st.booleans()), min_size=1, max_size=4, unique_by=lambda f: f[0]
    )
    return fields.map(lambda fs: pa.struct([pa.field(n, t, nullable) for n, t, nullable in fs]))


def values(t: pa.DataType, nullable: bool = True) -> st.SearchStrategy:
    """A Python value of type t (None allowed when nullable); maps as lists of pairs with
    distinct keys."""
    if pa.types.is_list(t):
        body = st.lists(values(t.value_type, t.value_field.nullable), max_size=3)
    elif pa.types.is_map(t):
        body = st.dictionaries(
            st.text(max_size=4), values(t.item_type, t.item_field.nullable), max_size=3
        ).map(lambda d: list(d.items()))
    elif pa.types.is_struct(t):
        body = st.fixed_dictionaries({f.name: values(f.type, f.nullable) for f in t})
    else:
        body = _leaf_values(t)
    return st.one_of(st.none(), body) if nullable else body


@st.composite
def columns(draw, max_depth: int = 2, max_rows: int = 8) -> pa.Array:
    """A struct array of random columns (the value's row type), nulls at every level, often
    sliced (so offsets are not zero)."""
    t = draw(structs(types(max_depth)))
    rows = draw(st.lists(values(t, nullable=True), max_size=max_rows))
    array = pa.array([None, *rows, None], t)
    if draw(st.booleans()):
        return array.slice(1, len(rows))
    return array
