"""Reading framed and plain values back: records written by other implementations (fastavro's
writer, the protobuf runtime, json.dumps) under several schema versions decode into one reader
type; an unknown id, a record outside the framing and bad bytes each get a reason."""

from __future__ import annotations

import io
import json
import struct

import fastavro
import pyarrow as pa

from kafkalog_core.schema.decode import Decoding, decode_column
from kafkalog_core.schema.protobuf import parse_proto
from tests.schema.orders import AVRO_V1, AVRO_V2, runtime_class

V1, V2 = AVRO_V1, AVRO_V2


def framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">i", schema_id) + payload


def avro(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def test_avro_versions_resolve_to_the_reader_schema() -> None:
    payloads = pa.array(
        [
            framed(1, avro(V1, {"id": 1})),
            framed(2, avro(V2, {"id": 2, "currency": "USD", "at": 1_700_000_000_123})),
            None,
            framed(9, avro(V1, {"id": 3})),
            b"\x01\x00",
            b"\x03" + framed(1, b"")[1:],
            framed(1, b"\x80"),  # a varint that never ends
        ],
        pa.binary(),
    )
    decoding = Decoding("value", "avro", True, V2, {1: V1, 2: V2})
    values, reasons = decode_column(payloads, decoding)
    rows = values.to_pylist()
    assert rows[0] == {"id": 1, "currency": "EUR", "at": None}
    assert rows[1]["currency"] == "USD" and rows[1]["at"].timestamp() == 1_700_000_000.123
    assert rows[2] is None and reasons[2] is None  # a tombstone
    assert (
        reasons[3].startswith("unknown schema id 9 (in the header that value.framing=confluent")
        and rows[3] is None
    )
    assert (
        reasons[4]
        == "not in the registry framing (value.framing=confluent): the value is 2 bytes, shorter than the framing"
    )
    assert reasons[5] == (
        "not in the registry framing (value.framing=confluent): the value starts with byte 3, not the framing's magic byte 0"
    )
    assert reasons[6].startswith("bad bytes for schema id 1: ")
    assert reasons[:3] == [None, None, None]


def test_avro_plain_records_with_the_reader_schema() -> None:
    payloads = pa.array([avro(V2, {"id": 5, "currency": "CHF", "at": None})], pa.binary())
    values, reasons = decode_column(payloads, Decoding("key", "avro", False, V2))
    assert values.to_pylist() == [{"id": 5, "currency": "CHF", "at": None}] and reasons == [None]


def test_protobuf_versions_and_message_indexes() -> None:
    v1 = parse_proto('syntax = "proto3"; package shop; message Order { int64 id = 1; }')
    v2 = parse_proto(
        'syntax = "proto3"; package shop; message Header { string h = 1; }\n'
        "message Order { int64 id = 1; optional string currency = 2; }"
    )
    old = runtime_class(v1)(id=1).SerializeToString()
    new = runtime_class(v2.with_message("shop.Order"))(id=2, currency="USD").SerializeToString()
    payloads = pa.array(
        [framed(1, b"\x00" + old), framed(2, b"\x02\x02" + new), framed(2, b"\x02\x02\xff")],
        pa.binary(),
    )
    reader = v2.with_message("shop.Order")
    values, reasons = decode_column(
        payloads, Decoding("value", "protobuf", True, reader, {1: v1, 2: v2})
    )
    assert values.to_pylist()[:2] == [{"id": 1, "currency": None}, {"id": 2, "currency": "USD"}]
    assert reasons[:2] == [None, None]
    assert reasons[2].startswith("bad bytes for schema id 2: ")


def test_json_schema_values_in_one_arrow_read_and_a_bad_one_located() -> None:
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
    }
    docs = [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(3)]
    payloads = pa.array(
        [framed(4, docs[0]), framed(4, b"{not json"), None, framed(4, docs[2])], pa.binary()
    )
    values, reasons = decode_column(
        payloads, Decoding("value", "json_schema", True, schema, {4: schema})
    )
    assert values.to_pylist() == [{"id": 0, "name": "n0"}, None, None, {"id": 2, "name": "n2"}]
    assert (
        reasons[0] is None and reasons[1].startswith("bad JSON: ") and reasons[2:] == [None, None]
    )
    plain, none = decode_column(
        pa.array(docs, pa.binary()), Decoding("value", "json", False, schema)
    )
    assert plain.to_pylist()[1] == {"id": 1, "name": "n1"} and none == [None] * 3
