"""Producing to and consuming from a live cluster (tests/kafka_cluster.py) with confluent-kafka."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from jobs.ingest import LEADER_EPOCH
from kafkalog_core.config import LogConfig
from kafkalog_core.log.checkpoints import OffsetCheckpointFile
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.record.encoder import encode_records
from tests.kafka_cluster import KafkaCluster


def create_topic(
    cluster: KafkaCluster, topic: str, partitions: int = 1, replicas: int = 1, **configs: object
) -> None:
    """Create `topic` and wait until the admin client reports it done."""
    admin = cluster.admin()
    new = NewTopic(topic, partitions, replicas, config={k: str(v) for k, v in configs.items()})
    for future in admin.create_topics([new], operation_timeout=30).values():
        future.result()


def produce(cluster: KafkaCluster, topic: str, records: list[tuple[bytes, bytes]], **conf) -> None:
    """Produce (key, value) records to partition 0 of `topic`, acks=all, and flush them."""
    producer = Producer(cluster.client_config(acks="all", **conf))
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(60) == 0, "records left unsent"


def consume_all(
    cluster: KafkaCluster,
    topic: str,
    partition: int = 0,
    *,
    end: int | None = None,
    timeout: float = 60.0,
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of one partition from the earliest offset up to `end` (by default its high
    watermark when asked), as (offset, key, value): assigned directly, no group to join. With
    `end`, records not yet readable (a new leader's high watermark catching up) are waited for."""
    consumer = Consumer(
        cluster.client_config(**{"group.id": "kafkalog-tests", "enable.auto.commit": False})
    )
    try:
        if end is None:
            low, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
            if low == end:
                return []
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + timeout
        while not out or out[-1][0] + 1 < end:
            assert time.monotonic() < deadline, f"read {len(out)} of {topic} up to {end}"
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.offset(), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def write_partition(
    output: Path, topic: str, partition: int, records: pa.Table, **settings: object
) -> int:
    """One partition of `records` (key, value, timestamp, headers columns) in kafkalog's output
    root, as the ingest writes it: the topic `settings` (e.g. segment.bytes, compression.type),
    leader epoch 0 on every batch, the root's replication-offset-checkpoint entry at its log
    end offset. Small batches (`max_batch_bytes`, default 1000), so segments hold several."""
    batch_bytes = int(settings.pop("max_batch_bytes", 1000))
    config = LogConfig.from_dict({k: str(v) for k, v in settings.items()})
    log = PartitionLog.create(output / f"{topic}-{partition}", config, leader_epoch=LEADER_EPOCH)
    log.append_batches(
        encode_records(records, options=log.batch_options(max_batch_bytes=batch_bytes))
    )
    log.close()
    checkpoint = OffsetCheckpointFile(output / "replication-offset-checkpoint")
    entries = checkpoint.read() if checkpoint.exists() else {}
    checkpoint.write({**entries, (topic, partition): log.log_end_offset})
    return log.log_end_offset
