"""`partition.metadata`: the topic id file of a partition dir (§9).

Exactly `version: 0\\ntopic_id: <22 chars>`, no trailing newline, read with Kafka's
PartitionMetadataFile rules (a bad line or a zero id is a `CorruptCheckpointError`).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from kafkalog_core.errors import CorruptCheckpointError
from kafkalog_core.log.checkpoints.checkpoint_file import (
    atomic_write,
    java_split,
    parse_java_int,
    read_lines,
)
from kafkalog_core.log.checkpoints.topic_ids import ZERO_UUID, topic_id_from_str, topic_id_to_str

_METADATA_SEPARATOR = re.compile(r":[ \t\n\x0b\f\r]+")


class PartitionMetadataFile:
    """`partition.metadata`: exactly `version: 0\\ntopic_id: <22 chars>`, no trailing newline."""

    VERSION = 0

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def exists(self) -> bool:
        return self.path.exists()

    @classmethod
    def to_bytes(cls, topic_id: uuid.UUID) -> bytes:
        return f"version: {cls.VERSION}\ntopic_id: {topic_id_to_str(topic_id)}".encode()

    def write(self, topic_id: uuid.UUID, *, sync: bool = True) -> None:
        atomic_write(self.path, self.to_bytes(topic_id), sync=sync)

    def _malformed(self, line: str | None) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"Malformed line in checkpoint file [{self.path}]: {line}")

    def _value(self, lines: list[str], index: int, key: str) -> str:
        line = lines[index] if index < len(lines) else None
        if line is None:
            raise self._malformed(None)
        parts = java_split(_METADATA_SEPARATOR, line, 2)
        if len(parts) != 2 or parts[0] != key:
            raise self._malformed(line)
        return parts[1]

    def read_version_and_topic_id(self) -> tuple[int, uuid.UUID]:
        try:
            text = self.path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise CorruptCheckpointError(
                f"partition metadata file {self.path} does not exist"
            ) from None
        except UnicodeDecodeError:
            raise CorruptCheckpointError(
                f"partition metadata file {self.path} is not UTF-8"
            ) from None
        lines = read_lines(text)
        version_text = self._value(lines, 0, "version")
        try:
            version = parse_java_int(version_text)
        except ValueError:
            raise self._malformed(lines[0]) from None
        if version < self.VERSION:
            raise CorruptCheckpointError(
                f"Unrecognized version of partition metadata file ({self.path}): {version}"
            )
        topic_text = self._value(lines, 1, "topic_id")
        try:
            topic_id = topic_id_from_str(topic_text)
        except ValueError as exc:
            raise CorruptCheckpointError(f"partition metadata file ({self.path}): {exc}") from None
        if topic_id == ZERO_UUID:
            raise CorruptCheckpointError(
                f"Invalid topic ID in partition metadata file ({self.path})"
            )
        return version, topic_id

    def read(self) -> uuid.UUID:
        """The topic id stored in the file."""
        return self.read_version_and_topic_id()[1]
