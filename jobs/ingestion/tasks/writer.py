"""The task side of the ingest job: Arrow batches in, staged Kafka segments out.

A Spark task receives rows already range-partitioned and sorted by (topic, partition, order)
(the range mode, `write_task`) or in source order (the direct mode, `write_task_direct`). For
every run of rows of one partition it drives the core's `PartitionLog` in a staging directory
unique to the task attempt: the log rolls by segment.bytes / segment.ms and indexes every
index.interval.bytes exactly as the engine does anywhere else, because it *is* the engine.

Batches must not depend on how Spark happened to slice the input into Arrow batches, or the
same records would give different logs. A range is encoded in chunks (to keep memory flat):
a chunk ends after the record that brings its payload bytes to `chunk_bytes`, counted from the
chunk's first record, so chunk boundaries depend on the records only; every batch but the last
is appended and the last batch's records are carried over into the next chunk, with the
timestamps of the `split_context_rows` records before them as the encoder's context. The
encoder's split of a record depends only on it and those records, so every chunk continues the
single encode of the whole range exactly: a range's staged bytes equal the engine's single append
of the same records, however many chunks it takes.

Across tasks the same holds through the relayout: a range that may continue an earlier task's
is staged as its rows (`record_share.RecordShareWriter`), and a range a later one may continue
keeps its last batch's rows and their context (its carry), so the relayout continues the
encode exactly where one writer would (`jobs.ingestion.relayout.shares`).

Nothing here imports Spark; `jobs.ingest` wraps `write_task` / `write_task_direct` in
`mapInArrow`, the arrow reader's tasks and the data-source writer call them directly.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.ingestion.staging.task_staging import (
    TaskManifest,
    copy_segment_for_continuation,
    finalize_task_staging,
    task_staging_dir,
)
from jobs.ingestion.tasks.planner import PROVISIONAL, OnePassPlan, ProvisionalPlan, RangeAssignment
from jobs.ingestion.tasks.record_share import (
    RecordShareWriter,
    carry_files,
    payload_bytes,
    row_payload_bytes,
    save_carry,
)
from kafkalog_core import native as native_loops
from kafkalog_core.config import LogConfig
from kafkalog_core.errors import KafkaLogError
from kafkalog_core.log.names import partition_dir_name
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.log.rebase import moved_batches
from kafkalog_core.record.encoder import (
    BatchOptions,
    EncodedBatches,
    encode_records,
    record_timestamps,
    split_context_rows,
)

# Records are encoded once this many payload bytes are pending for a partition: big enough that
# per-encode overhead vanishes, small enough to keep a task's memory flat.
DEFAULT_CHUNK_BYTES = 32 << 20
# A direct-mode task keeps a writer open for every partition it sees: their pending chunks share
# this budget (each gets at least MIN_CHUNK_BYTES), so memory stays flat however many there are.
DIRECT_TASK_BUFFER_BYTES = 64 << 20
MIN_CHUNK_BYTES = 1 << 20
# Test hook for killing an executor mid-write (tests/cluster): set on the executors, a write task
# reports itself (where and on what Python it runs) in this directory after its first batch and
# waits until `release` appears there.
HOLD_DIR_ENV = "KAFKALOG_TEST_HOLD_DIR"
HOLD_TIMEOUT_S = 600
# Target size of one record batch (a producer's batch.size); capped by max.message.bytes.
DEFAULT_BATCH_BYTES = 1 << 20

RECORD_COLUMNS = ("key", "value", "timestamp", "headers")


class InjectedFailure(KafkaLogError):
    """Raised on purpose by tests (kill a task mid-write) via WriterSettings.fail_after_batches."""


class PerTopic(dict):
    """Topic -> value, computed on first use: a task meets its topics only in its rows."""

    def __init__(self, make) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, topic: str):
        self[topic] = value = self._make(topic)
        return value


@dataclass(frozen=True)
class WriterSettings:
    """Everything a task needs besides its rows; small and picklable (shipped to executors)."""

    output_root: str
    run_id: str
    configs: Mapping[str, LogConfig]  # per topic
    batch_options: Mapping[str, BatchOptions]  # per topic
    continue_segments: Mapping[tuple[str, int], int] = field(default_factory=dict)
    leader_epoch: int = 0
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    fail_after_batches: int | None = None  # test hook: raise after this many Arrow batches


def head(encoded: EncodedBatches, count: int) -> EncodedBatches:
    """The first `count` batches of `encoded` (same buffer, shorter per-batch arrays)."""
    return dataclasses.replace(
        encoded,
        positions=encoded.positions[:count],
        sizes=encoded.sizes[:count],
        base_offsets=encoded.base_offsets[:count],
        last_offsets=encoded.last_offsets[:count],
        max_timestamps=encoded.max_timestamps[:count],
        record_counts=encoded.record_counts[:count],
    )


class RangeWriter:
    """Appends the rows of one partition range to a staged PartitionLog, chunk by chunk."""

    def __init__(
        self,
        assignment: RangeAssignment,
        settings: WriterSettings,
        directory: Path,
        task_key: str,
        attempt_id: str,
        log: PartitionLog | None = None,
    ) -> None:
        """`log`: a live log to continue (the relayout's), else one is opened in `directory`."""
        self.assignment = assignment
        self.settings = settings
        self.directory = directory
        self.task_key = task_key
        self.attempt_id = attempt_id
        self.options = settings.batch_options[assignment.topic]
        self.pending: list[pa.Table] = []
        self.pending_bytes = 0
        self.chunk_limit = max(int(settings.chunk_bytes), 1)
        # timestamps of the last records appended (the split's context for the pending ones)
        self.context = np.zeros(0, dtype=np.int64)
        self.context_rows = split_context_rows(self.options)
        self.records = 0
        self.max_timestamp = -1
        self.native: bool | None = None  # None: this process's C loops wrote the batches
        self.replaces: int | None = None
        # keep the last batch's rows for a later record share (`record_share.save_carry`)
        self.keep_carry = False
        self.carry_at: int | None = None  # the last batch's position in the last .log
        self.log = self._open_log() if log is None else log

    def _open_log(self) -> PartitionLog:
        a, s = self.assignment, self.settings
        continued = s.continue_segments.get((a.topic, a.partition)) if a.starts_partition else None
        self.replaces = continued
        return open_range_log(
            s, a.topic, a.partition, a.first_offset, self.directory, continued=continued
        )

    def add(self, table: pa.Table, payload: int | None = None) -> None:
        """Queue rows; `payload` is their `payload_bytes` when the caller knows it."""
        self.pending.append(table)
        self.pending_bytes += payload_bytes(table) if payload is None else payload
        while self.pending_bytes >= self.chunk_limit:
            self._encode(final=False)

    def _encode(self, *, final: bool) -> None:
        """Encode pending records and append the batches; unless `final`, encode exactly the
        first records holding `chunk_limit` payload bytes and carry the last batch over.

        Where a chunk ends depends only on the records (payload sizes counted from the chunk's
        first record), never on how Spark sliced them into Arrow batches, so the same records
        always give the same batches.
        """
        if not self.pending:
            return
        combined = table = pa.concat_tables(self.pending).combine_chunks()
        self.pending, self.pending_bytes = [], 0
        if table.num_rows == 0:
            return
        if not final:
            sizes = np.cumsum(row_payload_bytes(table))
            cut = int(np.searchsorted(sizes, self.chunk_limit, side="left")) + 1
            if cut < table.num_rows:
                table = table.slice(0, cut)
        try:
            encoded = encode_records(
                table,
                base_offset=self.log.log_end_offset,
                options=self.options,
                context_timestamps=self.context,
            )
        except KafkaLogError as e:  # say which partition (the encoder knows only offsets)
            a = self.assignment
            raise type(e)(f"{a.topic}-{a.partition}: {e}") from None
        keep = len(encoded) if final else len(encoded) - 1
        if keep > 0:
            written = head(encoded, keep)
            self.log.append_batches(written)
            self.log.start_writeback()  # the disk works while later chunks are encoded
            self.records += int(written.record_counts.sum())
            self.max_timestamp = max(self.max_timestamp, int(written.max_timestamps.max()))
        if final and self.keep_carry:
            self._save_carry(table, int(encoded.record_counts[-1]), int(encoded.sizes[-1]))
        if not final:
            carried = int(encoded.record_counts[-1])
            if keep > 0 and self.context_rows:
                written_rows = table.num_rows - carried
                tail = table.slice(max(written_rows - self.context_rows, 0), written_rows)
                self.context = np.concatenate((self.context, record_timestamps(tail)))
                self.context = self.context[max(self.context.shape[0] - self.context_rows, 0) :]
            # The carried batch and the rows after the chunk stay pending, as a compact copy: a
            # slice would keep the whole chunk alive, so a task's memory would follow its split
            # size instead of its buffer budget.
            kept = np.arange(table.num_rows - carried, combined.num_rows)
            self.pending = [combined.take(pa.array(kept))]
            self.pending_bytes = payload_bytes(self.pending[0])
            if keep == 0:
                # One batch holds the whole chunk (big batches, compression): widen the chunk.
                self.chunk_limit *= 2

    def _save_carry(self, table: pa.Table, carried: int, size: int) -> None:
        """The last batch's rows and the timestamps of the records before them, beside the
        segments: a later record share continues the partition as if they were pending."""
        before = table.num_rows - carried
        context = record_timestamps(table.slice(max(before - self.context_rows, 0), before))
        context = np.concatenate((self.context, context))
        context = context[max(context.shape[0] - self.context_rows, 0) :]
        save_carry(self.directory, table.slice(before), context)
        self.carry_at = self.log.active_segment.size - size

    def close(self) -> int:
        """Encode what is pending and close the log (not fsynced); its log end offset."""
        self._encode(final=True)
        end = self.log.log_end_offset
        self.log.close(fsync=False)  # finalize_task_staging makes each file durable, once
        return end

    def finish(self) -> TaskManifest:
        end = self.close()
        a = self.assignment
        provisional = a.record_count == PROVISIONAL
        if not provisional and (end != a.next_offset or self.records != a.record_count):
            raise KafkaLogError(
                f"{a.topic}-{a.partition}: task wrote {self.records} records up to offset {end} "
                f"but the plan expected {a.record_count} up to {a.next_offset}"
            )
        return finalize_task_staging(
            self.directory,
            run_id=self.settings.run_id,
            task_key=self.task_key,
            attempt_id=self.attempt_id,
            topic=a.topic,
            partition=a.partition,
            range_index=a.range_index,
            first_offset=a.first_offset,
            next_offset=end if provisional else a.next_offset,
            record_count=self.records if provisional else a.record_count,
            replaces=self.replaces,
            max_timestamp=self.max_timestamp,
            leader_epoch=self.settings.leader_epoch,
            provisional=a.provisional,
            native=self.native,
            carry_at=self.carry_at,
        )


def open_range_log(
    settings: WriterSettings,
    topic: str,
    partition: int,
    first_offset: int,
    directory: Path,
    *,
    continued: int | None,
) -> PartitionLog:
    """A staged log in `directory` (created) whose next offset is `first_offset`: a copy of the
    published segment `continued`, reopened as a broker would (copy-on-write: the live file
    never changes), or else a new log starting there."""
    config = settings.configs[topic]
    directory.mkdir(parents=True)
    if continued is None:
        return PartitionLog.create(
            directory, config, base_offset=first_offset, leader_epoch=settings.leader_epoch
        )
    copy_segment_for_continuation(settings.output_root, topic, partition, continued, directory)
    log = PartitionLog.open(
        directory, config, had_clean_shutdown=True, leader_epoch=settings.leader_epoch
    )
    if log.log_end_offset != first_offset:
        log.close()
        raise KafkaLogError(
            f"{topic}-{partition}: the published log ends at offset {log.log_end_offset} but "
            f"this run planned to start at {first_offset}"
        )
    return log


def continue_staged_range(
    manifest: TaskManifest, first_offset: int, settings: WriterSettings
) -> TaskManifest | None:
    """A provisional range of segments that turned out to start its partition, rewritten as the
    writer writes a known start: appended to a copy of the published last segment (None when
    the partition has none to continue). Its batches do not depend on where they land, only
    the segments' rolls and index entries do, so they are moved (`moved_batches`), not encoded
    again: the bytes equal what the counted plan's write gives. Its carry goes with it."""
    tp = (manifest.topic, manifest.partition)
    if tp not in settings.continue_segments:
        return None
    staged = Path(manifest.staging_dir)
    # beside the attempt's r<range>/ dirs, so the attempt's staging still holds all of it
    directory = staged.parent.parent / "continued" / staged.name
    shutil.rmtree(directory, ignore_errors=True)
    assignment = RangeAssignment(
        manifest.topic, manifest.partition, -1, 0, first_offset, PROVISIONAL
    )
    writer = RangeWriter(assignment, settings, directory, manifest.task_key, manifest.attempt_id)
    delta = first_offset - manifest.first_offset
    logs = sorted(staged / f.name for f in manifest.files if f.ext == "log")
    for log_path in logs:
        for piece in moved_batches(log_path, delta):
            writer.log.append_batches(piece)
    if manifest.carry is not None:  # the last batch, moved: same size, at the log's end now
        writer.carry_at = writer.log.active_segment.size - (
            logs[-1].stat().st_size - manifest.carry.size
        )
        for path in carry_files(staged):
            os.link(path, directory / path.name)
    writer.records = manifest.record_count
    writer.max_timestamp = manifest.max_timestamp
    writer.native = manifest.native  # moved, not encoded again: the task's encoder wrote them
    return writer.finish()


def _cumulative_payload(batch: pa.RecordBatch, order: np.ndarray | None = None) -> np.ndarray:
    """[0, payload of row 0, of rows 0..1, ...] of the rows in `order` (as they are when None):
    a run's payload is a difference of two."""
    sizes = row_payload_bytes(pa.Table.from_batches([batch]))
    out = np.zeros(batch.num_rows + 1, dtype=np.int64)
    np.cumsum(sizes if order is None else sizes[order], out=out[1:])
    return out


def partition_runs(batch: pa.RecordBatch) -> Iterator[tuple[str, int, int, int]]:
    """(topic, partition, start, stop) for each run of equal (topic, partition) in a sorted batch."""
    n = batch.num_rows
    if n == 0:
        return
    partitions = batch.column("partition").to_numpy(zero_copy_only=False).astype(np.int64)
    topics = pc.dictionary_encode(batch.column("topic")).indices.to_numpy(zero_copy_only=False)
    change = np.flatnonzero((partitions[1:] != partitions[:-1]) | (topics[1:] != topics[:-1])) + 1
    starts = np.concatenate(([0], change)).tolist()
    stops = np.concatenate((change, [n])).tolist()
    topic_values = batch.column("topic")
    for start, stop in zip(starts, stops, strict=True):
        yield topic_values[start].as_py(), int(partitions[start]), start, stop


def write_task(
    batches: Iterable[pa.RecordBatch],
    task_index: int,
    attempt_id: str,
    plan: Mapping[tuple[int, str, int], RangeAssignment] | OnePassPlan,
    settings: WriterSettings,
) -> Iterator[TaskManifest]:
    """Write every partition range found in this task's sorted rows into its attempt's staging.

    Yields one manifest per range as soon as the range is complete. With a `OnePassPlan` the
    task's first partition is staged as records when it may continue an earlier task's share,
    the others in place; the last keeps its carry when the next task's first may continue it.
    """
    task_key = f"task-{task_index}"
    staging = task_staging_dir(settings.output_root, settings.run_id, task_key, attempt_id)
    writer: RangeWriter | RecordShareWriter | None = None
    for count, batch in enumerate(batches, start=1):
        columns = [c for c in RECORD_COLUMNS if c in batch.schema.names]
        payload = _cumulative_payload(batch)
        for topic, partition, start, stop in partition_runs(batch):
            current = writer and (writer.assignment.topic, writer.assignment.partition)
            if current != (topic, partition):
                first_in_task = writer is None
                if writer is not None:
                    yield writer.finish()
                writer = _range_writer(
                    plan,
                    (task_index, topic, partition),
                    settings,
                    staging,
                    attempt_id,
                    first_in_task=first_in_task,
                )
            rows = batch.select(columns).slice(start, stop - start)
            writer.add(pa.Table.from_batches([rows]), int(payload[stop] - payload[start]))
        _maybe_fail(settings, task_index, count)
        _maybe_hold(task_index, count, staging)
    if writer is not None:
        if isinstance(writer, RangeWriter):
            writer.keep_carry = not isinstance(plan, OnePassPlan) or plan.may_be_continued(
                task_index
            )
        yield writer.finish()


def _range_writer(
    plan: Mapping[tuple[int, str, int], RangeAssignment] | OnePassPlan,
    key: tuple[int, str, int],
    settings: WriterSettings,
    staging: Path,
    attempt_id: str,
    *,
    first_in_task: bool = False,
) -> RangeWriter | RecordShareWriter:
    """The writer of the plan's range `key` = (task index, topic, partition), in staging: of
    its rows when the range may continue an earlier task's share, else of segments."""
    task_index, topic, partition = key
    if isinstance(plan, OnePassPlan):
        assignment = plan.assignment(*key, first_in_task=first_in_task)
    else:
        assignment = plan[key] if isinstance(plan, ProvisionalPlan) else plan.get(key)
    if assignment is None:
        raise KafkaLogError(f"task {task_index}: the plan has no range for {topic}-{partition}")
    directory = staging / f"r{assignment.range_index}" / partition_dir_name(topic, partition)
    if assignment.continues_share:
        return RecordShareWriter(
            assignment,
            directory,
            settings.run_id,
            f"task-{task_index}",
            attempt_id,
            settings.chunk_bytes,
            settings.leader_epoch,
        )
    return RangeWriter(assignment, settings, directory, f"task-{task_index}", attempt_id)


def _maybe_fail(settings: WriterSettings, task_index: int, batches_seen: int) -> None:
    """The tests' kill switch (`fail_after_batches`)."""
    if settings.fail_after_batches is not None and batches_seen >= settings.fail_after_batches:
        raise InjectedFailure(f"injected failure in task {task_index} after {batches_seen} batches")


def _maybe_hold(task_index: int, batches_seen: int, staging: Path) -> None:
    """The tests' pause (`HOLD_DIR_ENV`): the first batch is staged, the task is held."""
    hold = os.environ.get(HOLD_DIR_ENV)
    if not hold or batches_seen != 1:
        return
    folder = Path(hold)
    note = {
        "task": task_index,
        "staging": str(staging),
        "cwd": os.getcwd(),  # the executor's: tells which worker runs the task
        "python": sys.prefix,  # the executor's environment
        "code": __file__,
        "native": native_loops.module is not None,
    }
    name = f"held-{task_index}-{staging.name}"
    (folder / f".{name}").write_text(json.dumps(note))
    os.replace(folder / f".{name}", folder / f"{name}.json")
    deadline = time.monotonic() + HOLD_TIMEOUT_S
    while not (folder / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def partition_groups(
    batch: pa.RecordBatch,
) -> tuple[np.ndarray | None, list[tuple[str, int, int, int]]]:
    """The rows of `batch` grouped by (topic name, partition), without copying it.

    Returns the stable order that groups them (None when they are grouped already): a
    partition's records keep the order the task received them in (the source order). Also
    each group's (topic, partition, start, stop) in that order, as `partition_runs` gives for
    the grouped rows; the caller takes only the columns it writes. Topic ranks come from the
    sorted distinct names, whatever dictionary Arrow built. Group codes that fit 16 bits (the
    usual case: a few topics and partitions) sort with numpy's radix sort.
    """
    n = batch.num_rows
    if n == 0:
        return None, []
    encoded = pc.dictionary_encode(batch.column("topic"))
    names = encoded.dictionary.to_pylist()
    order_of_names = sorted(range(len(names)), key=names.__getitem__)
    ranks = np.empty(len(names), dtype=np.int64)
    ranks[order_of_names] = np.arange(len(names), dtype=np.int64)
    partitions = batch.column("partition").to_numpy(zero_copy_only=False).astype(np.int64)
    rank = ranks[encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)]
    span = int(partitions.max()) + 1
    codes = rank * span + partitions  # orders like (rank, partition): partitions are >= 0
    order = None
    if n > 1 and not bool(np.all(codes[1:] >= codes[:-1])):
        small = codes.astype(np.uint16) if len(names) * span <= 1 << 16 else codes
        order = np.argsort(small, kind="stable")
        codes = codes[order]
    bounds = np.flatnonzero(codes[1:] != codes[:-1]) + 1
    starts = np.concatenate(([0], bounds)).tolist()
    stops = np.concatenate((bounds, [n])).tolist()
    firsts = codes[starts].tolist()
    return order, [
        (names[order_of_names[c // span]], c % span, start, stop)
        for c, start, stop in zip(firsts, starts, stops, strict=True)
    ]


def _share_budget(writers: Collection[RangeWriter | RecordShareWriter], chunk_bytes: int) -> None:
    """Give every open writer an equal share of `DIRECT_TASK_BUFFER_BYTES` (at most
    `chunk_bytes`, at least `MIN_CHUNK_BYTES`), as writers open: a task's pending rows stay
    within the budget however many partitions it meets. Chunk sizes never change the bytes
    written (see `RangeWriter._encode`)."""
    share = max(MIN_CHUNK_BYTES, min(chunk_bytes, DIRECT_TASK_BUFFER_BYTES // len(writers)))
    for writer in writers:
        writer.chunk_limit = min(writer.chunk_limit, share)


def write_task_direct(
    batches: Iterable[pa.RecordBatch],
    task_index: int,
    attempt_id: str,
    plan: Mapping[tuple[int, str, int], RangeAssignment] | OnePassPlan,
    settings: WriterSettings,
    owned: Collection[tuple[str, int]] | None = None,
) -> Iterator[TaskManifest]:
    """The direct write (no shuffle): this task's rows in source order, any partition anywhere.

    Every (topic, partition) the task holds is one range of the plan, written by its own
    `RangeWriter`; all of them stay open until the input ends, their pending chunks sharing
    `DIRECT_TASK_BUFFER_BYTES`. Each Arrow batch is grouped by partition with a stable sort, so
    a partition's records keep the order the task read them in: the source order. Batches and
    segments depend on the records only (see `RangeWriter`), never on the Arrow slicing. With
    a `OnePassPlan` every partition of a task after the first may continue earlier tasks'
    shares, so each counts as the task's first: task 0 writes in place (keeping each share's
    carry), the others stage their rows as records.

    `owned` (the partition-owning layout, `partition_owners`): the task reads every split and
    writes only these partitions, each whole, so none continues an earlier task's share (the
    plan starts each in place) and no later task continues it (no carry); the other
    partitions' rows are skipped without a copy.
    """
    task_key = f"task-{task_index}"
    staging = task_staging_dir(settings.output_root, settings.run_id, task_key, attempt_id)
    writers: dict[tuple[str, int], RangeWriter | RecordShareWriter] = {}
    for count, batch in enumerate(batches, start=1):
        columns = [c for c in RECORD_COLUMNS if c in batch.schema.names]
        order, groups = partition_groups(batch)
        records = batch.select(columns)  # only what is written is copied into groups
        payload = _cumulative_payload(records, order)
        for topic, partition, start, stop in groups:
            if owned is not None and (topic, partition) not in owned:
                continue  # another task's partition
            writer = writers.get((topic, partition))
            if writer is None:
                key = (task_index, topic, partition)
                writer = _range_writer(
                    plan, key, settings, staging, attempt_id, first_in_task=owned is None
                )
                if isinstance(writer, RangeWriter) and owned is None:
                    writer.keep_carry = True  # any later split may continue it
                writers[(topic, partition)] = writer
                _share_budget(writers.values(), settings.chunk_bytes)
            # Each partition gets its own copy of its rows: slices of one shared copy would keep
            # every batch alive until the slowest partition encodes, so a task's memory would
            # follow its split size instead of DIRECT_TASK_BUFFER_BYTES.
            if order is None:
                rows = records.slice(start, stop - start)
            else:
                rows = records.take(pa.array(order[start:stop]))
            writer.add(pa.Table.from_batches([rows]), int(payload[stop] - payload[start]))
        _maybe_fail(settings, task_index, count)
        _maybe_hold(task_index, count, staging)
    for key in sorted(writers):
        yield writers[key].finish()
