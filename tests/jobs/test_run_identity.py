"""Runs are reproducible byte for byte: topic ids (given, kept, or derived from the topic name)
and `timestamp: now` (the run's start time, fixed once per run id, both task readers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.ingest import run
from jobs.ingestion.commit.topic_ids import TopicIdMismatchError
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.staging.task_staging import staging_root
from kafkalog_core.errors import KafkaLogError
from kafkalog_core.log.checkpoints import (
    PartitionMetadataFile,
    new_topic_id,
    topic_id_for_name,
    topic_id_to_str,
)
from kafkalog_core.tools.check_logdir import check_log_dir
from tests.jobs.ingest_helpers import (
    config_doc,
    read_root,
    snapshot,
    source_rows,
    staging_leftovers,
    write_parquet,
)

pytestmark = pytest.mark.spark

TOPICS = {"events": {"partitions": 3, "config": {"segment.bytes": 8192}}}
N = 300
NOW = 1_714_521_600_123


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return write_parquet(tmp_path_factory.mktemp("src"), source_rows(N), files=2)


def _doc(source: Path, root: Path, *, topic_id: str | None = None, reader: str = "auto") -> dict:
    topics = {"events": dict(TOPICS["events"])}
    if topic_id is not None:
        topics["events"]["topic_id"] = topic_id
    doc = config_doc(source, root, topics=topics, ordering="source")
    del doc["mapping"]["headers"]  # the arrow reader takes plain columns only
    doc["source"]["task_reader"] = reader
    return doc


def _run(spark, doc: dict, run_id: str = "r1", **kw):
    return run(spark, IngestConfig.from_dict(doc), run_id=run_id, out=lambda _: None, **kw)


def _topic_ids(root: Path) -> set[str]:
    return {
        topic_id_to_str(PartitionMetadataFile(p / "partition.metadata").read())
        for p in root.iterdir()
        if p.is_dir()
    }


def test_two_roots_are_byte_identical_with_the_name_based_topic_id(spark, source, tmp_path):
    a, b = tmp_path / "a" / "logs", tmp_path / "b" / "logs"
    _run(spark, _doc(source, a))
    _run(spark, _doc(source, b))
    assert snapshot(a) == snapshot(b)
    assert sum(1 for k in snapshot(a) if k.endswith("partition.metadata")) == 3
    assert _topic_ids(a) == {topic_id_to_str(topic_id_for_name("events"))}
    assert topic_id_for_name("events") != topic_id_for_name("events2")
    # what a broker would see: nothing to refuse or repair, only the broker's own root files
    findings = [(f.severity, f.path) for f in check_log_dir(a).findings]
    assert findings == [("note", "meta.properties"), ("note", ".kafka_cleanshutdown")]


def test_a_given_topic_id_lands_in_every_partition(spark, source, tmp_path):
    given = topic_id_to_str(new_topic_id())
    root = tmp_path / "logs"
    _run(spark, _doc(source, root, topic_id=given))
    assert _topic_ids(root) == {given}
    # a second run continues the topic with the same id
    _run(spark, _doc(source, root, topic_id=given), run_id="r2")
    assert _topic_ids(root) == {given}


def test_an_existing_partition_keeps_its_id_and_a_different_given_id_is_refused(
    spark, source, tmp_path
):
    root = tmp_path / "logs"
    _run(spark, _doc(source, root))
    derived = topic_id_to_str(topic_id_for_name("events"))
    before = snapshot(root)
    other = topic_id_to_str(new_topic_id())
    with pytest.raises(TopicIdMismatchError) as info:
        _run(spark, _doc(source, root, topic_id=other), run_id="r2")
    message = str(info.value)
    assert "events-0/partition.metadata" in message
    assert derived in message and other in message
    assert snapshot(root) == before
    # an existing id written by someone else (a broker) is kept when none is given
    kept = new_topic_id()
    for pdir in (p for p in root.iterdir() if p.is_dir()):
        PartitionMetadataFile(pdir / "partition.metadata").write(kept)
    _run(spark, _doc(source, root), run_id="r3")
    assert _topic_ids(root) == {topic_id_to_str(kept)}


@pytest.mark.parametrize("reader", ["arrow", "spark"])
def test_timestamp_now_stamps_the_given_run_start(spark, source, tmp_path, reader):
    doc = _doc(source, tmp_path / "logs", reader=reader)
    doc["mapping"]["timestamp"] = "now"
    result = _run(spark, doc, now_ms=NOW)
    assert result.task_reader == reader
    stamps = {r[6] for r in read_root(tmp_path / "logs")}
    assert stamps == {NOW} and result.records == N


def test_timestamp_now_killed_and_rerun_is_byte_identical(spark, source, tmp_path):
    root = tmp_path / "killed" / "logs"
    doc = _doc(source, root, reader="arrow")
    doc["mapping"]["timestamp"] = "now"
    with pytest.raises(KafkaLogError, match="injected failure"):
        _run(spark, doc, fail_after_batches=1)
    recorded = json.loads((staging_root(root, "r1") / "run-start.json").read_bytes())
    _run(spark, doc)  # the rerun reads the first attempt's start back
    assert staging_leftovers(root) == []
    assert {r[6] for r in read_root(root)} == {recorded["started_at_ms"]}
    fresh = tmp_path / "fresh" / "logs"
    doc["output"]["root"] = str(fresh)
    _run(spark, doc, now_ms=recorded["started_at_ms"])
    assert snapshot(root) == snapshot(fresh)


def test_a_committed_runs_leftover_staging_goes_with_its_rerun(spark, source, tmp_path):
    """A kill -9 after the history row, while the run's staging was being removed, leaves some
    of it (bench/crash.py found it killing a range run before an rmdir); the rerun of that run
    id is a no-op and must remove it, or the meta area keeps it for good."""
    root = tmp_path / "logs"
    doc = _doc(source, root, reader="arrow")
    assert _run(spark, doc).status == "committed"
    before = snapshot(root)
    left = staging_root(root, "r1") / "task-0" / "attempt-7" / "r0" / "events-0.manifest.json"
    left.parent.mkdir(parents=True)
    left.write_text("{}")
    assert _run(spark, doc).status == "no-op"
    assert staging_leftovers(root) == [] and snapshot(root) == before
