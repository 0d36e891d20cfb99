"""The Avro schema Spark's to_avro derives from column types, and the checks of a given one:
a schema that does not parse, or columns that do not fit it, is one SchemaError naming the
problem, the field and both types."""

from __future__ import annotations

import json

import avro.schema
import fastavro
import pyarrow as pa
import pytest

from kafkalog_core.errors import SchemaError
from kafkalog_core.schema import avro_schema_for, check_avro_schema, parse_avro_schema

ORDER = pa.struct(
    [
        pa.field("order_id", pa.int64(), False),
        pa.field("amount", pa.decimal128(10, 2)),
        pa.field("event_time", pa.timestamp("us", tz="UTC")),
        pa.field("local_time", pa.timestamp("us"), False),
        pa.field("day", pa.date32()),
        pa.field("n", pa.int16(), False),
        pa.field(
            "customer",
            pa.struct(
                [pa.field("name", pa.string()), pa.field("balance", pa.decimal128(38, 4), False)]
            ),
        ),
        pa.field("tags", pa.list_(pa.field("element", pa.string(), False))),
        pa.field("scores", pa.map_(pa.string(), pa.field("value", pa.float64(), True)), False),
        pa.field("raw", pa.binary(), False),
    ]
)


def test_spark_to_avro_naming_and_nullability():
    """What SchemaConverters.toAvroType gives for this struct (nullable -> [type, "null"],
    decimals as fixed named <field>.fixed in the enclosing records' namespace)."""
    assert avro_schema_for(ORDER) == {
        "type": "record",
        "name": "topLevelRecord",
        "fields": [
            {"name": "order_id", "type": "long"},
            {
                "name": "amount",
                "type": [
                    {
                        "type": "fixed",
                        "name": "fixed",
                        "namespace": "topLevelRecord.amount",
                        "size": 5,
                        "logicalType": "decimal",
                        "precision": 10,
                        "scale": 2,
                    },
                    "null",
                ],
            },
            {
                "name": "event_time",
                "type": [{"type": "long", "logicalType": "timestamp-micros"}, "null"],
            },
            {
                "name": "local_time",
                "type": {"type": "long", "logicalType": "local-timestamp-micros"},
            },
            {"name": "day", "type": [{"type": "int", "logicalType": "date"}, "null"]},
            {"name": "n", "type": "int"},
            {
                "name": "customer",
                "type": [
                    {
                        "type": "record",
                        "name": "customer",
                        "namespace": "topLevelRecord",
                        "fields": [
                            {"name": "name", "type": ["string", "null"]},
                            {
                                "name": "balance",
                                "type": {
                                    "type": "fixed",
                                    "name": "fixed",
                                    "namespace": "topLevelRecord.customer.balance",
                                    "size": 16,
                                    "logicalType": "decimal",
                                    "precision": 38,
                                    "scale": 4,
                                },
                            },
                        ],
                    },
                    "null",
                ],
            },
            {"name": "tags", "type": [{"type": "array", "items": "string"}, "null"]},
            {"name": "scores", "type": {"type": "map", "values": ["double", "null"]}},
            {"name": "raw", "type": "bytes"},
        ],
    }


def test_derived_schemas_parse_in_fastavro_the_avro_package_and_ours():
    schema = avro_schema_for(ORDER)
    fastavro.parse_schema(schema)
    avro.schema.parse(json.dumps(schema))
    assert parse_avro_schema(json.dumps(schema)) == schema


def test_fixed_sizes_follow_the_precision():
    sizes = {
        p: avro_schema_for(pa.struct([pa.field("d", pa.decimal128(p, 0), False)]))["fields"][0][
            "type"
        ]["size"]
        for p in (1, 2, 3, 9, 10, 18, 19, 38)
    }
    # the fewest bytes b with 2**(8b - 1) >= 10**p
    assert sizes == {1: 1, 2: 1, 3: 2, 9: 4, 10: 5, 18: 8, 19: 9, 38: 16}


def test_a_single_column_and_nullable_tops():
    assert avro_schema_for(pa.int64()) == {"type": "long"}
    assert avro_schema_for(pa.string(), nullable=True) == {"type": ["string", "null"]}


def test_columns_avro_cannot_name_are_refused():
    with pytest.raises(SchemaError, match="order-id"):
        avro_schema_for(pa.struct([("order-id", pa.int64())]))
    with pytest.raises(SchemaError, match="string keys"):
        avro_schema_for(pa.struct([("m", pa.map_(pa.int32(), pa.int32()))]))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"type": "record", "name": "r", "fields": [', "the Avro schema is not JSON"),
        ('{"type": "recrod", "name": "r"}', "'recrod' is not an Avro type"),
        (
            '{"type": "record", "name": "r", "fields": [{"name": "a", "type": "Missing"}]}',
            "'Missing' is neither",
        ),
        (
            '{"type": "record", "name": "r", "fields": [{"name": "a", "type": "int"}, {"name": "a", "type": "int"}]}',
            "two fields named 'a'",
        ),
        ('{"type": "enum", "name": "e", "symbols": ["A", "A"]}', "repeats a symbol"),
        ('{"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 5}', "scale"),
        (
            '{"type": "fixed", "name": "f", "size": 2, "logicalType": "decimal", "precision": 9}',
            "cannot hold",
        ),
        ('{"type": "record", "name": "1r", "fields": []}', "is not an Avro name"),
        ('["null", "string"]', "top is a union"),
        (
            '{"type": "record", "name": "r", "fields": [{"name": "a", "type": ["int", "int"]}]}',
            "holds 'int' twice",
        ),
    ],
)
def test_schemas_that_do_not_parse_say_why(text, message):
    with pytest.raises(SchemaError, match=message):
        parse_avro_schema(text)


def _record(*fields):
    return {"type": "record", "name": "r", "fields": [{"name": n, "type": t} for n, t in fields]}


@pytest.mark.parametrize(
    ("arrow_type", "schema", "message"),
    [
        (
            pa.struct([("a", pa.string())]),
            _record(("a", "long")),
            'field a is Arrow string but the schema says "long"',
        ),
        (pa.struct([("a", pa.float64())]), _record(("a", "float")), "field a is Arrow double"),
        (
            pa.struct([("a", pa.int32()), ("b", pa.int32())]),
            _record(("a", "int")),
            "no field for the column b",
        ),
        (
            pa.struct([("a", pa.int32())]),
            _record(("a", "int"), ("b", "int")),
            'field b ("int") has no column',
        ),
        (
            pa.struct([("d", pa.decimal128(10, 2))]),
            _record(
                ("d", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 3})
            ),
            "the scales differ",
        ),
        (
            pa.struct([("t", pa.timestamp("us", "UTC"))]),
            _record(("t", {"type": "long", "logicalType": "local-timestamp-micros"})),
            "a timestamp with a zone",
        ),
        (
            pa.struct([("x", pa.list_(pa.int32()))]),
            _record(("x", {"type": "array", "items": "string"})),
            "field x[] is Arrow int32",
        ),
        (
            pa.struct([("a", pa.int32())]),
            _record(("a", ["null", "string", "boolean"])),
            "no branch of the union fits",
        ),
    ],
)
def test_columns_that_do_not_fit_name_the_field_and_both_types(arrow_type, schema, message):
    with pytest.raises(SchemaError) as e:
        check_avro_schema(schema, arrow_type)
    assert message in str(e.value)


def test_widenings_that_lose_nothing_fit():
    check_avro_schema(
        _record(("a", "long"), ("f", "double")), pa.struct([("a", pa.int8()), ("f", pa.float32())])
    )
    check_avro_schema(_record(("a", ["null", "string", "long"])), pa.struct([("a", pa.int64())]))
