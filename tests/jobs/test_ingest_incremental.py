"""Re-runs of the ingest job: incremental appends (copy-on-write last segment), idempotency per
run id and per Delta source version, a task killed mid-write, and `main` end to end."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from deltalake import write_deltalake

from jobs.ingest import main, run
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.run.history import IngestHistory
from kafkalog_core.errors import KafkaLogError
from kafkalog_core.log.checkpoints import LeaderEpochCheckpointFile, OffsetCheckpointFile
from kafkalog_core.log.partition.append import batch_options_for
from kafkalog_core.log.partition.partition_log import PartitionLog
from tests.jobs.ingest_helpers import (
    SOURCE_SCHEMA,
    config_doc,
    expected_records,
    read_root,
    segment_files,
    snapshot,
    staging_leftovers,
    two_sources,
)

pytestmark = pytest.mark.spark

PARTITIONS = {"events": 3}
BATCH_BYTES = 2048
TOPICS = {
    "events": {
        "partitions": 3,
        "config": {"segment.bytes": 40_000, "index.interval.bytes": 1024},
    }
}
N_A, N_B = 400, 300


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict:
    return two_sources(tmp_path_factory.mktemp("incr"), N_A, N_B, files=2)


def _config(path, root, task_reader: str = "auto") -> IngestConfig:
    doc = config_doc(path, root, topics=TOPICS)
    doc["source"]["task_reader"] = task_reader
    return IngestConfig.from_dict(doc)


def _run(spark, path, root, run_id, task_reader: str = "auto", **kw):
    return run(
        spark,
        _config(path, root, task_reader),
        run_id=run_id,
        batch_bytes=BATCH_BYTES,
        out=lambda _: None,
        **kw,
    )


def _leo(rows) -> dict:
    leo: dict = {}
    for r in expected_records(rows, PARTITIONS):
        leo[(r[0], r[1])] = r[2] + 1
    return leo


def _expected_both(rows_a, rows_b) -> list[tuple]:
    both = expected_records(rows_a, PARTITIONS) + expected_records(
        rows_b, PARTITIONS, leo=_leo(rows_a)
    )
    return sorted(both, key=lambda r: (r[0], r[1], r[2]))


def _table(records) -> pa.Table:
    return pa.table(
        {
            "key": pa.array([r[3] for r in records], pa.binary()),
            "value": pa.array([r[4] for r in records], pa.binary()),
            "timestamp": pa.array([r[6] for r in records], pa.int64()),
            "headers": pa.array(
                [r[5] for r in records],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )


@pytest.fixture(scope="module")
def appended(spark, sources, tmp_path_factory) -> dict:
    """Run a1 ingests A; the old last segments are kept; run b1 appends B. One task each, so
    every partition is one range (the layout test compares with a single engine log)."""
    root = tmp_path_factory.mktemp("appended") / "logs"
    first = _run(spark, sources["path_a"], root, "a1", tasks=1)
    before = {
        pdir.name: {p.name: p.read_bytes() for p in pdir.iterdir() if p.is_file()}
        for pdir in root.iterdir()
        if pdir.is_dir()
    }
    second = _run(spark, sources["path_b"], root, "b1", tasks=1)
    return {"root": root, "first": first, "second": second, "before": before}


def test_second_run_continues_offsets_from_the_log_end(appended, sources):
    leo_a = _leo(sources["a"])
    assert appended["first"].records == N_A
    assert appended["second"].status == "committed"
    assert appended["second"].records == N_B
    leo_both = _leo(sources["a"] + sources["b"])
    assert appended["second"].partitions == {
        f"{t}-{p}": [leo_a[(t, p)], leo_both[(t, p)]] for t, p in leo_a
    }
    assert read_root(appended["root"]) == _expected_both(sources["a"], sources["b"])
    root = appended["root"]
    checkpoint = OffsetCheckpointFile(root / "recovery-point-offset-checkpoint").read()
    assert checkpoint == {tp: leo_both[tp] for tp in leo_a}
    for pdir in (p for p in root.iterdir() if p.is_dir()):
        epochs = LeaderEpochCheckpointFile(pdir / "leader-epoch-checkpoint").read()
        assert [(e.epoch, e.start_offset) for e in epochs] == [(0, 0)]


def test_last_segment_continued_copy_on_write(appended):
    """Old segments untouched; the old last segment, having room, grew in place: its new bytes
    start with its old bytes (same name, same base offset)."""
    root = appended["root"]
    continued = 0
    for name, old_files in appended["before"].items():
        pdir = root / name
        old_logs = sorted(f for f in old_files if f.endswith(".log"))
        for log in old_logs[:-1]:
            assert (pdir / log).read_bytes() == old_files[log]
        last = old_logs[-1]
        new = (pdir / last).read_bytes()
        assert new.startswith(old_files[last])
        if len(old_files[last]) < 40_000 - 2048:
            assert len(new) > len(old_files[last]), f"{name}/{last} was not continued"
            continued += 1
    assert continued >= 2


def test_incremental_layout_identical_to_the_log_engine(appended, sources, tmp_path):
    """The engine appending A, closing, reopening and appending B gives the same files."""
    root = appended["root"]
    leo_a = _leo(sources["a"])
    exp_a = expected_records(sources["a"], PARTITIONS)
    exp_b = expected_records(sources["b"], PARTITIONS, leo=leo_a)
    config = _config(sources["path_a"], root)
    log_config = config.topic("events").log_config
    options = batch_options_for(
        log_config, leader_epoch=0, now_ms=None, max_batch_bytes=BATCH_BYTES
    )
    for pdir in sorted(p for p in root.iterdir() if p.is_dir()):
        part = int(pdir.name.rpartition("-")[2])
        engine = tmp_path / pdir.name
        log = PartitionLog.create(engine, log_config, leader_epoch=0)
        log.append_records(_table([r for r in exp_a if r[1] == part]), options=options)
        log.close()
        log = PartitionLog.open(engine, log_config, had_clean_shutdown=True, leader_epoch=0)
        log.append_records(_table([r for r in exp_b if r[1] == part]), options=options)
        log.close()
        for ext in ("log", "index", "timeindex"):
            ours = [p.name for p in segment_files(pdir, ext)]
            assert ours == [p.name for p in segment_files(engine, ext)], (pdir.name, ext)
            for name in ours:
                assert (pdir / name).read_bytes() == (engine / name).read_bytes(), name


def test_same_run_id_is_a_no_op(spark, appended, sources):
    before = snapshot(appended["root"])
    result = _run(spark, sources["path_b"], appended["root"], "b1")
    assert result.status == "no-op" and result.records == 0
    assert snapshot(appended["root"]) == before


def test_killed_task_leaves_nothing_visible_and_a_rerun_publishes_once(spark, sources, tmp_path):
    root = tmp_path / "logs"
    _run(spark, sources["path_a"], root, "a1")
    before = snapshot(root)
    # Spark's reader, in small Arrow batches, so the kill lands mid-write (the arrow range
    # path's kills are tests/jobs/test_arrow_range.py's)
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    old = spark.conf.get(key)
    spark.conf.set(key, "25")
    try:
        with pytest.raises(KafkaLogError) as info:
            _run(
                spark,
                sources["path_b"],
                root,
                "b1",
                fail_after_batches=4,
                tasks=2,
                task_reader="spark",
            )
    finally:
        spark.conf.set(key, old)
    assert "injected failure" in str(info.value) and "\n" not in str(info.value)
    # Whatever the tasks staged before the kill (which depends on which task got how far),
    # nothing of it is visible in the log dir, and the run is not in the history.
    assert snapshot(root) == before
    assert IngestHistory(root).find_run("b1") is None

    result = _run(spark, sources["path_b"], root, "b1")
    assert result.status == "committed" and result.records == N_B
    assert read_root(root) == _expected_both(sources["a"], sources["b"])
    assert staging_leftovers(root) == []
    history = IngestHistory(root)
    assert [r["run_id"] for r in history.last_runs()] == ["b1", "a1"]


def test_killed_first_run_leaves_an_empty_root(spark, sources, tmp_path):
    root = tmp_path / "logs"
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    old = spark.conf.get(key)
    spark.conf.set(key, "30")
    try:
        with pytest.raises(KafkaLogError, match="injected failure"):
            _run(
                spark,
                sources["path_a"],
                root,
                "a1",
                fail_after_batches=5,
                tasks=2,
                task_reader="spark",
            )
    finally:
        spark.conf.set(key, old)
    assert list(root.iterdir()) == []
    result = _run(spark, sources["path_a"], root, "a1")
    assert result.records == N_A
    assert read_root(root) == expected_records(sources["a"], PARTITIONS)


def _delta_table(rows) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SOURCE_SCHEMA)


def test_delta_version_then_since_version_through_main(spark, sources, tmp_path, capsys):
    """delta-rs source: version 0 by `run`, then `main --since-version 0` appends only the rows
    of version 1; the same source version again is a no-op, whatever the run id."""
    table = str(tmp_path / "delta" / "events")
    write_deltalake(table, _delta_table(sources["a"]))
    root = tmp_path / "logs"
    doc = config_doc({"format": "delta", "path": table}, root, topics=TOPICS)
    first = run(
        spark,
        IngestConfig.from_dict(doc),
        run_id="d0",
        batch_bytes=BATCH_BYTES,
        out=lambda _: None,
    )
    assert first.source_version == 0 and first.records == N_A
    assert "via delta-rs" in first.source

    write_deltalake(table, _delta_table(sources["b"]), mode="append")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    argv = ["--config", str(path), "--since-version", "0", "--batch-bytes", str(BATCH_BYTES)]
    assert main([*argv, "--run-id", "d1"]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    identity = f"delta {Path(table).resolve()} since 0"
    assert f"run d1: committed, {N_B} records from {identity}@1 " in out.out
    assert read_root(root) == _expected_both(sources["a"], sources["b"])

    before = snapshot(root)
    assert main([*argv, "--run-id", "d2"]) == 0
    assert "kafkalog: nothing to do:" in capsys.readouterr().out
    again = run(
        spark,
        IngestConfig.from_dict({**doc, "source": {**doc["source"], "version": 0}}),
        run_id="d3",
        out=lambda _: None,
    )
    assert again.status == "no-op" and again.source_version == 0
    assert snapshot(root) == before
    runs = [r["run_id"] for r in IngestHistory(root).last_runs()]
    assert runs == ["d1", "d0"]


def test_main_end_to_end_from_a_yaml_file(sources, tmp_path, capsys):
    root = tmp_path / "out" / "kafka-logs"
    doc = config_doc(sources["path_a"], Path("unused"), topics=TOPICS)
    path = tmp_path / "ingest.yaml"
    path.write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    code = main(["--config", str(path), "--run-id", "x", "--output", str(root), "--tasks", "3"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert out.err == ""
    assert out.out.startswith(f"run x: committed, {N_A} records from parquet {sources['path_a']}")
    assert read_root(root) == expected_records(sources["a"], PARTITIONS)
    record = IngestHistory(root).find_run("x")
    assert record["source"] == f"parquet {Path(sources['path_a']).resolve()}"
    assert record["description"] == f"parquet {sources['path_a']}"
    assert not Path("unused").exists()
    shutil.rmtree(root.parent)
