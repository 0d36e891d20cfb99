"""Commit protocol of an ingest run: task staging, manifests, planning and an atomic publish.

Who calls what (the driver holds a `RunLock` for all of it):

1. driver: `recover_interrupted_publish(root)`, `cleanup_stale_staging(root, run_id)`,
   `scan_existing_state(root)`.
2. task attempt: `task_staging_dir(...)` -> write segment files there (for a continued last
   segment first `copy_segment_for_continuation(...)`) -> `finalize_task_staging(...)` returns a
   `TaskManifest`; ship `manifest.to_json()` back to the driver.
3. driver: `plan_publish(manifests, state, ...)` -> `publish(plan)`.

Where the staging lives. A Kafka broker treats *every* subdirectory of a log dir as a partition
dir and fails on a name it cannot parse as `<topic>-<partition>` (§2, §6); the only name it skips,
`remote-log-index-cache`, belongs to tiered storage, which manages and deletes its contents. So
nothing of ours may live inside the output root. The meta area is a hidden *sibling*
`<parent>/.<rootname>.kafkalog/` (staging, publish journal, run lock, ingest history): the root
stays a pure Kafka log dir, and the sibling is on the same file system (checked), so publishing
is a rename, never a copy.

Publish and crash safety. Inside an existing partition dir we use Kafka's own swap protocol
(§8.8): staged files are moved in as `*.cleaned`, renamed to `*.swap` in descending offset order,
then renamed to their final names (`.log` first per segment). After a crash a broker's loader
(§6 passes 1-3) rolls back while any `.cleaned` remains and completes the swap otherwise, so it
only ever sees the old or the new complete segments; a continued (copy-on-write) last segment is
replaced by a same-named swap. A new partition is assembled complete in the meta area and renamed
into the root as one directory. Partition metadata, then root checkpoints, then the ingest
history record come last. A journal (the serialized plan) is written before the first rename;
`recover_interrupted_publish` replays it: every step is idempotent, so it completes the publish,
or rolls it back if another process already undid it.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import re
import shutil
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crc32c import crc32c

from jobs.ingestion.meta import IngestError, meta_root
from kafkalog_core.errors import CorruptRecordError, LogDirError
from kafkalog_core.log.checkpoints import (
    LeaderEpochCache,
    LeaderEpochCheckpointFile,
    MetaProperties,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    atomic_write,
    fsync_dir,
    topic_id_from_str,
    topic_id_to_str,
)
from kafkalog_core.log.names import parse_partition_dir_name, partition_dir_name
from kafkalog_core.record.batch import iter_batch_headers


class ManifestError(IngestError):
    """A task manifest is malformed or its staged files do not match it."""


class PlanError(IngestError):
    """The manifests of a run do not form contiguous ranges from each partition's log end."""


class PublishError(IngestError):
    """Publishing (or recovering a publish) found the file system in an unexpected state."""


# --- names -------------------------------------------------------------------------------------
JOURNAL_NAME = "publish-journal.json"
MANIFEST_SUFFIX = ".manifest.json"
ASSEMBLY_DIR = "_publish"  # per run: new partition dirs assembled before the directory rename
SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex|snapshot)$")
# Order in which the files of one segment become final: the .log first, so that a crash never
# leaves a final index beside a pending .log.swap (Kafka's pass 2 would delete that index).
_EXT_ORDER = {"log": 0, "index": 1, "timeindex": 2, "txnindex": 3, "snapshot": 4}
_SAFE_COMPONENT = re.compile(r"^[A-Za-z0-9._=+-]{1,200}$")
CHECKPOINT_FILES = ("recovery-point-offset-checkpoint", "replication-offset-checkpoint")


def staging_root(output_root: str | os.PathLike[str], run_id: str) -> Path:
    """All staging of one run; removed after its publish (or by the next run's cleanup)."""
    return meta_root(output_root) / "staging" / _component(run_id, "run id")


def task_staging_dir(
    output_root: str | os.PathLike[str], run_id: str, task_key: str, attempt_id: str | int
) -> Path:
    """A fresh directory unique to one task attempt (created; emptied if a stale copy exists).

    Retried and speculative attempts write side by side; the driver picks one winner per range.
    """
    root = Path(output_root)
    path = staging_root(root, run_id) / _component(task_key, "task key") / f"attempt-{attempt_id}"
    _component(str(attempt_id), "attempt id")
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    _check_same_filesystem(root, path)
    return path


def journal_path(output_root: str | os.PathLike[str]) -> Path:
    return meta_root(output_root) / JOURNAL_NAME


def segment_file_name(base_offset: int, ext: str) -> str:
    return f"{base_offset:020d}.{ext}"


def _component(value: str, what: str) -> str:
    if not _SAFE_COMPONENT.match(value) or value in (".", ".."):
        raise IngestError(f"{what} {value!r} is not usable as a directory name")
    return value


def _check_same_filesystem(root: Path, other: Path) -> None:
    """Renames from the meta area into the root must not cross a mount point."""
    probe = root if root.exists() else root.parent
    if probe.exists() and other.exists() and os.stat(probe).st_dev != os.stat(other).st_dev:
        raise IngestError(
            f"staging {other} is on another file system than output root {root}; "
            "publishing needs an atomic rename (the output root must not be a mount point)"
        )


# --- durability helpers ------------------------------------------------------------------------
def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_CHUNK = 1 << 20


def _crc32c_stream(f) -> str:
    """CRC-32C (Castagnoli, hardware-accelerated) of an open binary file, as 8 hex digits."""
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    crc = 0
    while n := f.readinto(buf):
        crc = crc32c(view[:n], crc)
    return f"{crc:08x}"


def crc32c_file(path: Path) -> str:
    """CRC-32C of a file's bytes, streamed in 1 MiB chunks (8 hex digits)."""
    with open(path, "rb") as f:
        return _crc32c_stream(f)


def _sync_and_checksum(path: Path) -> str:
    """fsync a staged file and checksum it through one open (the bytes are in the page cache)."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        return _crc32c_stream(f)


# --- manifests ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class StagedFile:
    """One staged file: its final name in the partition dir, size and CRC-32C (8 hex digits).

    The checksum tells a staged file that was damaged or swapped, and, during recovery, our file
    at its final name from the one it replaces; it is not a defence against tampering.
    """

    name: str
    size: int
    crc32c: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "crc32c": self.crc32c}

    def matches(self, path: Path) -> bool:
        """Whether the file at `path` has this checksum (size is the caller's first check)."""
        return crc32c_file(path) == self.crc32c

    @property
    def base_offset(self) -> int:
        return int(self.name.split(".", 1)[0])

    @property
    def ext(self) -> str:
        return self.name.split(".", 1)[1]


@dataclass(frozen=True)
class TaskManifest:
    """What one task attempt staged for one offset range of one partition.

    `next_offset` is exclusive. `replaces` is the base offset of the existing last segment this
    attempt continued copy-on-write (its staged files carry the same names), else None.
    """

    run_id: str
    task_key: str
    attempt_id: str
    topic: str
    partition: int
    range_index: int
    first_offset: int
    next_offset: int
    record_count: int
    staging_dir: str
    files: tuple[StagedFile, ...]
    replaces: int | None = None
    max_timestamp: int = -1
    leader_epoch: int = -1
    size_bytes: int = 0

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.topic, self.partition, self.range_index)

    @property
    def segment_bases(self) -> list[int]:
        return sorted({f.base_offset for f in self.files if f.ext == "log"})

    def describe(self) -> str:
        return (
            f"{self.topic}-{self.partition} range {self.range_index} "
            f"[{self.first_offset}, {self.next_offset}) attempt {self.attempt_id}"
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["files"] = [f.to_dict() for f in self.files]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskManifest:
        try:
            values = dict(data)
            values["files"] = tuple(StagedFile(**f) for f in values["files"])
            values["attempt_id"] = str(values["attempt_id"])
            manifest = cls(**values)
        except (KeyError, TypeError, ValueError) as e:
            raise ManifestError(f"malformed task manifest: {e}") from None
        _validate_manifest(manifest)
        return manifest

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> TaskManifest:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ManifestError(f"task manifest is not JSON: {e}") from None
        return cls.from_dict(data)


def _validate_manifest(m: TaskManifest) -> None:
    where = m.describe()
    if m.partition < 0 or m.range_index < 0 or m.first_offset < 0:
        raise ManifestError(f"{where}: negative partition, range index or offset")
    if m.next_offset < m.first_offset:
        raise ManifestError(f"{where}: next offset below first offset")
    if m.record_count < 0 or m.record_count > m.next_offset - m.first_offset:
        raise ManifestError(f"{where}: record count {m.record_count} does not fit the range")
    names = [f.name for f in m.files]
    if len(set(names)) != len(names):
        raise ManifestError(f"{where}: a staged file is listed twice")
    for f in m.files:
        if not SEGMENT_FILE.match(f.name):
            raise ManifestError(f"{where}: {f.name!r} is not a segment file name")
        if not re.fullmatch(r"[0-9a-f]{8}", f.crc32c):
            raise ManifestError(f"{where}: {f.name} has no valid CRC-32C ({f.crc32c!r})")
    if m.next_offset > m.first_offset and not m.segment_bases:
        raise ManifestError(f"{where}: non-empty range without a .log file")
    bases = m.segment_bases
    if m.replaces is not None and (not bases or bases[0] != m.replaces):
        raise ManifestError(
            f"{where}: continues segment {m.replaces} but stages no .log with that base offset"
        )
    if bases and m.replaces is None and bases[0] != m.first_offset:
        raise ManifestError(f"{where}: first segment base {bases[0]} is not the first offset")
    if bases and bases[-1] >= max(m.next_offset, m.first_offset + 1):
        raise ManifestError(f"{where}: segment {bases[-1]} starts at or after the range end")


def manifest_path(staging_dir: str | os.PathLike[str]) -> Path:
    path = Path(staging_dir)
    return path.with_name(path.name + MANIFEST_SUFFIX)


def write_manifest(manifest: TaskManifest) -> Path:
    """Persist the manifest beside its staging dir (tasks may also just return it)."""
    path = manifest_path(manifest.staging_dir)
    atomic_write(path, manifest.to_json().encode())
    return path


def read_manifest(path: str | os.PathLike[str]) -> TaskManifest:
    try:
        text = Path(path).read_bytes()
    except OSError as e:
        raise ManifestError(f"cannot read task manifest {path}: {e.strerror}") from None
    return TaskManifest.from_json(text)


def verify_manifest(manifest: TaskManifest, *, checksums: bool = True) -> None:
    """Check that every staged file exists with the recorded size (and CRC-32C)."""
    base = Path(manifest.staging_dir)
    for f in manifest.files:
        path = base / f.name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise ManifestError(f"{manifest.describe()}: staged file {path} is missing") from None
        if size != f.size:
            raise ManifestError(
                f"{manifest.describe()}: staged file {path} has {size} bytes, manifest says {f.size}"
            )
        if checksums and not f.matches(path):
            raise ManifestError(f"{manifest.describe()}: staged file {path} fails its CRC-32C")


def finalize_task_staging(
    staging_dir: str | os.PathLike[str],
    *,
    run_id: str,
    task_key: str,
    attempt_id: str | int,
    topic: str,
    partition: int,
    range_index: int,
    first_offset: int,
    next_offset: int,
    record_count: int,
    replaces: int | None = None,
    max_timestamp: int = -1,
    leader_epoch: int = -1,
    include_snapshots: bool = False,
    write: bool = True,
) -> TaskManifest:
    """Task side, after writing the segment files: fsync them and describe them in a manifest.

    This is where staged bytes become durable: each file is fsynced and checksummed (CRC-32C)
    exactly once, here, through one open; the publish only renames (and fsyncs directories).

    Only segment files (`<20 digits>.log/.index/.timeindex/.txnindex`) are published; anything
    else a writer left there (partition.metadata, checkpoints) is ignored. Producer snapshots
    are left out by default: a range's writer only saw part of the log, and Kafka rebuilds
    producer state itself when no snapshot exists (§6 step 12).
    """
    base = Path(staging_dir)
    files = []
    for path in sorted(base.iterdir()):
        if not path.is_file() or not SEGMENT_FILE.match(path.name):
            continue
        if path.suffix == ".snapshot" and not include_snapshots:
            continue
        checksum = _sync_and_checksum(path)
        files.append(StagedFile(path.name, path.stat().st_size, checksum))
    fsync_dir(base)
    manifest = TaskManifest(
        run_id=run_id,
        task_key=task_key,
        attempt_id=str(attempt_id),
        topic=topic,
        partition=partition,
        range_index=range_index,
        first_offset=first_offset,
        next_offset=next_offset,
        record_count=record_count,
        staging_dir=str(base.absolute()),
        files=tuple(files),
        replaces=replaces,
        max_timestamp=max_timestamp,
        leader_epoch=leader_epoch,
        size_bytes=sum(f.size for f in files),
    )
    _validate_manifest(manifest)
    if write:
        write_manifest(manifest)
    return manifest


def copy_segment_for_continuation(
    output_root: str | os.PathLike[str],
    topic: str,
    partition: int,
    base_offset: int,
    dest_dir: str | os.PathLike[str],
) -> list[Path]:
    """Copy (never link: the live file must not change) the last segment into a task's staging."""
    source = Path(output_root) / partition_dir_name(topic, partition)
    dest = Path(dest_dir)
    copied = []
    for ext in _EXT_ORDER:
        path = source / segment_file_name(base_offset, ext)
        if path.exists():
            shutil.copyfile(path, dest / path.name)
            copied.append(dest / path.name)
    if not copied or copied[0].suffix != ".log":
        raise IngestError(
            f"{source}: no segment {segment_file_name(base_offset, 'log')} to continue"
        )
    return copied


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
    return PartitionState(parsed[0], parsed[1], leo, tuple(bases), size, _read_topic_id(pdir))


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


# --- planning ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunInfo:
    """What the ingest history records about the run besides the published ranges."""

    source: str = ""
    source_version: str = ""
    started_at_ms: int = 0
    config_hash: str = ""
    description: str = ""
    timings_ms: Mapping[str, int] = field(default_factory=dict)
    # {topic: non-default topic configs}: the maintenance jobs' source of topic settings
    topic_configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionPlan:
    """The winning manifests of one partition, in offset order, and what they change."""

    topic: str
    partition: int
    is_new: bool
    old_log_end_offset: int
    new_log_end_offset: int
    replaces: int | None
    manifests: tuple[TaskManifest, ...]
    topic_id: str | None = None
    leader_epoch: int = -1

    @property
    def dir_name(self) -> str:
        return partition_dir_name(self.topic, self.partition)

    @property
    def record_count(self) -> int:
        return sum(m.record_count for m in self.manifests)

    def files(self) -> list[tuple[TaskManifest, StagedFile]]:
        """All staged files in publish order: ascending base offset, .log first per segment."""
        pairs = [(m, f) for m in self.manifests for f in m.files]
        return sorted(pairs, key=lambda mf: (mf[1].base_offset, _EXT_ORDER[mf[1].ext]))


@dataclass(frozen=True)
class PublishPlan:
    run_id: str
    output_root: str
    partitions: tuple[PartitionPlan, ...]
    discarded: tuple[TaskManifest, ...] = ()
    run_info: RunInfo = field(default_factory=RunInfo)
    meta_properties: Mapping[str, str] | None = None

    @property
    def record_count(self) -> int:
        return sum(p.record_count for p in self.partitions)

    def ranges(self) -> dict[str, list[int]]:
        """`{"topic-p": [first, next)}` of what this run adds, for the history and the summary."""
        return {
            p.dir_name: [p.old_log_end_offset, p.new_log_end_offset]
            for p in self.partitions
            if p.new_log_end_offset > p.old_log_end_offset
        }

    def to_json(self) -> str:
        data = asdict(self)
        data["partitions"] = [
            {**asdict(p), "manifests": [m.to_dict() for m in p.manifests]} for p in self.partitions
        ]
        data["discarded"] = [m.to_dict() for m in self.discarded]
        data["run_info"] = {**asdict(self.run_info), "timings_ms": dict(self.run_info.timings_ms)}
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> PublishPlan:
        try:
            data = json.loads(text)
            partitions = tuple(
                PartitionPlan(
                    **{
                        **p,
                        "manifests": tuple(TaskManifest.from_dict(m) for m in p["manifests"]),
                    }
                )
                for p in data["partitions"]
            )
            return cls(
                run_id=data["run_id"],
                output_root=data["output_root"],
                partitions=partitions,
                discarded=tuple(TaskManifest.from_dict(m) for m in data["discarded"]),
                run_info=RunInfo(**data["run_info"]),
                meta_properties=data["meta_properties"],
            )
        except (KeyError, TypeError, ValueError) as e:
            raise PublishError(f"malformed publish plan/journal: {e}") from None


def _attempt_order(m: TaskManifest) -> tuple[int, int, str]:
    a = m.attempt_id
    return (0, int(a), a) if a.isdigit() else (1, 0, a)


def plan_publish(
    manifests: Iterable[TaskManifest],
    existing_state: StateMap,
    *,
    output_root: str | os.PathLike[str],
    run_id: str,
    run_info: RunInfo | None = None,
    topic_ids: Mapping[str, str] | None = None,
    meta_properties: Mapping[str, str] | None = None,
    verify: bool = True,
) -> PublishPlan:
    """Pick one attempt per (partition, range) and check the ranges chain from the log end.

    Duplicates (retried/speculative attempts) must agree on their offsets; the lowest attempt id
    whose staged files verify wins, so the choice is the same on every re-plan. A partition with
    no existing state is new and must start at offset 0.
    """
    by_key: dict[tuple[str, int, int], list[TaskManifest]] = {}
    for m in manifests:
        if m.run_id != run_id:
            raise PlanError(f"{m.describe()}: manifest of run {m.run_id}, expected run {run_id}")
        by_key.setdefault(m.key, []).append(m)

    winners: dict[tuple[str, int], list[TaskManifest]] = {}
    discarded: list[TaskManifest] = []
    for key in sorted(by_key):
        candidates = sorted(by_key[key], key=_attempt_order)
        spans = {(c.first_offset, c.next_offset, c.record_count) for c in candidates}
        if len(spans) > 1:
            raise PlanError(
                f"{key[0]}-{key[1]} range {key[2]}: attempts disagree on the offsets "
                f"({', '.join(c.describe() for c in candidates)})"
            )
        winner = None
        for c in candidates:
            if winner is None:
                try:
                    if verify:
                        verify_manifest(c)
                    winner = c
                    continue
                except ManifestError:
                    pass
            discarded.append(c)
        if winner is None:
            raise PlanError(f"{candidates[0].describe()}: no attempt has intact staged files")
        winners.setdefault(key[:2], []).append(winner)

    plans = []
    for (topic, partition), ms in sorted(winners.items()):
        state = existing_state.get((topic, partition))
        plans.append(_plan_partition(topic, partition, ms, state, topic_ids or {}))
    return PublishPlan(
        run_id=run_id,
        output_root=str(Path(output_root).absolute()),
        partitions=tuple(plans),
        discarded=tuple(discarded),
        run_info=run_info or RunInfo(),
        meta_properties=dict(meta_properties) if meta_properties else None,
    )


def _plan_partition(
    topic: str,
    partition: int,
    manifests: list[TaskManifest],
    state: PartitionState | None,
    topic_ids: Mapping[str, str],
) -> PartitionPlan:
    name = partition_dir_name(topic, partition)
    ordered = sorted(manifests, key=lambda m: (m.first_offset, m.next_offset, m.range_index))
    if [m.range_index for m in ordered] != sorted(m.range_index for m in ordered):
        raise PlanError(f"{name}: range indexes are not in offset order")
    expected = state.log_end_offset if state else 0
    start = expected
    replaces = None
    for i, m in enumerate(ordered):
        if m.first_offset != expected:
            what = "gap" if m.first_offset > expected else "overlap"
            if i == 0:
                raise PlanError(
                    f"{name}: first range starts at {m.first_offset}, but the log end offset is "
                    f"{expected}"
                )
            raise PlanError(f"{name}: {what} between offset {expected} and {m.describe()}")
        if m.replaces is not None:
            last = state.last_segment_base if state else None
            if i != 0 or last is None or m.replaces != last:
                raise PlanError(
                    f"{m.describe()}: continues segment {m.replaces}, but only the existing last "
                    f"segment ({last}) can be continued, by the first range"
                )
            replaces = m.replaces
        elif state is not None and any(b in state.segment_bases for b in m.segment_bases):
            raise PlanError(f"{m.describe()}: would overwrite an existing segment of {name}")
        expected = m.next_offset
    names = [f.name for m in ordered for f in m.files]
    if len(set(names)) != len(names):
        dup = sorted(n for n in set(names) if names.count(n) > 1)[0]
        raise PlanError(f"{name}: two ranges stage the same file {dup}")
    epochs = {m.leader_epoch for m in ordered}
    return PartitionPlan(
        topic=topic,
        partition=partition,
        is_new=state is None,
        old_log_end_offset=start,
        new_log_end_offset=expected,
        replaces=replaces,
        manifests=tuple(ordered),
        topic_id=(state.topic_id if state and state.topic_id else topic_ids.get(topic)),
        leader_epoch=max(epochs) if epochs else -1,
    )


# --- publish -----------------------------------------------------------------------------------
Hook = Callable[[str], None]


@dataclass
class PublishResult:
    run_id: str
    already_published: bool
    partitions: dict[str, list[int]]
    record_count: int
    seconds: float


def _noop(_: str) -> None:
    pass


def publish(
    plan: PublishPlan,
    *,
    verify_checksums: bool = False,
    hook: Hook | None = None,
    record_history: bool = True,
) -> PublishResult:
    """Move the winners into place atomically; safe to call again after a crash at any point.

    Before the first rename every staged file is checked to exist with its manifest's size; its
    checksum is re-read only with `verify_checksums` (`plan_publish` already verified it, and the
    task computed it from the bytes it had just fsynced). `hook(step)` runs before every step
    that changes the file system (tests use it to crash).
    """
    began = time.monotonic()
    hook = hook or _noop
    root = Path(plan.output_root)
    journal = journal_path(root)
    meta = meta_root(root)

    history = None
    if record_history:
        from jobs.ingestion.history import IngestHistory

        history = IngestHistory(root)
        if history.find_run(plan.run_id, status="committed") and not journal.exists():
            return PublishResult(plan.run_id, True, plan.ranges(), plan.record_count, 0.0)

    if journal.exists():
        current = PublishPlan.from_json(journal.read_bytes())
        if current.run_id != plan.run_id:
            raise PublishError(
                f"{journal}: an interrupted publish of run {current.run_id} must be recovered "
                f"before run {plan.run_id} publishes"
            )
    else:
        for p in plan.partitions:
            if p.is_new and (root / p.dir_name).exists():
                raise PublishError(f"{root / p.dir_name}: exists, but the plan creates it")
            for m in p.manifests:
                verify_manifest(m, checksums=verify_checksums)
        root.mkdir(parents=True, exist_ok=True)
        meta.mkdir(parents=True, exist_ok=True)
        hook("journal")
        atomic_write(journal, plan.to_json().encode())

    _run_steps(plan, root, hook)

    if history is not None and not history.find_run(plan.run_id, status="committed"):
        hook("history")
        history.append_run(plan, status="committed", publish_seconds=time.monotonic() - began)
    hook("cleanup")
    journal.unlink(missing_ok=True)
    fsync_dir(meta)
    shutil.rmtree(staging_root(root, plan.run_id), ignore_errors=True)
    return PublishResult(
        plan.run_id, False, plan.ranges(), plan.record_count, time.monotonic() - began
    )


# Locations of a staged file, in the order it travels through them.
_STAGED, _CLEANED, _SWAP, _FINAL = "staged", "cleaned", "swap", "final"
_ORDER = {_STAGED: 0, _CLEANED: 1, _SWAP: 2, _FINAL: 3}


def _assembly_dir(root: Path, run_id: str, p: PartitionPlan) -> Path:
    return staging_root(root, run_id) / ASSEMBLY_DIR / p.dir_name


def _paths(root: Path, run_id: str, p: PartitionPlan, m: TaskManifest, f: StagedFile) -> dict:
    final_dir = root / p.dir_name
    if p.is_new:
        return {
            _STAGED: Path(m.staging_dir) / f.name,
            _SWAP: _assembly_dir(root, run_id, p) / f.name,
            _FINAL: final_dir / f.name,
        }
    return {
        _STAGED: Path(m.staging_dir) / f.name,
        _CLEANED: final_dir / (f.name + ".cleaned"),
        _SWAP: final_dir / (f.name + ".swap"),
        _FINAL: final_dir / f.name,
    }


def _locate(
    root: Path, run_id: str, p: PartitionPlan, m: TaskManifest, f: StagedFile, check_final=True
) -> str | None:
    """Where the file is now; a file at its final name counts only if its checksum matches."""
    paths = _paths(root, run_id, p, m, f)
    for where in (_SWAP, _CLEANED, _STAGED):
        if where in paths and paths[where].exists():
            return where
    final = paths[_FINAL]
    if check_final and final.exists() and final.stat().st_size == f.size and f.matches(final):
        return _FINAL
    return None


def _missing(p: PartitionPlan, f: StagedFile) -> PublishError:
    return PublishError(
        f"{p.dir_name}: {f.name} of the publish is neither staged nor in place "
        "(another process rolled it back?)"
    )


def _run_steps(plan: PublishPlan, root: Path, hook: Hook) -> None:
    run_id = plan.run_id
    new_parts = [p for p in plan.partitions if p.is_new]
    old_parts = [p for p in plan.partitions if not p.is_new]

    # Where is every file right now? (All in staging on a first attempt.)
    where: dict[tuple[str, str], str] = {}
    for p in plan.partitions:
        if (
            p.is_new
            and (root / p.dir_name).exists()
            and not _assembly_dir(root, run_id, p).exists()
        ):
            for _, f in p.files():
                where[(p.dir_name, f.name)] = _FINAL
            continue
        for m, f in p.files():
            loc = _locate(root, run_id, p, m, f)
            if loc is None:
                raise _missing(p, f)
            where[(p.dir_name, f.name)] = loc

    def advance(p: PartitionPlan, m: TaskManifest, f: StagedFile, to: str) -> bool:
        loc = where[(p.dir_name, f.name)]
        if _ORDER[loc] >= _ORDER[to]:
            return False
        paths = _paths(root, run_id, p, m, f)
        hook(f"{to}:{p.dir_name}/{f.name}")
        os.replace(paths[loc], paths[to])
        where[(p.dir_name, f.name)] = to
        return True

    # Phase 1: staged files (made durable by their task, `finalize_task_staging`) move into the
    # partition dir as .cleaned (or into the assembly dir of a new partition). A crash here:
    # Kafka deletes the .cleaned files.
    for p in old_parts:
        pdir = root / p.dir_name
        if not pdir.is_dir():
            raise PublishError(f"{pdir}: partition dir of an incremental publish is missing")
        for m, f in p.files():
            advance(p, m, f, _CLEANED)
        fsync_dir(pdir)
    for p in new_parts:
        assembly = _assembly_dir(root, run_id, p)
        if (root / p.dir_name).exists():
            if assembly.exists():
                raise PublishError(f"{root / p.dir_name}: a new partition dir appeared meanwhile")
            continue  # renamed into place before the crash
        assembly.mkdir(parents=True, exist_ok=True)
        for m, f in p.files():
            advance(p, m, f, _SWAP)
        hook(f"metadata:{p.dir_name}")
        _write_partition_metadata(assembly, p)
        fsync_dir(assembly)
        fsync_dir(assembly.parent)

    # Phase 2: .cleaned -> .swap in descending offset order (§8.8). Once a partition has no
    # .cleaned left, Kafka's loader completes the swap instead of rolling it back.
    for p in old_parts:
        for m, f in reversed(p.files()):
            advance(p, m, f, _SWAP)
        fsync_dir(root / p.dir_name)

    # Phase 3: the commit. Swaps become final names (.log first per segment); a replaced last
    # segment's files are overwritten by the rename, leftovers of it are deleted. New partition
    # dirs are renamed into the root in one step.
    for p in old_parts:
        pdir = root / p.dir_name
        for m, f in p.files():
            advance(p, m, f, _FINAL)
        if p.replaces is not None:
            new_names = {f.name for _, f in p.files()}
            for ext in _EXT_ORDER:
                stale = pdir / segment_file_name(p.replaces, ext)
                if stale.name not in new_names and stale.exists():
                    hook(f"delete:{p.dir_name}/{stale.name}")
                    deleted = stale.with_name(stale.name + ".deleted")
                    os.replace(stale, deleted)
                    deleted.unlink()
        fsync_dir(pdir)
        _update_partition_metadata(pdir, p, hook)
    for p in new_parts:
        assembly = _assembly_dir(root, run_id, p)
        if assembly.exists():
            hook(f"rename-dir:{p.dir_name}")
            os.replace(assembly, root / p.dir_name)
    fsync_dir(root)

    # Phase 4: root checkpoints (other partitions' entries preserved), meta.properties.
    _update_root_checkpoints(root, plan, hook)


# --- metadata files ----------------------------------------------------------------------------
def _read_topic_id(pdir: Path) -> str | None:
    path = PartitionMetadataFile(pdir / "partition.metadata")
    if not path.exists():
        return None
    return topic_id_to_str(path.read())


def _write_partition_metadata(pdir: Path, p: PartitionPlan) -> None:
    """partition.metadata and leader-epoch-checkpoint of a new partition dir (§9.3, §9.4)."""
    if p.topic_id:
        PartitionMetadataFile(pdir / "partition.metadata").write(topic_id_from_str(p.topic_id))
    cache = LeaderEpochCache(entries=[])
    if p.leader_epoch >= 0:
        cache.assign(p.leader_epoch, p.old_log_end_offset)
    LeaderEpochCheckpointFile(pdir / "leader-epoch-checkpoint").write(cache.entries)


def _update_partition_metadata(pdir: Path, p: PartitionPlan, hook: Hook) -> None:
    """Idempotent: the epoch of the appended range is assigned at the old log end offset."""
    metadata = PartitionMetadataFile(pdir / "partition.metadata")
    if p.topic_id and not metadata.exists():
        hook(f"metadata:{p.dir_name}")
        metadata.write(topic_id_from_str(p.topic_id))
    checkpoint = LeaderEpochCheckpointFile(pdir / "leader-epoch-checkpoint")
    old = checkpoint.read() if checkpoint.exists() else []
    cache = LeaderEpochCache(entries=old)
    if p.leader_epoch >= 0:
        cache.assign(p.leader_epoch, p.old_log_end_offset)
    if cache.entries != old or not checkpoint.exists():
        hook(f"metadata:{p.dir_name}")
        checkpoint.write(cache.entries)


def _update_root_checkpoints(root: Path, plan: PublishPlan, hook: Hook) -> None:
    """recovery point = replication offset = LEO of the published partitions (§9.2).

    Entries of other partitions are kept. log-start-offset-checkpoint and
    cleaner-offset-checkpoint are left alone: appends move neither.
    """
    for name in CHECKPOINT_FILES:
        checkpoint = OffsetCheckpointFile(root / name)
        entries = checkpoint.read() if checkpoint.exists() else {}
        updated = dict(entries)
        for p in plan.partitions:
            updated[(p.topic, p.partition)] = p.new_log_end_offset
        if updated != entries or not checkpoint.exists():
            hook(f"checkpoint:{name}")
            checkpoint.write(updated)
    if plan.meta_properties and not (root / "meta.properties").exists():
        hook("checkpoint:meta.properties")
        MetaProperties.from_properties(plan.meta_properties).write(root / "meta.properties")


# --- recovery and cleanup ----------------------------------------------------------------------
def recover_interrupted_publish(
    output_root: str | os.PathLike[str], *, hook: Hook | None = None, record_history: bool = True
) -> str | None:
    """Finish (or, if its files are gone, roll back) a publish a crash interrupted.

    Returns "completed", "rolled back" or None (nothing to do). Call under the run lock.
    """
    root = Path(output_root)
    journal = journal_path(root)
    if not journal.exists():
        return None
    plan = PublishPlan.from_json(journal.read_bytes())
    try:
        publish(plan, verify_checksums=False, hook=hook, record_history=record_history)
        return "completed"
    except PublishError:
        if not _roll_back(plan, root):
            raise
    journal.unlink()
    fsync_dir(journal.parent)
    return "rolled back"


def _roll_back(plan: PublishPlan, root: Path) -> bool:
    """Undo a publish that never reached its commit (no .swap/final file of ours anywhere)."""
    for p in plan.partitions:
        if p.is_new:
            if (root / p.dir_name).exists() and not _assembly_dir(root, plan.run_id, p).exists():
                return False
            continue
        for m, f in p.files():
            paths = _paths(root, plan.run_id, p, m, f)
            if paths[_SWAP].exists() or _locate(root, plan.run_id, p, m, f) == _FINAL:
                return False
    for p in plan.partitions:
        if not p.is_new:
            for m, f in p.files():
                _paths(root, plan.run_id, p, m, f)[_CLEANED].unlink(missing_ok=True)
            fsync_dir(root / p.dir_name)
    return True


def cleanup_stale_staging(
    output_root: str | os.PathLike[str], current_run_id: str | None = None
) -> list[str]:
    """Remove the staging of every run except the current one and one awaiting recovery.

    Only safe under the run lock: no other run can be writing staging then.
    """
    base = meta_root(output_root) / "staging"
    if not base.is_dir():
        return []
    keep = {current_run_id}
    journal = journal_path(output_root)
    if journal.exists():
        with contextlib.suppress(PublishError):
            keep.add(PublishPlan.from_json(journal.read_bytes()).run_id)
    removed = []
    for path in sorted(base.iterdir()):
        if path.name not in keep:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return removed


def default_run_id() -> str:
    """A sortable, unique run id for drivers that are not re-running a known one."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{stamp}-{socket.gethostname()[:20]}-{os.getpid()}"
