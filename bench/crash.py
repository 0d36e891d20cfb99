"""Crash evidence: kill -9 of the real Spark jobs that write, at their file-system steps, then a
rerun; the files must be those of one uninterrupted run.

Not a test. Run from the repo root:

    .venv/bin/python bench/crash.py [--jobs rebuild,retention,compact,write,ingest-range-spark,...]
        [--sample 8 | --all] [--seed 1] [--forked] [--compare-steps]

Jobs and cases (the tests' own: tests/jobs/maintenance/kill_cases.py, tests/datasource/
write_driver.py, tests/jobs/ingest_helpers.py):
- rebuild: `./spark-submit.sh --master local[1] rebuild-index --mode rebuild` on three damaged
  partitions (missing and zero-padded indexes; a corrupt batch with segments after it; a
  segment whose offsets overflow it, which is split);
- retention: `./spark-submit.sh --master local[1] retention --apply` on two partitions with
  expired segments, an old quarantine file, leader epochs and recovery points below the new log
  start;
- compact: `./spark-submit.sh --master local[1] compact --apply` (io buffer 1200 bytes) on two
  compacted partitions (superseded keys, tombstones, an aborted transaction) and one partition
  of a delete-policy topic;
- write: `df.write.format("kafkalog")` (append, run id w1) by a driver of its own on a log dir
  that run w0 wrote;
- ingest-MODE-READER: `./spark-submit.sh --master local[1] ingest` (run id w1, 120 Parquet rows
  in 2 files to 3 partitions of 4 KiB segments; 2 tasks, or one per file in the direct mode) on a log dir that run w0 wrote,
  for each write mode (range: ordering [event_time, id]; direct: the source order) and task
  reader (spark, arrow).

Per job: one armed, uninterrupted run counts the steps (tests/killer.py: renames, unlinks,
truncations, file creations, writes, directory creations and removals below the case dir,
in the driver and in Spark's Python workers); then for each chosen step N (all with --all, else
a seeded sample of --sample) a copy of the case, the job killed before step N (SIGKILL of the
driver's session and of Spark's worker daemon), and the same job again in this process's
SparkSession; the log dir and its meta area (for the write and ingest: but their Delta history,
checked by rows) must then hold exactly the files (names and bytes) of an uninterrupted run
on Spark. With --forked, the maintenance jobs and the ingest's arrow task reader
(tests/serial_spark.py) run whole without a JVM in forked children
(tests/killer.killed_run: the run lock, each partition's task one after another, the driver's
checkpoints), killed and rerun there, as tests/jobs/maintenance/test_maintenance_kill9.py
does: every step in seconds, where a JVM per kill takes a minute.
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

import yaml  # noqa: E402

from jobs.ingest import run as ingest_run  # noqa: E402
from jobs.ingestion.config.ingest_config import IngestConfig  # noqa: E402
from jobs.ingestion.run.history import IngestHistory  # noqa: E402
from jobs.maintenance.common import parse_now  # noqa: E402
from kafkalog_core.root.meta_area import publish_journal_path  # noqa: E402
from tests.datasource import write_driver  # noqa: E402
from tests.jobs.ingest_helpers import (  # noqa: E402
    HISTORY_FILES,
    SERIAL_PRELOAD,
    SMALL_SPLIT_BYTES,
    ingest_serially,
    kill_case_doc,
    source_rows,
    write_parquet,
)
from tests.jobs.maintenance import kill_cases  # noqa: E402
from tests.killer import (  # noqa: E402
    differences,
    killed_program,
    killed_run,
    read_steps,
    snapshot,
)

# write mode - task reader [- the arrow reader's direct_tasks when not auto: partitions on the
# kill runs' one task slot]
INGEST_MODES = (
    "range-spark",
    "range-arrow",
    "direct-spark",
    "direct-arrow",
    "direct-arrow-splits",
)
INGEST_ROWS = 120
INGEST_NOW = "2024-06-01T00:00:00Z"  # the run's start time, as a scheduler would fix it


@dataclass(frozen=True)
class Job:
    name: str
    make: Callable[[Path], Path]  # the case: a dir holding logs/ (and topics.yaml)
    command: Callable[[Path], list[str]]  # the killed driver's command line on a case dir
    rerun: Callable[[Path, object], None]  # the same job on a case dir, in a SparkSession
    skip: str | None = None  # files `snapshot` leaves out
    serial: Callable[..., None] | None = None  # the job without a JVM, in a forked child
    serial_args: Callable[[Path], tuple] | None = None  # its arguments for a case dir

    def files(self, case: Path) -> dict[str, bytes]:
        return snapshot(case / "logs", self.skip)


def _maintenance(name: str, make, job) -> Job:
    return Job(
        name,
        make,
        lambda case: kill_cases.spark_submit(name, case),
        lambda case, spark: job(str(case / "logs"), str(case / "topics.yaml"), spark),
        serial=job,
        serial_args=lambda case: (str(case / "logs"), str(case / "topics.yaml")),
    )


def _write_base(spark) -> Callable[[Path], Path]:
    def make(case: Path) -> Path:
        write_driver.write(spark, str(case / "logs"), "w0")
        return case

    return make


def _ingest_doc(source: Path, logs: Path, mode: str) -> dict:
    """The ingest config of run w0 or w1 (`source`: its Parquet dir) in `mode` (write mode,
    task reader[, direct tasks])."""
    write_mode, reader, *direct_tasks = mode.split("-")
    return kill_case_doc(source, logs, write_mode, reader, 4096, *direct_tasks)


def _ingest(mode: str, sources: Path, spark) -> Job:
    """The ingest job's run w1 in `mode`, on a log dir its run w0 wrote (`sources`: the two
    runs' Parquet dirs, shared by every case; `spark`: the session of the runs not killed)."""

    def config(case: Path, run: str) -> dict:
        return _ingest_doc(sources / run, case / "logs", mode)

    tasks = 2 if mode.startswith("range") else None  # direct: one task per input split

    def rerun(case: Path, spark, run: str = "w1") -> None:
        ingest_run(
            spark,
            IngestConfig.from_dict(config(case, run)),
            run_id=run,
            tasks=tasks,
            now_ms=parse_now(INGEST_NOW),
            out=lambda *_: None,
        )

    def make(case: Path) -> Path:
        if not (sources / "w0").exists():
            rows = source_rows(2 * INGEST_ROWS)
            write_parquet(sources / "w0", rows[:INGEST_ROWS], files=2)
            write_parquet(sources / "w1", rows[INGEST_ROWS:], files=2)
        rerun(case, spark, "w0")
        return case

    def config_file(case: Path) -> Path:
        file = case / "w1.yaml"
        file.write_text(yaml.safe_dump(config(case, "w1")))
        return file

    def command(case: Path) -> list[str]:
        file = config_file(case)
        return [
            "./spark-submit.sh",
            "--master",
            "local[1]",
            "--conf",
            f"spark.sql.files.maxPartitionBytes={SMALL_SPLIT_BYTES}",  # several splits
            "ingest",
            "--config",
            str(file),
            "--run-id",
            "w1",
            *(["--tasks", str(tasks)] if tasks else []),
            "--now",
            INGEST_NOW,
        ]

    arrow = "-arrow" in mode  # the arrow task reader runs without a JVM (SerialSpark)
    return Job(
        f"ingest-{mode}",
        make,
        command,
        rerun,
        skip=HISTORY_FILES,
        serial=ingest_serially if arrow else None,
        serial_args=lambda case: (str(config_file(case)), "w1", tasks, INGEST_NOW),
    )


def jobs(spark, work: Path) -> dict[str, Job]:
    ingest = {f"ingest-{m}": _ingest(m, work / "ingest-sources", spark) for m in INGEST_MODES}
    return {
        "rebuild": _maintenance("rebuild", kill_cases.damaged, kill_cases.rebuild),
        "retention": _maintenance("retention", kill_cases.expiring, kill_cases.retention),
        "compact": _maintenance("compact", kill_cases.changelog, kill_cases.compact),
        **ingest,
        "write": Job(
            "write",
            _write_base(spark),
            lambda case: write_driver.command(case / "logs", "w1"),
            lambda case, s: write_driver.write(s, str(case / "logs"), "w1"),
            skip=HISTORY_FILES,
        ),
    }


def _check_write_history(case: Path) -> list[str]:
    runs = IngestHistory(case / "logs").read().to_pylist()
    committed = sorted(r["run_id"] for r in runs if r["status"] == "committed")
    problems = [] if committed == ["w0", "w1"] else [f"committed runs {committed}"]
    return problems + (["journal left"] if publish_journal_path(case / "logs").exists() else [])


def _same_step(step: str) -> str:
    """A step without what differs between two runs: the commit's attempt id (a pid, a time)."""
    return re.sub(r"attempt-commit\d+x\d+", "attempt-commit", step)


def _killed(job: Job, case: Path, log: Path, after: int | None, forked: bool) -> bool:
    """Run `job` on `case`, killed before step `after + 1` (None: not killed); whether it ran
    to its end. `forked`: the job's `serial` form in a forked child (tests/killer.killed_run),
    else its driver's command line as a session of its own."""
    if forked and job.serial is not None:
        assert job.serial_args is not None
        return killed_run(
            job.serial,
            *job.serial_args(case),
            log=log,
            after=after,
            under=case,
            preload=(*kill_cases.PRELOAD, *SERIAL_PRELOAD),
        )
    proc = killed_program(job.command(case), log=log, under=case, after=after)
    if proc.returncode not in (0, -9):
        print(proc.stderr.decode()[-3000:])
        raise SystemExit(f"{job.name}: exit {proc.returncode}")
    return proc.returncode == 0


def _rerun_once_unlocked(job: Job, case: Path, spark, timeout: float = 120) -> float:
    """`job.rerun`, retried while the killed run's lock is still held (as a scheduler's retry
    would come later): the seconds it waited for it, 0 when it was free at once."""
    from kafkalog_core.root.run_lock import RunLockedError

    began, waited = time.monotonic(), 0.0
    while True:
        try:
            job.rerun(case, spark)
            return waited
        except RunLockedError:
            if time.monotonic() - began > timeout:
                raise
            time.sleep(0.5)
            waited = time.monotonic() - began


def run_job(
    job: Job, spark, work: Path, picks: int | None, seed: int, forked: bool = False
) -> bool:
    began = time.monotonic()
    source = job.make(work / "source")
    reference = work / "reference"
    shutil.copytree(source, reference)
    job.rerun(reference, spark)
    want = job.files(reference)
    counted = work / "counted"
    shutil.copytree(source, counted)
    log = work / "counted.steps"
    if not _killed(job, counted, log, None, forked):
        raise SystemExit(f"{job.name}: the uninterrupted run was killed")
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
        killed = not _killed(job, case, log, k, forked)
        killed_at = read_steps(log)[-1] if killed else ""
        problems = [] if killed else ["not killed"]
        if _same_step(killed_at.replace(str(case), str(counted))) != _same_step(steps[k]):
            problems.append(f"killed at {killed_at}")
        if forked and job.serial is not None:  # the rerun too: its own process, not killed
            assert _killed(job, case, work / "rerun.steps", None, forked)
        else:
            waited = _rerun_once_unlocked(job, case, spark)
            if waited:
                print(f"  step {k:>3}: the rerun waited {waited:.1f} s for the killed run's lock")
        problems += differences(job.files(case), want)
        if job.skip == HISTORY_FILES:  # the write and ingest: each run once in the history
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


def _step_names(job: Job, work: Path, forked: bool) -> list[str]:
    """The steps of one uninterrupted run of `job`, without what differs between two runs: the
    case's path, attempt numbers and the commit's attempt id."""
    case = work / f"steps-{job.name}"
    shutil.copytree(job.make(work / f"source-{job.name}"), case)
    log = work / f"{job.name}.steps"
    if not _killed(job, case, log, None, forked):
        raise SystemExit(f"{job.name}: the uninterrupted run was killed")
    return [
        re.sub(r"attempt-\d+", "attempt-N", _same_step(step.replace(str(case), "CASE")))
        for step in read_steps(log)
    ]


def compare_steps(spark, names: list[str], forked: bool) -> bool:
    """Whether the jobs `names` take the same file-system steps in the same order (e.g. the
    ingest with Spark's reader and with the arrow task reader): a kill before step N then finds
    the same files whichever ran. Prints the steps only one of them takes."""
    import difflib

    with tempfile.TemporaryDirectory(prefix="kafkalog-crash-steps-") as tmp:
        work = Path(tmp)
        table = jobs(spark, work)
        first, *others = [(n, _step_names(table[n], work, forked)) for n in names]
    same = True
    for name, steps in others:
        diff = [
            line
            for line in difflib.unified_diff(first[1], steps, first[0], name, n=0, lineterm="")
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        print(
            f"{first[0]}: {len(first[1])} steps; {name}: {len(steps)} steps; "
            f"{len(diff)} steps differ"
        )
        for line in diff:
            print(f"  {line}")
        same &= not diff
    return same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default=",".join(["rebuild", "retention", "compact", "write"]))
    parser.add_argument("--sample", type=int, default=8, help="kill points per job")
    parser.add_argument("--all", action="store_true", help="every step of every job")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--forked",
        action="store_true",
        help="maintenance jobs and the ingest's arrow task reader: each run whole in a forked "
        "child without a JVM (tests/serial_spark.py: tasks one after another), killed there, "
        "not their Spark drivers; the ingest's Spark reader still runs its driver",
    )
    parser.add_argument(
        "--compare-steps",
        action="store_true",
        help="no kill: one uninterrupted run of each of --jobs, and the steps they do not share "
        "(exit 1 when any)",
    )
    args = parser.parse_args(argv)

    from tests.conftest import session_builder

    spark = session_builder("kafkalog-crash-bench").getOrCreate()
    # the killed runs' splits (the source order depends on them), for the reference runs too
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(SMALL_SPLIT_BYTES))
    spark.sparkContext.setLogLevel("ERROR")
    ok = True
    try:
        if args.compare_steps:
            same = compare_steps(spark, args.jobs.split(","), args.forked)
            print("crash: " + ("the same steps" if same else "different steps"))
            return 0 if same else 1
        for name in args.jobs.split(","):
            with tempfile.TemporaryDirectory(prefix=f"kafkalog-crash-{name}-") as tmp:
                job = jobs(spark, Path(tmp))[name]
                picks = None if args.all else args.sample
                ok &= run_job(job, spark, Path(tmp), picks, args.seed, args.forked)
    finally:
        spark.stop()
    print("crash: " + ("OK" if ok else "DIFFERENCES"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
