"""What a log dir root holds before a run: per-partition log end, last segment, topic id."""

from __future__ import annotations

import mmap
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jobs.ingestion.run.meta import IngestError
from jobs.ingestion.staging.task_staging import SEGMENT_FILE, segment_file_name
from kafkalog_core.errors import CorruptRecordError, LogDirError
from kafkalog_core.log.checkpoints import (
    PartitionMetadataFile,
    topic_id_to_str,
)
from kafkalog_core.log.names import parse_partition_dir_name
from kafkalog_core.record.batch import iter_batch_headers


# --- existing state ----------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionState:
    """What is already published for one partition (what a run must continue from)."""

    topic: str
    partition: int
    log_end_offset: int
    segment_bases: tuple[int, ...] = ()
    last_segment_size: int = 0
    topic_id: str | None = None

    @property
    def last_segment_base(self) -> int | None:
        return self.segment_bases[-1] if self.segment_bases else None

    def segment_to_continue(self, segment_bytes: int, incoming_bytes: int = 1) -> int | None:
        """Base offset of the last segment if more bytes still fit into it (else roll a new one)."""
        if self.last_segment_base is None:
            return None
        if self.last_segment_size + incoming_bytes > segment_bytes:
            return None
        return self.last_segment_base


StateMap = Mapping[tuple[str, int], PartitionState]


def _parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a live partition dir; None for anything a broker would not load
    as one (no `<topic>-<partition>` shape, or a `-delete`/`-future`/`-stray` dir)."""
    try:
        parsed = parse_partition_dir_name(name)
    except LogDirError:
        return None
    return None if parsed.suffix else (parsed.topic, parsed.partition)


def read_partition_state(partition_dir: str | os.PathLike[str]) -> PartitionState:
    """Segments of a partition dir and its log end offset (header-only scan of the last segment)."""
    pdir = Path(partition_dir)
    parsed = _parse_partition_dir(pdir.name)
    if parsed is None:
        raise IngestError(f"{pdir} is not a <topic>-<partition> directory")
    leftovers = sorted(p.name for p in pdir.iterdir() if p.suffix in (".swap", ".cleaned"))
    if leftovers:
        raise IngestError(
            f"{pdir} holds unfinished swap files ({leftovers[0]}); recover the publish first"
        )
    bases = sorted(
        int(p.name[:20])
        for p in pdir.iterdir()
        if SEGMENT_FILE.match(p.name) and p.suffix == ".log"
    )
    leo, size = 0, 0
    if bases:
        last = pdir / segment_file_name(bases[-1], "log")
        size = last.stat().st_size
        leo = bases[-1]
        if size:
            with open(last, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                try:
                    for header in iter_batch_headers(buf):
                        leo = header.last_offset + 1
                except CorruptRecordError as e:
                    raise IngestError(f"{last}: cannot find the log end offset: {e}") from None
    return PartitionState(parsed[0], parsed[1], leo, tuple(bases), size, read_topic_id(pdir))


def scan_existing_state(
    output_root: str | os.PathLike[str],
) -> dict[tuple[str, int], PartitionState]:
    """Every partition dir under the root (dirs Kafka would not load as partitions are skipped)."""
    root = Path(output_root)
    if not root.is_dir():
        return {}
    state = {}
    for pdir in sorted(root.iterdir()):
        if pdir.is_dir() and _parse_partition_dir(pdir.name) is not None:
            s = read_partition_state(pdir)
            state[(s.topic, s.partition)] = s
    return state


def read_topic_id(pdir: Path) -> str | None:
    path = PartitionMetadataFile(pdir / "partition.metadata")
    if not path.exists():
        return None
    return topic_id_to_str(path.read())
