"""A topic written with a schema reads back: values framed by confluent-kafka's own serializers
(AvroSerializer, ProtobufSerializer, JSONSerializer) against the stand-in registry, read with the registry or with
only a local schema (the framing is the default for avro, protobuf and json_schema); and a
topic kafkalog wrote with `schema_id` and no registry, read with no schema at all (the writer
schemas kept with the output, jobs/schemas/store.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from jobs.schemas.store import WriterSchemaStore
from kafkalog_core.schema.protobuf import parse_proto
from tests.datasource.helpers import read
from tests.schema.orders import AVRO_V1, runtime_class, text
from tests.schema.standin_registry import StandInRegistry
from tests.schema.test_read_decoded import write_values
from tests.schema.test_write_formats import orders, write

pytestmark = pytest.mark.spark

JSON_ORDER = {
    "type": "object",
    "title": "Order",
    "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
}
PROTO = 'syntax = "proto3"; package shop; message Order { int64 id = 1; string name = 2; }'


def _decoded(df) -> list[dict]:
    rows = sorted(df.collect(), key=lambda r: r.offset)
    return [r.value_decoded.asDict() for r in rows]


def test_confluent_serializers_values_read_with_the_registry_or_a_local_schema(
    spark, tmp_path: Path
) -> None:
    with StandInRegistry() as registry:
        client = SchemaRegistryClient({"url": registry.url})
        avro = AvroSerializer(client, text(AVRO_V1))
        js = JSONSerializer(json.dumps(JSON_ORDER), client)
        write_values(
            tmp_path,
            "av",
            [avro({"id": i}, SerializationContext("av", MessageField.VALUE)) for i in (1, 2)],
        )
        write_values(
            tmp_path,
            "js",
            [js({"id": 3, "name": "x"}, SerializationContext("js", MessageField.VALUE))],
        )
        order = runtime_class(parse_proto(PROTO))
        pb = ProtobufSerializer(order, client, {"use.deprecated.format": False})
        write_values(
            tmp_path,
            "pb",
            [pb(order(id=4, name="y"), SerializationContext("pb", MessageField.VALUE))],
        )
        by_registry = {"value.schema_registry.url": registry.url}
        assert _decoded(
            read(spark, tmp_path, subscribe="pb", **{"value.format": "protobuf"}, **by_registry)
        ) == [{"id": 4, "name": "y"}]
        assert _decoded(
            read(spark, tmp_path, subscribe="av", **{"value.format": "avro"}, **by_registry)
        ) == [{"id": 1}, {"id": 2}]
        assert _decoded(
            read(spark, tmp_path, subscribe="js", **{"value.format": "json_schema"}, **by_registry)
        ) == [{"id": 3, "name": "x"}]
    # no registry, no framing option: every Confluent serializer frames its values
    local = {"value.format": "avro", "value.schema": text(AVRO_V1)}
    assert _decoded(read(spark, tmp_path, subscribe="av", **local)) == [{"id": 1}, {"id": 2}]
    local = {"value.format": "protobuf", "value.schema": PROTO}
    assert _decoded(read(spark, tmp_path, subscribe="pb", **local)) == [{"id": 4, "name": "y"}]
    local = {"value.format": "json_schema", "value.schema": json.dumps(JSON_ORDER)}
    assert _decoded(read(spark, tmp_path, subscribe="js", **local)) == [{"id": 3, "name": "x"}]


def test_plain_values_read_with_the_default_framing_name_it(spark, tmp_path: Path) -> None:
    write_values(tmp_path, "plain", [b"\x02"])  # an Avro long 1, no framing
    local = {"value.format": "avro", "value.schema": text(AVRO_V1)}
    with pytest.raises(Exception) as failed:
        read(spark, tmp_path, subscribe="plain", **local).collect()
    assert "(value.framing=confluent): the value is 1 bytes" in str(failed.value)
    plain = read(spark, tmp_path, subscribe="plain", **local, **{"value.framing": "none"})
    assert _decoded(plain) == [{"id": 1}]


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json_schema"])
def test_written_with_a_schema_id_reads_back_with_no_schema(
    spark, tmp_path: Path, fmt: str
) -> None:
    frame = orders(spark, [(1, "ada")], "id bigint, customer string")
    write(frame, tmp_path, **{"value.format": fmt, "value.schema_id": "7"})
    stored = WriterSchemaStore.of_output(tmp_path).load("orders-value")
    assert stored is not None and (stored.format, stored.latest) == (fmt, 7)
    # a later run with the same columns frames with the same id and schema
    write(
        orders(spark, [(2, "bob")], "id bigint, customer string"),
        tmp_path,
        **{"value.format": fmt, "value.schema_id": "7"},
    )
    df = read(spark, tmp_path, subscribe="orders", **{"value.format": fmt})
    assert _decoded(df) == [{"id": 1, "customer": "ada"}, {"id": 2, "customer": "bob"}]
    # an id names one schema for good: another schema under id 7 is refused before writing
    frame = orders(spark, [(3, 3.5)], "id bigint, price double")
    with pytest.raises(Exception, match="schema id 7 already names another schema"):
        write(frame, tmp_path, **{"value.format": fmt, "value.schema_id": "7"})
    assert len(_decoded(read(spark, tmp_path, subscribe="orders", **{"value.format": fmt}))) == 2


def test_a_failed_option_check_and_a_bad_value_are_one_line(spark, tmp_path: Path) -> None:
    write_values(tmp_path, "orders", [b"x"])
    with pytest.raises(Exception) as failed:
        read(spark, tmp_path, subscribe="orders", **{"value.format": "avro"}).schema  # noqa: B018
    assert "value.format=avro needs a reader schema" in str(failed.value)
    assert "Traceback" not in str(failed.value)
    local = {"value.format": "avro", "value.schema": text(AVRO_V1)}
    with pytest.raises(Exception) as failed:
        read(spark, tmp_path, subscribe="orders", **local).collect()
    assert "cannot decode the value of orders-0 at offset 0" in str(failed.value)
    assert "Traceback" not in str(failed.value)
