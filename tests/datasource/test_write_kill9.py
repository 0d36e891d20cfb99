"""kill -9 of a Spark driver in the middle of `df.write.format("kafkalog")`, then the same write
(same run id) again: the log dir holds the files (names and bytes) of one uninterrupted write.

The killed write is a driver of its own (tests/datasource/write_driver.py, local[1]), every Python
process of it armed by tests/killer.py: the step named below SIGKILLs the driver, its JVM and
Spark's Python workers at once, whichever of them reaches it (a task staging its share, or the
commit). A JVM start per kill, so a few kill points here; bench/crash.py kills at every step.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from jobs.ingestion.run.history import IngestHistory
from jobs.ingestion.staging.task_staging import staging_root
from kafkalog_core.root.meta_area import publish_journal_path
from kafkalog_core.root.run_lock import RunLock
from tests import killer
from tests.datasource import write_driver
from tests.killer import differences, killed_program, read_steps

pytestmark = pytest.mark.spark

HISTORY = r"/ingest-history/"  # Delta files named by uuid: compared by rows, not bytes
KILLS = {
    # task 0 and 1 have staged their shares, task 2 has not begun
    "a task": r"^mkdir .*/staging/w1/task-2$",
    # after the journal: one partition's new segments in place, the other's half moved
    "the publish": r"^replace .*/logs/orders-1/\d{20}\.log\.swap$",
    # after the history row: only the journal and the staging are left to remove
    "the cleanup": r"^unlink .*/publish-journal\.json$",
}


def snapshot(root: Path) -> dict[str, bytes]:
    return killer.snapshot(root, skip=HISTORY)


@pytest.fixture(scope="module")
def written(spark, tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    """A log dir with run w0 (the base every case copies) and the files of w1 written on it."""
    base = tmp_path_factory.mktemp("kill9") / "base"
    write_driver.write(spark, str(base / "logs"), "w0")
    reference = base.parent / "reference"
    shutil.copytree(base, reference)
    write_driver.write(spark, str(reference / "logs"), "w1")
    return base, snapshot(reference / "logs")


@pytest.mark.parametrize("where", sorted(KILLS))
def test_a_write_killed_in_the_middle_then_rerun_gives_one_writes_files(
    spark, written, tmp_path: Path, where: str
) -> None:
    base, want = written
    work = tmp_path / "work"
    shutil.copytree(base, work)
    logs = work / "logs"
    log = tmp_path / "steps"
    killed = killed_program(
        write_driver.command(logs, "w1"),
        log=log,
        under=work,
        at=KILLS[where],
    )
    assert killed.returncode == -9, killed.stderr.decode()[-3000:]
    steps = read_steps(log)
    assert re.search(KILLS[where], steps[-1]), steps[-5:]  # killed before that step
    assert (IngestHistory(logs).find_run("w1") is not None) == (where == "the cleanup")

    write_driver.write(spark, str(logs), "w1")  # the same write again, in another driver

    assert differences(snapshot(logs), want) == []
    assert not publish_journal_path(logs).exists() and not staging_root(logs, "w1").exists()
    runs = IngestHistory(logs).read().to_pylist()
    assert sorted(r["run_id"] for r in runs if r["status"] == "committed") == ["w0", "w1"]
    with RunLock(logs, "next"):  # the killed driver's lock is free again
        pass
