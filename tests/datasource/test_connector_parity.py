"""`format("kafkalog")` against Spark's own `format("kafka")`: the same option sets, run on a
live broker (tests/kafka_cluster.py, the `kafka_broker` fixture; Spark's connector jars are on
the tests' SparkSession) and on that broker's stopped log dir. Rows, errors (by kind) and the
rows of each streaming micro-batch must agree.

The broker holds topic `p` (3 partitions): keyed records, some with headers, some without,
timestamps one second apart. Every `format("kafka")` read runs while the broker is up; the
broker is then stopped (its logs closed cleanly) and every `format("kafkalog")` read runs on its
log dir, with the same options, `kafka.bootstrap.servers` included (taken with a warning).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.live.records import create_topic

pytestmark = pytest.mark.spark

TOPIC, PARTITIONS, PER_PARTITION = "p", 3, 40
# recent, so that the broker's retention (7 days) keeps every record while the module runs
BASE_TS = (int(time.time()) - 3600) * 1000
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")

# name -> the options of one batch read (subscription included)
BATCH = {
    "everything": {"subscribe": TOPIC},
    "headers": {"subscribe": TOPIC, "includeHeaders": "true"},
    "pattern": {"subscribePattern": " p "},
    "assign and offsets": {
        "assign": json.dumps({TOPIC: [0, 2]}),
        "startingOffsets": json.dumps({TOPIC: {"0": 5, "2": -2}}),
        "endingOffsets": json.dumps({TOPIC: {"0": 30, "2": -1}}),
    },
    "timestamps": {
        "subscribe": TOPIC,
        "startingTimestamp": str(BASE_TS + 10_000),
        "endingTimestamp": str(BASE_TS + 20_000),
    },
    "read_committed": {"subscribe": TOPIC, "kafka.isolation.level": "read_committed"},
    "stream options on a batch read": {"subscribe": TOPIC, "maxOffsetsPerTrigger": "7"},
    "start after end": {
        "subscribe": TOPIC,
        "startingOffsets": json.dumps({TOPIC: {"0": 30, "1": 0, "2": 0}}),
        "endingOffsets": json.dumps({TOPIC: {"0": 20, "1": -1, "2": -1}}),
    },
}
STREAM = {"subscribe": TOPIC, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "50"}


def _produce(cluster) -> None:
    create_topic(cluster, TOPIC, PARTITIONS)
    producer = Producer(cluster.client_config(acks="all"))
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            headers = [("h", b"%d" % i)] if i % 3 else None
            producer.produce(
                TOPIC,
                key=b"k%d" % i,
                value=b"v-%d-%d" % (p, i),
                partition=p,
                timestamp=BASE_TS + i * 1000,
                headers=headers,
            )
    assert producer.flush(60) == 0


def _batch(spark, fmt: str, path: str | None, servers: str, options: dict[str, str]):
    """(rows, None) or (None, the error's kind) of one batch read."""
    reader = spark.read.format(fmt).option("kafka.bootstrap.servers", servers)
    for name, value in options.items():
        reader = reader.option(name, value)
    try:
        frame = reader.load(path) if path else reader.load()
        wanted = [*COLUMNS, "headers"] if "includeHeaders" in options else list(COLUMNS)
        rows = sorted(tuple(_plain(r[c]) for c in wanted) for r in frame.collect())
        return rows, None, None
    except Exception as error:  # noqa: BLE001 (compared by kind below)
        return None, _kind(error), str(error)[:2000]


def _plain(value):
    if isinstance(value, list):
        return tuple((h["key"], bytes(h["value"])) for h in value)
    return bytes(value) if isinstance(value, bytearray) else value


def _kind(error: Exception) -> str:
    """An error's kind: "offsets" for a start after an end (Spark: IllegalArgumentException,
    kafkalog: its option error, both at planning, in the same words), else its class name."""
    if "is greater than the end offset" in str(error):
        return "offsets"
    return type(error).__name__


def _stream(spark, fmt: str, path: str | None, servers: str, checkpoint: Path) -> list[list]:
    """Each non-empty micro-batch's (partition, offset) rows, with Trigger.AvailableNow."""
    reader = spark.readStream.format(fmt).option("kafka.bootstrap.servers", servers)
    for name, value in STREAM.items():
        reader = reader.option(name, value)
    batches: dict[int, list] = {}
    query = (
        (reader.load(path) if path else reader.load())
        .selectExpr("partition", "offset")
        .writeStream.foreachBatch(
            lambda df, batch_id: batches.__setitem__(
                batch_id, sorted((r.partition, r.offset) for r in df.collect())
            )
        )
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return [rows for _, rows in sorted(batches.items()) if rows]


@pytest.fixture(scope="module")
def results(spark, kafka_broker, tmp_path_factory):
    """Every option set's result from Spark's connector (broker up) and from kafkalog (the
    broker stopped, its log dir read)."""
    _produce(kafka_broker)
    servers = kafka_broker.bootstrap_servers
    work = tmp_path_factory.mktemp("parity")
    kafka = {name: _batch(spark, "kafka", None, servers, o) for name, o in BATCH.items()}
    kafka_stream = _stream(spark, "kafka", None, servers, work / "kafka-ckpt")
    kafka_broker.stop()
    try:
        log_dir = str(kafka_broker.log_dirs[0])
        ours = {name: _batch(spark, "kafkalog", log_dir, servers, o) for name, o in BATCH.items()}
        ours_stream = _stream(spark, "kafkalog", log_dir, servers, work / "kafkalog-ckpt")
    finally:
        kafka_broker.start()
    return kafka, ours, kafka_stream, ours_stream


@pytest.mark.parametrize("name", sorted(BATCH))
def test_a_batch_read_gives_what_spark_kafka_gives(results, name: str) -> None:
    kafka, ours, _, _ = results
    assert ours[name][:2] == kafka[name][:2], (ours[name][2], kafka[name][2])
    assert kafka[name][0] is not None or name == "start after end"


def test_a_stream_gives_the_same_micro_batches(results) -> None:
    _, _, kafka_stream, ours_stream = results
    assert ours_stream == kafka_stream
    assert sum(len(b) for b in kafka_stream) == PARTITIONS * PER_PARTITION
