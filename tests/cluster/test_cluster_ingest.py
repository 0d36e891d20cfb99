"""The ingest job through `./spark-submit.sh --master spark://...`, with a worker killed
mid-write: the same bytes as local[2], the lost tasks retried on the other worker, executors on
the packed environment with the C loops; then maintenance and the data source on the cluster.

The cluster is driven by as few submits as prove these (each costs a driver JVM and two
executors): one ingest (the kill happens inside it) and one job for verify + data source. The
local[2] reference runs in this process's session.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from jobs import ingest
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.tasks.writer import HOLD_DIR_ENV
from jobs.maintenance.common import parse_now
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


@pytest.fixture(scope="module")
def local_output(spark, ingest_config: Path) -> dict[str, str]:
    """The reference: the same input, run id and split size on this process's local[2]."""
    out = ingest_config.parent / "local" / "logs"
    doc = yaml.safe_load(ingest_config.read_text())
    doc["output"]["root"] = str(out)
    before = {k: spark.conf.get(k, None) for k in SPLIT_CONF}
    for key, value in SPLIT_CONF.items():
        spark.conf.set(key, value)
    try:
        result = ingest.run(
            spark, IngestConfig.from_dict(doc), run_id=RUN_ID, now_ms=parse_now(NOW),
            out=lambda _: None,
        )  # fmt: skip
    finally:
        for key, value in before.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    assert "C loops in every write task" in result.summary
    files = snapshot(out)
    assert sum(name.endswith(".log") for name in files) > 3  # rolled: several per partition
    return files


@dataclass
class KilledRun:
    """The cluster ingest during which a worker was killed."""

    out: Path
    result: subprocess.CompletedProcess
    hold: Path  # the write tasks' hold notes (held-*.json)
    held: dict  # the note of the task whose worker was killed
    victim_work_dir: Path
    events: Path  # the driver's event log dir


@pytest.fixture(scope="module")
def killed_run(cluster: StandaloneCluster, ingest_config: Path) -> KilledRun:
    """Every write task holds after staging its first batch; the worker running the first held
    task is SIGKILLed (JVM, executor, Python workers); then the tasks are released."""
    base = ingest_config.parent / "cluster"
    hold, events, out = base / "hold", base / "events", base / "logs"
    hold.mkdir(parents=True)
    events.mkdir()
    conf = {
        **SPLIT_CONF,
        f"spark.executorEnv.{HOLD_DIR_ENV}": str(hold),
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.rolling.enabled": "false",  # one plain JSON-lines file
        "spark.eventLog.compress": "false",
    }
    results: list[subprocess.CompletedProcess] = []

    def ingest_on_cluster() -> None:
        results.append(
            submit(
                cluster.master_url,
                "ingest",
                "--config",
                str(ingest_config),
                "--run-id",
                RUN_ID,
                "--output",
                str(out),
                "--now",
                NOW,
                conf=conf,
            )  # fmt: skip
        )

    job = threading.Thread(target=ingest_on_cluster)
    job.start()
    victim = None
    try:
        held = _first_held(hold, job)
        victim = next(i for i, w in cluster.workers.items() if _runs_in(held, w.work_dir))
        assert Path(held["staging"]).is_dir()  # the doomed attempt has staged its first batch
        victim_work_dir = cluster.workers[victim].work_dir
        cluster.kill_worker(victim)
    finally:
        (hold / "release").touch()
        job.join(timeout=600)
        if victim is not None:
            cluster.start_worker(victim)  # the next tests get two workers again
            cluster.wait_for_workers(len(cluster.workers))
    [result] = results
    assert result.returncode == 0, output_of(result)[-4000:]
    assert victim_work_dir is not None
    return KilledRun(out, result, hold, held, victim_work_dir, events)


def test_ingest_on_the_cluster_is_byte_identical_to_local(
    cluster: StandaloneCluster, killed_run: KilledRun, local_output: dict[str, str]
):
    """Also: every write task ran on the packed env's Python (not the test venv), kafkalog's
    code from the --py-files zip and the C loops from the env (the tasks' hold notes say)."""
    assert "C loops in every write task" in killed_run.result.stdout
    assert snapshot(killed_run.out) == local_output
    held = [json.loads(p.read_text()) for p in killed_run.hold.glob("held-*.json")]
    # two task slots: a task per group of partitions, each reading every file's split
    assert (
        f"direct tasks: auto: partitions, 2 tasks each read the {FILES} input splits"
        in killed_run.result.stdout
    )
    assert len({n["task"] for n in held}) == 2
    for note in held:
        python = Path(note["python"])
        assert python == Path(note["cwd"]) / "env", note
        assert python.is_relative_to(cluster.base / "work"), note
        assert note["code"].endswith("kafkalog-pyfiles.zip/jobs/ingestion/tasks/writer.py"), note
        assert note["native"], note
    assert "partition.metadata" in " ".join(local_output)
    assert any(name.endswith("-checkpoint") for name in local_output)


def test_the_killed_workers_tasks_ran_again_on_the_other_worker(killed_run: KilledRun):
    """The killed attempt's task was written again by a new attempt elsewhere, and Spark's
    event log shows each lost task succeeding later on another executor."""
    held = killed_run.held
    notes = [json.loads(p.read_text()) for p in killed_run.hold.glob("held-*.json")]
    again = [n for n in notes if n["task"] == held["task"] and n["staging"] != held["staging"]]
    assert again and not _runs_in(again[0], killed_run.victim_work_dir), notes
    ends = _task_ends(killed_run.events)
    lost = [e for e in ends if e["Task End Reason"]["Reason"] == "ExecutorLostFailure"]
    assert lost, [e["Task End Reason"] for e in ends]
    victim_executors = {e["Task Info"]["Executor ID"] for e in lost}
    for e in lost:
        retried = [
            r for r in ends
            if r["Stage ID"] == e["Stage ID"] and r["Task Info"]["Index"] == e["Task Info"]["Index"]
            and r["Task End Reason"]["Reason"] == "Success"
        ]  # fmt: skip
        assert retried and retried[0]["Task Info"]["Executor ID"] not in victim_executors
        assert retried[0]["Task Info"]["Attempt"] >= 1


def _task_ends(event_log_dir: Path) -> list[dict]:
    [log] = [p for p in event_log_dir.iterdir() if p.is_file()]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    return [e for e in events if e["Event"] == "SparkListenerTaskEnd"]


def _first_held(hold: Path, job: threading.Thread) -> dict:
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
    cluster: StandaloneCluster, killed_run: KilledRun, tmp_path: Path
):
    """rebuild-index (verify) over the cluster-written log dir, and format("kafkalog") reading
    it and writing a copy, in one job submitted through spark-submit.sh to the cluster."""
    copy = tmp_path / "copy"
    job = submit(
        cluster.master_url, "tests/cluster/cluster_job.py", str(killed_run.out), "events",
        str(copy),
    )  # fmt: skip
    assert job.returncode == 0, output_of(job)[-4000:]
    assert "segments ok, 0 not ok" in job.stdout
    line = next(x for x in job.stdout.splitlines() if x.startswith("DATASOURCE "))
    found = json.loads(line[len("DATASOURCE ") :])
    assert found["read"] == found["copied"] == 400
    assert found["read_digest"] == found["copied_digest"]
    assert sorted(p.name for p in copy.iterdir() if p.is_dir()) == ["copy-0", "copy-1"]
