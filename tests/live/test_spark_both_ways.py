"""Spark reads a placed topic both ways: its own Kafka source (`format("kafka")`, the
spark-sql-kafka-0-10 jars of the run's `spark`) from the live broker, and `format("kafkalog")`
from kafkalog's output dirs with no broker. The two DataFrames are equal: all seven columns,
and `headers` with includeHeaders.

The topic: two partitions of a few segments each, gzip batches, null and repeated keys, an
empty value, headers (none, one, a repeated key, a null value), CreateTime from 2024.
"""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from kafkalog_core.tools.place import run_place
from tests.kafka_cluster import KafkaCluster
from tests.live.records import create_topic, write_partition

TOPIC = "both-ways"
SETTINGS = {"retention.ms": "-1", "compression.type": "gzip"}
WRITE = {**SETTINGS, "segment.bytes": "6000"}
HEADER = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
N = 250


def records(partition: int) -> pa.Table:
    def headers(i: int) -> list | None:
        kinds = [None, [("trace", b"%d" % i)], [("dup", b"a"), ("dup", b"b")], [("null", None)]]
        return kinds[i % 4]

    return pa.table(
        {
            "key": [None if i % 7 == 0 else b"k%d" % (i % 30) for i in range(N)],
            "value": [b"" if i % 11 == 0 else b"p%d-v%d" % (partition, i) * 4 for i in range(N)],
            "timestamp": pa.array(
                [1_714_550_400_000 + 1000 * i + partition for i in range(N)], pa.int64()
            ),
            "headers": pa.array([headers(i) for i in range(N)], HEADER),
        }
    )


@pytest.fixture(scope="module")
def placed(kafka_broker: KafkaCluster, tmp_path_factory) -> Path:
    """The topic written by kafkalog, placed into the stopped broker, the broker started; the
    output root."""
    output = tmp_path_factory.mktemp("both-ways") / "output"
    for p in (0, 1):
        write_partition(output, TOPIC, p, records(p), max_batch_bytes=1500, **WRITE)
    create_topic(kafka_broker, TOPIC, 2, **SETTINGS)
    kafka_broker.stop()
    (node,) = kafka_broker.nodes.values()
    out = io.StringIO()
    status = run_place(
        str(output), [str(node.log_dirs[0])], [TOPIC], out, apply=True,
        topic_configs={TOPIC: SETTINGS},
    )  # fmt: skip
    assert status == 0, out.getvalue()
    kafka_broker.start()
    return output


@pytest.mark.parametrize("headers", [False, True], ids=["seven-columns", "with-headers"])
def test_sparks_kafka_source_and_kafkalog_read_the_same_dataframe(
    spark, kafka_broker, placed, headers
) -> None:
    include = str(headers).lower()
    from_broker = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", include)
        .load()
    )
    from_dirs = (
        spark.read.format("kafkalog")
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", include)
        .load(str(placed))
    )
    columns = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if headers:
        columns.append("headers")
    assert from_broker.columns == columns and from_dirs.columns == columns
    order = ["partition", "offset"]
    broker_rows, dir_rows = from_broker.orderBy(*order), from_dirs.orderBy(*order)
    assert broker_rows.count() == 2 * N
    assert_df_equality(broker_rows, dir_rows, ignore_nullable=True)
