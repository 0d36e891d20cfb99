"""df.write.format("kafkalog") with value.format: records framed for a registry, decoded by
implementations we did not write (the Apache `avro` package and fastavro for Avro, the protobuf
runtime for Protobuf, `jsonschema` for JSON Schema), and read back through our read side with
two schema versions in one topic. The registry is the stand-in (a local HTTP server that stands
in for a Schema Registry)."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import avro.io
import avro.schema
import fastavro
import jsonschema
import pytest

from jobs.schemas.registry import Registry
from jobs.schemas.settings import RegistrySettings
from kafkalog_core.schema.protobuf import parse_proto
from tests.datasource.helpers import oracle, read
from tests.schema.orders import runtime_class
from tests.schema.standin_registry import StandInRegistry

pytestmark = pytest.mark.spark

AT = datetime(2024, 5, 1, 12, 30, tzinfo=timezone.utc)
ROWS = [(1, "ada", Decimal("12.50"), AT), (2, None, None, None), (3, "bob", Decimal("0.01"), AT)]
DDL = "id bigint, customer string, amount decimal(10,2), at timestamp"


def orders(spark, rows=ROWS, ddl=DDL):
    """The rows as a `value` struct column, as a sink's caller builds it."""
    frame = spark.createDataFrame(rows, ddl)
    return frame.selectExpr(
        "CAST(id AS STRING) AS key", f"struct({', '.join(frame.columns)}) AS value"
    )


def write(frame, root: Path, **options: str) -> None:
    writer = frame.coalesce(1).write.format("kafkalog").mode("append").option("topic", "orders")
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save(str(root))


def values(root: Path) -> list[bytes]:
    return [value for _, _, _, value in oracle(root / "orders-0")]


def unframe(value: bytes) -> tuple[int, bytes]:
    assert value[0] == 0
    return int.from_bytes(value[1:5], "big"), value[5:]


def test_avro_auto_registered_read_by_apache_avro_fastavro_and_our_reader(
    spark, tmp_path: Path
) -> None:
    with StandInRegistry() as registry:
        url = {"value.format": "avro", "value.schema_registry.url": registry.url}
        write(orders(spark), tmp_path, **url, **{"value.schema_registry.auto_register": "true"})
        # a second version: one more column; Spark's derived schema makes it nullable (a union
        # with null), which the registry's backward check accepts only with a default, so v2
        # is registered by hand, as a schema's owner would, and the write looks it up by file
        registered = Registry(RegistrySettings(url=registry.url)).version("orders-value", None)
        v1 = json.loads(registered.schema)
        v2 = {
            **v1,
            "fields": [
                *v1["fields"],
                {"name": "currency", "type": ["null", "string"], "default": None},
            ],
        }
        v2_file = tmp_path / "orders-v2.avsc"
        v2_file.write_text(json.dumps(v2))
        v2_id = registry.register("orders-value", json.dumps(v2))
        write(
            orders(spark, [(4, "cy", Decimal("1.00"), AT, "CHF")], f"{DDL}, currency string"),
            tmp_path,
            **url,
            **{"value.schema_file": str(v2_file)},
        )
        written = values(tmp_path)
        ids = [unframe(v)[0] for v in written]
        assert ids == [registered.schema_id] * 3 + [v2_id]
        # Apache's reference implementation and fastavro decode the payloads
        apache = avro.schema.parse(registered.schema)
        first = avro.io.DatumReader(apache).read(
            avro.io.BinaryDecoder(io.BytesIO(unframe(written[0])[1]))
        )
        assert (first["id"], first["customer"], first["amount"]) == (1, "ada", Decimal("12.50"))
        assert first["at"] == AT
        fast = fastavro.parse_schema(v1)
        second = fastavro.schemaless_reader(io.BytesIO(unframe(written[1])[1]), fast)
        assert second == {"id": 2, "customer": None, "amount": None, "at": None}
        # our read side: both versions as the latest's type
        df = read(spark, tmp_path, subscribe="orders", **url)
        got = sorted((r.value_decoded.asDict() for r in df.collect()), key=lambda r: r["id"])
    assert [r["currency"] for r in got] == [None, None, None, "CHF"]
    assert got[0]["amount"] == Decimal("12.50") and got[0]["at"] == AT.replace(tzinfo=None)


def test_protobuf_with_a_schema_id_read_by_the_runtime(spark, tmp_path: Path) -> None:
    proto = tmp_path / "orders.proto"
    proto.write_text(
        'syntax = "proto3";\npackage shop;\nmessage Audit { string who = 1; }\n'
        "message Order { int64 id = 1; optional string customer = 2; string amount = 3; }\n"
    )
    frame = orders(
        spark, [(1, "ada", Decimal("12.50"))], "id bigint, customer string, amount decimal(10,2)"
    )
    write(
        frame,
        tmp_path,
        **{
            "value.format": "protobuf",
            "value.schema_file": str(proto),
            "value.record_name": "Order",
            "value.schema_id": "21",
        },
    )
    (value,) = values(tmp_path)
    assert value[:5] == b"\x00\x00\x00\x00\x15"
    assert value[5:7] == b"\x02\x02"  # message indexes: one index, 1 (zig-zag varints)
    message = runtime_class(parse_proto(proto.read_text(), "Order")).FromString(value[7:])
    assert (message.id, message.customer, message.amount) == (1, "ada", "12.50")


def test_json_schema_registered_and_checked_by_jsonschema(spark, tmp_path: Path) -> None:
    with StandInRegistry() as registry:
        options = {
            "value.format": "json_schema",
            "value.schema_registry.url": registry.url,
            "value.schema_registry.auto_register": "true",
        }
        write(orders(spark), tmp_path, **options)
        schema = json.loads(
            Registry(RegistrySettings(url=registry.url)).version("orders-value", None).schema
        )
        validator = jsonschema.Draft7Validator(schema)
        for value in values(tmp_path):
            assert validator.is_valid(json.loads(unframe(value)[1]))
        df = read(
            spark,
            tmp_path,
            subscribe="orders",
            **{k: v for k, v in options.items() if "auto" not in k},
        )
        ids = sorted(r.value_decoded.id for r in df.collect())
    assert ids == [1, 2, 3]


def test_write_refusals_are_one_line(spark, tmp_path: Path) -> None:
    with StandInRegistry() as registry:
        with pytest.raises(
            Exception,
            match="subject 'orders-value' version latest: Subject 'orders-value' not found",
        ):
            write(
                orders(spark),
                tmp_path,
                **{"value.format": "avro", "value.schema_registry.url": registry.url},
            )
        bad = tmp_path / "bad.proto"
        bad.write_text('syntax = "proto3";\nmessage {')
        with pytest.raises(
            Exception,
            match=r"value.schema_file='.*bad.proto': .proto does not parse: schema.proto:2:9: Expected ",
        ):
            write(
                orders(spark),
                tmp_path,
                **{"value.format": "protobuf", "value.schema_file": str(bad)},
            )
    assert not (tmp_path / "orders-0").exists()  # nothing written
