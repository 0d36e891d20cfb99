"""What every checkpoint file of a log dir shares (KAFKA_LOG_FACTS.md §9).

- `atomic_write`: Kafka's `.tmp` + fsync + atomic rename + directory fsync, used by every writer
  of a checkpoint or metadata file (and by producer-state snapshots).
- Java's text rules (`read_lines`, `java_split`, `parse_java_int`), so a file a broker reads
  is read the same way here, with the same refusals.
- `CheckpointFile`: the generic `<version>\\n<count>\\n<entry>\\n...` text file with Kafka's
  read rules and error messages; the offset and leader-epoch checkpoints subclass it and say
  only how their entries look.

Every parse failure is a `CorruptCheckpointError` naming the file and the offending line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

from kafkalog_core.errors import CorruptCheckpointError
from kafkalog_core.properties import JAVA_LINE_BREAK  # BufferedReader.readLine's line breaks

E = TypeVar("E")  # one entry (line) of a checkpoint file
C = TypeVar("C")  # what `read` returns and `write` takes: the entries, or a map of them

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

JAVA_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")  # java.util.regex \s
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


def read_lines(data: str) -> list[str]:
    """Lines as Java's BufferedReader.readLine returns them (no empty line after a final break)."""
    if not data:
        return []
    lines = JAVA_LINE_BREAK.split(data)
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
class CheckpointFile(Generic[E, C]):
    """`<version>\\n<count>\\n<entry>\\n...` with Kafka's CheckpointFile read rules.

    Every checkpoint kind has this one format; a subclass says only how its entries look:
    `VERSION`, `format_entry`, `parse_entry` (None for a line that is not an entry, ->
    "Malformed line"; a ValueError from a bad number is reported the same way) and, when callers
    want the entries as something other than a list (the offset checkpoints' map), the
    `entries_of` / `contents_of` pair that converts what `write` takes and `read` returns (C).
    """

    VERSION: ClassVar[int] = 0

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    # ---- what a subclass says about its entries
    def format_entry(self, entry: E) -> str:
        raise NotImplementedError

    def parse_entry(self, line: str) -> E | None:
        raise NotImplementedError

    def entries_of(self, contents: C) -> Iterable[E]:
        """The entries to write for `contents`, in file order (default: `contents` as given)."""
        return contents  # type: ignore[return-value]

    def contents_of(self, entries: list[E]) -> C:
        """What `read` returns for the entries of a file (default: the list)."""
        return entries  # type: ignore[return-value]

    @staticmethod
    def fields(line: str, count: int) -> list[str] | None:
        """A line split as Kafka splits entries (`\\s+`), or None unless it has `count` parts."""
        parts = java_split(JAVA_WHITESPACE, line)
        return parts if len(parts) == count else None

    # ---- the file
    @property
    def version(self) -> int:
        return self.VERSION

    def exists(self) -> bool:
        return self.path.exists()

    def ensure_exists(self) -> None:
        """Create an empty file if there is none: Kafka's CheckpointFile constructor does this."""
        if not self.path.exists():
            self.path.touch()

    def to_bytes(self, contents: C) -> bytes:
        items = list(self.entries_of(contents))
        lines = [str(self.VERSION), str(len(items))]
        lines.extend(self.format_entry(item) for item in items)
        return "".join(line + "\n" for line in lines).encode("utf-8")

    def write(self, contents: C, *, sync: bool = True) -> None:
        atomic_write(self.path, self.to_bytes(contents), sync=sync)

    def read(self) -> C:
        """Parse the file; a missing or empty file has no entries."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        return self.contents_of(self.parse(data))

    def _malformed(self, line: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"Malformed line in checkpoint file [{self.path}]: {line}")

    def parse(self, data: bytes) -> list[E]:
        """The entries of a file's bytes, in file order, with Kafka's refusals."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptCheckpointError(
                f"checkpoint file [{self.path}] is not UTF-8: {exc}"
            ) from None
        lines = read_lines(text)
        if not lines:
            return []
        try:
            read_version = parse_java_int(lines[0])
        except ValueError:
            raise self._malformed(lines[0]) from None
        if read_version != self.VERSION:
            raise CorruptCheckpointError(
                f"Unrecognised version:{read_version}, expected version: {self.VERSION} in "
                f"checkpoint file at: {self.path}"
            )
        if len(lines) < 2:
            return []
        try:
            expected = parse_java_int(lines[1])
        except ValueError:
            raise self._malformed(lines[1]) from None
        entries: list[E] = []
        for line in lines[2:]:
            try:
                entry = self.parse_entry(line)
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
