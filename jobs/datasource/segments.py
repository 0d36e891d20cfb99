"""The segments view: `spark.read.format("kafkalog").option("view", "segments").load(dir)`.

One row per segment (`schema.SEGMENTS_COLUMNS`): how a topic lies on disk, for a notebook's
plot or a check of a broker's copy, without reaching into the core. The facts are those that
retention and the cleaner audit read (`read_segment_facts`: one walk of the batch headers, no
record decoded), plus how many entries the offset and time indexes hold before any zero
padding a broker preallocated (what DumpLogSegments counts). Nothing is written; a corrupt
batch header fails the read with one line naming the file.

`records` counts the records the batches declare, control records included. A magic 0/1
compressed wrapper declares none (its count is inside the compressed bytes), so a segment with
one has `records` null rather than a guess. Partitions are chosen with subscribe /
subscribePattern / assign, every partition of the dir when none is given; one Spark task reads
one partition's segments.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from jobs.datasource.layout import subscribed_partitions
from jobs.datasource.options import SegmentsOptions
from jobs.datasource.schema import SEGMENTS_COLUMNS
from kafkalog_core.log.index.offset_index import AbstractIndex, OffsetIndex
from kafkalog_core.log.index.time_index import TimeIndex
from kafkalog_core.log.names import index_file_name, segment_log_files, time_index_file_name
from kafkalog_core.maintenance.segment_facts import read_segment_facts
from kafkalog_core.record.batch import MAGIC_V2, BatchHeader, Compression

__all__ = ["PartitionDir", "SegmentsReader", "segment_rows"]

# The DDL types' Arrow forms, as Spark takes them from a Python data source
_ARROW = {
    "string": pa.string(),
    "int": pa.int32(),
    "long": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
_SCHEMA = pa.schema([(name, _ARROW[kind]) for name, kind in SEGMENTS_COLUMNS])


@dataclass(frozen=True)
class PartitionDir(InputPartition):
    """One Spark input partition: a topic-partition's directory."""

    topic: str
    partition: int
    directory: str


class SegmentsReader(DataSourceReader):
    """Plans a task per subscribed partition dir; each yields its segments' rows."""

    def __init__(self, options: SegmentsOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        chosen = subscribed_partitions(self.options.path, self.options.subscription)
        return [PartitionDir(t, p, str(d)) for (t, p), d in chosen.items()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PartitionDir)
        rows = segment_rows(partition.topic, partition.partition, Path(partition.directory))
        yield pa.RecordBatch.from_pylist(rows, schema=_SCHEMA)


def segment_rows(topic: str, partition: int, directory: Path) -> list[dict[str, object]]:
    """The segments view's rows of one partition dir, by base offset."""
    rows = []
    for log in segment_log_files(directory):
        records = _RecordCount()
        facts = read_segment_facts(log, strict=True, on_batch=records.add)
        base = facts.base_offset
        offset_index = OffsetIndex(directory / index_file_name(base), base)
        time_index = TimeIndex(directory / time_index_file_name(base), base)
        rows.append(
            {
                "topic": topic,
                "partition": partition,
                "baseOffset": base,
                "nextOffset": facts.next_offset,
                "size": facts.size,
                "batches": facts.batches,
                "records": records.total,
                "firstBatchTimestamp": _micros(facts.first_batch_timestamp),
                "maxTimestamp": _micros(facts.max_timestamp),
                "lastModified": _micros(facts.last_modified_ms),
                "offsetIndexEntries": _entries(offset_index),
                "timeIndexEntries": _entries(time_index),
            }
        )
    return rows


class _RecordCount:
    """The records the batches declare; None once a legacy compressed wrapper hides its count."""

    def __init__(self) -> None:
        self.total: int | None = 0

    def add(self, _view: memoryview, header: BatchHeader) -> None:
        if self.total is None:
            return
        if header.magic < MAGIC_V2 and header.compression is not Compression.NONE:
            self.total = None
        else:
            self.total += header.records_count


def _micros(ms: int) -> int | None:
    return ms * 1000 if ms >= 0 else None  # -1: no batch carries a timestamp (magic 0)


def _entries(index: AbstractIndex) -> int | None:
    """Entries before a preallocated zero padding (DumpLogSegments' rule); None: no file."""
    return index.entries_before_padding() if index.file_exists() else None
