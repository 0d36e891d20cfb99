"""The Hive-format table runs of `test_hive_tables`, in a Spark process of their own.

Why a process: the test session's SparkSession has no Hive support, and
`spark.sql.catalogImplementation` is static, so Hive tables need a second JVM. This script
starts it once (local[2], a Derby metastore and a warehouse under the work dir), makes the
tables, ingests each with both task readers and writes what every run returned to
`<work>/results.json`; the tests assert on that and on the output dirs.

Usage: python -m tests.jobs.hive_runs WORK_DIR  (run from the repo root)
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

from jobs.ingest import run
from jobs.ingestion.config.ingest_config import IngestConfig
from tests.conftest import session_builder
from tests.jobs.ingest_helpers import config_doc, source_rows, write_parquet

DB = "hive_src"
TOPICS = {"events": {"partitions": 3, "config": {"segment.bytes": 8192}}}
ROWS = 240
SEED = 11
DAYS = ("2024-05-01", "2024-05-01", "a/b=c", "a/b=c", None)  # day of id: DAYS[id % 5]
# the Kafka partition from the int partition column (n = id % 3), the key the string one
BY_PARTITIONS = {"partition": {"column": "n"}, "key": {"column": "day", "format": "string"}}
COLUMNS = (
    "id bigint, topic string, `user` string, payload binary, event_time timestamp, "
    "attrs array<struct<key:string,value:string>>"
)


def session(work: Path):
    """A local Spark session with Hive support, its metastore and warehouse under `work`."""
    spark = (
        session_builder("kafkalog-hive-tests", driver_memory="1g")
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        .config(
            "spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={work / 'metastore_db'};create=true",
        )
        .config("spark.hadoop.hive.exec.dynamic.partition.mode", "nonstrict")
        .enableHiveSupport()
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def ingest(spark, work: Path, case: str, table: str, reader: str, **mapping) -> dict:
    """One ingest run of `table`: what it returned, or the error it raised."""
    root = work / case / reader / "logs"
    doc = config_doc(
        {"format": "table", "table": table},
        root,
        topics=TOPICS,
        ordering="source",
        mapping=mapping,
    )
    doc["source"]["task_reader"] = reader
    try:
        result = run(spark, IngestConfig.from_dict(doc), run_id="r1", out=lambda _: None)
    except Exception as error:  # noqa: BLE001 - the test asserts on what was raised
        return {"error": f"{type(error).__name__}: {error}", "root": str(root)}
    return {
        "task_reader": result.task_reader,
        "summary": result.summary,
        "records": result.records,
        "root": str(root),
    }


def make_parquet_table(spark, work: Path) -> dict:
    """A Hive-format Parquet table partitioned by (day string, n int): nine partitions (a day
    with characters Spark escapes, a null day), a few files each; returns its files and the ids
    in Spark's read order."""
    from pyspark.sql import functions as F

    spark.sql(
        f"CREATE TABLE {DB}.events ({COLUMNS}) PARTITIONED BY (day string, n int) STORED AS PARQUET"
    )
    rows = source_rows(ROWS, seed=SEED)
    src = spark.read.parquet(str(write_parquet(work / "input", rows)))
    day = F.col("id") % 5
    days = F.when(day < 2, "2024-05-01").when(day < 4, "a/b=c").otherwise(F.lit(None))
    df = src.drop("part").withColumn("day", days).withColumn("n", (F.col("id") % 3).cast("int"))
    df.repartition(2).write.insertInto(f"{DB}.events")
    read = spark.table(f"{DB}.events")
    return {
        "rows": rows,
        "files": sorted(read.inputFiles()),
        "order": [r.id for r in read.select("id").collect()],
    }


def make_text_table(spark) -> None:
    """A Hive-format text table (LazySimpleSerDe) with the same rows' key and value columns."""
    spark.sql(
        f"CREATE TABLE {DB}.as_text (id bigint, topic string, `user` string, payload string) "
        "STORED AS TEXTFILE"
    )
    spark.sql(f"INSERT INTO {DB}.as_text SELECT id, topic, `user`, hex(payload) FROM {DB}.events")


def main(argv: list[str]) -> int:
    work = Path(argv[0]).resolve()
    os.chdir(work)  # derby.log lands here
    spark = session(work)
    out: dict = {}
    try:
        spark.sql(f"CREATE DATABASE {DB}")
        table = f"{DB}.events"
        out["table"] = make_parquet_table(spark, work)
        out["describe"] = {
            r.col_name: r.data_type for r in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
        }
        for reader in ("arrow", "spark"):
            out.setdefault("parquet", {})[reader] = ingest(spark, work, "parquet", table, reader)
            out.setdefault("by_n", {})[reader] = ingest(
                spark, work, "by_n", table, reader, **BY_PARTITIONS
            )
        spark.conf.set("spark.sql.hive.convertMetastoreParquet", "false")
        for reader in ("auto", "arrow"):
            out.setdefault("serde", {})[reader] = ingest(spark, work, "serde", table, reader)
        spark.conf.set("spark.sql.hive.convertMetastoreParquet", "true")
        make_text_table(spark)
        text_mapping = {"headers": None, "timestamp": "now"}
        for reader in ("auto", "arrow"):
            out.setdefault("text", {})[reader] = ingest(
                spark, work, "text", f"{DB}.as_text", reader, **text_mapping
            )
    except Exception:  # noqa: BLE001 - reported to the tests, which fail on it
        out["failed"] = traceback.format_exc()
    finally:
        (work / "results.json").write_text(json.dumps(out, default=str, indent=1))
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
