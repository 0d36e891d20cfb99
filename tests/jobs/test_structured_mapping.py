"""Keys and values made from columns in a structured format (`format: avro` / `json` of a column
list or a struct column) keep the arrow task reader, in the direct and the range mode, and write
the same bytes as Spark's path, which encodes with the same encoder in an Arrow UDF: JSON as
Spark's to_json writes it, Avro that fastavro reads, framed for the Schema Registry with a
schema_id. A row that does not fit a given .avsc stops the run with one line."""

from __future__ import annotations

import datetime
import decimal
import io
import json
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.ingest import run
from jobs.ingestion.config.ingest_config import IngestConfig
from kafkalog_core.errors import ConfigError, KafkaLogError, SchemaError
from kafkalog_core.schema import read_confluent_frame
from tests.jobs.ingest_helpers import read_root, snapshot

pytestmark = pytest.mark.spark

N = 300
COLUMNS = ["id", "user", "amount", "price", "event_time", "tags", "meta"]
UTC = datetime.timezone.utc


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("structured")
    rows = [
        {
            "id": i,
            "user": f"user-{i % 17}" if i % 11 else None,
            "amount": decimal.Decimal(i * 37 - 500).scaleb(-2),
            "price": i * 0.25 if i % 7 else None,
            "event_time": datetime.datetime(2024, 5, 1, tzinfo=UTC)
            + datetime.timedelta(seconds=i * 13.5),
            "tags": [f"t{j}" for j in range(i % 3)] if i % 5 else None,
            "meta": {"a": i % 4, "b": 'x\ny"' if i % 2 else None} if i % 9 else None,
        }
        for i in range(N)
    ]
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("user", pa.string()),
            ("amount", pa.decimal128(10, 2)),
            ("price", pa.float64()),
            ("event_time", pa.timestamp("us", tz="UTC")),
            ("tags", pa.list_(pa.string())),
            ("meta", pa.struct([("a", pa.int32()), ("b", pa.string())])),
        ]
    )
    table = pa.Table.from_pylist(rows, schema)
    path = base / "orders"
    path.mkdir()
    for k in range(3):
        pq.write_table(table.slice(k * N // 3, N // 3), path / f"part-{k}.parquet")
    return path


def _doc(
    source: Path, root: Path, reader: str, value: dict, *, key: dict | None = None, ordering=()
) -> dict:
    return {
        "source": {"format": "parquet", "path": str(source), "task_reader": reader},
        "output": {"root": str(root), "write_mode": "range" if ordering else "direct"},
        "topics": {"orders": {"partitions": 3, "config": {"segment.bytes": 1 << 20}}},
        "mapping": {
            "topic": "orders",
            "key": key or {"column": "user", "format": "string"},
            "value": value,
            "timestamp": {"column": "event_time"},
        },
        "ordering": list(ordering) if ordering else "source",
    }


def _both(spark, source: Path, tmp_path: Path, value: dict, **kw):
    results = {}
    for reader in ("arrow", "spark"):
        doc = _doc(source, tmp_path / reader, reader, value, **kw)
        results[reader] = run(spark, IngestConfig.from_dict(doc), run_id="r1", out=lambda _: None)
    assert results["arrow"].task_reader == "arrow"
    assert results["spark"].task_reader == "spark"
    assert results["arrow"].records == results["spark"].records == N
    assert snapshot(tmp_path / "arrow") == snapshot(tmp_path / "spark")
    return results


def test_json_of_columns_keeps_the_arrow_reader_and_writes_spark_to_json(spark, source, tmp_path):
    from pyspark.sql import functions as F

    _both(spark, source, tmp_path, {"columns": COLUMNS, "format": "json"})
    df = spark.read.parquet(str(source))
    expected = sorted(r.j for r in df.select(F.to_json(F.struct(*COLUMNS)).alias("j")).collect())
    written = sorted(r[4].decode() for r in read_root(tmp_path / "arrow"))
    assert written == expected


def test_json_in_the_arrow_range_mode(spark, source, tmp_path):
    results = _both(
        spark,
        source,
        tmp_path,
        {"columns": COLUMNS, "format": "json"},
        ordering=["event_time", "id"],
    )
    assert results["arrow"].write_mode == "range"
    assert "range mode: sorted runs exchanged through the run's staging" in results["arrow"].summary


def test_avro_of_columns_framed_with_a_schema_id(spark, source, tmp_path):
    value = {"columns": COLUMNS, "format": "avro", "schema_id": 42}
    key = {"columns": ["id"], "format": "avro"}  # a record of one long, no framing
    _both(spark, source, tmp_path, value, key=key)
    records = read_root(tmp_path / "arrow")
    frames = read_confluent_frame(pa.array([r[4] for r in records]))
    assert set(frames.schema_ids.to_pylist()) == {42}
    df = spark.read.parquet(str(source))
    from jobs.ingestion.mapping.structured import structured_value

    resolved = structured_value(
        df,
        IngestConfig.from_dict(_doc(source, tmp_path, "spark", value)).mapping.value,
        "mapping.value",
        "UTC",
        {},
    )
    schema = fastavro.parse_schema(resolved.encoding.schema)
    decoded = {}
    for payload in frames.payloads.to_pylist():
        row = fastavro.schemaless_reader(io.BytesIO(payload), schema)
        decoded[row["id"]] = row
    by_id = {r["id"]: r for r in df.toPandas().to_dict("records")}
    assert sorted(decoded) == list(range(N))
    assert decoded[5]["amount"] == decimal.Decimal("-3.15")
    assert decoded[5]["event_time"] == datetime.datetime(2024, 5, 1, 0, 1, 7, 500000, tzinfo=UTC)
    assert decoded[5]["tags"] is None and decoded[7]["tags"] == ["t0"] and decoded[6]["tags"] == []
    assert decoded[9]["meta"] is None and decoded[1]["meta"] == {"a": 1, "b": 'x\ny"'}
    assert decoded[7]["price"] is None and decoded[8]["price"] == by_id[8]["price"] == 2.0
    key_schema = fastavro.parse_schema(
        {
            "type": "record",
            "name": "topLevelRecord",
            "fields": [{"name": "id", "type": ["long", "null"]}],
        }
    )
    keys = sorted(fastavro.schemaless_reader(io.BytesIO(r[3]), key_schema)["id"] for r in records)
    assert keys == list(range(N))


def test_a_schema_file_that_does_not_fit_is_one_line(spark, source, tmp_path):
    avsc = tmp_path / "orders.avsc"
    avsc.write_text(
        json.dumps({"type": "record", "name": "o", "fields": [{"name": "id", "type": "string"}]})
    )
    doc = _doc(
        source,
        tmp_path / "logs",
        "auto",
        {"columns": ["id"], "format": "avro", "schema_file": str(avsc)},
    )
    with pytest.raises(
        SchemaError,
        match=r"mapping.value.schema_file=.*: .*field id is Arrow int64 but the schema says \"string\"",
    ):
        run(spark, IngestConfig.from_dict(doc), run_id="r1", out=lambda _: None)


@pytest.mark.parametrize("reader", ["arrow", "spark"])
def test_a_row_that_does_not_fit_stops_the_run_with_one_line(spark, source, tmp_path, reader):
    avsc = tmp_path / "orders.avsc"
    fields = [
        {"name": "id", "type": "long"},
        {"name": "price", "type": "double"},
    ]  # price has nulls
    avsc.write_text(json.dumps({"type": "record", "name": "o", "fields": fields}))
    value = {"columns": ["id", "price"], "format": "avro", "schema_file": str(avsc)}
    doc = _doc(source, tmp_path / "logs", reader, value)
    with pytest.raises(KafkaLogError) as info:
        run(spark, IngestConfig.from_dict(doc), run_id="r1", out=lambda _: None)
    message = str(info.value)
    assert message.startswith(
        "mapping.value (format avro): the row does not fit the value schema: field price is null "
        "and the schema has no null; record: topic='orders'"
    ), message
    assert "source row id=" in message
    assert "\n" not in str(info.value)
    assert not (tmp_path / "logs" / "orders-0").exists()


def test_settings_are_checked():
    base = _doc(Path("x"), Path("y"), "auto", {"columns": ["id"], "format": "avro"})
    for value, message in [
        ({"columns": ["id"], "format": "string"}, "format must be json or avro"),
        ({"column": "id", "format": "string", "schema_id": 3}, "apply to the formats"),
        (
            {"columns": ["id"], "format": "avro", "framing": "confluent"},
            "needs a schema id to frame with",
        ),
        (
            {"columns": ["id"], "format": "json", "schema_file": "a.avsc"},
            "format json takes no schema",
        ),
        ({"columns": ["id"], "format": "avro", "schema_id": -1}, "schema_id"),
    ]:
        base["mapping"]["value"] = value
        with pytest.raises(ConfigError, match=message):
            IngestConfig.from_dict(base)
