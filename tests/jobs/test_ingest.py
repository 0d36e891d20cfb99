"""The ingest job end to end on real Spark (local mode): read back, byte layout, split partitions.

One source (two topics: `events` with 5 partitions, `vectors` with 10 for the murmur2 vectors)
is ingested twice, with the default task count and with one task, and reused across the
assertions below. Everything is read back with kafka-python, an independent reader.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from jobs.ingest import LEADER_EPOCH, run
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.run.history import IngestHistory
from kafkalog_core.log.checkpoints import (
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadataFile,
)
from kafkalog_core.log.partition.append import batch_options_for
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.partitioner import murmur2
from tests.jobs.ingest_helpers import (
    RECORD_SCHEMA,
    VECTOR_KEYS,
    config_doc,
    expected_records,
    kp_murmur2,
    kp_partition,
    read_partition,
    read_root,
    segment_files,
    snapshot,
    source_rows,
    write_parquet,
)

pytestmark = pytest.mark.spark

PARTITIONS = {"events": 5, "vectors": 10}
BATCH_BYTES = 2048  # several batches per 16 KiB segment, so the indexes get entries
TOPICS = {
    "events": {
        "partitions": 5,
        "config": {"segment.bytes": 16384, "index.interval.bytes": 1024},
    },
    "vectors": {"partitions": 10, "config": {"segment.bytes": 4096, "index.interval.bytes": 256}},
}


def _rows() -> list[dict]:
    rows = source_rows(1500)
    # The §11 vectors as keys of a 10-partition topic, a few records each.
    extra = source_rows(40, start_id=10_000, topic="vectors")
    for i, r in enumerate(extra):
        r["user"] = list(VECTOR_KEYS)[i % len(VECTOR_KEYS)]
    return rows + extra


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> dict:
    rows = _rows()
    path = write_parquet(tmp_path_factory.mktemp("src") / "events", rows, files=3)
    return {"rows": rows, "path": path}


def _config(source_path, root, **kw) -> IngestConfig:
    doc = config_doc(source_path, root, topics=TOPICS, mapping={"topic": {"column": "topic"}}, **kw)
    return IngestConfig.from_dict(doc)


@pytest.fixture(scope="module")
def ingested(spark, source, tmp_path_factory) -> dict:
    """The source ingested with the default task count (and with one task, for the layout)."""
    base = tmp_path_factory.mktemp("ingest")
    out: dict = {}
    for name, tasks in (("default", None), ("single", 1)):
        root = base / name / "kafka-logs"
        lines: list[str] = []
        config = _config(source["path"], root)
        result = run(
            spark,
            config,
            run_id=f"r-{name}",
            tasks=tasks,
            batch_bytes=BATCH_BYTES,
            out=lines.append,
        )
        out[name] = {"root": root, "result": result, "lines": lines, "config": config}
    return out


def test_run_reports_what_it_committed(ingested, source):
    result = ingested["default"]["result"]
    assert result.status == "committed"
    assert result.records == len(source["rows"])
    assert result.rejected == 0
    counts = {}
    for r in expected_records(source["rows"], PARTITIONS):
        counts[f"{r[0]}-{r[1]}"] = counts.get(f"{r[0]}-{r[1]}", 0) + 1
    assert result.partitions == {name: [0, n] for name, n in counts.items()}
    summary = "\n".join(ingested["default"]["lines"])
    assert f"{len(source['rows'])} records" in summary
    history = IngestHistory(ingested["default"]["root"]).find_run("r-default")
    assert history is not None and history["rows"] == len(source["rows"])


def test_read_back_with_kafka_python_equals_source(spark, ingested, source):
    """Keys, values, headers, timestamps, partitions and offsets, record for record."""
    actual = spark.createDataFrame(read_root(ingested["default"]["root"]), RECORD_SCHEMA)
    expected = spark.createDataFrame(expected_records(source["rows"], PARTITIONS), RECORD_SCHEMA)
    assert actual.count() == len(source["rows"])
    assert_df_equality(actual, expected)


def test_task_count_does_not_change_records_or_offsets(ingested):
    assert read_root(ingested["default"]["root"]) == read_root(ingested["single"]["root"])


def test_partitions_follow_murmur2_of_both_implementations(ingested, source):
    root = ingested["default"]["root"]
    seen = 0
    for pdir in sorted(p for p in root.iterdir() if p.is_dir()):
        topic, _, part = pdir.name.rpartition("-")
        records, _ = read_partition(pdir)
        for _, key, *_ in records:
            key = bytes(key)
            ours = (murmur2(key) & 0x7FFFFFFF) % PARTITIONS[topic]
            theirs = kp_partition(key, PARTITIONS[topic])
            assert ours == theirs == int(part), (topic, key, ours, theirs, part)
            assert murmur2(key) & 0xFFFFFFFF == kp_murmur2(key) & 0xFFFFFFFF
            seen += 1
    assert seen == len(source["rows"])
    # §11 vectors: foobar -> 6 and abc -> 7 of 10, landing in those partition dirs.
    for key, partition in VECTOR_KEYS.items():
        assert kp_partition(key.encode(), 10) == partition
        records, _ = read_partition(root / f"vectors-{partition}")
        assert records and {bytes(r[1]) for r in records} == {key.encode()}


def test_offsets_contiguous_from_zero_with_engine_batches(ingested):
    root = ingested["default"]["root"]
    partition_dirs = sorted(p for p in root.iterdir() if p.is_dir())
    # every partition of both topics, as a broker creates them; vectors' keys reach 4 of 10
    assert {p.name for p in partition_dirs} == {f"events-{i}" for i in range(5)} | {
        f"vectors-{i}" for i in range(10)
    }
    written = {f"events-{i}" for i in range(5)} | {f"vectors-{i}" for i in {0, 6, 7, 9}}
    for pdir in partition_dirs:
        records, batches = read_partition(pdir)
        assert bool(records) == (pdir.name in written)
        if not records:
            continue
        assert [r[0] for r in records] == list(range(len(records)))
        assert [b.base_offset for b in batches] == [0] + [b.next_offset for b in batches[:-1]]
        assert all(b.leader_epoch == LEADER_EPOCH and b.magic == 2 for b in batches)
        assert all(not b.is_transactional and b.compression_type == 0 for b in batches)


def test_partition_and_root_metadata(ingested):
    root = ingested["default"]["root"]
    checkpoints = OffsetCheckpointFile(root / "recovery-point-offset-checkpoint").read()
    replication = OffsetCheckpointFile(root / "replication-offset-checkpoint").read()
    topic_ids = {}
    for pdir in sorted(p for p in root.iterdir() if p.is_dir()):
        topic, _, part = pdir.name.rpartition("-")
        records, _ = read_partition(pdir)
        assert checkpoints[(topic, int(part))] == replication[(topic, int(part))] == len(records)
        topic_ids.setdefault(topic, set()).add(
            PartitionMetadataFile(pdir / "partition.metadata").read()
        )
        epochs = LeaderEpochCheckpointFile(pdir / "leader-epoch-checkpoint").read()
        assert [(e.epoch, e.start_offset) for e in epochs] == [(LEADER_EPOCH, 0)]
        assert not [p.name for p in pdir.iterdir() if p.suffix in (".swap", ".cleaned", ".deleted")]
    assert all(len(ids) == 1 for ids in topic_ids.values())  # one topic id per topic
    assert len({next(iter(ids)) for ids in topic_ids.values()}) == 2


def _engine_copy(pdir: Path, dest: Path, config: IngestConfig) -> Path:
    """The same records written by the log engine directly, in one append."""
    topic = pdir.name.rpartition("-")[0]
    records, _ = read_partition(pdir)
    table = pa.table(
        {
            "key": pa.array([None if r[1] is None else bytes(r[1]) for r in records], pa.binary()),
            "value": pa.array(
                [None if r[2] is None else bytes(r[2]) for r in records], pa.binary()
            ),
            "timestamp": pa.array([r[4] for r in records], pa.int64()),
            "headers": pa.array(
                [
                    [{"key": k, "value": None if v is None else bytes(v)} for k, v in r[3]]
                    for r in records
                ],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )
    log_config = config.topic(topic).log_config
    options = batch_options_for(
        log_config, leader_epoch=0, now_ms=None, max_batch_bytes=BATCH_BYTES
    )
    log = PartitionLog.create(dest, log_config, leader_epoch=0)
    log.append_records(table, options=options)
    log.close()
    return dest


def test_segments_and_indexes_identical_to_the_log_engine(ingested, tmp_path):
    """One task per partition: .log/.index/.timeindex byte for byte as PartitionLog writes them."""
    single = ingested["single"]
    root = single["root"]
    several = 0
    for pdir in sorted(p for p in root.iterdir() if p.is_dir()):
        engine = _engine_copy(pdir, tmp_path / pdir.name, single["config"])
        for ext in ("log", "index", "timeindex"):
            ours = [p.name for p in segment_files(pdir, ext)]
            theirs = [p.name for p in segment_files(engine, ext)]
            assert ours == theirs, (pdir.name, ext)
            for name in ours:
                assert (pdir / name).read_bytes() == (engine / name).read_bytes(), (pdir.name, name)
        logs = segment_files(pdir)
        indexes = segment_files(pdir, "index")
        if len(logs) >= 3 and all(p.stat().st_size >= 16 for p in indexes[:-1]):
            several += 1
    # several segments, each full one with several index entries, in every events partition
    assert several == 5


def test_same_run_id_again_is_a_no_op(spark, ingested, source):
    info = ingested["default"]
    before = snapshot(info["root"])
    lines: list[str] = []
    result = run(spark, info["config"], run_id="r-default", out=lines.append)
    assert result.status == "no-op"
    assert lines == ["kafkalog: nothing to do: run r-default is already committed"]
    assert snapshot(info["root"]) == before


def test_hot_partition_split_over_tasks_matches_one_task(spark, tmp_path):
    """A one-partition topic over 4 tasks: >= 3 ranges, laid out again as one writer (so one
    segment, as one task writes), and the same records and offsets as one task writes."""
    rows = source_rows(1200, hot_user="hot")
    path = write_parquet(tmp_path / "src", rows, files=2)
    topics = {"events": {"partitions": 1, "config": {"segment.bytes": 1 << 20}}}
    outputs, summaries = {}, {}
    for tasks in (4, 1):
        root = tmp_path / f"t{tasks}" / "logs"
        config = IngestConfig.from_dict(config_doc(path, root, topics=topics))
        result = run(spark, config, run_id=f"hot-{tasks}", tasks=tasks, out=lambda _: None)
        assert result.records == len(rows)
        outputs[tasks], summaries[tasks] = root, result.summary
    split_bases = [int(p.name[:20]) for p in segment_files(outputs[4] / "events-0")]
    one_bases = [int(p.name[:20]) for p in segment_files(outputs[1] / "events-0")]
    assert one_bases == split_bases == [0]  # no roll at 1 MiB, and the ranges are relaid
    assert "the relayout encoded" in summaries[4] and ": 1 partitions, 1 segments" in summaries[4]
    assert snapshot(outputs[4]) == snapshot(outputs[1])  # the same bytes, not only records
    history = IngestHistory(outputs[4]).find_run("hot-4")
    assert history["partitions"] == {"events-0": [0, len(rows)]}
    assert read_root(outputs[4]) == read_root(outputs[1])
    expected = expected_records(rows, {"events": 1})
    assert read_root(outputs[1]) == [(t, p, o, k, v, h, ts) for t, p, o, k, v, h, ts in expected]


def test_compressed_and_log_append_time_topics_read_back(spark, source, tmp_path):
    """gzip, lz4 and zstd batches decode with kafka-python's codecs to the source records; a
    LogAppendTime topic stamps the run's start time as every batch's (and record's) timestamp."""
    codecs = {"gz": "gzip", "lz": "lz4", "zs": "zstd"}
    topics = {
        name: {"partitions": 2, "config": {"compression.type": codec}}
        for name, codec in codecs.items()
    }
    topics["la"] = {"partitions": 2, "config": {"message.timestamp.type": "LogAppendTime"}}
    topic_expr = "CASE id % 4 WHEN 0 THEN 'gz' WHEN 1 THEN 'lz' WHEN 2 THEN 'zs' ELSE 'la' END"
    rows = [dict(r) for r in source["rows"] if r["topic"] == "events"][:600]
    for r in rows:
        r["topic"] = ["gz", "lz", "zs", "la"][r["id"] % 4]
    path = write_parquet(tmp_path / "src", rows)
    root = tmp_path / "logs"
    doc = config_doc(path, root, topics=topics, mapping={"topic": {"expr": topic_expr}})
    before = int(time.time() * 1000)
    result = run(spark, IngestConfig.from_dict(doc), run_id="codecs", out=lambda _: None)
    after = int(time.time() * 1000)
    assert result.records == len(rows)
    partitions = dict.fromkeys(topics, 2)
    expected = expected_records(rows, partitions)
    actual = read_root(root)
    stamped = {r[6] for r in actual if r[0] == "la"}
    assert len(stamped) == 1 and before - 60_000 <= next(iter(stamped)) <= after
    assert [r for r in actual if r[0] != "la"] == [r for r in expected if r[0] != "la"]
    assert [r[:6] for r in actual if r[0] == "la"] == [r[:6] for r in expected if r[0] == "la"]
    for name, codec_id in (("gz", 1), ("lz", 3), ("zs", 4), ("la", 0)):
        for p in range(2):
            _, batches = read_partition(root / f"{name}-{p}")
            assert {b.compression_type for b in batches} == {codec_id}
            assert {b.timestamp_type for b in batches} == {1 if name == "la" else 0}


def test_every_partition_of_a_topic_is_created(spark, tmp_path):
    """As a broker creates a topic (and as df.write does, through the same publish): the
    partitions no record went to are empty partition dirs of the topic, so the dirs hold the
    count."""
    rows = source_rows(20, users=1)  # one key: one partition of 6
    root = tmp_path / "logs"
    topics = {"events": {"partitions": 6}}
    doc = config_doc(write_parquet(tmp_path / "src", rows), root, topics=topics)
    run(spark, IngestConfig.from_dict(doc), run_id="one-key", out=lambda _: None)
    dirs = sorted(p.name for p in root.iterdir() if p.name.startswith("events-"))
    assert dirs == [f"events-{p}" for p in range(6)]
    written = kp_partition(b"user-0", 6)
    ids = {PartitionMetadataFile(root / d / "partition.metadata").read() for d in dirs}
    assert len(ids) == 1
    recovery = OffsetCheckpointFile(root / "recovery-point-offset-checkpoint").read()
    for p in range(6):
        log = root / f"events-{p}" / "00000000000000000000.log"
        assert (log.stat().st_size > 0) == (p == written)
        assert recovery[("events", p)] == (20 if p == written else 0)
        epochs = LeaderEpochCheckpointFile(root / f"events-{p}" / "leader-epoch-checkpoint").read()
        assert [(e.epoch, e.start_offset) for e in epochs] == [(LEADER_EPOCH, 0)]
    assert read_root(root) == expected_records(rows, {"events": 6})
