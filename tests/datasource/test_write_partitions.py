"""Appending to an existing topic keeps its partition count, as a producer takes it from the
cluster: keyed rows land where Kafka's own partitioner puts them for the real count
(tests/datasource/java/KeyPartitions.java, Kafka's BuiltInPartitioner, is the oracle)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog_core.errors import ConfigError

pytestmark = pytest.mark.spark

KEY_PARTITIONS = Path(__file__).resolve().parent / "java" / "KeyPartitions.java"


def _append(spark, root: Path, run_id: str, rows: list[tuple], schema: str, **options: str):
    writer = spark.createDataFrame(rows, schema).write.format("kafkalog").mode("append")
    writer = writer.option("topic", "orders").option("runId", run_id)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save(str(root))


def _kafka_partitions(kafka_client, keys: list[bytes], count: int) -> list[int]:
    stdin = "".join(k.hex() + "\n" for k in keys).encode()
    out = kafka_client.run_java(KEY_PARTITIONS, str(count), stdin=stdin)
    return [int(line) for line in out.split()]


def test_an_append_keeps_the_topics_partition_count(spark, kafka_client, tmp_path: Path) -> None:
    root = tmp_path / "logs"
    schema = "key binary, value binary"
    first = [(b"a%d" % i, b"v%d" % i) for i in range(30)]
    _append(spark, root, "w0", first, schema, **{"topics.orders.partitions": "6"})
    later = [(b"k%d" % i, b"later-%d" % i) for i in range(120)]
    _append(spark, root, "w1", later, schema)  # no count given: the topic's own 6

    read = kafka_client.kafka_client_read(root)
    got = {(key, value): partition for _, partition, _, key, value, _, _ in read.rows()}
    keys = [k for k, _ in first + later]
    want = dict(zip(first + later, _kafka_partitions(kafka_client, keys, 6), strict=True))
    assert got == want
    assert len(set(want.values())) == 6
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("orders-")) == [
        f"orders-{p}" for p in range(6)
    ]


def test_an_explicit_partition_of_an_existing_topic_is_in_range(spark, tmp_path: Path) -> None:
    root = tmp_path / "logs"
    _append(spark, root, "w0", [(b"v",)], "value binary", **{"topics.orders.partitions": "6"})
    _append(spark, root, "w1", [(b"x", 3)], "value binary, partition int")
    assert (root / "orders-3" / "00000000000000000000.log").stat().st_size > 0


def test_another_explicit_count_is_refused_in_one_line(spark, tmp_path: Path) -> None:
    root = tmp_path / "logs"
    _append(spark, root, "w0", [(b"v",)], "value binary", **{"topics.orders.partitions": "6"})
    with pytest.raises(Exception) as refused:
        _append(spark, root, "w1", [(b"v",)], "value binary", **{"topics.orders.partitions": "2"})
    line = next(
        line for line in str(refused.value).splitlines() if "topics.orders.partitions=2" in line
    )
    assert "has 6 partitions" in line
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("orders-")) == [
        f"orders-{p}" for p in range(6)
    ]


def test_the_commit_refuses_a_count_changed_meanwhile(tmp_path: Path) -> None:
    from jobs.datasource.writer import _check_partition_counts, parse_write_options

    options = parse_write_options({"path": str(tmp_path), "topic": "orders"})

    class Staged:
        topic = "orders"

    with pytest.raises(ConfigError, match="has 3 partitions"):
        _check_partition_counts(options, [Staged()], {("orders", 0): 0, ("orders", 2): 0})


def test_a_new_topic_gets_every_partition(spark, kafka_client, tmp_path: Path) -> None:
    """As Kafka creates a topic: partitions no row went to are empty dirs, so that the next
    append finds the count; they take records later like any partition."""
    root = tmp_path / "logs"
    _append(spark, root, "w0", [(b"v",)], "value binary", **{"topics.orders.partitions": "4"})
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("orders-")) == [
        f"orders-{p}" for p in range(4)
    ]
    _append(spark, root, "w1", [(b"k%d" % i, b"x") for i in range(40)], "key binary, value binary")
    read = kafka_client.kafka_client_read(root)
    assert read.offset_problems() == []
    assert len(list(read.rows())) == 41


def test_an_overwrite_keeps_every_partition_for_the_next_append(
    spark, kafka_client, tmp_path: Path
) -> None:
    """An overwrite whose rows go to 2 of the topic's 6 partitions leaves the other 4 as empty
    dirs (in the same publish), so the next append still places keys for 6."""
    root = tmp_path / "logs"
    schema = "key binary, value binary"
    _append(spark, root, "w0", [(b"a", b"old")], schema, **{"topics.orders.partitions": "6"})
    spark.createDataFrame([(b"x", 1), (b"y", 4)], "value binary, partition int").write.format(
        "kafkalog"
    ).mode("overwrite").option("topic", "orders").option("runId", "w1").save(str(root))
    later = [(b"k%d" % i, b"later-%d" % i) for i in range(60)]
    _append(spark, root, "w2", later, schema)

    read = kafka_client.kafka_client_read(root)
    assert read.offset_problems() == []
    got = {(key, value): partition for _, partition, _, key, value, _, _ in read.rows() if key}
    want = dict(zip(later, _kafka_partitions(kafka_client, [k for k, _ in later], 6), strict=True))
    assert got == want
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("orders-")) == [
        f"orders-{p}" for p in range(6)
    ]
