"""kill -9 at every file-system step of `rebuild-index --mode rebuild` and `retention --apply`.

Each job runs whole (`run`: the run lock, every partition's task, the driver's checkpoints) in a
forked child that SIGKILLs itself before its Nth step (tests/killer.py: renames, unlinks,
truncations, creations, writes below the log dir's parent), for every N of a small
case. Then the job runs again, uninterrupted; the log dir and its meta area must then hold
exactly the files (names and bytes) of one uninterrupted run of the job on Spark.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import jobs.rebuild_index as index_job
import jobs.retention as retention_job
from jobs.ingestion.run.meta import meta_root
from kafkalog_core.log.checkpoints import LeaderEpochCache, OffsetCheckpointFile
from kafkalog_core.log.names import LEADER_EPOCH_CHECKPOINT_FILE
from kafkalog_core.maintenance.verify import verify_partition
from tests.killer import killed_run, read_steps
from tests.log.test_recovery import write_log
from tests.log.test_split import raise_base_offset
from tests.serial_spark import SerialSpark

INTERVAL = 200  # write_log's index.interval.bytes
# what the jobs import on first use: imported once by the forkserver, not in every child
PRELOAD = (
    "jobs.maintenance.topic_configs",
    "jobs.ingestion.run.history",
    "deltalake",
    "yaml",
    "pandas",
)
NOW = 10_000 + 10 * 200 + 1_000  # write_log's timestamps are 10_000 + 10 * offset


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file of the log dir and of its meta area: name relative to the parent -> bytes."""
    parent = root.parent
    return {
        str(p.relative_to(parent)): p.read_bytes()
        for base in (root, meta_root(root))
        if base.exists()
        for p in sorted(base.rglob("*"))
        if p.is_file()
    }


def differences(got: dict[str, bytes], want: dict[str, bytes]) -> list[str]:
    missing = [f"missing {n}" for n in sorted(set(want) - set(got))]
    extra = [f"extra {n}" for n in sorted(set(got) - set(want))]
    changed = [f"differs {n}" for n in sorted(set(got) & set(want)) if got[n] != want[n]]
    return missing + extra + changed


def quiet(_line: str) -> None:
    pass


def rebuild(root: str, conf: str, spark=None) -> None:
    index_job.run(spark or SerialSpark(), root, mode="rebuild", topic_config=conf, out=quiet)


def retention(root: str, conf: str, spark=None) -> None:
    retention_job.run(
        spark or SerialSpark(), root, apply=True, now=NOW, topic_config=conf, out=quiet
    )


def reference_run(job, source: Path, tmp_path: Path, spark) -> tuple[Path, dict[str, bytes]]:
    """`job` run once on Spark, on a copy of `source`: its log dir and its files."""
    reference = tmp_path / "reference"
    shutil.copytree(source, reference)
    job(str(reference / "logs"), str(reference / "topics.yaml"), spark)
    return reference / "logs", snapshot(reference / "logs")


def run_job(job, work: Path, after: int | None) -> tuple[bool, list[str]]:
    """`job` on `work/logs` (with `work/topics.yaml`) in a process of its own, killed before
    step `after + 1` (None: not killed): whether it ran to its end, and its steps."""
    log = work.parent / f"{work.name}.steps"
    log.unlink(missing_ok=True)
    logs, conf = str(work / "logs"), str(work / "topics.yaml")
    finished = killed_run(job, logs, conf, log=log, after=after, under=work, preload=PRELOAD)
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
    """Three partitions, each needing another kind of repair: a missing offset index and a
    zero-padded time index; a corrupt batch (its tail and the segments after it go to
    quarantine, a leader-epoch entry above the new log end goes); a raised base offset in the
    last segment (split)."""
    root = tmp_path / "src" / "logs"
    for p in range(3):
        write_log(root / f"orders-{p}", n=90)
    (root.parent / "topics.yaml").write_text(
        f"topics:\n  orders: {{index.interval.bytes: {INTERVAL}}}\n"
    )
    logs = [sorted((root / f"orders-{p}").glob("*.log")) for p in range(3)]
    logs[0][0].with_suffix(".index").unlink()
    with open(logs[0][1].with_suffix(".timeindex"), "ab") as f:
        f.write(bytes(12 * 4))
    data = bytearray(logs[1][1].read_bytes())
    data[1500] ^= 0xFF  # inside a batch of the middle segment: a CRC mismatch
    logs[1][1].write_bytes(bytes(data))
    epochs = LeaderEpochCache(root / "orders-1" / LEADER_EPOCH_CHECKPOINT_FILE)
    epochs.assign(0, 0)
    epochs.assign(1, 80)
    epochs.write()
    raise_base_offset(logs[2][-1], 1)
    return root.parent


def test_kill9_at_every_step_of_a_rebuild_then_a_rerun_gives_one_runs_files(
    spark, damaged: Path, tmp_path: Path
) -> None:
    logs, want = reference_run(rebuild, damaged, tmp_path, spark)
    for p in range(3):
        assert verify_partition(logs / f"orders-{p}", INTERVAL).is_ok
    steps = kill_at_every_step(damaged, want, rebuild, tmp_path)
    kinds = {s.split(" ")[0] for s in steps}
    assert {"replace", "unlink", "ftruncate", "open", "utime", "pwrite"} <= kinds, kinds


@pytest.fixture()
def expiring(tmp_path: Path) -> Path:
    """Two partitions whose oldest segments are past retention.ms, a rebuild's old quarantine
    file, leader epochs below the new log start, recovery points below it."""
    root = tmp_path / "src" / "logs"
    for p in range(2):
        write_log(root / f"events-{p}", n=90 + 40 * p)
        epochs = LeaderEpochCache(root / f"events-{p}" / LEADER_EPOCH_CHECKPOINT_FILE)
        epochs.assign(0, 0)
        epochs.assign(1, 40)
        epochs.assign(2, 85)
        epochs.write()
    quarantined = root / "events-0" / "00000000000000000036.log.quarantine"
    quarantined.write_bytes(b"a corrupt tail")
    os.utime(quarantined, (0, 0))  # quarantined long before NOW: past retention.ms
    OffsetCheckpointFile(root / "recovery-point-offset-checkpoint").write(
        {("events", 0): 10, ("events", 1): 90}
    )
    (root.parent / "topics.yaml").write_text("topics:\n  events: {retention.ms: 2000}\n")
    return root.parent


def test_kill9_at_every_step_of_a_retention_apply_then_a_rerun_gives_one_runs_files(
    spark, expiring: Path, tmp_path: Path
) -> None:
    logs, want = reference_run(retention, expiring, tmp_path, spark)
    assert sorted(p.name for p in (logs / "events-0").glob("*.log")) == [
        "00000000000000000072.log"  # the active segment
    ]
    assert not list(logs.glob("*/*.quarantine"))
    assert LeaderEpochCache(logs / "events-0" / LEADER_EPOCH_CHECKPOINT_FILE).entries[0] == (1, 72)
    assert (
        OffsetCheckpointFile(logs / "recovery-point-offset-checkpoint").read()[("events", 0)] == 72
    )
    kill_at_every_step(expiring, want, retention, tmp_path)
