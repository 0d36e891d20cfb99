"""kill -9 at every file-system step of `rebuild-index --mode rebuild` and `retention --apply`.

Each job runs whole (`run`: the run lock, every partition's task, the driver's checkpoints) in a
forked child that SIGKILLs itself before its Nth step (tests/killer.py: renames, unlinks,
truncations, creations, writes below the log dir's parent), for every N of a small
case. Then the job runs again, uninterrupted; the log dir and its meta area must then hold
exactly the files (names and bytes) of one uninterrupted run of the job on Spark.
bench/crash.py does the same with the jobs' Spark drivers (./spark-submit.sh) killed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kafkalog_core.log.checkpoints import LeaderEpochCache, OffsetCheckpointFile
from kafkalog_core.log.names import LEADER_EPOCH_CHECKPOINT_FILE
from kafkalog_core.maintenance.verify import verify_partition
from tests.jobs.maintenance import kill_cases
from tests.jobs.maintenance.kill_cases import INTERVAL, rebuild, reference_run, retention
from tests.killer import differences, killed_run, read_steps, snapshot


def run_job(job, work: Path, after: int | None) -> tuple[bool, list[str]]:
    """`job` on `work/logs` (with `work/topics.yaml`) in a process of its own, killed before
    step `after + 1` (None: not killed): whether it ran to its end, and its steps."""
    log = work.parent / f"{work.name}.steps"
    log.unlink(missing_ok=True)
    logs, conf = str(work / "logs"), str(work / "topics.yaml")
    finished = killed_run(
        job, logs, conf, log=log, after=after, under=work, preload=kill_cases.PRELOAD
    )
    return finished, read_steps(log)


def kill_at_every_step(source: Path, want: dict[str, bytes], job, tmp_path: Path) -> list[str]:
    """Kill `job` before each of its steps on a copy of `source` (a dir holding `logs/` and
    `topics.yaml`), rerun it, compare with `want`; the steps of an uninterrupted run."""
    counted = tmp_path / "counted"
    shutil.copytree(source, counted)
    finished, steps = run_job(job, counted, None)
    assert finished and differences(snapshot(counted / "logs"), want) == []
    for k, step in enumerate(steps):
        work = tmp_path / f"kill-{k}"
        shutil.copytree(source, work)
        finished, done = run_job(job, work, k)
        assert not finished, f"not killed before step {k}"
        assert done[-1] == step.replace(str(counted), str(work)), "not deterministic"
        assert run_job(job, work, None)[0]  # the rerun, in a process of its own too
        assert differences(snapshot(work / "logs"), want) == [], f"killed before {step}"
        shutil.rmtree(work)
    return steps


@pytest.fixture()
def damaged(tmp_path: Path) -> Path:
    return kill_cases.damaged(tmp_path / "src")


@pytest.fixture()
def expiring(tmp_path: Path) -> Path:
    return kill_cases.expiring(tmp_path / "src")


def test_kill9_at_every_step_of_a_rebuild_then_a_rerun_gives_one_runs_files(
    spark, damaged: Path, tmp_path: Path
) -> None:
    want = reference_run(rebuild, damaged, tmp_path / "reference", spark)
    for p in range(3):
        assert verify_partition(tmp_path / "reference" / "logs" / f"orders-{p}", INTERVAL).is_ok
    steps = kill_at_every_step(damaged, want, rebuild, tmp_path)
    kinds = {s.split(" ")[0] for s in steps}
    assert {"replace", "unlink", "ftruncate", "open", "utime", "pwrite"} <= kinds, kinds


def test_kill9_at_every_step_of_a_retention_apply_then_a_rerun_gives_one_runs_files(
    spark, expiring: Path, tmp_path: Path
) -> None:
    want = reference_run(retention, expiring, tmp_path / "reference", spark)
    logs = tmp_path / "reference" / "logs"
    # every segment is past retention, the active one too: a new empty one rolled at the LEO
    assert sorted(p.name for p in (logs / "events-0").glob("*.log")) == ["00000000000000000090.log"]
    assert not list(logs.glob("*/*.quarantine"))
    # no epoch entry at the empty log's end offset: a broker's load drops such entries too
    assert LeaderEpochCache(logs / "events-0" / LEADER_EPOCH_CHECKPOINT_FILE).entries == []
    recovery_points = OffsetCheckpointFile(logs / "recovery-point-offset-checkpoint").read()
    assert recovery_points[("events", 0)] == 90
    steps = kill_at_every_step(expiring, want, retention, tmp_path)
    kinds = {s.split(" ")[0] for s in steps}
    assert {"replace", "unlink", "open", "pwrite"} <= kinds, kinds
