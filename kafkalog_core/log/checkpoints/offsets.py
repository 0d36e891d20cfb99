"""Offset checkpoints: `<topic> <partition> <offset>` files of a log dir root (§9).

`OffsetCheckpointFile` reads and writes the recovery-point, log-start-offset, replication
(high watermark) and cleaner checkpoints; the `read_*` functions give one of them as a map,
{} when the file is absent (the compaction audit, the data source and the retention job read
them without writing). `read_recovery_points` also says whether a broker's load would recover
anything at all (the clean-shutdown marker).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kafkalog_core.log.checkpoints.checkpoint_file import CheckpointFile, parse_java_int
from kafkalog_core.log.checkpoints.clean_shutdown import CleanShutdownFile
from kafkalog_core.log.names import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
)

TopicPartition = tuple[str, int]


class OffsetCheckpointFile(
    CheckpointFile[tuple[TopicPartition, int], Mapping[TopicPartition, int]]
):
    """`<topic> <partition> <offset>` checkpoints (recovery point, log start, replication, cleaner).

    Read as a map (a later duplicate line wins, as in Kafka's toMap); written sorted by
    (topic, partition), so the bytes are deterministic (the order carries no meaning).
    """

    VERSION = 0

    def format_entry(self, entry: tuple[TopicPartition, int]) -> str:
        (topic, partition), offset = entry
        return f"{topic} {partition} {offset}"

    def parse_entry(self, line: str) -> tuple[TopicPartition, int] | None:
        parts = self.fields(line, 3)
        if parts is None:
            return None
        return (parts[0], parse_java_int(parts[1])), parse_java_int(parts[2], 64)

    def entries_of(
        self, contents: Mapping[TopicPartition, int]
    ) -> list[tuple[TopicPartition, int]]:
        return sorted(contents.items())

    def contents_of(self, entries: list[tuple[TopicPartition, int]]) -> dict[TopicPartition, int]:
        return dict(entries)


def read_offset_checkpoint(
    log_dir: str | os.PathLike[str], file_name: str
) -> dict[TopicPartition, int]:
    """One offset checkpoint of a log dir root as {(topic, partition): offset}; {} if absent."""
    checkpoint = OffsetCheckpointFile(Path(log_dir) / file_name)
    return checkpoint.read() if checkpoint.exists() else {}


def read_cleaner_checkpoint(log_dir: str | os.PathLike[str]) -> dict[TopicPartition, int]:
    """`cleaner-offset-checkpoint`: the first dirty offset of every partition cleaned before."""
    return read_offset_checkpoint(log_dir, CLEANER_OFFSET_CHECKPOINT_FILE)


def read_log_start_checkpoint(log_dir: str | os.PathLike[str]) -> dict[TopicPartition, int]:
    """`log-start-offset-checkpoint` (a log start above the first segment's base offset)."""
    return read_offset_checkpoint(log_dir, LOG_START_OFFSET_CHECKPOINT_FILE)


def read_high_watermarks(log_dir: str | os.PathLike[str]) -> dict[TopicPartition, int]:
    """`replication-offset-checkpoint`: the high watermark, which bounds the last stable offset."""
    return read_offset_checkpoint(log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE)


def read_recovery_points(log_dir: str | os.PathLike[str]) -> dict[TopicPartition, int] | None:
    """Where a broker's load of this log dir starts recovering each partition (rebuilding its
    segments' indexes, the time index's largest timestamp with them): None after a clean
    shutdown (the `.kafka_cleanshutdown` marker), when it recovers nothing; else
    `recovery-point-offset-checkpoint` (a partition it does not name, or a missing file: from
    offset 0, as a broker's load takes it)."""
    if CleanShutdownFile(log_dir).exists:
        return None
    return read_offset_checkpoint(log_dir, RECOVERY_POINT_CHECKPOINT_FILE)
