"""Relayout: each partition written in several shares laid out as one writer writes its records.

Why. Without a counting pass a task cannot know where its share of a partition lands, and a
record batch ends where its writer's greedy split ends it, which depends on where that writer
started. So a share that may continue an earlier task's (the direct mode's later splits, a hot
partition's continuation in the range mode, the data source's later tasks) is staged as its
rows (`jobs.ingestion.tasks.record_share`), and this relayout encodes them where one writer would:
every path gives the bytes of a one-task run, and a partition about ceil(bytes / segment.bytes)
+ 1 new segments, whatever the split count.

What. A partition's first share is either segments (its writer's, in place or placed by the
driver) or records. Segments are kept: all but the last are hard-linked (same file system,
checksums reused). The last is copied kernel-side (`copy_file`: a reflink where the file system
has them) into a work dir; its last batch, which its writer only ended because its rows ended,
is cut (`LogSegment.cut_before`: the files as the writer would have closed them just before
appending it) and the copy is taken back to the live state its writer had then
(`LogSegment.resume_as_active`). Then the cut batch's rows (its writer's carry, with the split
context before them) and every record share's rows, in order, go through the writer a single
task uses (`writer.RangeWriter`, chunk by chunk, the staged rows memory-mapped), so rolls,
index entries and batches are that writer's, with no second copy of any rule. A partition whose
first share is records is encoded from its start, continuing the published last segment when
there is one, as the task that started it would have. The tail's kept bytes never pass through
Python, and their checksum continues from the one its writer took (`TaskManifest.carry`).

Where. One Spark stage (`spark_runner`) whose tasks take the partitions' jobs, at most one task
per core; each partition is laid out in its own attempt's staging dir (task key `relayout-<n>`)
under the run's staging and gives one ordinary `TaskManifest` that replaces its share manifests
(the data source's commit has no SparkSession: `thread_runner` runs the jobs on the driver's
threads instead). The publish and its crash safety see nothing new: before the publish
everything is staging, as the write tasks' output is. Each published byte is fsynced once: the
first share's by its task, the rest by `finalize_task_staging` here (record shares are never
fsynced, and `plan_publish` refuses them).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from jobs.ingestion.staging.task_staging import (
    SEGMENT_FILE,
    StagedFile,
    TaskManifest,
    copy_file,
    finalize_task_staging,
    task_staging_dir,
)
from jobs.ingestion.tasks.planner import PROVISIONAL, RangeAssignment
from jobs.ingestion.tasks.record_share import load_carry, payload_bytes, record_share_rows
from jobs.ingestion.tasks.writer import RangeWriter, WriterSettings
from jobs.spark.tasks import default_parallelism, run_tasks, task_attempt
from kafkalog_core import native as native_loops
from kafkalog_core.errors import KafkaLogError
from kafkalog_core.log.names import partition_dir_name
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.log.segment.log_segment import LogSegment


@dataclass(frozen=True)
class RelayoutJob:
    """One partition's staged shares, in offset order (all but the first are record shares),
    to lay out as one writer would."""

    topic: str
    partition: int
    shares: tuple[TaskManifest, ...]


@dataclass(frozen=True)
class RelayoutReport:
    """What the relayout did: partitions laid out, the record shares and rows it encoded, and
    the segments the partitions have after it."""

    partitions: int = 0
    shares: int = 0
    records: int = 0
    segments_after: int = 0

    def describe(self) -> str:
        if not self.partitions:
            return "segments: no partition had shares to lay out"
        return (
            f"segments: the relayout encoded {self.shares} staged record shares "
            f"({self.records} records) after their partitions' first shares: "
            f"{self.partitions} partitions, {self.segments_after} segments"
        )


Runner = Callable[[Sequence[RelayoutJob]], list[TaskManifest]]


def relayout(
    manifests: Iterable[TaskManifest], settings: WriterSettings, run: Runner
) -> tuple[list[TaskManifest], RelayoutReport]:
    """The run's placed manifests with every partition that has record shares laid out by
    `run` (`spark_runner`; `thread_runner` in a process without Spark; `local_runner` for
    tests), and what that did."""
    del settings  # the runner has them
    kept, jobs = plan_relayout(manifests)
    if not jobs:
        return kept, RelayoutReport()
    done = run(jobs)
    staged = [s for job in jobs for s in job.shares if s.records is not None]
    report = RelayoutReport(
        partitions=len(jobs),
        shares=len(staged),
        records=sum(s.record_count for s in staged),
        segments_after=sum(len(m.segment_bases) for m in done),
    )
    return kept + done, report


def plan_relayout(
    manifests: Iterable[TaskManifest],
) -> tuple[list[TaskManifest], list[RelayoutJob]]:
    """(manifests kept as they are, the partitions to lay out): those with record shares."""
    by_partition: dict[tuple[str, int], list[TaskManifest]] = {}
    for m in manifests:
        by_partition.setdefault((m.topic, m.partition), []).append(m)
    kept: list[TaskManifest] = []
    jobs: list[RelayoutJob] = []
    for (topic, partition), shares in sorted(by_partition.items()):
        shares.sort(key=lambda m: (m.first_offset, m.range_index))
        if any(s.records is not None for s in shares):
            if any(s.records is None for s in shares[1:]):
                raise KafkaLogError(
                    f"{topic}-{partition}: only a partition's first share may be staged as "
                    "segments when others are staged as records"
                )
            jobs.append(RelayoutJob(topic, partition, tuple(shares)))
        else:
            kept.extend(shares)
    return kept, jobs


def relayout_partition(
    job: RelayoutJob, task_key: str, attempt_id: str, settings: WriterSettings
) -> TaskManifest:
    """Task side: lay out one partition's shares in this attempt's staging; its manifest."""
    staging = task_staging_dir(settings.output_root, settings.run_id, task_key, attempt_id)
    target = staging / partition_dir_name(job.topic, job.partition)
    first = job.shares[0]
    assignment = RangeAssignment(job.topic, job.partition, -1, 0, first.first_offset, PROVISIONAL)
    linked: dict[str, StagedFile] = {}
    prefixes: dict[str, StagedFile] = {}
    work = None
    if first.records is None:  # segments: kept, the last continued live
        if first.carry is None or not first.durable:
            raise KafkaLogError(f"{first.describe()}: a share continued by records has a carry")
        rows, context = load_carry(Path(first.staging_dir))
        work = staging / "work" / target.name
        log = _continue_tail(first, first.next_offset - rows.num_rows, target, work, settings)
        tail = first.segment_bases[-1]
        linked.update((f.name, f) for f in first.files if f.base_offset != tail)
        prefixes[first.carry.name] = first.carry
        writer = RangeWriter(assignment, settings, work, task_key, attempt_id, log=log)
        writer.context = context
        writer.add(rows)
        replaces, native, max_timestamp = first.replaces, first.native, first.max_timestamp
    else:  # records from the start: as the task that knew its start writes them
        writer = RangeWriter(assignment, settings, target, task_key, attempt_id)
        replaces, native, max_timestamp = writer.replaces, True, -1
    schema = writer.pending[0].schema if writer.pending else None
    for share in job.shares:
        for table in record_share_rows(share):
            if schema is None:
                schema = table.schema
            elif table.schema != schema:
                table = table.cast(schema)
            writer.add(table, payload_bytes(table))
    end = writer.close()
    if end != job.shares[-1].next_offset:
        raise KafkaLogError(
            f"{job.topic}-{job.partition}: the relayout ended at offset {end}, the shares at "
            f"{job.shares[-1].next_offset}"
        )
    if work is not None:
        for path in sorted(work.iterdir()):
            if SEGMENT_FILE.match(path.name) and not path.name.endswith(".snapshot"):
                os.replace(path, target / path.name)
        shutil.rmtree(work.parent)
    return finalize_task_staging(
        target,
        run_id=settings.run_id,
        task_key=task_key,
        attempt_id=attempt_id,
        topic=job.topic,
        partition=job.partition,
        range_index=first.range_index,
        first_offset=first.first_offset,
        next_offset=end,
        record_count=sum(s.record_count for s in job.shares),
        replaces=replaces,
        max_timestamp=max(max_timestamp, writer.max_timestamp),
        leader_epoch=first.leader_epoch,
        native=native and native_loops.module is not None,
        known=linked,
        prefixes=prefixes,
    )


def _continue_tail(
    first: TaskManifest, cut: int, target: Path, work: Path, settings: WriterSettings
) -> PartitionLog:
    """The first share's segments but its last hard-linked into `target`, and a live log in
    `work` holding its last as its writer held it just before appending the batch at `cut`
    (its last, whose rows its carry holds)."""
    staged = Path(first.staging_dir)
    base = first.segment_bases[-1]
    target.mkdir()
    work.mkdir(parents=True)
    for f in first.files:
        if f.base_offset != base:
            os.link(staged / f.name, target / f.name)
        elif f.ext != "snapshot":
            copy_file(staged / f.name, work / f.name)
    config = settings.configs[first.topic]
    segment = LogSegment.open(work, base, config)
    segment.cut_before(cut)
    segment.close()
    log = PartitionLog.open(
        work, config, had_clean_shutdown=True, leader_epoch=settings.leader_epoch
    )
    # its writer reopened the published segment it continues (at the share's first offset),
    # or else created it
    opened_at = first.first_offset if first.replaces == base else base
    log.active_segment.resume_as_active(opened_at)
    return log


def local_runner(settings: WriterSettings, attempt_id: str = "0") -> Runner:
    """Runs the jobs in this process, one after another (tests, small runs)."""

    def run(jobs: Sequence[RelayoutJob]) -> list[TaskManifest]:
        return [
            relayout_partition(job, f"relayout-{i}", attempt_id, settings)
            for i, job in enumerate(jobs)
        ]

    return run


def thread_runner(settings: WriterSettings, workers: int | None = None) -> Runner:
    """Runs the jobs on a small thread pool in this process: for a commit that has no
    SparkSession (the data source's `commit` runs in a Python worker on the driver, which so
    encodes every record share). The C loops' batch writes, the copies and the fsyncs
    release the GIL, the rest of the encode holds it; each job is its own task key, and the
    attempt id is this commit's, so a retried commit writes beside, not into, a failed one's
    staging."""
    attempt = f"commit{os.getpid()}x{time.time_ns()}"

    def run(jobs: Sequence[RelayoutJob]) -> list[TaskManifest]:
        threads = max(1, min(len(jobs), workers or os.cpu_count() or 1))
        if threads == 1:
            return local_runner(settings, attempt)(jobs)
        with ThreadPoolExecutor(threads, thread_name_prefix="relayout") as pool:
            return list(
                pool.map(
                    lambda ij: relayout_partition(ij[1], f"relayout-{ij[0]}", attempt, settings),
                    enumerate(jobs),
                )
            )

    return run


def spark_runner(spark, settings: WriterSettings) -> Runner:
    """Runs the jobs as one Spark stage (the bytes move on executors, beside the staged files,
    never through the driver), at most one task per core: a job's work is often smaller than a
    task's own cost (a Python worker's round trip, ~80 ms on a quiet machine), so a task takes
    several jobs, spread by staged bytes (largest first, to the task with the fewest)."""

    def run(jobs: Sequence[RelayoutJob]) -> list[TaskManifest]:
        groups = job_groups(jobs, default_parallelism(spark))

        def task(k: int):
            attempt = task_attempt()
            for index, job in groups[k]:
                manifest = relayout_partition(job, f"relayout-{index}", attempt, settings)
                yield index, manifest.to_json()

        done = dict(run_tasks(spark, len(groups), task))
        return [TaskManifest.from_json(done[i]) for i in range(len(jobs))]

    return run


def job_groups(jobs: Sequence[RelayoutJob], tasks: int) -> list[list[tuple[int, RelayoutJob]]]:
    """The jobs (with their index) in at most `tasks` groups of about equal staged bytes."""
    groups: list[list[tuple[int, RelayoutJob]]] = [[] for _ in range(max(1, min(tasks, len(jobs))))]
    loads = [0] * len(groups)
    by_size = sorted(enumerate(jobs), key=lambda ij: -sum(s.size_bytes for s in ij[1].shares))
    for index, job in by_size:
        k = loads.index(min(loads))
        groups[k].append((index, job))
        loads[k] += sum(s.size_bytes for s in job.shares)
    return groups
