"""Retention held to the broker's own: two topics produced through a live broker and stopped,
kafkalog's retention dry run on a copy, then the broker started again on its own dir with a
quick retention check. The segments the broker deletes are exactly those the dry run lists:
- `oracle-retention-ms`: every record two days old under retention.ms of one day, so the
  active segment, non-empty, has breached retention too: the broker rolls it and deletes it;
- `oracle-retention-bytes`: retention.bytes below the partition's size, recent records.
Record timestamps are two days old or current, never near the one-day line, so the broker's
clock and the dry run's `now` agree on every segment."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.live.broker_logs import copy_partitions
from tests.live.records import create_topic

DAY_MS = 86_400_000
SEGMENT_BYTES = 4096  # internal.segment.bytes
TOPICS = {
    "oracle-retention-ms": {"retention.ms": DAY_MS, "retention.bytes": -1},
    "oracle-retention-bytes": {"retention.ms": -1, "retention.bytes": 3 * SEGMENT_BYTES},
}


@pytest.fixture(scope="module")
def broker_configs() -> dict[str, object]:
    # no retention check while producing: it starts with the broker's restart
    return {"log.retention.check.interval.ms": 3_600_000, "log.initial.task.delay.ms": 3_600_000}


def _produce(cluster) -> None:
    now_ms = int(time.time() * 1000)
    producer = Producer(cluster.client_config(acks="all", **{"linger.ms": 5}))
    for topic, configs in TOPICS.items():
        create_topic(cluster, topic, **{**configs, "internal.segment.bytes": SEGMENT_BYTES})
        at = now_ms - 2 * DAY_MS if "ms" in topic else now_ms
        for i in range(400):
            producer.produce(topic, key=b"k%d" % i, value=b"v%d-" % i * 8, timestamp=at + i)
            if i % 50 == 0:
                producer.flush(30)
    assert producer.flush(30) == 0


def _segments(pdir: Path) -> set[str]:
    return {p.name for p in pdir.glob("*.log")}


@pytest.fixture(scope="module")
def deletions(kafka_broker, spark, tmp_path_factory) -> dict[str, tuple[set, set, Path]]:
    """Per topic: (segments the dry run lists for deletion, segments the broker deleted, the
    broker's partition dir)."""
    from jobs import retention

    tmp_path = tmp_path_factory.mktemp("retention")
    _produce(kafka_broker)
    kafka_broker.stop()
    log_dir = kafka_broker.nodes[1].log_dirs[0]
    copy = copy_partitions(log_dir, TOPICS, tmp_path / "logs")
    configs = tmp_path / "topic-configs"
    configs.mkdir()
    before = {}
    for topic, settings in TOPICS.items():
        before[topic] = _segments(log_dir / f"{topic}-0")
        assert len(before[topic]) > 4, topic
        text = "".join(
            f"{k}={v}\n" for k, v in {**settings, "segment.bytes": SEGMENT_BYTES}.items()
        )
        (configs / f"{topic}.properties").write_text(text)
    dry = retention.run(
        spark, str(copy), topic_config=str(configs), topics=list(TOPICS), out=lambda _l: None
    )
    listed: dict[str, set] = {topic: set() for topic in TOPICS}
    for row in dry.rows.to_pylist():
        if row["kind"] == "segment" and row["action"] == "delete":
            listed[row["topic"]].add(row["file"])

    kafka_broker.start(
        configs={
            "log.retention.check.interval.ms": 200,
            "log.initial.task.delay.ms": 0,
            "log.segment.delete.delay.ms": 0,
        }
    )
    deadline = time.monotonic() + 60
    while any(before[t] - _segments(log_dir / f"{t}-0") == set() for t in TOPICS):
        assert time.monotonic() < deadline, "the broker deleted no segment"
        time.sleep(0.5)
    time.sleep(2)  # a few more retention checks: nothing more goes
    kafka_broker.stop()
    return {
        topic: (
            listed[topic],
            before[topic] - _segments(log_dir / f"{topic}-0"),
            log_dir / f"{topic}-0",
        )
        for topic in TOPICS
    }


def test_retention_bytes_deletes_what_the_broker_deletes(deletions):
    listed, deleted, _ = deletions["oracle-retention-bytes"]
    assert deleted and sorted(listed) == sorted(deleted)


def test_retention_ms_deletes_what_the_broker_deletes_the_breached_active_segment_too(deletions):
    listed, deleted, pdir = deletions["oracle-retention-ms"]
    # every segment went, the active one too: the broker rolled a new, empty one at the log end
    ((active,),) = [list(pdir.glob("*.log"))]
    assert active.stat().st_size == 0 and active.name not in deleted
    assert sorted(listed) == sorted(deleted)
