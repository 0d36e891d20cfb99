"""kafkalog held to a live broker's own files and tools (tests/live/broker_logs.py produces them
once per module, then stops the broker): Kafka's DumpLogSegments, the broker's indexes, what its
consumers read, and its recovery after an unclean shutdown."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from kafkalog_core.log.checkpoints.offsets import read_offset_checkpoint
from kafkalog_core.tools.cli import build_parser
from tests.kafka_cluster import CLEAN_SHUTDOWN_MARKER, DUMP_LOG_SEGMENTS, run_kafka_tool
from tests.live.broker_logs import (
    CODECS,
    TXN_TOPIC,
    BrokerLogs,
    produce_broker_logs,
)

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")


@pytest.fixture(scope="module")
def broker_logs(kafka_broker) -> BrokerLogs:
    logs = produce_broker_logs(kafka_broker)
    for topic in logs.topics:  # small segments: every topic rolled at least once
        assert len(list(logs.partition_dir(topic).glob("*.log"))) >= 2, topic
    return logs


def _segment_files(logs: BrokerLogs) -> list[str]:
    files = []
    for topic in logs.topics:
        for item in sorted(logs.partition_dir(topic).iterdir()):
            if item.suffix in SEGMENT_SUFFIXES:
                files.append(str(item))
    return files


def _kafkalog_dump(files: list[str], *flags: str) -> tuple[str, str, int]:
    args = build_parser().parse_args(["dump-log", "--files", ",".join(files), *flags])
    out, err = io.StringIO(), io.StringIO()
    status = args.handler(args, out, err)
    return out.getvalue(), err.getvalue(), status


@pytest.mark.parametrize(
    "flags", [(), ("--deep-iteration", "--print-data-log")], ids=["plain", "deep-data"]
)
def test_dump_log_prints_what_kafkas_dump_log_segments_prints(broker_logs, tmp_path, flags):
    files = _segment_files(broker_logs)
    assert {Path(f).suffix for f in files} == set(SEGMENT_SUFFIXES)
    kafka_out = run_kafka_tool(
        DUMP_LOG_SEGMENTS, "--files", ",".join(files), *flags, log_dir=tmp_path
    )
    ours, errors, status = _kafkalog_dump(files, *flags)
    assert (status, errors) == (0, "")
    kafka_lines, our_lines = kafka_out.splitlines(), ours.splitlines()
    for n, (theirs, mine) in enumerate(zip(kafka_lines, our_lines, strict=False)):
        assert mine == theirs, f"line {n + 1} differs"
    assert len(our_lines) == len(kafka_lines)
    if flags:  # what the logs hold, so that the comparison covers it
        for codec in CODECS:
            assert f"compresscodec: {codec}" in kafka_out
        for marker in ("endTxnMarker: COMMIT", "endTxnMarker: ABORT", "headerKeys: [h1,h-null]"):
            assert marker in kafka_out
        assert "isTransactional: true" in kafka_out and "LogAppendTime: " in kafka_out


def _topic_config_dir(logs: BrokerLogs, dest: Path) -> Path:
    """`--topic-config` as a dir of <topic>.properties: each topic's index.interval.bytes."""
    dest.mkdir()
    for topic, configs in logs.topics.items():
        interval = configs["index.interval.bytes"]
        (dest / f"{topic}.properties").write_text(f"index.interval.bytes={interval}\n")
    return dest


def _index_bytes(root: Path, topics) -> dict[str, bytes]:
    return {
        f"{p.parent.name}/{p.name}": p.read_bytes()
        for topic in topics
        for p in sorted((root / f"{topic}-0").iterdir())
        if p.suffix in INDEX_SUFFIXES
    }


def test_rebuild_index_all_rewrites_every_index_as_the_broker_wrote_it(
    broker_logs, spark, tmp_path
):
    from jobs import rebuild_index

    topics = list(broker_logs.topics)
    configs = _topic_config_dir(broker_logs, tmp_path / "topic-configs")
    copy = broker_logs.copy_topics(tmp_path / "copy")
    broker = _index_bytes(broker_logs.log_dir, topics)
    for path in copy.glob("*-0/*"):  # nothing left to copy from: every index from the .log
        if path.suffix in INDEX_SUFFIXES:
            path.write_bytes(b"\xff" * 7)
    quiet = {"topics": topics, "topic_config": str(configs), "out": lambda _line: None}
    result = rebuild_index.run(spark, str(copy), mode="rebuild", rebuild_all=True, **quiet)
    assert result.problems == 0
    # A broker stopped cleanly has trimmed every index to its entries (LogSegment.close; the
    # active segment's preallocated index too), and an empty .txnindex is written as no file
    # (TransactionIndex creates its file on the first aborted transaction only).
    rebuilt = _index_bytes(copy, topics)
    assert sorted(rebuilt) == sorted(broker)
    for name, data in broker.items():
        assert rebuilt[name] == data, name
    assert any(name.endswith(".txnindex") and data for name, data in broker.items())

    verified = rebuild_index.run(spark, str(broker_logs.log_dir), **quiet)
    assert verified.problems == 0, verified.summary


def _kafkalog_rows(spark, logs: BrokerLogs, level: str) -> dict[str, list]:
    """Every topic's rows read by format("kafkalog") in one query, by topic, as `Consumed`."""
    from pyspark.sql import functions as F

    df = (
        spark.read.format("kafkalog")
        .option("subscribe", ",".join(logs.topics))
        .option("includeHeaders", "true")
        .option("isolation.level", level)
        .load(str(logs.log_dir))
    )
    rows = df.select(
        "topic",
        "offset",
        "key",
        "value",
        "headers",
        "timestampType",
        F.unix_millis("timestamp").alias("ts"),
    ).orderBy("topic", "offset")
    by_topic: dict[str, list] = {topic: [] for topic in logs.topics}
    for r in rows.collect():
        by_topic[r.topic].append(
            (
                r.offset,
                None if r.key is None else bytes(r.key),
                None if r.value is None else bytes(r.value),
                tuple(
                    (h.key, None if h.value is None else bytes(h.value)) for h in r.headers or []
                ),
                r.timestampType + 1,  # Spark's 0/1; librdkafka's CREATE_TIME=1, LOG_APPEND_TIME=2
                r.ts,
            )
        )
    return by_topic


@pytest.mark.parametrize("level", ["read_committed", "read_uncommitted"])
def test_format_kafkalog_reads_what_a_consumer_gets(broker_logs, spark, level):
    ours = _kafkalog_rows(spark, broker_logs, level)
    for topic in broker_logs.topics:
        consumed = broker_logs.consumed[(topic, level)]
        assert consumed, topic
        assert ours[topic] == consumed, topic
    committed = broker_logs.consumed[(TXN_TOPIC, "read_committed")]
    uncommitted = broker_logs.consumed[(TXN_TOPIC, "read_uncommitted")]
    assert len(committed) < len(uncommitted)  # the aborted transactions are left out


def _cut_last_batch_in_half(segment: Path) -> int:
    from kafkalog_core.log.mapped import mapped_file
    from kafkalog_core.record.batch import iter_batch_headers

    with mapped_file(segment) as view:
        last = list(iter_batch_headers(view))[-1]
    cut_at = last.position + last.size // 2
    with open(segment, "r+b") as f:
        f.truncate(cut_at)
    return last.base_offset


def _segments_of(pdir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(pdir.glob("*.log"))}


def test_recovery_reaches_the_log_end_and_segments_the_broker_reaches(
    broker_logs, kafka_broker, tmp_path
):
    """Runs last: it starts the broker again on its own dir, made unclean and cut."""
    from confluent_kafka import Consumer, TopicPartition

    from kafkalog_core.config import LogConfig
    from kafkalog_core.log.partition.partition_log import PartitionLog

    topic = "oracle-lz4"
    pdir = broker_logs.partition_dir(topic)
    (broker_logs.log_dir / CLEAN_SHUTDOWN_MARKER).unlink()
    cut_batch = _cut_last_batch_in_half(sorted(pdir.glob("*.log"))[-1])
    recovery_point = read_offset_checkpoint(
        broker_logs.log_dir, "recovery-point-offset-checkpoint"
    )[(topic, 0)]
    ours = tmp_path / pdir.name
    shutil.copytree(pdir, ours)
    log = PartitionLog.open(
        ours,
        LogConfig.from_dict(
            {"index.interval.bytes": broker_logs.topics[topic]["index.interval.bytes"]}
        ),
        recovery_point=recovery_point,
        had_clean_shutdown=False,
    )
    our_end = log.log_end_offset
    log.close()
    assert our_end == cut_batch

    kafka_broker.start()
    assert "unclean" in kafka_broker.nodes[1].log_file.read_text().lower()
    consumer = Consumer(kafka_broker.client_config(**{"group.id": "oracle-recovery"}))
    try:
        _, broker_end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        consumer.close()
    kafka_broker.stop()
    assert broker_end == cut_batch
    assert _segments_of(ours) == _segments_of(pdir)
