"""Relayout: a partition's staged shares laid out as one writer lays out the same batches.

Why. In the direct mode every input split writes its share of each partition it holds as
segments of its own (placed at its offsets by `place_ranges`); a hot partition of the range mode
has one share per task likewise. So a partition written by k tasks had at least k segments (200
files x 50 partitions: 10,000 segments, 30,000 files, each an open file and a mapped index on a
broker). After the relayout the run's output is what one `PartitionLog` appending the same
batches in order writes, so the segment count follows the bytes, not the split count.

What. Share i+1's batches continue share i's last segment through the core's own
`PartitionLog.append_batches`: its roll rules (segment.bytes, segment.ms, full indexes, offset
overflow) and index entries, no second copy of either. The batches do not change: their base
offsets are final when this runs (after `place_ranges`), so moving one is a byte copy, straight
from a memory-mapped slice of the staged .log (`moved_batches` with delta 0); only batch headers
are walked in Python.

The tail. A closed segment is not the live one a single writer holds (closing added the final
time-index entry; reopening forgets the bytes since the last index entry). Its batches are not
appended again: the tail's files are copied kernel-side (`copy_file`: `copy_file_range`, a
reflink where the file system has them) into a work dir, opened there and taken back to the
live state its writer had before closing it (`LogSegment.resume_as_active`, which reads that
state back from the files); the next share's batches follow. The log's state is then the single
writer's, and the tail's bytes never pass through Python.

Only where it changes something. The size condition alone decides a roll
(`LogSegment.rolls_by_size`). Where the tail cannot take the next share's first batch by size,
one writer rolls there too, at the share's first offset, and from there writes exactly the
share's own segments: those are hard-linked (same file system, checksums reused), not copied,
and that share's last segment becomes the tail. A partition with no boundary the tail could take
keeps its manifests as they are (synced first if staged without fsync, below); the driver tells
that from the manifests' sizes and one header read per share. (A boundary the size allows but segment.ms rolls is copied: correct, slower.)

Where. One Spark stage (`spark_runner`) whose tasks take the partitions' jobs, at most one
task per core; each partition is laid out in its own attempt's staging dir (task key
`relayout-<n>`) under the run's staging and gives one ordinary `TaskManifest` that replaces its
share manifests. The publish and its crash safety see nothing new: before the publish
everything is staging, as the write tasks' output is.

Each byte fsynced once. In the direct mode every task but the first stages its shares without
fsync (`durable=False`: they are placed after task 0's and laid out again). Such a share is
either copied here, and the copy fsynced, or, when no boundary can be continued, kept as staged
in a job of its own (`merge=False`) that hard-links its files and fsyncs them. Everything published is durable before the publish journal, as
before (`plan_publish` refuses a manifest staged without fsync).

The bound. One writer's segments hold at least segment.bytes minus one batch each (time rolls
aside), so a run leaves a partition at most ceil(bytes / (segment.bytes - largest batch)) + 1
new or changed segments (the + 1: the continued last segment); with batches small against
segment.bytes (1 MiB against 1 GiB by default) that is ceil(bytes / segment.bytes) + 1.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from jobs.ingestion.commit import (
    SEGMENT_FILE,
    StagedFile,
    TaskManifest,
    copy_file,
    finalize_task_staging,
    task_staging_dir,
)
from jobs.ingestion.writer import WriterSettings
from kafkalog_core.log.names import partition_dir_name
from kafkalog_core.log.partition_log import PartitionLog
from kafkalog_core.log.rebase import moved_batches
from kafkalog_core.log.segment import LogSegment
from kafkalog_core.record.batch import LENGTH_OFFSET, LOG_OVERHEAD

_LENGTH = struct.Struct(">i")


@dataclass(frozen=True)
class RelayoutJob:
    """One partition's staged shares, in offset order, to lay out as one writer would."""

    topic: str
    partition: int
    shares: tuple[TaskManifest, ...]
    # False: no boundary can be continued, the shares' segments are kept (hard-linked) and
    # only made durable (their tasks staged them without fsync)
    merge: bool = True


@dataclass(frozen=True)
class RelayoutReport:
    """What the relayout did: partitions laid out again, segments before and after."""

    partitions: int = 0
    segments_before: int = 0
    segments_after: int = 0
    synced: int = 0  # partitions whose shares were kept as staged, only fsynced

    @property
    def saved(self) -> int:
        return self.segments_before - self.segments_after

    def describe(self) -> str:
        if not self.partitions:
            return "segments: no partition's shares needed a relayout"
        return (
            f"segments: the relayout of {self.partitions} partitions saved {self.saved} segments "
            f"({self.segments_before} staged, {self.segments_after} kept)"
        )


Runner = Callable[[Sequence[RelayoutJob]], list[TaskManifest]]


def relayout(
    manifests: Iterable[TaskManifest], settings: WriterSettings, run: Runner
) -> tuple[list[TaskManifest], RelayoutReport]:
    """The run's placed manifests with every partition that needs it laid out again by `run`
    (`spark_runner`; `thread_runner` in a process without Spark; `local_runner` for tests),
    and what that saved."""
    kept, jobs = plan_relayout(manifests, settings)
    if not jobs:
        return kept, RelayoutReport()
    done = run(jobs)
    merged = [(job, m) for job, m in zip(jobs, done, strict=True) if job.merge]
    before = sum(len(s.segment_bases) for job, _ in merged for s in job.shares)
    after = sum(len(m.segment_bases) for _, m in merged)
    return kept + done, RelayoutReport(len(merged), before, after, len(jobs) - len(merged))


def plan_relayout(
    manifests: Iterable[TaskManifest], settings: WriterSettings
) -> tuple[list[TaskManifest], list[RelayoutJob]]:
    """(manifests kept as they are, the partitions to relayout): a partition is laid out again
    when at some share boundary the tail as staged could take the next share's first batch;
    one whose shares were staged without fsync is a job too (`merge=False`: kept, synced)."""
    by_partition: dict[tuple[str, int], list[TaskManifest]] = {}
    for m in manifests:
        by_partition.setdefault((m.topic, m.partition), []).append(m)
    kept: list[TaskManifest] = []
    jobs: list[RelayoutJob] = []
    for (topic, partition), shares in sorted(by_partition.items()):
        shares.sort(key=lambda m: (m.first_offset, m.range_index))
        segment_bytes = int(settings.configs[topic].segment_bytes)
        movable = all(s.segment_bases and not s.provisional for s in shares)
        if movable and any(
            not LogSegment.rolls_by_size(_last_log(a).size, first_batch_size(b), segment_bytes)
            for a, b in pairwise(shares)
        ):
            jobs.append(RelayoutJob(topic, partition, tuple(shares)))
        elif movable and not all(s.durable for s in shares):
            jobs.append(RelayoutJob(topic, partition, tuple(shares), merge=False))
        else:
            kept.extend(shares)
    return kept, jobs


def first_batch_size(share: TaskManifest) -> int:
    """Bytes of the share's first batch (its log overhead included), from its header."""
    path = Path(share.staging_dir) / _logs(share)[0].name
    with open(path, "rb") as f:
        head = f.read(LENGTH_OFFSET + 4)
    return LOG_OVERHEAD + _LENGTH.unpack_from(head, LENGTH_OFFSET)[0]


def _logs(share: TaskManifest) -> list[StagedFile]:
    return sorted((f for f in share.files if f.ext == "log"), key=lambda f: f.base_offset)


def _last_log(share: TaskManifest) -> StagedFile:
    return _logs(share)[-1]


def relayout_partition(
    job: RelayoutJob, task_key: str, attempt_id: str, settings: WriterSettings
) -> TaskManifest:
    """Task side: lay out one partition's shares in this attempt's staging; its manifest."""
    staging = task_staging_dir(settings.output_root, settings.run_id, task_key, attempt_id)
    layout = _Layout(job, settings, staging)
    for share in job.shares:
        layout.add(share)
    layout.cut()
    shares = job.shares
    return finalize_task_staging(
        layout.target,
        run_id=settings.run_id,
        task_key=task_key,
        attempt_id=attempt_id,
        topic=job.topic,
        partition=job.partition,
        range_index=shares[0].range_index,
        first_offset=shares[0].first_offset,
        next_offset=shares[-1].next_offset,
        record_count=sum(s.record_count for s in shares),
        replaces=shares[0].replaces,
        max_timestamp=max(s.max_timestamp for s in shares),
        leader_epoch=shares[0].leader_epoch,
        native=all(s.native for s in shares),  # moved, not encoded: the tasks' encoders wrote them
        known=layout.linked,
        unsynced=layout.unsynced,
        prefixes=layout.copied,
    )


class _Layout:
    """The partition's segments as one writer lays them out, built share by share in `target`.

    Either `tail` (a share whose staged last segment is the tail, unchanged) or `log` (a live
    log in a work dir holding the tail) is set after the first share.
    """

    def __init__(self, job: RelayoutJob, settings: WriterSettings, staging: Path) -> None:
        self.job = job
        self.settings = settings
        self.segment_bytes = int(settings.configs[job.topic].segment_bytes)
        self.staging = staging
        self.target = staging / partition_dir_name(job.topic, job.partition)
        self.target.mkdir()
        self.linked: dict[str, StagedFile] = {}
        self.unsynced: set[str] = set()  # linked from shares staged without fsync
        self.copied: dict[str, StagedFile] = {}  # a continued tail's .log: the staged copy
        self.tail: TaskManifest | None = None
        self.log: PartitionLog | None = None
        self.work: Path | None = None
        self.runs = 0

    def add(self, share: TaskManifest) -> None:
        if self.tail is None and self.log is None:
            self._link(share, keep_last=False)
            self.tail = share
            return
        tail_size = _last_log(self.tail).size if self.log is None else self.log.active_segment.size
        if LogSegment.rolls_by_size(tail_size, first_batch_size(share), self.segment_bytes):
            # one writer rolls here, at the share's first offset: the share's own segments
            self.cut()
            self._link(share, keep_last=False)
            self.tail = share
            return
        if self.log is None:
            self._continue_tail()
        for f in _logs(share):
            self._append(Path(share.staging_dir) / f.name)

    def cut(self) -> None:
        """End the current tail: the live log's segments move into `target`, or the staged
        tail segment is linked there."""
        if self.log is not None:
            assert self.work is not None
            self.log.close(fsync=False)  # finalize_task_staging makes each file durable
            for path in sorted(self.work.iterdir()):
                if SEGMENT_FILE.match(path.name) and not path.name.endswith(".snapshot"):
                    os.replace(path, self.target / path.name)
            shutil.rmtree(self.work)
            self.log = self.work = None
        elif self.tail is not None:
            self._link(self.tail, keep_last=True)
        self.tail = None

    def _link(self, share: TaskManifest, *, keep_last: bool) -> None:
        """Hard-link the share's segments but its last (`keep_last`: only its last)."""
        last = _last_log(share).base_offset
        for f in share.files:
            if (f.base_offset == last) == keep_last:
                os.link(Path(share.staging_dir) / f.name, self.target / f.name)
                self.linked[f.name] = f
                if not share.durable:
                    self.unsynced.add(f.name)

    def _continue_tail(self) -> None:
        """A live log holding the tail as its writer left it before closing it, without
        appending its batches again: the staged tail's files copied kernel-side into a work dir
        and resumed there (`LogSegment.resume_as_active`)."""
        tail = self.tail
        assert tail is not None
        base = _last_log(tail).base_offset
        self.runs += 1
        self.work = self.staging / f"run-{self.runs}" / self.target.name
        self.work.mkdir(parents=True)
        for f in tail.files:
            if f.base_offset == base and f.ext != "snapshot":
                copy_file(Path(tail.staging_dir) / f.name, self.work / f.name)
                if f.ext == "log":  # appended to, never rewritten: its checksum continues
                    self.copied[f.name] = f
        self.log = PartitionLog.open(
            self.work,
            self.settings.configs[self.job.topic],
            had_clean_shutdown=True,
            leader_epoch=self.settings.leader_epoch,
        )
        # its writer reopened the published segment it continues (at the share's first
        # offset), or else created it
        opened_at = tail.first_offset if tail.replaces == base else base
        self.log.active_segment.resume_as_active(opened_at)
        self.tail = None

    def _append(self, log_path: Path) -> None:
        assert self.log is not None
        for piece in moved_batches(log_path, 0):
            self.log.append_batches(piece)


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
    SparkSession (the data source's `commit` runs in a Python worker on the driver). The moves
    are file copies, hard links and fsyncs, which release the GIL; each job is its own task
    key, and the attempt id is this commit's, so a retried commit writes beside, not into, a
    failed one's staging."""
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
        def task(rows):
            from pyspark import TaskContext

            attempt = str(TaskContext.get().taskAttemptId())
            for group in rows:
                for index, job in group:
                    manifest = relayout_partition(job, f"relayout-{index}", attempt, settings)
                    yield index, manifest.to_json()

        groups = job_groups(jobs, spark.sparkContext.defaultParallelism)
        rdd = spark.sparkContext.parallelize(groups, len(groups))
        done = dict(rdd.mapPartitions(task).collect())
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
