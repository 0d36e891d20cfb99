"""kafkalog's Avro held to Spark's own (spark-avro, from Maven at pyspark's version, in the run's
session): `to_avro` of the same columns with the same schema gives the same value bytes as the
ingest job's Avro after the registry's five-byte header, and the data source's `value_decoded`
equals `from_avro` of the same bytes."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs import ingest
from jobs.ingestion.config.ingest_config import IngestConfig
from tests.jobs.ingest_helpers import config_doc, read_partition
from tests.schema.standin_registry import StandInRegistry

pytestmark = pytest.mark.spark

COLUMNS = ["id", "name", "amount", "ratio", "flag", "blob", "price", "day", "at", "tags", "where"]
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("amount", pa.int32()),
        ("ratio", pa.float64()),
        ("flag", pa.bool_()),
        ("blob", pa.binary()),
        ("price", pa.decimal128(10, 2)),
        ("day", pa.date32()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("tags", pa.list_(pa.string())),
        ("where", pa.struct([("city", pa.string()), ("zip", pa.int32())])),
        pa.field("ts", pa.timestamp("ms", tz="UTC"), nullable=False),  # the record timestamp
    ]
)


def _rows(n: int) -> list[dict]:
    t0 = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
    rows = []
    for i in range(n):
        empty = i % 7 == 3  # every nullable column null
        rows.append(
            {
                "id": i,
                "name": None if empty else f"name-{i}-\u00e9\u4e2d" * (i % 3),
                "amount": None if empty else (i - 20) * 100_003,
                "ratio": None if empty else i / 7 - 1.5,
                "flag": None if empty else i % 2 == 0,
                "blob": None if empty else bytes(range(i % 11)),
                "price": None if empty else decimal.Decimal(i * 1234 - 9000) / 100,
                "day": None if empty else dt.date(2024, 1, 1) + dt.timedelta(days=i * 3),
                "at": None if empty else t0 + dt.timedelta(seconds=i * 61, microseconds=i),
                "tags": None if empty else [f"t{j}" for j in range(i % 4)],
                "where": None if empty else {"city": f"c{i}" if i % 5 else None, "zip": i},
                "ts": t0,
            }
        )
    return rows


def test_avro_values_are_spark_to_avro_bytes_and_decode_as_from_avro(spark, tmp_path: Path):
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro, to_avro

    source = tmp_path / "src"
    source.mkdir()
    pq.write_table(pa.Table.from_pylist(_rows(40), schema=SCHEMA), source / "part-0.parquet")
    root = tmp_path / "out"
    mapping = {
        "key": {"column": "id", "format": "string"},
        "value": {
            "columns": COLUMNS,
            "format": "avro",
            "record_name": "shop.Row",
            "schema_registry": {"auto_register": True},
        },
    }
    with StandInRegistry() as registry:
        mapping["value"]["schema_registry"]["url"] = registry.url
        doc = config_doc(source, root, mapping=mapping, ordering=["id"])
        doc["mapping"]["timestamp"] = {"column": "ts"}
        del doc["mapping"]["headers"]
        doc["topics"]["events"]["partitions"] = 1
        ingest.run(spark, IngestConfig.from_dict(doc), run_id="avro", out=lambda *_: None)
        ((_, schema_text),) = registry.state.schemas
        records, _ = read_partition(root / "events-0")
        ours = {int(key): value for _, key, value, _, _ in records}
        assert len(ours) == 40 and all(v[:5] == b"\x00\x00\x00\x00\x01" for v in ours.values())

        src = spark.read.parquet(str(source))
        spark_bytes = {
            r.id: bytes(r.avro)
            for r in src.select(
                "id", to_avro(F.struct(*COLUMNS), schema_text).alias("avro")
            ).collect()
        }
        assert spark_bytes == {i: v[5:] for i, v in ours.items()}

        read = (
            spark.read.format("kafkalog")
            .option("subscribe", "events")
            .option("value.format", "avro")
            .option("value.schema_registry.url", registry.url)
            .load(str(root))
        )
        decoded = read.select(
            "offset",
            F.to_json("value_decoded").alias("ours"),
            F.to_json(from_avro(F.expr("substring(value, 6)"), schema_text)).alias("spark"),
        ).collect()
    assert len(decoded) == 40
    for row in decoded:
        assert row.ours == row.spark, row.offset
