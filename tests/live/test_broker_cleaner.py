"""Compaction held to the broker's own log cleaner: one compacted topic produced through a live
broker (duplicate keys, tombstones, committed and aborted transactions), then two copies of its
partition: kafkalog's `compact --apply --now T` cleans copy A, and the broker, started again on
its own dir (copy B) with its cleaner on and eager, cleans it until `cleaner-offset-checkpoint`
names the partition. T is the broker's cleaning time, read back from the delete horizon it wrote
into the batches it kept tombstones and markers in (the horizon is the clean's time plus
delete.retention.ms)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kafkalog_core.log.checkpoints.offsets import read_cleaner_checkpoint
from kafkalog_core.log.mapped import mapped_file
from kafkalog_core.maintenance.cleaner import CleanerSettings
from kafkalog_core.record.batch import iter_batch_headers
from tests.live.broker_logs import copy_partitions
from tests.live.records import create_topic

TOPIC = "oracle-compacted"
SEGMENT_BYTES = 4096  # internal.segment.bytes: a few segments to clean
DELETE_RETENTION_MS = 86_400_000  # Kafka's default delete.retention.ms
DEDUPE_BUFFER = 16 << 20  # log.cleaner.dedupe.buffer.size, on both sides
DELETE_HORIZON_FLAG = 0x40  # batch attribute: the base timestamp is the delete horizon
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.01",
    "index.interval.bytes": "1024",
}


@pytest.fixture(scope="module")
def broker_configs() -> dict[str, object]:
    # no cleaning while producing: the cleaner starts with the broker's restart on copy B
    return {"log.cleaner.enable": "false", "log.cleaner.dedupe.buffer.size": DEDUPE_BUFFER}


def _produce(cluster) -> None:
    create_topic(cluster, TOPIC, **{**TOPIC_CONFIGS, "internal.segment.bytes": SEGMENT_BYTES})

    def records(producer: Producer, start: int, n: int) -> None:
        for i in range(start, start + n):
            key = b"key-%d" % (i % 29)
            value = None if i % 11 == 0 else b"value-%d-" % i * (1 + i % 6)
            headers = [("h", b"%d" % i)] if i % 4 == 0 else None
            producer.produce(TOPIC, key=key, value=value, headers=headers, partition=0)
            if i % 19 == 0:
                producer.flush(30)

    plain = Producer(cluster.client_config(acks="all", **{"linger.ms": 10}))
    txn = Producer(
        cluster.client_config(
            acks="all", **{"transactional.id": "cleaner-txn", "compression.type": "zstd"}
        )
    )
    txn.init_transactions(30)
    for n, commit in enumerate((True, False, True, False)):
        records(plain, n * 100, 60)
        assert plain.flush(30) == 0
        txn.begin_transaction()
        records(txn, n * 100 + 60, 40)
        (txn.commit_transaction if commit else txn.abort_transaction)(30)
    records(plain, 1000, 80)
    assert plain.flush(30) == 0


def _cleaned_by_broker(cluster, timeout: float = 90.0) -> None:
    log_dir = cluster.nodes[1].log_dirs[0]
    cluster.start(configs={"log.cleaner.enable": "true", "log.cleaner.backoff.ms": 100})
    deadline = time.monotonic() + timeout
    while (TOPIC, 0) not in read_cleaner_checkpoint(log_dir):
        assert time.monotonic() < deadline, "the broker's cleaner wrote no checkpoint"
        time.sleep(0.5)
    cluster.stop()


def _delete_horizons(pdir: Path) -> set[int]:
    horizons = set()
    for log in sorted(pdir.glob("*.log")):
        with mapped_file(log) as view:
            for header in iter_batch_headers(view):
                if header.attributes & DELETE_HORIZON_FLAG:
                    horizons.add(header.base_timestamp)
    return horizons


@pytest.fixture(scope="module")
def cleaned(kafka_broker, spark, tmp_path_factory) -> tuple[Path, Path]:
    """(copy A cleaned by kafkalog, copy B cleaned by the broker)."""
    from jobs import compact

    _produce(kafka_broker)
    kafka_broker.stop()
    log_dir = kafka_broker.nodes[1].log_dirs[0]
    copy_a = copy_partitions(log_dir, [TOPIC], tmp_path_factory.mktemp("compact") / "logs")

    _cleaned_by_broker(kafka_broker)
    horizons = _delete_horizons(log_dir / f"{TOPIC}-0")
    assert len(horizons) == 1, horizons  # one cleaning round, one clock: T is known
    now = horizons.pop() - DELETE_RETENTION_MS

    configs = copy_a.parent / "topic-configs"
    configs.mkdir()
    (configs / f"{TOPIC}.properties").write_text(
        "".join(f"{k}={v}\n" for k, v in {**TOPIC_CONFIGS, "segment.bytes": SEGMENT_BYTES}.items())
    )
    result = compact.run(
        spark,
        str(copy_a),
        apply=True,
        now=now,
        topics=[TOPIC],
        topic_config=str(configs),
        out=lambda _line: None,
        settings=CleanerSettings(dedupe_buffer_size=DEDUPE_BUFFER),
    )
    assert result.problems == 0, result.summary
    return copy_a / f"{TOPIC}-0", log_dir / f"{TOPIC}-0"


def _kept(pdir: Path) -> list[tuple]:
    """(offset, key, value, headers, timestamp, control) of every record, through kafka-python
    (a cleaned segment may start above its name: the cleaner keeps the group's base offset)."""
    from kafka.record import MemoryRecords

    out = []
    for log in sorted(pdir.glob("*.log")):
        records = MemoryRecords(log.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc(), log
            control = bool(getattr(batch, "is_control_batch", False))
            for r in batch:
                out.append((r.offset, r.key, r.value, list(r.headers), r.timestamp, control))
    return out


def test_kafkalog_keeps_the_records_the_broker_cleaner_keeps(cleaned):
    ours, broker = cleaned
    kept, theirs = _kept(ours), _kept(broker)
    assert kept == theirs
    assert len(kept) < 400  # the cleaner dropped duplicates and aborted records
    assert any(r[5] for r in kept) and any(r[2] is None for r in kept)  # markers, tombstones


def test_kafkalog_rewrites_the_segments_the_broker_rewrites_to_the_byte(cleaned):
    ours, broker = cleaned
    suffixes = (".log", ".index", ".timeindex", ".txnindex")
    our_logs = {p.name: p.read_bytes() for p in sorted(ours.iterdir()) if p.suffix in suffixes}
    broker_logs = {p.name: p.read_bytes() for p in sorted(broker.iterdir()) if p.suffix in suffixes}
    assert sorted(our_logs) == sorted(broker_logs)  # the same grouping of segments
    for name, data in broker_logs.items():
        assert our_logs[name] == data, name
