"""The ingest job through `./spark-submit.sh --master spark://...`: the same bytes as local[2],
executors on the packed environment with the C loops, and a worker killed mid-write."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from jobs.ingestion.writer import HOLD_DIR_ENV
from tests.cluster.conftest import output_of, submit
from tests.cluster.standalone import StandaloneCluster
from tests.jobs.ingest_helpers import config_doc, snapshot, source_rows, write_parquet

pytestmark = pytest.mark.cluster

RUN_ID = "cluster-1"
NOW = "2024-05-01T00:00:00Z"
# Each source file is its own write task on both masters (the arrow reader splits by this).
SPLIT_CONF = {"spark.sql.files.maxPartitionBytes": "65536"}
FILES = 4


@pytest.fixture(scope="module")
def ingest_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 rows in four Parquet files, keyed into 3 partitions, source order (arrow reader)."""
    base = tmp_path_factory.mktemp("cluster-ingest")
    source = write_parquet(base / "source", source_rows(400), files=FILES)
    doc = config_doc(
        source,
        base / "unused",
        topics={"events": {"partitions": 3, "config": {"segment.bytes": 8192}}},
        ordering=None,
    )
    path = base / "ingest.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _ingest(master: str, config: Path, output: Path, conf: dict | None = None, check=True):
    result = submit(
        master, "ingest", "--config", str(config), "--run-id", RUN_ID, "--output", str(output),
        "--now", NOW, conf={**SPLIT_CONF, **(conf or {})},
    )  # fmt: skip
    if check:
        assert result.returncode == 0, output_of(result)[-4000:]
    return result


@pytest.fixture(scope="module")
def local_output(ingest_config: Path) -> dict[str, str]:
    """The reference: the same input and run id on local[2]."""
    out = ingest_config.parent / "local" / "logs"
    result = _ingest("local[2]", ingest_config, out)
    assert "C loops in every write task" in result.stdout
    files = snapshot(out)
    assert sum(name.endswith(".log") for name in files) >= FILES  # a segment per task at least
    return files


@pytest.fixture(scope="module")
def cluster_run(cluster: StandaloneCluster, ingest_config: Path) -> tuple[Path, str, Path]:
    """The same ingest through the cluster: (output root, job output, the tasks' hold notes)."""
    out, notes = ingest_config.parent / "cluster" / "logs", ingest_config.parent / "notes"
    notes.mkdir()
    (notes / "release").touch()  # report, never wait
    result = _ingest(
        cluster.master_url, ingest_config, out, {f"spark.executorEnv.{HOLD_DIR_ENV}": str(notes)}
    )
    return out, result.stdout, notes


def test_ingest_on_the_cluster_is_byte_identical_to_local(
    cluster: StandaloneCluster, cluster_run: tuple[Path, str, Path], local_output: dict[str, str]
):
    """Also: every write task ran on the packed env's Python (not the test venv), kafkalog's
    code from the --py-files zip and the C loops from the env (the tasks' hold notes say)."""
    out, stdout, notes = cluster_run
    assert "C loops in every write task" in stdout
    assert snapshot(out) == local_output
    held = [json.loads(p.read_text()) for p in notes.glob("held-*.json")]
    assert len({n["task"] for n in held}) == FILES
    for note in held:
        python = Path(note["python"])
        assert python == Path(note["cwd"]) / "env", note
        assert python.is_relative_to(cluster.base / "work"), note
        assert note["code"].endswith("kafkalog-pyfiles.zip/jobs/ingestion/writer.py"), note
        assert note["native"], note
    assert "partition.metadata" in " ".join(local_output)
    assert any(name.endswith("-checkpoint") for name in local_output)


def _task_ends(event_log_dir: Path) -> list[dict]:
    [log] = [p for p in event_log_dir.iterdir() if p.is_file()]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    return [e for e in events if e["Event"] == "SparkListenerTaskEnd"]


def test_a_worker_killed_mid_write_retries_on_the_other_and_gives_the_same_bytes(
    cluster: StandaloneCluster, ingest_config: Path, local_output: dict[str, str], tmp_path: Path
):
    """Every write task holds after staging its first batch; the worker running the first held
    task is SIGKILLed (JVM, executor, Python workers); then the tasks are released."""
    hold, events = tmp_path / "hold", tmp_path / "events"
    hold.mkdir()
    events.mkdir()
    out = tmp_path / "logs"
    conf = {
        f"spark.executorEnv.{HOLD_DIR_ENV}": str(hold),
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.rolling.enabled": "false",  # one plain JSON-lines file
        "spark.eventLog.compress": "false",
    }
    results: list[subprocess.CompletedProcess] = []
    job = threading.Thread(
        target=lambda: results.append(
            _ingest(cluster.master_url, ingest_config, out, conf, check=False)
        )
    )
    job.start()
    try:
        held = _first_held(hold, job)
        victim = next(i for i, w in cluster.workers.items() if _runs_in(held, w.work_dir))
        assert Path(held["staging"]).is_dir()  # the doomed attempt has staged its first batch
        cluster.kill_worker(victim)
    finally:
        (hold / "release").touch()
        job.join(timeout=600)
    try:
        [result] = results
        assert result.returncode == 0, output_of(result)[-4000:]
        assert snapshot(out) == local_output
        # The killed attempt's task index was written again by a new attempt on the other worker
        notes = [json.loads(p.read_text()) for p in hold.glob("held-*.json")]
        again = [n for n in notes if n["task"] == held["task"] and n["staging"] != held["staging"]]
        assert again and not _runs_in(again[0], cluster.workers[victim].work_dir), notes
        ends = _task_ends(events)
        lost = [e for e in ends if e["Task End Reason"]["Reason"] == "ExecutorLostFailure"]
        assert lost, [e["Task End Reason"] for e in ends]
        victim_executors = {e["Task Info"]["Executor ID"] for e in lost}
        for e in lost:  # each lost task succeeded again, later, on another executor
            retried = [
                r for r in ends
                if r["Stage ID"] == e["Stage ID"] and r["Task Info"]["Index"] == e["Task Info"]["Index"]
                and r["Task End Reason"]["Reason"] == "Success"
            ]  # fmt: skip
            assert retried and retried[0]["Task Info"]["Executor ID"] not in victim_executors
            assert retried[0]["Task Info"]["Attempt"] >= 1
    finally:
        cluster.start_worker(victim)  # the next tests get two workers again
        cluster.wait_for_workers(len(cluster.workers))


def _first_held(hold: Path, job) -> dict:
    deadline = time.monotonic() + 420
    while time.monotonic() < deadline and job.is_alive():
        notes = sorted(hold.glob("held-*.json"))
        if notes:
            return json.loads(notes[0].read_text())
        time.sleep(0.2)
    raise AssertionError("no write task reported itself held (did the job fail early?)")


def _runs_in(held: dict, work_dir: Path | None) -> bool:
    return work_dir is not None and Path(held["cwd"]).is_relative_to(work_dir)


def test_maintenance_and_data_source_on_the_cluster(
    cluster: StandaloneCluster, cluster_run: tuple[Path, str, Path], tmp_path: Path
):
    """rebuild-index (verify) over the cluster-written log dir, and format("kafkalog") reading
    it and writing a copy, each through spark-submit.sh against the cluster."""
    out = cluster_run[0]
    verify = submit(cluster.master_url, "rebuild-index", "--log-dir", str(out))
    assert verify.returncode == 0, output_of(verify)[-4000:]
    assert "segments ok, 0 not ok" in verify.stdout
    copy = tmp_path / "copy"
    job = submit(
        cluster.master_url, "tests/cluster/datasource_job.py", str(out), "events", str(copy)
    )
    assert job.returncode == 0, output_of(job)[-4000:]
    line = next(x for x in job.stdout.splitlines() if x.startswith("DATASOURCE "))
    found = json.loads(line[len("DATASOURCE ") :])
    assert found["read"] == found["copied"] == 400
    assert found["read_digest"] == found["copied_digest"]
    assert sorted(p.name for p in copy.iterdir() if p.is_dir()) == ["copy-0", "copy-1"]
