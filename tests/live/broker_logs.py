"""Broker-written logs for the oracle tests: topics produced through a live broker with every
codec, an idempotent producer, committed and aborted transactions, headers, null keys and values,
tombstones, a LogAppendTime topic, small segments and three index spacings; and what consumers
of both isolation levels read from them before the broker stops."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from tests.kafka_cluster import CLEAN_SHUTDOWN_MARKER, KafkaCluster
from tests.live.records import create_topic

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
INDEX_SPACINGS = (128, 1024, 4096)  # index.interval.bytes, one per topic in turn
# internal.segment.bytes (Kafka 4.x refuses segment.bytes below 1 MiB): a few segments each
SEGMENT_BYTES = 16384
COMPRESSED_SEGMENT_BYTES = 4096
TXN_TOPIC = "oracle-txn"
APPEND_TIME_TOPIC = "oracle-append-time"

# (offset, key, value, headers, timestamp type, timestamp): what a consumer hands out
Consumed = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int, int]


@dataclass
class BrokerLogs:
    """The stopped broker's log dir and what consumers read before it stopped."""

    log_dir: Path
    topics: dict[str, dict[str, object]]  # topic -> its topic configs
    consumed: dict[tuple[str, str], list[Consumed]] = field(default_factory=dict)

    def partition_dir(self, topic: str) -> Path:
        return self.log_dir / f"{topic}-0"

    def copy_topics(self, dest: Path) -> Path:
        """The partition dirs of our topics (and the log dir's checkpoints) copied to `dest`."""
        return copy_partitions(self.log_dir, self.topics, dest)


def copy_partitions(log_dir: Path, topics, dest: Path) -> Path:
    """Partition 0 of each topic and the log dir's checkpoint files (not the clean-shutdown
    marker) copied into a new dir `dest`: a stopped broker's dir for kafkalog to work on."""
    dest.mkdir(parents=True)
    for topic in topics:
        shutil.copytree(log_dir / f"{topic}-0", dest / f"{topic}-0")
    for item in log_dir.iterdir():
        if item.is_file() and item.name != CLEAN_SHUTDOWN_MARKER:
            shutil.copy2(item, dest / item.name)
    return dest


def _record(i: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    """The i-th record: keys repeat (a tombstone every 17th), every 23rd key is null, headers
    on every 5th record, values of varying size and compressibility."""
    key = None if i % 23 == 0 else b"key-%d" % (i % 41)
    noise = hashlib.sha256(b"%d" % i).digest()[: i % 24]  # bytes the codecs cannot shrink
    value = None if i % 17 == 0 else (b"value %d " % i) * (1 + i % 9) + noise
    headers = [("h1", b"x%d" % i), ("h-null", None)] if i % 5 == 0 else []
    return key, value, headers


def _produce(producer: Producer, topic: str, indexes: range) -> None:
    for i in indexes:
        key, value, headers = _record(i)
        producer.produce(topic, key=key, value=value, headers=headers or None, partition=0)
        if i % 37 == 0:
            producer.flush(30)  # batch boundaries of several sizes


def _producer(cluster: KafkaCluster, **conf: object) -> Producer:
    return Producer(cluster.client_config(acks="all", **{"linger.ms": 20, **conf}))


def _flushed(producer: Producer) -> None:
    assert producer.flush(60) == 0, "records left unsent"


def produce_broker_logs(cluster: KafkaCluster, records: int = 600) -> BrokerLogs:
    """Create and fill the topics, read them back at both isolation levels, stop the broker."""
    topics: dict[str, dict[str, object]] = {}
    spacing = iter(INDEX_SPACINGS * 3)
    for codec in CODECS:
        topics[f"oracle-{codec}"] = {
            "index.interval.bytes": next(spacing),
            "internal.segment.bytes": SEGMENT_BYTES
            if codec == "none"
            else COMPRESSED_SEGMENT_BYTES,
        }
    topics[TXN_TOPIC] = {
        "index.interval.bytes": next(spacing),
        "internal.segment.bytes": COMPRESSED_SEGMENT_BYTES,
    }
    topics[APPEND_TIME_TOPIC] = {
        "index.interval.bytes": next(spacing),
        "message.timestamp.type": "LogAppendTime",
        "internal.segment.bytes": COMPRESSED_SEGMENT_BYTES,
    }
    for topic, configs in topics.items():
        create_topic(cluster, topic, **configs)

    for codec in CODECS:
        producer = _producer(cluster, **{"compression.type": codec, "enable.idempotence": False})
        _produce(producer, f"oracle-{codec}", range(records))
        _flushed(producer)
    idempotent = _producer(cluster, **{"enable.idempotence": True, "compression.type": "lz4"})
    _produce(idempotent, APPEND_TIME_TOPIC, range(records // 2))
    _flushed(idempotent)

    # committed and aborted transactions, with idempotent records between them
    txn = _producer(cluster, **{"transactional.id": "oracle-txn", "compression.type": "zstd"})
    txn.init_transactions(30)
    step = records // 6
    for n, commit in enumerate((True, False, True, False, True)):
        txn.begin_transaction()
        _produce(txn, TXN_TOPIC, range(n * step, (n + 1) * step))
        if commit:
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)
        _produce(idempotent, TXN_TOPIC, range(records + n * 7, records + n * 7 + 7))
        _flushed(idempotent)

    logs = BrokerLogs(cluster.nodes[1].log_dirs[0], topics)
    for topic in topics:
        for level in ("read_committed", "read_uncommitted"):
            logs.consumed[(topic, level)] = consume_to_end(cluster, topic, level)
    cluster.stop()
    return logs


def consume_to_end(cluster: KafkaCluster, topic: str, isolation_level: str) -> list[Consumed]:
    """Every record of partition 0 a consumer of `isolation_level` gets, up to the end it sees
    (the high watermark, or the last stable offset): librdkafka's partition EOF event."""
    consumer = Consumer(
        cluster.client_config(
            **{
                "group.id": f"oracle-{isolation_level}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": isolation_level,
            }
        )
    )
    out: list[Consumed] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        while True:
            msg = consumer.poll(30.0)
            assert msg is not None, f"no partition EOF from {topic} after {len(out)} records"
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return out
            ts_type, ts = msg.timestamp()
            headers = tuple((k, v) for k, v in (msg.headers() or []))
            out.append((msg.offset(), msg.key(), msg.value(), headers, ts_type, ts))
    finally:
        consumer.close()
