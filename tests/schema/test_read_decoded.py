"""spark.read.format("kafkalog") with decoded values: records framed for a registry under two
schema versions (written by fastavro and the protobuf runtime, not by us) in one topic come out
as one struct type; unknown ids and bad bytes fail the read with one line naming topic,
partition and offset, or give null and the reason with decode.onError=null. The registry is the
stand-in (a local HTTP server standing in for a Schema Registry)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from kafkalog_core.log import PartitionLog
from tests.datasource.helpers import SMALL_SEGMENTS, read
from tests.schema.orders import AVRO_V1, AVRO_V2, runtime_class, text
from tests.schema.standin_registry import StandInRegistry
from tests.schema.test_decode import avro

pytestmark = pytest.mark.spark


def framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">i", schema_id) + payload


def write_values(root: Path, topic: str, values: list[bytes | None]) -> None:
    log = PartitionLog.create(root / f"{topic}-0", SMALL_SEGMENTS)
    log.append_records(
        pa.table(
            {
                "key": pa.array([None] * len(values), pa.binary()),
                "value": pa.array(values, pa.binary()),
                "timestamp": pa.array(range(len(values)), pa.int64()),
            }
        )
    )
    log.close()


def test_avro_versions_in_one_topic_read_as_the_latest(spark, tmp_path: Path) -> None:
    with StandInRegistry() as registry:
        v1 = registry.register("orders-value", text(AVRO_V1))
        v2 = registry.register("orders-value", text(AVRO_V2))
        write_values(
            tmp_path,
            "orders",
            [
                framed(v1, avro(AVRO_V1, {"id": 1})),
                framed(v2, avro(AVRO_V2, {"id": 2, "currency": "USD", "at": 1_700_000_000_000})),
                None,
            ],
        )
        df = read(
            spark,
            tmp_path,
            subscribe="orders",
            **{"value.format": "avro", "value.schema_registry.url": registry.url},
        )
        assert df.schema["value_decoded"].dataType.simpleString() == (
            "struct<id:bigint,currency:string,at:timestamp>"
        )
        rows = sorted((r.asDict(recursive=True) for r in df.collect()), key=lambda r: r["offset"])
        asked = list(registry.state.requests)
    decoded = [r["value_decoded"] for r in rows]
    assert decoded[0] == {"id": 1, "currency": "EUR", "at": None}
    assert decoded[1]["currency"] == "USD" and decoded[1]["at"].timestamp() == 1_700_000_000
    assert decoded[2] is None
    # the registry was asked by the driver only, a few calls for the whole read
    assert len(asked) <= 6, asked


def test_unknown_id_fails_with_one_line_or_null_and_the_reason(spark, tmp_path: Path) -> None:
    with StandInRegistry() as registry:
        v1 = registry.register("orders-value", text(AVRO_V1))
        write_values(
            tmp_path, "orders", [framed(v1, avro(AVRO_V1, {"id": 1})), framed(42, b"\x02")]
        )
        options = {
            "subscribe": "orders",
            "value.format": "avro",
            "value.schema_registry.url": registry.url,
        }
        with pytest.raises(Exception) as failed:
            read(spark, tmp_path, **options).collect()
        assert (
            "kafkalog: cannot decode the value of orders-0 at offset 1: unknown schema id 42 "
            in str(failed.value)
        )
        rows = read(spark, tmp_path, **options, **{"decode.onError": "null"})
        got = [
            (r.value_decoded, r.decode_error)
            for r in sorted(rows.collect(), key=lambda r: r.offset)
        ]
    assert got[0][0].asDict() == {"id": 1} and got[0][1] is None
    assert got[1][0] is None and got[1][1].startswith("value: unknown schema id 42 (in the header")


def test_protobuf_and_json_schema_with_a_reader_schema_and_no_registry(
    spark, tmp_path: Path
) -> None:
    from kafkalog_core.schema.protobuf import parse_proto

    proto = 'syntax = "proto3"; package shop; message Order { int64 id = 1; string name = 2; }'
    message = runtime_class(parse_proto(proto))
    write_values(
        tmp_path,
        "pb",
        [framed(3, b"\x00" + message(id=5, name="x").SerializeToString())],
    )
    write_values(tmp_path, "js", [json.dumps({"id": 6, "name": "y"}).encode()])
    pb = read(
        spark,
        tmp_path,
        subscribe="pb",
        **{"value.format": "protobuf", "value.schema": proto, "value.framing": "confluent"},
    )
    assert pb.select("value_decoded.*").collect()[0].asDict() == {"id": 5, "name": "x"}
    schema = json.dumps(
        {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}
    )
    js = read(spark, tmp_path, subscribe="js", **{"value.format": "json", "value.schema": schema})
    assert js.select("value_decoded.*").collect()[0].asDict() == {"id": 6, "name": "y"}


def test_bad_read_options_are_one_line(spark, tmp_path: Path) -> None:
    write_values(tmp_path, "orders", [b"x"])
    with pytest.raises(Exception, match="value.format=avro needs a reader schema"):
        read(spark, tmp_path, subscribe="orders", **{"value.format": "avro"}).schema  # noqa: B018
    with pytest.raises(Exception, match=r"value.format='xml' is invalid"):
        read(spark, tmp_path, subscribe="orders", **{"value.format": "xml"}).schema  # noqa: B018
