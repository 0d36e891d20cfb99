"""One `df.write.format("kafkalog")` as a Spark driver of its own (local[1]: one task at a time,
so the killer's step count is the same in every run), for the kill tests and bench/crash.py:

    python -m tests.datasource.write_driver ROOT RUN_ID

`frame` and `write` are the same write for a test's own SparkSession.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

ROWS = 600
PARTITIONS = 2  # of the topic
TASKS = 3  # of the frame: task 0 stages segments, the later tasks stage records
OPTIONS = {
    "topic": "orders",
    "topics.orders.partitions": str(PARTITIONS),
    "topics.orders.config.segment.bytes": "4000",  # a few segments per partition and run
    "topics.orders.config.index.interval.bytes": "500",
}


def frame(spark, first: int = 0):
    """ROWS rows (keyed, timestamped, one header each) in TASKS Spark partitions: the same rows
    in the same order in every session."""
    from pyspark.sql import functions as F

    stamp = datetime(2024, 5, 1, tzinfo=timezone.utc)
    ids = spark.range(first, first + ROWS, 1, TASKS)
    return ids.select(
        F.concat(F.lit("k"), (F.col("id") % 17).cast("string")).cast("binary").alias("key"),
        F.concat(F.lit("value-"), F.col("id").cast("string")).cast("binary").alias("value"),
        (F.lit(stamp) + F.make_interval(secs=F.col("id"))).alias("timestamp"),
        F.array(
            F.struct(
                F.lit("h").alias("key"), F.col("id").cast("string").cast("binary").alias("value")
            )
        ).alias("headers"),
    )


def write(spark, root: str, run_id: str, first: int = 0) -> None:
    writer = frame(spark, first).write.format("kafkalog").mode("append").option("runId", run_id)
    for name, value in OPTIONS.items():
        writer = writer.option(name, value)
    writer.save(root)


def command(root: Path, run_id: str) -> list[str]:
    """The command line of this driver writing run `run_id` into `root`."""
    return [sys.executable, "-m", "tests.datasource.write_driver", str(root), run_id]


def main(argv: list[str]) -> None:
    from tests.conftest import session_builder

    root, run_id = argv
    spark = session_builder("kafkalog-write-driver").master("local[1]").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    write(spark, root, run_id)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
