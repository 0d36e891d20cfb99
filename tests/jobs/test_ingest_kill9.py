"""kill -9 of the ingest job (arrow task reader, both write modes; the direct mode's tasks per
group of partitions, what auto takes on one task slot, and per split, with the relayout after)
at file-system steps spread over a whole run, then a rerun: the log dir and its meta area hold
one uninterrupted run's files.

The job runs whole in a forked child without a JVM (`tests.serial_spark.SerialSpark`: its
tasks one after another) that SIGKILLs itself before its Nth step (tests/killer.py). The
reference is the same run on Spark, so the stand-in is held to Spark's files too.
bench/crash.py kills at every step (`--forked --all`) and kills the Spark drivers.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from jobs.ingest import run as ingest_run
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.run.history import IngestHistory
from jobs.maintenance.common import parse_now
from tests.jobs.ingest_helpers import (
    HISTORY_FILES,
    SERIAL_PRELOAD,
    ingest_serially,
    kill_case_doc,
    source_rows,
    write_parquet,
)
from tests.jobs.maintenance.kill_cases import PRELOAD
from tests.killer import differences, killed_run, read_steps, snapshot

ROWS = 60
NOW = "2024-06-01T00:00:00Z"
KILLS = 4  # kill points per mode, evenly spread over the run's steps


def _doc(source: Path, logs: Path, mode: str) -> dict:
    write_mode, _, direct_tasks = mode.partition("-")
    return kill_case_doc(source, logs, write_mode, "arrow", 2048, direct_tasks or "auto")


def _run(case: Path, tasks: int | None, after: int | None) -> tuple[bool, list[str]]:
    """Run w1 on `case` in a forked child killed before step `after + 1` (None: not killed)."""
    log = case.parent / f"{case.name}.steps"
    log.unlink(missing_ok=True)
    args = (str(case / "w1.yaml"), "w1", tasks, NOW)
    finished = killed_run(
        ingest_serially,
        *args,
        log=log,
        after=after,
        under=case,
        preload=(*PRELOAD, *SERIAL_PRELOAD),
    )
    return finished, read_steps(log)


@pytest.mark.spark
@pytest.mark.parametrize("mode", ["direct", "direct-splits", "range"])
def test_ingest_killed_at_steps_reruns_to_one_runs_files(spark, tmp_path, mode, small_splits):
    rows = source_rows(2 * ROWS)
    sources = {r: tmp_path / r for r in ("w0", "w1")}
    write_parquet(sources["w0"], rows[:ROWS], files=2)
    write_parquet(sources["w1"], rows[ROWS:], files=2)
    tasks = 2 if mode == "range" else None

    def on_spark(case: Path, run: str) -> None:
        doc = _doc(sources[run], case / "logs", mode)
        ingest_run(
            spark,
            IngestConfig.from_dict(doc),
            run_id=run,
            tasks=tasks,
            now_ms=parse_now(NOW),
            out=lambda *_: None,
        )

    base = tmp_path / "base"
    on_spark(base, "w0")
    (base / "w1.yaml").write_text(yaml.safe_dump(_doc(sources["w1"], base / "logs", mode)))
    reference = tmp_path / "reference"
    shutil.copytree(base, reference)
    on_spark(reference, "w1")
    want = snapshot(reference / "logs", HISTORY_FILES)

    def copy(name: str) -> Path:
        case = tmp_path / name
        shutil.copytree(base, case)
        doc = _doc(sources["w1"], case / "logs", mode)  # the output root is the copy's
        (case / "w1.yaml").write_text(yaml.safe_dump(doc))
        return case

    counted = copy("counted")
    finished, steps = _run(counted, tasks, None)
    assert finished and differences(snapshot(counted / "logs", HISTORY_FILES), want) == []
    assert len(steps) > 50
    if mode.startswith("direct"):  # two splits: laid out again only with a task per split
        relaid = any("/relayout-" in step for step in steps)
        assert relaid == (mode == "direct-splits"), steps
    for k in range(0, len(steps), -(-len(steps) // KILLS)):
        case = copy(f"kill-{k}")
        finished, done = _run(case, tasks, k)
        assert not finished, f"not killed before step {k}"
        assert _run(case, tasks, None)[0]  # the rerun, in a process of its own too
        assert differences(snapshot(case / "logs", HISTORY_FILES), want) == [], f"before {steps[k]}"
        runs = IngestHistory(case / "logs").read().to_pylist()
        committed = sorted(r["run_id"] for r in runs if r["status"] == "committed")
        assert committed == ["w0", "w1"], f"killed before {steps[k]}"
        shutil.rmtree(case)
