"""Offset checkpoints: `<topic> <partition> <offset>` files of a log dir root (§9).

`OffsetCheckpointFile` reads and writes the recovery-point, log-start-offset, replication
(high watermark) and cleaner checkpoints; the `read_*` functions give one of them as a map,
{} when the file is absent (the compaction audit, the data source and the retention job read
them without writing).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kafkalog_core.log.checkpoints.checkpoint_file import (
    JAVA_WHITESPACE,
    CheckpointFile,
    java_split,
    parse_java_int,
)
from kafkalog_core.log.names import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
)

TopicPartition = tuple[str, int]


def _format_offset_entry(entry: tuple[TopicPartition, int]) -> str:
    (topic, partition), offset = entry
    return f"{topic} {partition} {offset}"


def _parse_offset_entry(line: str) -> tuple[TopicPartition, int] | None:
    parts = java_split(JAVA_WHITESPACE, line)
    if len(parts) != 3:
        return None
    return (parts[0], parse_java_int(parts[1])), parse_java_int(parts[2], 64)


class OffsetCheckpointFile:
    """`<topic> <partition> <offset>` checkpoints (recovery point, log start, replication, cleaner)."""

    VERSION = 0

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file: CheckpointFile[tuple[TopicPartition, int]] = CheckpointFile(
            path, self.VERSION, _format_offset_entry, _parse_offset_entry
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def exists(self) -> bool:
        return self._file.exists()

    def ensure_exists(self) -> None:
        self._file.ensure_exists()

    def read(self) -> dict[TopicPartition, int]:
        """The map in the file; a later duplicate line wins, as in Kafka's toMap."""
        return dict(self._file.read())

    def to_bytes(self, offsets: Mapping[TopicPartition, int]) -> bytes:
        return self._file.to_bytes(sorted(offsets.items()))

    def write(self, offsets: Mapping[TopicPartition, int], *, sync: bool = True) -> None:
        """Entries sorted by (topic, partition): deterministic (order carries no meaning)."""
        self._file.write(sorted(offsets.items()), sync=sync)


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
