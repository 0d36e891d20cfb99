"""Avro binary values from Arrow columns: byte-equal to fastavro's schemaless_writer, read back
by the Apache Avro Python package, the same with and without the C module, and row misfits
refused with the row and the field."""

from __future__ import annotations

import datetime
import decimal
import io
import json

import fastavro
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from kafkalog_core.errors import SchemaError
from kafkalog_core.schema import avro_misfits, avro_schema_for, encode_avro, parse_avro_schema
from kafkalog_core.schema.avro_encode import encode_avro_rows
from tests.schema.columns import columns
from tests.schema.helpers import avro_reference_roundtrip, both_paths, fastavro_bytes

D = decimal.Decimal
UTC = datetime.timezone.utc


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(array=columns())
def test_random_columns_match_fastavro_on_both_paths(monkeypatch, array):
    schema = avro_schema_for(array.type)
    with_c, without_c = both_paths(monkeypatch, lambda: encode_avro(array, schema))
    expected = fastavro_bytes(schema, array)
    assert with_c.to_pylist() == expected
    assert without_c.to_pylist() == expected
    assert with_c.equals(without_c)


@settings(max_examples=25, deadline=None)
@given(array=columns(max_rows=4))
def test_the_avro_reference_package_reads_what_we_write(array):
    schema = avro_schema_for(array.type)
    for payload in encode_avro(array, schema).to_pylist():
        if payload is not None:
            assert avro_reference_roundtrip(schema, payload) == payload


def test_a_null_row_is_a_tombstone_and_a_single_column_works():
    longs = pa.array([1, None, -64, 2**62])
    out = encode_avro(longs, avro_schema_for(longs.type))
    # zig-zag: 1 -> 2, -64 -> 127, 2**62 -> 2**63 (nine 7-bit groups of zeros, then 1)
    assert out.to_pylist() == [b"\x02", None, b"\x7f", b"\x80" * 9 + b"\x01"]
    assert out.to_pylist() == fastavro_bytes(avro_schema_for(longs.type), longs)
    assert out.type == pa.binary()


SCHEMA_FILE = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "qty", "type": "long"},
        {
            "name": "price",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2},
            ],
        },
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ratio", "type": "double"},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
ORDERS = pa.array(
    [
        {
            "id": "123e4567-e89b-12d3-a456-426614174000",
            "status": "PAID",
            "qty": 3,
            "price": D("-12.50"),
            "at": datetime.datetime(2024, 5, 1, 12, 0, 0, 123999, tzinfo=UTC),
            "ratio": 0.5,
            "digest": b"abcd",
        },
        {
            "id": "00000000-0000-0000-0000-000000000000",
            "status": "NEW",
            "qty": 0,
            "price": None,
            "at": datetime.datetime(1969, 12, 31, 23, 59, 59, 999500, tzinfo=UTC),
            "ratio": 2.0,
            "digest": b"\x00\x01\x02\x03",
        },
    ],
    pa.struct(
        [
            pa.field("id", pa.string(), False),
            pa.field("status", pa.string(), False),
            pa.field("qty", pa.int32(), False),
            pa.field("price", pa.decimal128(8, 2)),
            pa.field("at", pa.timestamp("us", tz="UTC"), False),
            pa.field("ratio", pa.float32(), False),
            pa.field("digest", pa.binary(), False),
        ]
    ),
)


def test_a_given_schema_file_with_enum_uuid_fixed_millis_and_a_missing_nullable_field(monkeypatch):
    schema = parse_avro_schema(json.dumps(SCHEMA_FILE))
    with_c, without_c = both_paths(monkeypatch, lambda: encode_avro(ORDERS, schema))
    assert with_c.equals(without_c)
    rows = ORDERS.to_pylist()
    for row in rows:  # what fastavro is given: millis floor, the absent field null
        row["note"] = None
    parsed = fastavro.parse_schema(SCHEMA_FILE)
    for row, got in zip(rows, with_c.to_pylist(), strict=True):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, row)
        assert got == buf.getvalue()
        assert avro_reference_roundtrip(SCHEMA_FILE, got) == got
    # timestamp-millis floors: 1969-12-31T23:59:59.9995 -> -1 ms
    decoded = fastavro.schemaless_reader(io.BytesIO(with_c[1].as_py()), parsed)
    assert decoded["at"] == datetime.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("array", "schema", "message"),
    [
        (
            pa.array([{"a": 1}, {"a": None}], pa.struct([("a", pa.int64())])),
            {"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]},
            "row 1: field a is null and the schema has no null",
        ),
        (
            pa.array([{"a": 2**31}], pa.struct([("a", pa.int64())])),
            {"type": "record", "name": "r", "fields": [{"name": "a", "type": "int"}]},
            "row 0: field a does not fit an Avro int",
        ),
        (
            pa.array([{"d": D("1.5")}, {"d": D("123.4")}], pa.struct([("d", pa.decimal128(6, 1))])),
            {
                "type": "record",
                "name": "r",
                "fields": [
                    {
                        "name": "d",
                        "type": {
                            "type": "bytes",
                            "logicalType": "decimal",
                            "precision": 3,
                            "scale": 1,
                        },
                    }
                ],
            },
            "row 1: field d has more digits than the decimal's precision 3",
        ),
        (
            pa.array([{"s": "NEW"}, {"s": "LOST"}], pa.struct([("s", pa.string())])),
            {
                "type": "record",
                "name": "r",
                "fields": [
                    {"name": "s", "type": {"type": "enum", "name": "E", "symbols": ["NEW"]}}
                ],
            },
            "row 1: field s is not a symbol of the enum",
        ),
        (
            pa.array([{"b": b"abc"}], pa.struct([("b", pa.binary())])),
            {
                "type": "record",
                "name": "r",
                "fields": [{"name": "b", "type": {"type": "fixed", "name": "F", "size": 4}}],
            },
            "row 0: field b is not 4 bytes long (the fixed's size)",
        ),
        (
            pa.array(
                [{"xs": [1, 2]}, None, {"xs": [3, None]}], pa.struct([("xs", pa.list_(pa.int32()))])
            ),
            {
                "type": "record",
                "name": "r",
                "fields": [{"name": "xs", "type": {"type": "array", "items": "int"}}],
            },
            "row 2: field xs[] is null and the schema has no null (item 3)",
        ),
    ],
)
def test_rows_that_do_not_fit_name_the_row_and_the_field(monkeypatch, array, schema, message):
    for native_on in (True, False):
        with monkeypatch.context() as m:
            if not native_on:
                m.setattr("kafkalog_core.native.schema_module", None)
            with pytest.raises(SchemaError) as e:
                encode_avro(array, schema)
        assert str(e.value) == message


def test_misfits_lists_every_bad_row_and_skips_values_under_null_parents():
    t = pa.struct([("inner", pa.struct([pa.field("x", pa.int64())]))])
    array = pa.array(
        [{"inner": {"x": None}}, {"inner": None}, {"inner": {"x": 1}}, {"inner": {"x": None}}], t
    )
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {
                "name": "inner",
                "type": [
                    "null",
                    {"type": "record", "name": "i", "fields": [{"name": "x", "type": "long"}]},
                ],
            }
        ],
    }
    assert [row for row, _ in avro_misfits(array, schema)] == [0, 3]
    assert "field inner.x is null" in avro_misfits(array, schema)[0][1]


def test_rows_that_do_not_fit_are_left_null_and_the_others_encoded_on_both_paths(monkeypatch):
    """`encode_avro_rows` lists each misfit row (an enum symbol, a fixed's size, a value in a
    list) and leaves it null; every other row is exactly what fastavro writes."""
    t = pa.struct([("s", pa.string()), ("b", pa.binary()), ("xs", pa.list_(pa.int64()))])
    rows = [
        {"s": "A", "b": b"1234", "xs": [1]},
        {"s": "Z", "b": b"1234", "xs": []},
        {"s": "B", "b": b"12", "xs": [2]},
        {"s": "A", "b": b"abcd", "xs": [3, 2**40]},
        None,
        {"s": "B", "b": b"wxyz", "xs": None},
    ]
    array = pa.array(rows, t)
    schema = parse_avro_schema(
        json.dumps(
            {
                "type": "record",
                "name": "r",
                "fields": [
                    {"name": "s", "type": {"type": "enum", "name": "e", "symbols": ["A", "B"]}},
                    {"name": "b", "type": {"type": "fixed", "name": "f", "size": 4}},
                    {"name": "xs", "type": ["null", {"type": "array", "items": "int"}]},
                ],
            }
        )
    )
    with_c, without_c = both_paths(monkeypatch, lambda: encode_avro_rows(array, schema)[0])
    misfits = encode_avro_rows(array, schema)[1]
    assert [row for row, _ in misfits] == [1, 2, 3]
    assert misfits[0][1] == "field s is not a symbol of the enum"
    assert misfits[1][1] == "field b is not 4 bytes long (the fixed's size)"
    assert misfits[2][1].startswith("field xs[] does not fit an Avro int")
    fitting = pa.array([r if i not in (1, 2, 3) else None for i, r in enumerate(rows)], t)
    assert with_c.to_pylist() == fastavro_bytes(schema, fitting)
    assert with_c.equals(without_c)


def test_wide_decimals_and_every_integer_width_on_both_paths(monkeypatch):
    values = [D(10**37 - 1), D(-(10**37)), D(0), D(-1), D(255), D(-128), D(-129), None]
    t = pa.struct(
        [
            ("d", pa.decimal128(38, 0)),
            ("w", pa.decimal256(40, 0)),
            ("u8", pa.uint8()),
            ("u32", pa.uint32()),
            ("i8", pa.int8()),
        ]
    )
    rows = [
        {"d": v, "w": v, "u8": i * 30, "u32": 2**32 - 1 - i, "i8": -128 + i}
        for i, v in enumerate(values)
    ]
    array = pa.array(rows, t)
    schema = avro_schema_for(t)
    with_c, without_c = both_paths(monkeypatch, lambda: encode_avro(array, schema))
    assert with_c.equals(without_c)
    bytes_schema = json.loads(json.dumps(schema))
    bytes_schema["fields"][0]["type"][0] = {
        "type": "bytes",
        "logicalType": "decimal",
        "precision": 38,
        "scale": 0,
    }
    with_c, without_c = both_paths(monkeypatch, lambda: encode_avro(array, bytes_schema))
    assert with_c.equals(without_c)
    # fastavro gives a negative power of two one byte more than Java's BigInteger.toByteArray
    # (-128: ff 80, not 80); Avro Java, what the registry's serializers use, is the rule here
    # (test_avro_java.py holds us to it). Every other row is byte-equal, and all read back.
    theirs = fastavro_bytes(bytes_schema, array)
    parsed = fastavro.parse_schema(bytes_schema)
    for value, ours, fast in zip(values, with_c.to_pylist(), theirs, strict=True):
        if value is None or value >= 0 or (-int(value)) & (-int(value) - 1):
            assert ours == fast
        assert fastavro.schemaless_reader(io.BytesIO(ours), parsed)["d"] == value


def test_chunked_and_dictionary_columns_are_read_as_plain_ones():
    plain = pa.array([{"s": "a"}, {"s": "b"}, {"s": "a"}], pa.struct([("s", pa.string())]))
    dictionary = pa.StructArray.from_arrays([pa.array(["a", "b", "a"]).dictionary_encode()], ["s"])
    schema = avro_schema_for(plain.type)
    expected = encode_avro(plain, schema)
    assert encode_avro(dictionary, schema).equals(expected)
    assert encode_avro(pa.chunked_array([plain.slice(0, 1), plain.slice(1)]), schema).equals(
        expected
    )


def test_large_counts_of_rows_are_the_same_on_both_paths(monkeypatch):
    rng = np.random.default_rng(5)
    n = 20_000
    array = pa.StructArray.from_arrays(
        [
            pa.array(rng.integers(-(2**40), 2**40, n)),
            pa.array(rng.standard_normal(n)),
            pa.array([f"customer-{i % 97}" for i in range(n)]),
        ],
        ["id", "amount", "customer"],
    )
    schema = avro_schema_for(array.type)
    with_c, without_c = both_paths(monkeypatch, lambda: encode_avro(array, schema))
    assert with_c.equals(without_c)
    assert with_c.to_pylist()[:50] == fastavro_bytes(schema, array.slice(0, 50))
