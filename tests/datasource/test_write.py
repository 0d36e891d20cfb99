"""df.write.format("kafkalog"): the Kafka sink's columns in, the ingest job's commit and bytes."""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kafkalog_core.partitioner import murmur2, to_positive
from tests.datasource.helpers import oracle

pytestmark = pytest.mark.spark

ROWS = [
    (
        f"k{i % 17}".encode(),
        f"value-{i}".encode(),
        datetime(2024, 5, 1, 0, 0, i % 60, tzinfo=timezone.utc),
    )
    for i in range(240)
]


def _frame(spark, rows=ROWS, partitions: int = 3):
    return spark.createDataFrame(rows, "key binary, value binary, timestamp timestamp").repartition(
        partitions
    )


def _write(frame, root: Path, **options: str) -> None:
    writer = frame.write.format("kafkalog").mode("append")
    options = {"topic": "orders", "topics.orders.partitions": "3", **options}
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save(str(root))


def _read(spark, root: Path):
    return spark.read.format("kafkalog").option("subscribe", "orders").load(str(root))


def test_write_then_read_back(spark, tmp_path: Path) -> None:
    root = tmp_path / "logs"
    _write(_frame(spark), root, runId="w1")
    back = _read(spark, root).collect()
    assert Counter((r.key, r.value) for r in back) == Counter((k, v) for k, v, _ in ROWS)
    for r in back:  # murmur2 of the key, as the Java producer
        assert r.partition == to_positive(murmur2(bytes(r.key))) % 3
        assert r.topic == "orders"
    for p in range(3):  # offsets dense from 0, as kafka-python decodes them from the files
        offsets = [o for o, _, _, _ in oracle(root / f"orders-{p}")]
        assert offsets == list(range(len(offsets)))
    assert sum(len(oracle(root / f"orders-{p}")) for p in range(3)) == len(ROWS)
    stamps = {r.value: r.timestamp for r in back}
    assert stamps[b"value-5"] == datetime(2024, 5, 1, 0, 0, 5)


def test_append_continues_and_a_committed_run_id_is_a_no_op(spark, tmp_path: Path) -> None:
    root = tmp_path / "logs"
    _write(_frame(spark), root, runId="a1")
    _write(_frame(spark), root, runId="a1")  # a retry of a committed run: nothing happens
    assert _read(spark, root).count() == len(ROWS)
    _write(_frame(spark), root, runId="a2")
    assert _read(spark, root).count() == 2 * len(ROWS)
    for p in range(3):
        offsets = [o for o, _, _, _ in oracle(root / f"orders-{p}")]
        assert offsets == list(range(len(offsets)))


def test_a_failed_write_publishes_nothing(spark, tmp_path: Path) -> None:
    root = tmp_path / "logs"
    rows = [(None if i == 100 else b"k", b"v", None) for i in range(200)]
    frame = _frame(spark, rows)
    with pytest.raises(Exception, match="null key on compacted topic"):
        _write(frame, root, **{"topics.orders.config.cleanup.policy": "compact"})
    assert not root.exists() or not any(p.name.startswith("orders-") for p in root.iterdir())


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"nonsense": "1"}, "unknown kafkalog write option 'nonsense'"),
        ({"topics.orders.partitions": "zero"}, "expected a partition count"),
        ({"topics.orders.config.retention.ms": "soon"}, "retention.ms"),
        ({"topics.orders.topic_id": "nope"}, "not a Kafka topic id"),
    ],
)
def test_bad_options_name_the_option(spark, tmp_path: Path, options, match) -> None:
    with pytest.raises(Exception, match=match):
        _write(_frame(spark), tmp_path / "logs", **options)


@pytest.mark.parametrize(
    ("ddl", "row", "line"),
    [
        ("value int", (1,), 'column "value" is int; the Kafka sink takes string or binary'),
        ("key bigint, value binary", (1, b"v"), '"key" is bigint; the Kafka sink takes string or'),
        (
            "value string, partition string",
            ("v", "0"),
            '"partition" is string; the Kafka sink takes int',
        ),
        (
            "value binary, headers array<struct<k: string, v: binary>>",
            (b"v", [("a", b"b")]),
            '"headers" is array<struct<k:string,v:binary>>; the Kafka sink takes '
            "array<struct<key:string,value:binary>>",
        ),
        (  # a bigint is taken as epoch milliseconds (tests/datasource/test_kafka_parity.py)
            "value binary, timestamp string",
            (b"v", "2024-05-01"),
            '"timestamp" is string; the Kafka sink takes timestamp or bigint epoch milliseconds',
        ),
        ("value binary, topic int", (b"v", 1), '"topic" is int; the Kafka sink takes string'),
        ("key binary", (b"k",), 'needs a "value" column'),
    ],
)
def test_a_column_of_a_type_the_sink_refuses_is_one_line_before_any_task(
    spark, tmp_path: Path, ddl: str, row: tuple, line: str
) -> None:
    frame = spark.createDataFrame([row], ddl)
    writer = frame.write.format("kafkalog").mode("append")
    if "topic" not in ddl:
        writer = writer.option("topic", "orders")
    with pytest.raises(Exception, match=re.escape(line)):
        writer.save(str(tmp_path / "logs"))
    assert not (tmp_path / "logs").exists()  # refused on the driver: no task staged anything


@pytest.mark.parametrize(
    "ddl",
    [
        "value string, key string, topic string, partition int, timestamp timestamp",
        "value binary, key binary, partition smallint, timestamp timestamp_ntz",
        "value binary, headers array<struct<key: string, value: binary>>",
        "value binary, headers array<struct<key: string, value: string>>",
        "value binary, headers map<string, binary>, partition bigint, extra array<int>",
    ],
)
def test_the_sink_columns_taken(spark, ddl: str) -> None:
    from pyspark.sql.types import StructType

    from jobs.datasource.sink_columns import check_sink_schema

    check_sink_schema(StructType.fromDDL(ddl), None if "topic" in ddl else "orders")
    # the topic option overrides a topic column of any type, as in Spark's sink
    check_sink_schema(StructType.fromDDL(f"{ddl}, topic int".replace("topic string, ", "")), "t")


def test_topic_id_option_lands_in_partition_metadata_and_a_mismatch_is_refused(
    spark, tmp_path: Path
) -> None:
    from kafkalog_core.log.checkpoints import PartitionMetadataFile, new_topic_id, topic_id_to_str

    root = tmp_path / "logs"
    wanted = topic_id_to_str(new_topic_id())
    _write(_frame(spark), root, **{"runId": "t1", "topics.orders.topic_id": wanted})
    for p in range(3):
        stored = PartitionMetadataFile(root / f"orders-{p}" / "partition.metadata").read()
        assert topic_id_to_str(stored) == wanted
    other = topic_id_to_str(new_topic_id())
    with pytest.raises(Exception, match="holds topic id"):
        _write(_frame(spark), root, **{"runId": "t2", "topics.orders.topic_id": other})
    assert _read(spark, root).count() == len(ROWS)


def test_overwrite_replaces_the_written_topic(spark, tmp_path: Path) -> None:
    root = tmp_path / "logs"
    _write(_frame(spark), root, runId="o1")
    _write(_frame(spark), root, runId="o2", topic="other", **{"topics.other.partitions": "1"})
    fresh = [(b"n%d" % i, b"new-%d" % i, None) for i in range(30)]
    writer = _frame(spark, fresh, 2).write.format("kafkalog").mode("overwrite")
    writer.option("topic", "orders").option("topics.orders.partitions", "2").save(str(root))
    back = _read(spark, root).collect()
    assert sorted(r.value for r in back) == sorted(v for _, v, _ in fresh)
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("orders-")) == [
        "orders-0",
        "orders-1",
    ]
    for p in range(2):  # offsets start at 0 again
        offsets = [o for o, _, _, _ in oracle(root / f"orders-{p}")]
        assert offsets == list(range(len(offsets)))
    other = spark.read.format("kafkalog").option("subscribe", "other").load(str(root))
    assert other.count() == len(ROWS)  # the topic the overwrite did not name is untouched


@pytest.mark.parametrize("mode", ["errorifexists", "ignore", None])
def test_spark_refuses_errorifexists_and_ignore_before_the_writer(spark, tmp_path, mode) -> None:
    """Spark decides these for every Python data source: the writer is never asked."""
    writer = _frame(spark).write.format("kafkalog").option("topic", "orders")
    if mode is not None:
        writer = writer.mode(mode)
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        writer.save(str(tmp_path / "logs"))
    assert not (tmp_path / "logs").exists()
