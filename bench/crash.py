"""Crash evidence: kill -9 of the real Spark jobs that write, at their file-system steps, then a
rerun; the files must be those of one uninterrupted run.

Not a test. Run from the repo root:

    .venv/bin/python bench/crash.py [--jobs rebuild,retention,write] [--sample 8 | --all] [--seed 1]

Jobs and cases (the tests' own: tests/jobs/maintenance/kill_cases.py, tests/datasource/
write_driver.py):
- rebuild: `./spark-submit.sh --master local[1] rebuild-index --mode rebuild` on three damaged
  partitions (missing and zero-padded indexes; a corrupt batch with segments after it; a
  segment whose offsets overflow it, which is split);
- retention: `./spark-submit.sh --master local[1] retention --apply` on two partitions with
  expired segments, an old quarantine file, leader epochs and recovery points below the new log
  start;
- write: `df.write.format("kafkalog")` (append, run id w1) by a driver of its own on a log dir
  that run w0 wrote.

Per job: one armed, uninterrupted run counts the steps (tests/killer.py: renames, unlinks,
truncations, file creations, writes, directory creations and removals below the case dir,
in the driver and in Spark's Python workers); then for each chosen step N (all with --all, else
a seeded sample of --sample) a copy of the case, the job killed before step N (SIGKILL of the
driver's session and of Spark's worker daemon), and the same job again in this process's
SparkSession; the log dir and its meta area (for the write: but its Delta history, checked by
rows) must then hold exactly the files (names and bytes) of an uninterrupted run.
Prints per job the steps, the kill points run, how many gave the same files, and the time.
Exit 1 on any difference.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.ingestion.run.history import IngestHistory  # noqa: E402
from jobs.ingestion.staging.task_staging import journal_path  # noqa: E402
from tests.datasource import write_driver  # noqa: E402
from tests.jobs.maintenance import kill_cases  # noqa: E402
from tests.killer import differences, killed_program, read_steps, snapshot  # noqa: E402

HISTORY = r"/ingest-history/"


@dataclass(frozen=True)
class Job:
    name: str
    make: Callable[[Path], Path]  # the case: a dir holding logs/ (and topics.yaml)
    command: Callable[[Path], list[str]]  # the killed driver's command line on a case dir
    rerun: Callable[[Path, object], None]  # the same job on a case dir, in a SparkSession
    skip: str | None = None  # files `snapshot` leaves out

    def files(self, case: Path) -> dict[str, bytes]:
        return snapshot(case / "logs", self.skip)


def _maintenance(name: str, make, job) -> Job:
    return Job(
        name,
        make,
        lambda case: kill_cases.spark_submit(name, case),
        lambda case, spark: job(str(case / "logs"), str(case / "topics.yaml"), spark),
    )


def _write_base(spark) -> Callable[[Path], Path]:
    def make(case: Path) -> Path:
        write_driver.write(spark, str(case / "logs"), "w0")
        return case

    return make


def jobs(spark) -> dict[str, Job]:
    return {
        "rebuild": _maintenance("rebuild", kill_cases.damaged, kill_cases.rebuild),
        "retention": _maintenance("retention", kill_cases.expiring, kill_cases.retention),
        "write": Job(
            "write",
            _write_base(spark),
            lambda case: write_driver.command(case / "logs", "w1"),
            lambda case, s: write_driver.write(s, str(case / "logs"), "w1"),
            skip=HISTORY,
        ),
    }


def _check_write_history(case: Path) -> list[str]:
    runs = IngestHistory(case / "logs").read().to_pylist()
    committed = sorted(r["run_id"] for r in runs if r["status"] == "committed")
    problems = [] if committed == ["w0", "w1"] else [f"committed runs {committed}"]
    return problems + (["journal left"] if journal_path(case / "logs").exists() else [])


def _same_step(step: str) -> str:
    """A step without what differs between two runs: the commit's attempt id (a pid, a time)."""
    return re.sub(r"attempt-commit\d+x\d+", "attempt-commit", step)


def run_job(job: Job, spark, work: Path, picks: int | None, seed: int) -> bool:
    began = time.monotonic()
    source = job.make(work / "source")
    reference = work / "reference"
    shutil.copytree(source, reference)
    job.rerun(reference, spark)
    want = job.files(reference)
    counted = work / "counted"
    shutil.copytree(source, counted)
    log = work / "counted.steps"
    proc = killed_program(job.command(counted), log=log, under=counted)
    if proc.returncode != 0:
        print(proc.stderr.decode()[-3000:])
        raise SystemExit(f"{job.name}: the uninterrupted run exited {proc.returncode}")
    steps = read_steps(log)
    same = not differences(job.files(counted), want)
    chosen = list(range(len(steps)))
    if picks is not None and picks < len(steps):
        chosen = sorted(random.Random(f"{seed}:{job.name}").sample(chosen, picks))
    print(
        f"{job.name}: {len(steps)} steps; the armed uninterrupted run "
        f"{'gives' if same else 'DOES NOT give'} the reference files; killing at {chosen}",
        flush=True,
    )
    failed = 0 if same else 1
    for k in chosen:
        case = work / f"kill-{k}"
        shutil.copytree(source, case)
        log = work / f"kill-{k}.steps"
        proc = killed_program(job.command(case), log=log, under=case, after=k)
        killed_at = read_steps(log)[-1] if proc.returncode == -9 else ""
        problems = [] if proc.returncode == -9 else [f"exit {proc.returncode}, not killed"]
        if _same_step(killed_at.replace(str(case), str(counted))) != _same_step(steps[k]):
            problems.append(f"killed at {killed_at}")
        job.rerun(case, spark)
        problems += differences(job.files(case), want)
        if job.name == "write":
            problems += _check_write_history(case)
        name = re.sub(r"^(\w+) \S*?/(logs|\.logs\.kafkalog)(?=/|$)", r"\1 \2", steps[k])
        print(f"  step {k:>3} {name}: {'same files' if not problems else problems[:5]}")
        failed += bool(problems)
        shutil.rmtree(case)
    print(
        f"{job.name}: {len(chosen)} kill points, {len(chosen) - failed} rerun to the same files, "
        f"{time.monotonic() - began:.0f} s",
        flush=True,
    )
    return failed == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default="rebuild,retention,write")
    parser.add_argument("--sample", type=int, default=8, help="kill points per job")
    parser.add_argument("--all", action="store_true", help="every step of every job")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    from tests.conftest import session_builder

    spark = session_builder("kafkalog-crash-bench").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    ok = True
    try:
        for name in args.jobs.split(","):
            with tempfile.TemporaryDirectory(prefix=f"kafkalog-crash-{name}-") as tmp:
                job = jobs(spark)[name]
                ok &= run_job(job, spark, Path(tmp), None if args.all else args.sample, args.seed)
    finally:
        spark.stop()
    print("crash: " + ("OK" if ok else "DIFFERENCES"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
