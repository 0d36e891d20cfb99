"""`meta.properties` of a log dir (§9.5): version 0 (ZooKeeper, broker.id) or 1 (KRaft, node.id).

The file is java.util.Properties text, read and written by `kafkalog_core.properties` (the
reader topic configs use too); `parse_properties` / `format_properties` stay importable here.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kafkalog_core.errors import CorruptCheckpointError
from kafkalog_core.log.checkpoints.checkpoint_file import atomic_write, parse_java_int
from kafkalog_core.log.checkpoints.topic_ids import topic_id_from_str, topic_id_to_str
from kafkalog_core.properties import format_properties, parse_properties, read_properties

__all__ = ["MetaProperties", "format_properties", "parse_properties"]


@dataclass(frozen=True)
class MetaProperties:
    """`meta.properties` of a log dir: version 0 (ZooKeeper, broker.id) or 1 (KRaft, node.id)."""

    version: int = 1
    cluster_id: str | None = None
    node_id: int | None = None
    directory_id: uuid.UUID | None = None
    other: dict[str, str] = field(default_factory=dict)  # keys we do not interpret, kept as-is

    def __post_init__(self) -> None:
        if self.version not in (0, 1):
            raise CorruptCheckpointError(f"Unknown meta.properties version number {self.version}")
        if self.version == 1:
            if self.cluster_id is None:
                raise CorruptCheckpointError("cluster.id was not found in meta.properties v1")
            if self.node_id is None:
                raise CorruptCheckpointError("node.id was not found in meta.properties v1")

    def to_properties(self) -> dict[str, str]:
        props = {"version": str(self.version)}
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        if self.node_id is not None:
            props["broker.id" if self.version == 0 else "node.id"] = str(self.node_id)
        if self.directory_id is not None:
            props["directory.id"] = topic_id_to_str(self.directory_id)
        props.update(self.other)
        return props

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], source: str = "meta.properties"
    ) -> MetaProperties:
        rest = dict(props)
        try:
            version = parse_java_int(rest.pop("version", "0"))
            id_key = "broker.id" if version == 0 else "node.id"
            node_text = rest.pop(id_key, None)
            node_id = parse_java_int(node_text) if node_text is not None else None
            dir_text = rest.pop("directory.id", None)
            directory_id = topic_id_from_str(dir_text) if dir_text is not None else None
        except ValueError as exc:
            raise CorruptCheckpointError(f"{source}: {exc}") from None
        cluster_id = rest.pop("cluster.id", None)
        try:
            return cls(version, cluster_id, node_id, directory_id, rest)
        except CorruptCheckpointError as exc:
            raise CorruptCheckpointError(f"{source}: {exc}") from None

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> MetaProperties:
        p = Path(path)
        try:
            props = read_properties(p)
        except ValueError as exc:  # not UTF-8, or a malformed \uXXXX
            raise CorruptCheckpointError(f"{p}: {exc}") from None
        return cls.from_properties(props, str(p))

    def to_bytes(self, *, date: str | None = None) -> bytes:
        return format_properties(self.to_properties(), date=date).encode("utf-8")

    def write(
        self, path: str | os.PathLike[str], *, date: str | None = None, sync: bool = True
    ) -> None:
        atomic_write(path, self.to_bytes(date=date), sync=sync)
