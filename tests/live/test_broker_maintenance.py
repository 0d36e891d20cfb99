"""A live broker's own background work on placed data (tests/kafka_cluster.py): its log cleaner
cleans a placed compacted topic and keeps the latest value of every key, and its retention
deletes from a placed delete topic exactly the segments kafkalog's `retention` dry run, with
the same settings and the same clock, says it would, a non-empty active segment included.

One broker, eager: the first retention check a second after the start and then every second,
segments deleted at once, the cleaner polling every 100 ms.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from jobs import retention
from kafkalog_core.config import LogConfig
from kafkalog_core.log.checkpoints import OffsetCheckpointFile
from kafkalog_core.log.names import LOG_FILE_SUFFIX
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.tools.place import run_place
from tests.kafka_cluster import KafkaCluster
from tests.live.records import consume_all, create_topic, write_partition
from tests.live.test_kafka_cluster3 import wait_for

DAY_MS = 86_400_000
AGED, COMPACTED = "aged", "compacted"
AGED_CONFIG = {"cleanup.policy": "delete", "retention.ms": str(DAY_MS)}
COMPACTED_CONFIG = {
    "cleanup.policy": "compact",
    "retention.ms": "-1",
    "min.cleanable.dirty.ratio": "0.01",
}
KEYS = 40


@pytest.fixture(scope="module")
def broker_configs() -> dict[str, object]:
    return {
        "log.initial.task.delay.ms": 1000,
        "log.retention.check.interval.ms": 1000,
        "log.segment.delete.delay.ms": 0,
        "log.cleaner.backoff.ms": 100,
    }


def write_records(
    output: Path, topic: str, partition: int, keys: list[bytes | None], timestamps: list[int]
) -> int:
    """One partition of small segments (4 KB) in kafkalog's output root; its log end offset."""
    data = pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": [b"value-%d-" % i + b"x" * 30 for i in range(len(keys))],
            "timestamp": pa.array(timestamps, pa.int64()),
        }
    )
    settings = {"segment.bytes": 4000, "index.interval.bytes": 200, "max_batch_bytes": 400}
    return write_partition(output, topic, partition, data, **settings)


def segment_bases(pdir: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in pdir.glob(f"*{LOG_FILE_SUFFIX}"))


@pytest.fixture(scope="module")
def placed(kafka_broker: KafkaCluster, tmp_path_factory) -> dict:
    """Both topics created, written by kafkalog, placed into the stopped broker; the broker is
    not started yet (the tests time its work). Per partition: its log end offset."""
    tmp = tmp_path_factory.mktemp("maintenance")
    output = tmp / "output"
    now = int(time.time() * 1000)
    n = 300
    old = [now - 10 * DAY_MS + i for i in range(n)]
    recent = [now - 3_600_000 + i for i in range(n)]
    ends = {
        (AGED, 0): write_records(output, AGED, 0, [None] * n, old),  # every segment old
        # old, then recent: the old prefix goes, the rest stays
        (AGED, 1): write_records(output, AGED, 1, [None] * n, old[: n // 2] + recent[n // 2 :]),
        (COMPACTED, 0): write_records(
            output, COMPACTED, 0, [b"k%d" % (i % KEYS) for i in range(n)], recent
        ),
    }
    create_topic(kafka_broker, AGED, 2, **AGED_CONFIG)
    create_topic(kafka_broker, COMPACTED, 1, **COMPACTED_CONFIG)
    kafka_broker.stop()
    (node,) = kafka_broker.nodes.values()
    log_dir = node.log_dirs[0]
    out = io.StringIO()
    configs = {AGED: AGED_CONFIG, COMPACTED: COMPACTED_CONFIG}
    status = run_place(
        str(output), [str(log_dir)], [AGED, COMPACTED], out, apply=True, topic_configs=configs
    )
    assert status == 0, out.getvalue()
    return {"output": output, "log_dir": log_dir, "now": now, "ends": ends, "tmp": tmp}


def test_the_broker_deletes_exactly_the_segments_retentions_dry_run_names(
    kafka_broker, placed, spark
) -> None:
    output, log_dir, ends = placed["output"], placed["log_dir"], placed["ends"]
    settings = placed["tmp"] / "aged.properties"
    settings.write_text("".join(f"{k}={v}\n" for k, v in AGED_CONFIG.items()))
    result = retention.run(
        spark, str(output), topic_config=str(settings), topics=[AGED], now=placed["now"],
        out=lambda _: None,
    )  # fmt: skip
    rows = [r for r in result.rows.to_pylist() if r["kind"] == "segment"]
    verdict = {
        p: {r["base_offset"]: r["action"] for r in rows if r["partition"] == p} for p in (0, 1)
    }
    # partition 0: every segment goes, the non-empty active one too
    assert set(verdict[0].values()) == {"delete"} and len(verdict[0]) > 1
    assert set(verdict[1].values()) == {"delete", "keep"}
    log_start = {r["partition"]: r["log_start_offset"] for r in rows}
    assert log_start[0] == ends[(AGED, 0)]

    kafka_broker.start()
    consumer = Consumer(kafka_broker.client_config(**{"group.id": "retention-proof"}))

    def offsets(p: int) -> tuple[int, int] | None:
        try:  # the broker may not lead the partition yet
            return consumer.get_watermark_offsets(TopicPartition(AGED, p), timeout=10)
        except KafkaException:
            return None

    try:
        for p in (0, 1):
            want = (log_start[p], ends[(AGED, p)])
            wait_for(
                lambda p=p, want=want: offsets(p) == want,
                f"{AGED}-{p}'s offsets {want} after the broker's retention",
            )
    finally:
        consumer.close()
    kept = {p: sorted(b for b, a in verdict[p].items() if a == "keep") for p in (0, 1)}

    def deleted_files_gone() -> bool:
        return not list(log_dir.glob(f"{AGED}-*/*.deleted"))

    wait_for(deleted_files_gone, "the deleted segments' files removed")
    # what is left: the kept segments, and where every segment went the broker's new empty one
    assert segment_bases(log_dir / f"{AGED}-1") == kept[1]
    assert segment_bases(log_dir / f"{AGED}-0") == [ends[(AGED, 0)]]
    assert (log_dir / f"{AGED}-0" / f"{ends[(AGED, 0)]:020d}{LOG_FILE_SUFFIX}").stat().st_size == 0


def test_the_broker_cleaner_keeps_the_latest_value_of_every_key(kafka_broker, placed) -> None:
    log_dir, end = placed["log_dir"], placed["ends"][(COMPACTED, 0)]
    if not any(n.running for n in kafka_broker.nodes.values()):
        kafka_broker.start()
    pdir = placed["output"] / f"{COMPACTED}-0"
    log = PartitionLog.open(pdir, LogConfig())
    try:
        written = log.read_records().to_pylist()
    finally:
        log.close()
    latest = {r["key"]: (r["offset"], r["value"]) for r in written}  # the last one wins
    active_base = segment_bases(pdir)[-1]
    assert active_base > 0 and len(latest) == KEYS

    def cleaned_to() -> int:
        checkpoint = OffsetCheckpointFile(log_dir / "cleaner-offset-checkpoint")
        return checkpoint.read().get((COMPACTED, 0), 0) if checkpoint.exists() else 0

    # the cleaner cleans every segment but the active one
    first_dirty = wait_for(lambda: cleaned_to() >= active_base and cleaned_to(), "a cleaner pass")
    served = consume_all(kafka_broker, COMPACTED, end=end)
    assert served[-1][0] == end - 1 and len(served) < len(written)
    survivors = {key: (offset, value) for offset, key, value in served}
    assert survivors == latest
    cleaned = [key for offset, key, _ in served if offset < first_dirty]
    assert len(cleaned) == len(set(cleaned))  # one record per key below the cleaned offset
