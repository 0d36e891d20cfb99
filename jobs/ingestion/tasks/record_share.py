"""Shares staged as records: rows a later task holds of a partition an earlier task began.

Why. A record batch of one writer ends where the greedy split ends it, which depends on where
the writer started. A task's share that continues an earlier task's share would start a split
of its own there, so k splits would give other batches (other bytes) than one. Such a share is
therefore staged as its rows, in the writer's record columns, in an Arrow IPC file
(`RecordShareWriter`): no encoding, no fsync in its task (nothing of it is published as it is).
The relayout (`jobs.ingestion.relayout.shares`) encodes them after the partition's earlier records,
through the same writer a single task uses, so each record is encoded once, by the writer that
writes it in a one-task run.

The carry. The share a record share continues ended with a batch one writer would not have
ended there: its writer keeps that batch's rows and the timestamps of the records before them
(the split's context) beside its segments (`save_carry`), and the relayout takes the batch
back out of the log and encodes its rows again with what follows (`load_carry`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.ingestion.staging.task_staging import TaskManifest
from jobs.ingestion.tasks.planner import RangeAssignment
from kafkalog_core.record.encoder import record_timestamps

RECORDS_FILE = "records.arrow"  # a record share's rows, in its staging dir
CARRY_FILE = "carry.arrow"  # the last batch's rows of a share a record share may continue
CARRY_CONTEXT_FILE = "carry-context.npy"  # the timestamps of the records before them


def row_payload_bytes(table: pa.Table) -> np.ndarray:
    """Per record: key + value bytes + 1 (a deterministic measure of its size for chunking)."""
    sizes = np.ones(table.num_rows, dtype=np.int64)
    for name in ("key", "value"):
        if name in table.column_names:
            lengths = pc.fill_null(pc.binary_length(table.column(name)), 0)
            sizes += lengths.to_numpy(zero_copy_only=False).astype(np.int64)
    return sizes


def payload_bytes(table: pa.Table) -> int:
    return int(row_payload_bytes(table).sum()) if table.num_rows else 0


class RecordShareWriter:
    """Stages the rows of one share that continues an earlier one, in chunks of about
    `chunk_limit` payload bytes (one IPC record batch each), as `RangeWriter`'s interface."""

    def __init__(
        self,
        assignment: RangeAssignment,
        directory: Path,
        run_id: str,
        task_key: str,
        attempt_id: str,
        chunk_bytes: int,
        leader_epoch: int,
    ) -> None:
        self.assignment = assignment
        self.directory = directory
        self.run_id = run_id
        self.task_key = task_key
        self.attempt_id = attempt_id
        self.leader_epoch = leader_epoch
        self.chunk_limit = max(int(chunk_bytes), 1)
        self.pending: list[pa.Table] = []
        self.pending_bytes = 0
        self.records = 0
        self.max_timestamp = -1
        self.schema: pa.Schema | None = None
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        directory.mkdir(parents=True)

    def add(self, table: pa.Table, payload: int | None = None) -> None:
        self.pending.append(table)
        self.pending_bytes += payload_bytes(table) if payload is None else payload
        if self.pending_bytes >= self.chunk_limit:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        table = pa.concat_tables(self.pending).combine_chunks()
        self.pending, self.pending_bytes = [], 0
        if self._writer is None:
            self.schema = table.schema
            self._writer = pa.ipc.new_file(self.directory / RECORDS_FILE, table.schema)
        elif table.schema != self.schema:
            table = table.cast(self.schema)
        self._writer.write_table(table, max_chunksize=table.num_rows or None)
        self.records += table.num_rows
        if table.num_rows and "timestamp" in table.column_names:
            self.max_timestamp = max(self.max_timestamp, int(record_timestamps(table).max()))

    def finish(self) -> TaskManifest:
        self._flush()
        if self._writer is not None:
            self._writer.close()
        path = self.directory / RECORDS_FILE
        a = self.assignment
        return TaskManifest(
            run_id=self.run_id,
            task_key=self.task_key,
            attempt_id=str(self.attempt_id),
            topic=a.topic,
            partition=a.partition,
            range_index=a.range_index,
            first_offset=0,
            next_offset=self.records,
            record_count=self.records,
            staging_dir=str(self.directory.absolute()),
            files=(),
            max_timestamp=self.max_timestamp,
            leader_epoch=self.leader_epoch,
            size_bytes=path.stat().st_size if path.exists() else 0,
            provisional=True,
            durable=False,
            records=RECORDS_FILE,
        )


def record_share_rows(share: TaskManifest) -> Iterator[pa.Table]:
    """A record share's rows, one staged chunk at a time (memory-mapped: nothing more is read)."""
    if share.records is None or not share.record_count:
        return
    # not closed here: the tables point into the map (which lives while they do)
    reader = pa.ipc.open_file(pa.memory_map(str(Path(share.staging_dir) / share.records)))
    for i in range(reader.num_record_batches):
        yield pa.Table.from_batches([reader.get_batch(i)])


def save_carry(directory: Path, rows: pa.Table, context: np.ndarray) -> None:
    """The last batch's rows and the split context before them, beside a share's segments."""
    with pa.ipc.new_file(directory / CARRY_FILE, rows.schema) as writer:
        writer.write_table(rows)
    np.save(directory / CARRY_CONTEXT_FILE, np.asarray(context, dtype=np.int64))


def load_carry(directory: Path) -> tuple[pa.Table, np.ndarray]:
    """What `save_carry` kept: (the rows, the context timestamps)."""
    with pa.OSFile(str(directory / CARRY_FILE)) as source:
        rows = pa.ipc.open_file(source).read_all()
    return rows, np.load(directory / CARRY_CONTEXT_FILE)


def carry_files(directory: Path) -> list[Path]:
    return [directory / CARRY_FILE, directory / CARRY_CONTEXT_FILE]
