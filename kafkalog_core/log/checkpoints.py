"""Checkpoint and metadata files of a log dir and a partition dir (KAFKA_LOG_FACTS.md §9, §6).

- `atomic_write`: Kafka's `.tmp` + fsync + atomic rename + directory fsync, used by every writer here.
- `CheckpointFile`: the generic `<version>\\n<count>\\n<entry>\\n...` text file with Kafka's read
  rules and error messages; `OffsetCheckpointFile` (recovery point, log start offset,
  replication, cleaner) and `LeaderEpochCheckpointFile` are instances of it.
- `LeaderEpochCache`: the in-memory epoch -> start offset map with Kafka's assign/truncate rules.
- `PartitionMetadataFile` (`partition.metadata`), `MetaProperties` (`meta.properties`),
  `CleanShutdownFile` (`.kafka_cleanshutdown`).

Every parse failure is a `CorruptCheckpointError` naming the file and the offending line.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

from kafkalog_core.errors import CorruptCheckpointError

T = TypeVar("T")

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_JAVA_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # BufferedReader.readLine
_JAVA_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")  # java.util.regex \s
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")


# ---- small Java-compatible helpers ---------------------------------------------------------------
def atomic_write(path: str | os.PathLike[str], data: bytes, *, sync: bool = True) -> None:
    """Write `data` to `<path>.tmp`, fsync, rename over `path`, fsync the directory.

    A reader therefore sees either the old or the new file, never a torn one (Kafka's
    CheckpointFile / PartitionMetadataFile / meta.properties write procedure).
    """
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, target)
    if sync:
        fsync_dir(target.parent)


def fsync_dir(directory: Path) -> None:
    """Make renames/creations inside `directory` durable (no-op where it cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # e.g. platforms that cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _read_lines(data: str) -> list[str]:
    """Lines as Java's BufferedReader.readLine returns them (no empty line after a final break)."""
    if not data:
        return []
    lines = _JAVA_LINE_BREAK.split(data)
    if data.endswith(("\n", "\r")):
        lines.pop()
    return lines


def java_split(pattern: re.Pattern[str], line: str, limit: int = 0) -> list[str]:
    """String.split(regex[, limit]): a leading empty part is kept, trailing empties dropped (limit 0)."""
    if limit > 0:
        parts = pattern.split(line, maxsplit=limit - 1)
    else:
        parts = pattern.split(line)
        if line:  # "".split(x) is [""] in Java
            while parts and parts[-1] == "":
                parts.pop()
    return parts


def parse_java_int(text: str, bits: int = 32) -> int:
    """Integer.parseInt / Long.parseLong: optional sign, digits only, in range; else ValueError."""
    if not _JAVA_INTEGER.fullmatch(text):
        raise ValueError(f"For input string: {text!r}")
    value = int(text)
    low, high = (INT32_MIN, INT32_MAX) if bits == 32 else (INT64_MIN, INT64_MAX)
    if value < low or value > high:
        raise ValueError(f"For input string: {text!r} (out of range)")
    return value


# ---- generic checkpoint file -------------------------------------------------------------------
class CheckpointFile(Generic[T]):
    """`<version>\\n<count>\\n<entry>\\n...` with Kafka's CheckpointFile read rules.

    `parse_entry` returns None for a line that is not an entry (-> "Malformed line"); it may
    also raise ValueError (a bad number), reported the same way.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        version: int,
        format_entry: Callable[[T], str],
        parse_entry: Callable[[str], T | None],
    ) -> None:
        self.path = Path(path)
        self.version = version
        self._format_entry = format_entry
        self._parse_entry = parse_entry

    def exists(self) -> bool:
        return self.path.exists()

    def ensure_exists(self) -> None:
        """Create an empty file if there is none: Kafka's CheckpointFile constructor does this."""
        if not self.path.exists():
            self.path.touch()

    def to_bytes(self, entries: Iterable[T]) -> bytes:
        items = list(entries)
        lines = [str(self.version), str(len(items))]
        lines.extend(self._format_entry(item) for item in items)
        return "".join(line + "\n" for line in lines).encode("utf-8")

    def write(self, entries: Iterable[T], *, sync: bool = True) -> None:
        atomic_write(self.path, self.to_bytes(entries), sync=sync)

    def read(self) -> list[T]:
        """Parse the file; a missing or empty file is an empty list."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        return self.parse(data)

    def _malformed(self, line: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"Malformed line in checkpoint file [{self.path}]: {line}")

    def parse(self, data: bytes) -> list[T]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptCheckpointError(
                f"checkpoint file [{self.path}] is not UTF-8: {exc}"
            ) from None
        lines = _read_lines(text)
        if not lines:
            return []
        try:
            read_version = parse_java_int(lines[0])
        except ValueError:
            raise self._malformed(lines[0]) from None
        if read_version != self.version:
            raise CorruptCheckpointError(
                f"Unrecognised version:{read_version}, expected version: {self.version} in "
                f"checkpoint file at: {self.path}"
            )
        if len(lines) < 2:
            return []
        try:
            expected = parse_java_int(lines[1])
        except ValueError:
            raise self._malformed(lines[1]) from None
        entries: list[T] = []
        for line in lines[2:]:
            try:
                entry = self._parse_entry(line)
            except ValueError:
                entry = None
            if entry is None:
                raise self._malformed(line)
            entries.append(entry)
        if len(entries) != expected:
            raise CorruptCheckpointError(
                f"Expected [{expected}] entries in checkpoint file [{self.path}], but found "
                f"only [{len(entries)}]"
            )
        return entries


# ---- offset checkpoints ------------------------------------------------------------------------
TopicPartition = tuple[str, int]


def _format_offset_entry(entry: tuple[TopicPartition, int]) -> str:
    (topic, partition), offset = entry
    return f"{topic} {partition} {offset}"


def _parse_offset_entry(line: str) -> tuple[TopicPartition, int] | None:
    parts = java_split(_JAVA_WHITESPACE, line)
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


# ---- leader epochs -----------------------------------------------------------------------------
class EpochEntry(NamedTuple):
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


def _parse_epoch_entry(line: str) -> EpochEntry | None:
    parts = java_split(_JAVA_WHITESPACE, line)
    if len(parts) != 2:
        return None
    return EpochEntry(parse_java_int(parts[0]), parse_java_int(parts[1], 64))


class LeaderEpochCheckpointFile:
    """`leader-epoch-checkpoint`: version 0, `<epoch> <startOffset>` lines in ascending epoch order."""

    VERSION = 0

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file: CheckpointFile[EpochEntry] = CheckpointFile(
            path, self.VERSION, lambda e: f"{e.epoch} {e.start_offset}", _parse_epoch_entry
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def exists(self) -> bool:
        return self._file.exists()

    def ensure_exists(self) -> None:
        self._file.ensure_exists()

    def read(self) -> list[EpochEntry]:
        return self._file.read()

    def to_bytes(self, entries: Iterable[EpochEntry]) -> bytes:
        return self._file.to_bytes(entries)

    def write(self, entries: Iterable[EpochEntry], *, sync: bool = True) -> None:
        self._file.write(entries, sync=sync)


class LeaderEpochCache:
    """Epoch -> start offset, with LeaderEpochFileCache's assign and truncation rules.

    Changes stay in memory until `write()` (Kafka writes on every change; we batch to keep
    recovery and Spark appends cheap).
    """

    def __init__(
        self,
        checkpoint: LeaderEpochCheckpointFile | str | os.PathLike[str] | None = None,
        entries: Iterable[EpochEntry] | None = None,
    ) -> None:
        if checkpoint is not None and not isinstance(checkpoint, LeaderEpochCheckpointFile):
            checkpoint = LeaderEpochCheckpointFile(checkpoint)
        self.checkpoint = checkpoint
        if entries is None:
            entries = checkpoint.read() if checkpoint is not None else []
        self._entries: list[EpochEntry] = []
        for entry in entries:
            self.assign(*entry)

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; True if the cache changed.

        Ignored when it repeats the latest epoch at the same or a later offset. Otherwise every
        entry from the end whose epoch >= epoch or start >= start_offset is dropped first.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(
                f"Received invalid partition leader epoch entry EpochEntry(epoch={epoch}, "
                f"startOffset={start_offset})"
            )
        latest = self.latest_entry
        if latest is not None and latest.epoch == epoch and start_offset >= latest.start_offset:
            return False
        while self._entries and (
            self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset
        ):
            self._entries.pop()
        self._entries.append(EpochEntry(epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        """Drop entries starting at or after `end_offset` (the LEO after a truncation)."""
        removed: list[EpochEntry] = []
        latest = self.latest_entry
        if end_offset >= 0 and latest is not None and latest.start_offset >= end_offset:
            while self._entries and self._entries[-1].start_offset >= end_offset:
                removed.append(self._entries.pop())
        return removed

    def truncate_from_start(self, start_offset: int) -> list[EpochEntry]:
        """Drop entries at or before the new log start offset, keeping the last of them's epoch
        re-based to start at `start_offset`."""
        removed: list[EpochEntry] = []
        while self._entries and self._entries[0].start_offset <= start_offset:
            removed.append(self._entries.pop(0))
        if removed:
            self._entries.insert(0, EpochEntry(removed[-1].epoch, start_offset))
        return removed

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds `offset` (largest start offset <= offset), if any."""
        found = None
        for entry in self._entries:
            if entry.start_offset <= offset:
                found = entry.epoch
            else:
                break
        return found

    def clear(self) -> None:
        self._entries.clear()

    def write(self, *, sync: bool = True) -> None:
        if self.checkpoint is None:
            raise ValueError("LeaderEpochCache has no checkpoint file to write")
        self.checkpoint.write(self._entries, sync=sync)


# ---- topic ids and partition.metadata ------------------------------------------------------------
ZERO_UUID = uuid.UUID(int=0)
METADATA_TOPIC_ID = uuid.UUID(int=1)
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: the 16 bytes in base64url without padding (22 chars)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def topic_id_from_str(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString; ValueError unless it decodes to exactly 16 bytes."""
    if len(text) > 24:
        raise ValueError(
            f"Input string with prefix `{text[:24]}` is too long to be decoded as a base64 UUID"
        )
    if not _BASE64URL.fullmatch(text):
        raise ValueError(f"Input string `{text}` is not base64url")
    try:
        raw = base64.urlsafe_b64decode(text.rstrip("=") + "=" * (-len(text.rstrip("=")) % 4))
    except ValueError:
        raise ValueError(f"Input string `{text}` is not valid base64url") from None
    if len(raw) != 16:
        raise ValueError(
            f"Input string `{text}` decoded as {len(raw)} bytes, which is not equal to the "
            f"expected 16 bytes of a base64-encoded UUID"
        )
    return uuid.UUID(bytes=raw)


def new_topic_id() -> uuid.UUID:
    """A random topic id Kafka would accept: not zero, not the metadata topic id, no leading '-'."""
    while True:
        candidate = uuid.uuid4()
        if is_usable_topic_id(candidate):
            return candidate


# The fixed namespace of name-based topic ids: uuid5(NAMESPACE_URL, "kafkalog:topic-id").
# Never change it: every log dir written without an explicit topic id depends on it.
TOPIC_ID_NAMESPACE = uuid.UUID("a0e7f2de-f507-501a-90c6-bab9890cc26e")


def is_usable_topic_id(topic_id: uuid.UUID) -> bool:
    """Kafka accepts it: not zero, not the metadata topic's id, no leading '-' in its string."""
    return topic_id not in (ZERO_UUID, METADATA_TOPIC_ID) and not topic_id_to_str(
        topic_id
    ).startswith("-")


def topic_id_for_name(topic: str) -> uuid.UUID:
    """The deterministic topic id of a topic name: uuid5(TOPIC_ID_NAMESPACE, topic).

    Why: two runs of the same input must give byte-identical partition.metadata. In the
    unlikely case the id is not usable (see `is_usable_topic_id`), `topic + "\\0" + k` is hashed
    for k = 1, 2, ... until it is.
    """
    candidate = uuid.uuid5(TOPIC_ID_NAMESPACE, topic)
    k = 0
    while not is_usable_topic_id(candidate):
        k += 1
        candidate = uuid.uuid5(TOPIC_ID_NAMESPACE, f"{topic}\0{k}")
    return candidate


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
        lines = _read_lines(text)
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


# ---- meta.properties -----------------------------------------------------------------------------
def _java_date(epoch_seconds: float | None = None) -> str:
    """java.util.Date.toString() in UTC, e.g. `Fri May 24 22:16:18 UTC 2019`."""
    t = time.gmtime(epoch_seconds)
    return time.strftime("%a %b %d %H:%M:%S UTC %Y", t)


_PROPERTY_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[str]:
    """Java Properties.load's logical lines: comments/blank lines dropped, `\\` continuations joined."""
    out: list[str] = []
    pending: str | None = None
    for raw in _JAVA_LINE_BREAK.split(text):
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


# ---- clean shutdown marker -----------------------------------------------------------------------
class CleanShutdownFile:
    """`<logDir>/.kafka_cleanshutdown`: its existence means the last shutdown was clean.

    3.7+ writes `{"version":0,"brokerEpoch":N}`; <= 3.6 wrote an empty file. `read()` returns
    the broker epoch or -1 when there is none (missing, empty or unparsable file), like Kafka.
    """

    VERSION = 0

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self.path = Path(log_dir) / CLEAN_SHUTDOWN

    @property
    def exists(self) -> bool:
        return self.path.exists()

    def write(self, broker_epoch: int = -1, *, sync: bool = True) -> None:
        content = json.dumps(
            {"version": self.VERSION, "brokerEpoch": int(broker_epoch)}, separators=(",", ":")
        )
        atomic_write(self.path, content.encode("utf-8"), sync=sync)

    def write_empty(self, *, sync: bool = True) -> None:
        """The <= 3.6 form of the marker."""
        atomic_write(self.path, b"", sync=sync)

    def read(self) -> int:
        try:
            content = json.loads(self.path.read_bytes().decode("utf-8"))
            epoch = content["brokerEpoch"]
            return int(epoch) if isinstance(epoch, int) else -1
        except (OSError, ValueError, KeyError, TypeError):
            return -1

    def delete(self) -> bool:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True
