"""`kafkalog place` proven on a live KRaft broker (tests/kafka_cluster.py), the route of
docs/broker.md: create the topics on the broker, stop it, ingest, place, start it, consume.

The topics: the demo's order events (a delete topic with headers, CreateTime from 2024) once
per codec, and the demo's customer changelog (compacted, small segments). Both keep every
record while the test reads them: retention.ms=-1, and min.cleanable.dirty.ratio=1 (a
partition's dirty ratio is at most 1, and the cleaner takes only those above the setting).
The topics' other settings are the cluster's too (`place` checks them), but for segment.bytes.
"""

from __future__ import annotations

import contextlib
import io
import re
import time
from pathlib import Path

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    Producer,
    TopicPartition,
)

from jobs import demo, ingest
from jobs.ingestion.config.ingest_config import IngestConfig
from kafkalog_core.config import LogConfig
from kafkalog_core.log.checkpoints import OffsetCheckpointFile, topic_id_to_str
from kafkalog_core.log.cluster_metadata import read_cluster_metadata
from kafkalog_core.log.names import live_partition_dirs
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.tools.cli import main
from kafkalog_core.tools.place import place, run_place
from tests.kafka_cluster import KafkaCluster
from tests.killer import killed_run, read_steps
from tests.live.records import create_topic
from tests.log.test_recovery import write_log

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
EVENTS = {codec: f"events-{codec}" for codec in CODECS}
CHANGELOG = "changelog"
KEEP = {"retention.ms": "-1", "min.cleanable.dirty.ratio": "1"}
# what a broker logs when it drops or distrusts data of a partition (a partition's
# LeaderRecoveryState=RECOVERED, in every line the controller logs about it, is no such thing)
TROUBLE = re.compile(
    r"(?i)truncat|recover|corrupt|invalid|inconsisten|stray|offline|deleting segment"
)
LEADER_RECOVERY_STATE = re.compile(r"(?i)leaderRecoveryState=\w+")


def write_sources(source: Path) -> None:
    """The demo's two tables, smaller; the order events once per codec topic (a `topic`
    column), so one ingest run writes the five topics."""
    import pyarrow as pa
    from deltalake import write_deltalake

    orders = demo.orders_table(600, customers=200)
    copies = [orders.append_column("topic", pa.array([t] * len(orders))) for t in EVENTS.values()]
    write_deltalake(str(source / "orders"), pa.concat_tables(copies))
    write_deltalake(str(source / "customers"), demo.customers_table(300))


def events_config(source: Path, output: Path) -> dict:
    raw = demo.orders_config(source, output)
    base = raw["topics"].pop(demo.ORDERS_TOPIC)["config"]
    for codec, topic in EVENTS.items():
        compression = "uncompressed" if codec == "none" else codec  # a topic's name for none
        config = {**base, "compression.type": compression, **KEEP}
        raw["topics"][topic] = {"partitions": 2, "config": config}
    raw["mapping"]["topic"] = {"column": "topic"}
    return raw


def changelog_config(source: Path, output: Path) -> dict:
    raw = demo.customers_config(source, output)
    raw["topics"] = {CHANGELOG: raw["topics"].pop(demo.CUSTOMERS_TOPIC)}
    raw["topics"][CHANGELOG]["config"].update(KEEP)
    raw["mapping"]["topic"] = CHANGELOG
    return raw


def read_everything(cluster: KafkaCluster, topic: str, partition: int, end: int) -> list[tuple]:
    """(offset, timestamp type, timestamp, key, value, headers) of every record below `end`,
    from the earliest offset, as a consumer sees them."""
    consumer = Consumer(
        cluster.client_config(**{"group.id": "place-proof", "enable.auto.commit": False})
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[tuple] = []
        while (out[-1][0] + 1 if out else 0) < end:
            msg = consumer.poll(30.0)
            assert msg is not None, f"{topic}-{partition}: read {len(out)} of {end}"
            assert msg.error() is None, msg.error()
            kind, timestamp = msg.timestamp()
            headers = [(k, v) for k, v in msg.headers() or []]
            out.append((msg.offset(), kind, timestamp, msg.key(), msg.value(), headers))
        return out
    finally:
        consumer.close()


def kafkalogs_records(pdir: Path) -> list[tuple]:
    """The same tuples from the placed dir, read by kafkalog."""
    log = PartitionLog.open(pdir, LogConfig())
    try:
        table = log.read_records().to_pylist()
    finally:
        log.close()
    kinds = {0: TIMESTAMP_CREATE_TIME, 1: TIMESTAMP_LOG_APPEND_TIME}
    return [
        (
            r["offset"],
            kinds[r["timestamp_type"]],
            r["timestamp"],
            r["key"],
            r["value"],
            [(h["key"], h["value"]) for h in r["headers"] or []],
        )
        for r in table
    ]


@pytest.fixture(scope="module")
def placed(kafka_broker: KafkaCluster, spark, tmp_path_factory) -> dict[tuple[str, int], list]:
    """The topics created on the broker, ingested, placed while it was stopped, and the broker
    started again: per partition, kafkalog's records."""
    tmp = tmp_path_factory.mktemp("place")
    source, output = tmp / "source", tmp / "output"
    write_sources(source)
    configs = {
        "events": events_config(source, output),
        "changelog": changelog_config(source, output),
    }
    settings = {}
    for raw in configs.values():
        for topic, spec in raw["topics"].items():
            # the ingest's small segments: a Kafka 4 broker takes segment.bytes >= 1 MiB only,
            # and its own later rolls do not depend on how the placed segments were cut
            config = spec["config"].items()
            settings[topic] = {k: str(v) for k, v in config if k != "segment.bytes"}
            create_topic(kafka_broker, topic, spec["partitions"], **settings[topic])
    for name, raw in configs.items():
        ingest.run(spark, IngestConfig.from_dict(raw), run_id=f"load-{name}", out=lambda _: None)
    (node,) = kafka_broker.nodes.values()
    log_dir = node.log_dirs[0]

    status, _, err = place_cli(output, log_dir, EVENTS["none"])
    assert status == 1 and f"{log_dir}/.lock is locked: a broker is running" in err, err
    kafka_broker.stop()
    metadata = read_cluster_metadata(log_dir, partitions=True)
    assert metadata is not None and set(settings) <= set(metadata.topics)
    out = io.StringIO()
    status = run_place(str(output), [str(log_dir)], list(settings), out, topic_configs=settings)
    assert status == 0, out.getvalue()
    assert "dry run: nothing changed; --apply places 13 partition dir(s)" in out.getvalue()
    out = io.StringIO()
    status = run_place(
        str(output), [str(log_dir)], list(settings), out, apply=True, topic_configs=settings
    )
    assert status == 0, out.getvalue()
    for topic in settings:
        topic_id = topic_id_to_str(metadata.topics[topic])
        assert f"{log_dir / (topic + '-0')}: from " in out.getvalue()
        assert f"topic id {topic_id}" in out.getvalue()
    expected = {
        (topic, p): kafkalogs_records(path) for topic, p, path in live_partition_dirs(output)
    }
    kafka_broker.start()
    return expected


def place_cli(output: Path, log_dir: Path, topic: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["place", str(output), str(log_dir), "--topic", topic, "--apply"])
    return status, out.getvalue(), err.getvalue()


def check_served(cluster: KafkaCluster, expected: dict[tuple[str, int], list]) -> None:
    consumer = Consumer(cluster.client_config(**{"group.id": "place-offsets"}))
    try:
        for (topic, p), records in sorted(expected.items()):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            start = records[0][0] if records else high
            end = records[-1][0] + 1 if records else high
            assert (low, high) == (start, end), (topic, p)
            assert read_everything(cluster, topic, p, end) == records, (topic, p)
    finally:
        consumer.close()


def test_a_consumer_reads_every_placed_record_exactly(kafka_broker, placed) -> None:
    assert {t for t, _ in placed} == {*EVENTS.values(), CHANGELOG}
    assert all(placed.values())
    assert any(r[5] for r in placed[(EVENTS["gzip"], 0)])  # the records carry headers
    check_served(kafka_broker, placed)


def test_the_broker_logs_no_truncation_recovery_or_corruption_for_placed_partitions(
    kafka_broker, placed
) -> None:
    (node,) = kafka_broker.nodes.values()
    lines = node.log_file.read_text(errors="replace").splitlines()
    names = "|".join(re.escape(f"{t}-{p}") for t, p in placed)
    trouble = [
        line
        for line in lines
        if re.search(rf"(?<![\w.-])({names})(?![\w-])", line)
        and TROUBLE.search(LEADER_RECOVERY_STATE.sub("", line))
    ]
    assert trouble == []
    for (topic, p), records in placed.items():  # the merged replication-offset-checkpoint
        end = records[-1][0] + 1
        loaded = f"Log loaded for partition {topic}-{p} with initial high watermark {end}"
        assert any(loaded in line for line in lines), loaded


def test_a_new_record_lands_at_the_next_offset_and_a_restart_serves_it_all(
    kafka_broker, placed
) -> None:
    topic = EVENTS["zstd"]
    end = placed[(topic, 0)][-1][0] + 1
    delivered = []
    producer = Producer(kafka_broker.client_config(acks="all"))
    producer.produce(
        topic, key=b"new", value=b"after the load", partition=0, headers=[("h", b"1")],
        on_delivery=lambda error, msg: delivered.append((error, msg.offset())),
    )  # fmt: skip
    assert producer.flush(60) == 0
    assert delivered == [(None, end)]
    kafka_broker.restart()
    served = read_everything(kafka_broker, topic, 0, end + 1)
    assert served[:end] == placed[(topic, 0)]
    assert served[end][0] == end and served[end][3:] == (b"new", b"after the load", [("h", b"1")])
    check_served(kafka_broker, {k: v for k, v in placed.items() if k != (topic, 0)})


@pytest.fixture(scope="module")
def broker_configs() -> dict[str, object]:
    """A `-delete` dir found at startup is deleted at the broker's first log-deletion pass, a
    second after the start instead of 30 s (log.initial.task.delay.ms) plus 60 s
    (log.segment.delete.delay.ms)."""
    return {"log.initial.task.delay.ms": 1000, "log.segment.delete.delay.ms": 0}


def place_topic(output: str, log_dir: str, topic: str) -> None:
    place(output, [log_dir], [topic], apply=True)


def test_a_killed_place_leaves_a_dir_the_broker_discards_and_a_rerun_places_it(
    kafka_broker, placed, tmp_path
) -> None:
    """Killed while copying; the broker, started before a rerun, serves the topic's empty
    partition and deletes the staged copy itself; stopped again, a rerun places it."""
    topic = "late"
    create_topic(kafka_broker, topic, 1, **KEEP)
    output = tmp_path / "output"
    end = write_log(output / f"{topic}-0", 50).log_end_offset
    OffsetCheckpointFile(output / "replication-offset-checkpoint").write({(topic, 0): end})
    (node,) = kafka_broker.nodes.values()
    log_dir = node.log_dirs[0]
    kafka_broker.stop()
    steps = tmp_path / "steps.log"
    args = (str(output), str(log_dir), topic)
    assert not killed_run(place_topic, *args, log=steps, after=5, under=log_dir)
    staged = log_dir / f"{topic}-0.kafkalog-staged-delete"
    assert read_steps(steps)[-1].startswith(f"replace {staged}/")  # killed inside the copy
    kafka_broker.start()
    deadline = time.monotonic() + 60
    while staged.exists():
        assert time.monotonic() < deadline, "the broker kept the staged dir"
        time.sleep(0.2)
    consumer = Consumer(kafka_broker.client_config(**{"group.id": "place-late"}))
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (0, 0)
    finally:
        consumer.close()
    kafka_broker.stop()
    place_topic(*args)
    kafka_broker.start()
    served = read_everything(kafka_broker, topic, 0, end)
    assert [(r[0], r[3], r[4]) for r in served] == [
        (r[0], r[3], r[4]) for r in kafkalogs_records(log_dir / f"{topic}-0")
    ]
    assert len(served) == end == 50
