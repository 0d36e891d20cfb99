"""What `df.write.format("kafkalog")` writes, read by Apache Kafka's own client
(tests/kafka_oracle.py): every row once, in the partition murmur2 gives, offsets dense."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from kafkalog_core.partitioner import murmur2, to_positive

pytestmark = pytest.mark.spark

START = datetime(2024, 5, 1, tzinfo=timezone.utc)
SCHEMA = (
    "topic string, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>, timestamp timestamp"
)


def _rows(n: int) -> list[tuple]:
    """Two topics; null and empty values, a header with a null value, repeated timestamps."""
    rows = []
    for i in range(n):
        value = None if i % 11 == 3 else b"" if i % 13 == 4 else b"v%d" % i * (i % 7)
        headers = [("seq", b"%d" % i)] + ([("empty", None)] if i % 4 == 0 else [])
        stamp = START + timedelta(milliseconds=1000 * (i // 3) + i % 2)
        rows.append(("orders" if i % 3 else "audit", b"k%d" % (i % 23), value, headers, stamp))
    return rows


def test_a_write_reads_back_through_kafkas_client(spark, kafka_client, tmp_path: Path) -> None:
    rows = _rows(300)
    root = tmp_path / "logs"
    (
        spark.createDataFrame(rows, SCHEMA)
        .repartition(3)  # task 0 stages segments, the later tasks records: both paths
        .write.format("kafkalog")
        .mode("append")
        .option("runId", "w1")
        .option("topic_defaults.partitions", "2")
        .option("topics.orders.config.compression.type", "zstd")
        .option("topics.orders.config.segment.bytes", "600")
        .option("topics.audit.config.compression.type", "snappy")
        .save(str(root))
    )
    read = kafka_client.kafka_client_read(root)
    assert read.offset_problems() == []
    assert set(read.first_offsets().values()) == {0}
    assert len(read.segments) > len(read.first_offsets())  # orders rolled
    got = Counter(
        (topic, partition, key, value, tuple((h["key"], h["value"]) for h in headers), ts)
        for topic, partition, _, key, value, headers, ts in read.rows()
    )
    want = Counter(
        (
            topic,
            to_positive(murmur2(key)) % 2,
            key,
            value,
            tuple(headers),
            int(stamp.timestamp() * 1000),
        )
        for topic, key, value, headers, stamp in rows
    )
    assert got == want
    codecs = {b.dir.rpartition("-")[0]: set() for b in read.batches}
    for b in read.batches:
        codecs[b.dir.rpartition("-")[0]].add(b.compression)
    assert codecs == {"orders": {"zstd"}, "audit": {"snappy"}}
