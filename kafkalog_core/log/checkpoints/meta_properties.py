"""`meta.properties` of a log dir and the java.util.Properties text it is written in (§9).

`parse_properties` / `format_properties` read and write Properties.load/store text (escapes,
continuations, the `#<date>` header); `MetaProperties` is the file's version 0 (ZooKeeper,
broker.id) or version 1 (KRaft, node.id) content.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kafkalog_core.errors import CorruptCheckpointError
from kafkalog_core.log.checkpoints.checkpoint_file import (
    JAVA_LINE_BREAK,
    atomic_write,
    parse_java_int,
)
from kafkalog_core.log.checkpoints.topic_ids import topic_id_from_str, topic_id_to_str


def _java_date(epoch_seconds: float | None = None) -> str:
    """java.util.Date.toString() in UTC, e.g. `Fri May 24 22:16:18 UTC 2019`."""
    t = time.gmtime(epoch_seconds)
    return time.strftime("%a %b %d %H:%M:%S UTC %Y", t)


_PROPERTY_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[str]:
    """Java Properties.load's logical lines: comments/blank lines dropped, `\\` continuations joined."""
    out: list[str] = []
    pending: str | None = None
    for raw in JAVA_LINE_BREAK.split(text):
        line = raw.lstrip(" \t\f") if pending is not None else raw
        if pending is None:
            stripped = line.lstrip(" \t\f")
            if not stripped or stripped[0] in "#!":
                continue
            line = stripped
        trailing = len(line) - len(line.rstrip("\\"))
        continued = trailing % 2 == 1
        body = line[:-1] if continued else line
        pending = body if pending is None else pending + body
        if not continued:
            out.append(pending)
            pending = None
    if pending is not None:
        out.append(pending)
    return out


def _unescape(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 6 <= len(text):
                try:
                    out.append(chr(int(text[i + 2 : i + 6], 16)))
                except ValueError:
                    raise ValueError(f"Malformed \\uxxxx encoding in {text!r}") from None
                i += 6
                continue
            out.append(_PROPERTY_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """A java.util.Properties reader (key, separator `=`/`:`/whitespace, escapes)."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        i, key_end = 0, None
        while i < len(line):
            ch = line[i]
            if ch == "\\":
                i += 2
                continue
            if ch in "=: \t\f":
                key_end = i
                break
            i += 1
        if key_end is None:
            props[_unescape(line)] = ""
            continue
        key = line[:key_end]
        rest = line[key_end:].lstrip(" \t\f")
        if rest[:1] in ("=", ":") and line[key_end] in " \t\f":
            rest = rest[1:].lstrip(" \t\f")
        elif line[key_end] in "=:":
            rest = line[key_end + 1 :].lstrip(" \t\f")
        props[_unescape(key)] = _unescape(rest)
    return props


def _escape_property(text: str, is_key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch == " " and (i == 0 or is_key):
            out.append("\\ ")
        elif ch in "\\=:#!":
            out.append("\\" + ch)
        elif ch in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[ch])
        else:
            out.append(ch)
    return "".join(out)


def format_properties(props: Mapping[str, str], *, date: str | None = None) -> str:
    """Properties.store(writer, ""): `#`, `#<date>`, then `key=value` lines."""
    lines = ["#", "#" + (date if date is not None else _java_date())]
    lines.extend(
        f"{_escape_property(k, True)}={_escape_property(v, False)}" for k, v in props.items()
    )
    return "".join(line + "\n" for line in lines)


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
            text = p.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptCheckpointError(f"{p} is not UTF-8") from None
        try:
            props = parse_properties(text)
        except ValueError as exc:
            raise CorruptCheckpointError(f"{p}: {exc}") from None
        return cls.from_properties(props, str(p))

    def to_bytes(self, *, date: str | None = None) -> bytes:
        return format_properties(self.to_properties(), date=date).encode("utf-8")

    def write(
        self, path: str | os.PathLike[str], *, date: str | None = None, sync: bool = True
    ) -> None:
        atomic_write(path, self.to_bytes(date=date), sync=sync)
