"""Protobuf values: derived .proto files, protoc parsing, encoding read back by the protobuf
runtime's own classes (built from protoc's descriptors, not ours), and one-line refusals."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from google.protobuf import json_format

from kafkalog_core.errors import SchemaError
from kafkalog_core.schema.protobuf import check_protobuf_schema, parse_proto, proto_for
from tests.schema.orders import ORDER_COLUMNS, runtime_class

ORDER = pa.struct(
    [
        *ORDER_COLUMNS,
        ("attrs", pa.map_(pa.string(), pa.int64())),
        ("address", pa.struct([("city", pa.string()), ("zip", pa.int32())])),
    ]
)
ROWS = [
    {
        "id": 7,
        "customer": "ada",
        "amount": Decimal("12.50"),
        "day": dt.date(2024, 5, 1),
        "at": dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=dt.timezone.utc),
        "tags": ["new", "vip"],
        "attrs": [("n", 3)],
        "address": {"city": "Paris", "zip": 75001},
    },
    {
        "id": 8,
        "customer": None,
        "amount": None,
        "day": None,
        "at": None,
        "tags": [],
        "attrs": [],
        "address": None,
    },
]


def test_derived_message_encodes_what_the_runtime_reads() -> None:
    schema = parse_proto(proto_for(ORDER, "Order", "shop"))
    assert schema.message == "shop.Order"
    assert schema.message_indexes == (0,)
    encoded = schema.encode(pa.array([*ROWS, None], ORDER))
    assert encoded[2].as_py() is None  # a null row stays null (a tombstone)
    cls = runtime_class(schema)
    first = json_format.MessageToDict(
        cls.FromString(encoded[0].as_py()), preserving_proto_field_name=True
    )
    assert first == {
        "id": "7",
        "customer": "ada",
        "amount": "12.50",
        "day": 19844,
        "at": "2024-05-01T12:00:00.123456Z",
        "tags": ["new", "vip"],
        "attrs": {"n": "3"},
        "address": {"city": "Paris", "zip": 75001},
    }
    second = cls.FromString(encoded[1].as_py())
    assert second.id == 8
    assert not second.HasField("customer")  # null is absent, not ""
    assert not second.HasField("address")


def test_decoder_gives_the_arrow_values_back() -> None:
    schema = parse_proto(proto_for(ORDER, "Order", "shop"))
    encoded = schema.encode(pa.array(ROWS, ORDER))
    decode = schema.decoder()
    decoded = pa.array([decode(b) for b in encoded.to_pylist()], schema.arrow_type())
    back = decoded.cast(
        pa.struct(
            [
                ("id", pa.int64()),
                ("customer", pa.string()),
                ("amount", pa.string()),
                ("day", pa.int32()),
                ("at", pa.timestamp("us", tz="UTC")),
                ("tags", pa.list_(pa.string())),
                ("attrs", pa.map_(pa.string(), pa.int64())),
                ("address", pa.struct([("city", pa.string()), ("zip", pa.int32())])),
            ]
        )
    ).to_pylist()
    assert back[0]["amount"] == "12.50" and back[0]["at"] == ROWS[0]["at"]
    assert back[0]["attrs"] == [("n", 3)]
    assert back[1]["customer"] is None and back[1]["address"] is None


def test_a_given_proto_file_nested_message_indexes_and_enum() -> None:
    text = """
        syntax = "proto3";
        package shop;
        message Other { string x = 1; }
        message Envelope {
          message Order {
            int64 id = 1;
            Kind kind = 2;
            uint64 big = 3;
          }
          enum Kind { NONE = 0; RETAIL = 1; }
        }
    """
    schema = parse_proto(text, message="Order")
    assert schema.message == "shop.Envelope.Order"
    assert schema.message_indexes == (1, 0)
    assert schema.message_at((1, 0)) == "shop.Envelope.Order"
    assert schema.message_at(()) == "shop.Other"
    values = pa.array(
        [{"id": 1, "kind": "RETAIL", "big": 2**63 + 5}],
        schema_type := pa.struct([("id", pa.int64()), ("kind", pa.string()), ("big", pa.uint64())]),
    )
    encoded = schema.encode(values)
    message = runtime_class(schema).FromString(encoded[0].as_py())
    assert (message.id, message.kind, message.big) == (1, 1, 2**63 + 5)
    assert schema.decoder()(encoded[0].as_py()) == {"id": 1, "kind": "RETAIL", "big": 2**63 + 5}
    assert schema_type.num_fields == 3


def test_rows_the_runtime_refuses_are_left_null_naming_the_field() -> None:
    schema = parse_proto(
        'syntax = "proto3"; enum E { A = 0; B = 1; }\n'
        "message X { int32 a = 1; Inner inner = 2; repeated uint32 xs = 3; E e = 4;\n"
        "  message Inner { int32 u = 1; } }"
    )
    t = pa.struct(
        [
            ("a", pa.int64()),
            ("inner", pa.struct([("u", pa.int64())])),
            ("xs", pa.list_(pa.int64())),
            ("e", pa.string()),
        ]
    )
    rows = [
        {"a": 1, "inner": {"u": 1}, "xs": [1], "e": "B"},
        {"a": 2**40, "inner": None, "xs": [], "e": "A"},
        {"a": 1, "inner": {"u": -(2**40)}, "xs": [], "e": "A"},
        {"a": 1, "inner": None, "xs": [0, -1], "e": "A"},
        {"a": 1, "inner": None, "xs": [], "e": "C"},
        None,
    ]
    encoded, misfits = schema.encode_rows(pa.array(rows, t))
    assert misfits == [
        (1, "field a: Value out of range: 1099511627776"),
        (2, "field inner.u: Value out of range: -1099511627776"),
        (3, "field xs[1]: Value out of range: -1"),
        (4, 'field e: unknown enum label "C"'),
    ]
    assert encoded.to_pylist()[1:] == [None] * 5
    message = runtime_class(schema).FromString(encoded[0].as_py())
    assert (message.a, message.inner.u, list(message.xs), message.e) == (1, 1, [1], 1)


def test_refusals_are_one_line() -> None:
    with pytest.raises(
        SchemaError, match=r'\.proto does not parse: schema\.proto:1:\d+: Expected ";"'
    ):
        parse_proto('syntax = "proto3"; message X { int32 a = 1 }')
    schema = parse_proto('syntax = "proto3"; message X { int32 a = 1; string b = 2; }')
    with pytest.raises(SchemaError, match=r"value\.c: message X has no field 'c'"):
        check_protobuf_schema(schema, pa.struct([("c", pa.int32())]), "value")
    with pytest.raises(SchemaError, match=r"value\.b: the message's field b is string"):
        check_protobuf_schema(schema, pa.struct([("b", pa.float64())]), "value")
    with pytest.raises(SchemaError, match=r"value: row 1 does not fit message X: .*out of range"):
        schema.encode(pa.array([{"a": 1}, {"a": 2**40}], pa.struct([("a", pa.int64())])))
    with pytest.raises(SchemaError, match="has no message 'Y'"):
        parse_proto('syntax = "proto3"; message X { int32 a = 1; }', message="Y")
    with pytest.raises(SchemaError, match=r"x\.l: a list of list"):
        proto_for(pa.struct([("l", pa.list_(pa.list_(pa.int32())))]), "x")


def test_timestamps_before_1970_and_inside_lists_keep_their_instant() -> None:
    arrow = pa.struct(
        [("at", pa.timestamp("us", tz="UTC")), ("times", pa.list_(pa.timestamp("ms")))]
    )
    schema = parse_proto(proto_for(arrow, "T"))
    before = dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc)
    encoded = schema.encode(
        pa.array([{"at": before, "times": [dt.datetime(1960, 1, 1, 0, 0, 0, 1000)]}], arrow)
    )
    message = runtime_class(schema).FromString(encoded[0].as_py())
    assert (message.at.seconds, message.at.nanos) == (-1, 999_999_000)
    assert message.times[0].ToDatetime() == dt.datetime(1960, 1, 1, 0, 0, 0, 1000)
