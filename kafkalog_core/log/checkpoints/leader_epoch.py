"""The leader-epoch checkpoint of a partition dir and its in-memory cache (§9).

`LeaderEpochCheckpointFile` is `leader-epoch-checkpoint` (version 0, `<epoch> <startOffset>`
lines); `LeaderEpochCache` is LeaderEpochFileCache's epoch -> start offset map with its assign
and truncation rules, written back on demand.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import NamedTuple

from kafkalog_core.log.checkpoints.checkpoint_file import CheckpointFile, parse_java_int


class EpochEntry(NamedTuple):
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


class LeaderEpochCheckpointFile(CheckpointFile[EpochEntry, list[EpochEntry]]):
    """`leader-epoch-checkpoint`: version 0, `<epoch> <startOffset>` lines in ascending epoch order."""

    VERSION = 0

    def format_entry(self, entry: EpochEntry) -> str:
        return f"{entry.epoch} {entry.start_offset}"

    def parse_entry(self, line: str) -> EpochEntry | None:
        parts = self.fields(line, 2)
        if parts is None:
            return None
        return EpochEntry(parse_java_int(parts[0]), parse_java_int(parts[1], 64))


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
