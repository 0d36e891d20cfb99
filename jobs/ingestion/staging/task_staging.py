"""Task side of the commit protocol: staging dirs, durable files, manifests."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from crc32c import crc32c

from jobs.ingestion.run.meta import IngestError, ManifestError
from kafkalog_core import native as native_loops
from kafkalog_core.log.checkpoints import (
    atomic_write,
    fsync_dir,
)
from kafkalog_core.log.names import partition_dir_name
from kafkalog_core.root.meta_area import meta_root

# --- names -------------------------------------------------------------------------------------
MANIFEST_SUFFIX = ".manifest.json"
RUN_START_NAME = "run-start.json"  # per run: its start time, see run_start_ms
ASSEMBLY_DIR = "_publish"  # per run: new partition dirs assembled before the directory rename
SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex|snapshot)$")
# Order in which the files of one segment become final: the .log first, so that a crash never
# leaves a final index beside a pending .log.swap (Kafka's pass 2 would delete that index).
SEGMENT_FILE_ORDER = {"log": 0, "index": 1, "timeindex": 2, "txnindex": 3, "snapshot": 4}
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


def run_start_ms(
    output_root: str | os.PathLike[str], run_id: str, given_ms: int | None = None
) -> int:
    """The run's start time in epoch ms, fixed once per run id (call under the run lock).

    Recorded in the run's staging area (`run-start.json`) on the first attempt; a rerun of the
    same run id (after a kill) reads it back, so `timestamp: now` and LogAppendTime stamp the
    same bytes. `given_ms` (the job's `--now`) wins and is recorded. The file goes away with the
    run's staging after its publish.
    """
    path = staging_root(output_root, run_id) / RUN_START_NAME
    if given_ms is None:
        try:
            return int(json.loads(path.read_bytes())["started_at_ms"])
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError) as e:
            raise IngestError(f"{path}: unreadable run start ({e}); remove it to restart") from None
    started = int(time.time() * 1000) if given_ms is None else int(given_ms)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps({"run_id": run_id, "started_at_ms": started}).encode())
    return started


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


def _crc32c_stream(f, crc: int = 0, limit: int | None = None) -> str:
    """CRC-32C (Castagnoli, hardware-accelerated) of an open binary file from where it stands
    (to its end, or its next `limit` bytes), continuing `crc` (that of the bytes before), as 8
    hex digits."""
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    left = -1 if limit is None else limit
    while left and (n := f.readinto(view[: _CHUNK if left < 0 else min(left, _CHUNK)])):
        crc = crc32c(view[:n], crc)
        left -= n if left > 0 else 0
    return f"{crc:08x}"


def crc32c_file(path: Path) -> str:
    """CRC-32C of a file's bytes, streamed in 1 MiB chunks (8 hex digits)."""
    with open(path, "rb") as f:
        return _crc32c_stream(f)


def _sync_and_checksum(
    path: Path, sync: bool = True, prefix: StagedFile | None = None, mark: int | None = None
) -> tuple[str, str | None]:
    """fsync a staged file (`sync`) and checksum it through one open (the bytes are in the page
    cache); `prefix`: its first bytes are a copy of that file, whose checksum continues.
    Also the checksum of its first `mark` bytes on the way (None without a mark)."""
    with open(path, "rb") as f:
        if sync:
            os.fsync(f.fileno())
        crc = "00000000"
        if prefix is not None and (mark is None or prefix.size <= mark):
            f.seek(prefix.size)
            crc = prefix.crc32c
        marked = None
        if mark is not None:
            crc = marked = _crc32c_stream(f, int(crc, 16), mark - f.tell())
        return _crc32c_stream(f, int(crc, 16)), marked


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
    `provisional`: staged from offset 0 before the task could know where the range lands;
    `place_ranges` moves it into place (a published manifest is never provisional).
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
    provisional: bool = False
    native: bool = False  # the writing task encoded with the C loops (kafkalog_core.native)
    # the staged files were fsynced; False: a record share (never published as it is:
    # `plan_publish` refuses it)
    durable: bool = True
    # a record share: its rows, not encoded, in this Arrow IPC file of `staging_dir` (no
    # segment files); the relayout encodes them after the partition's earlier shares
    records: str | None = None
    # a share a later record share may continue: its last .log's bytes before its last batch
    # (name, size, CRC-32C), whose rows are in `CARRY_FILE` beside it (`jobs.ingestion.tasks.record_share`)
    carry: StagedFile | None = None

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
        data["carry"] = None if self.carry is None else self.carry.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskManifest:
        try:
            values = dict(data)
            values["files"] = tuple(StagedFile(**f) for f in values["files"])
            if values.get("carry") is not None:
                values["carry"] = StagedFile(**values["carry"])
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
    if m.records is not None:
        if m.files or m.durable or m.carry is not None or m.replaces is not None:
            raise ManifestError(f"{where}: a record share stages only its rows, without fsync")
        return
    if m.next_offset > m.first_offset and not m.segment_bases:
        raise ManifestError(f"{where}: non-empty range without a .log file")
    if m.carry is not None and (
        not m.segment_bases
        or m.carry.name != segment_file_name(m.segment_bases[-1], "log")
        or m.carry.size > next(f.size for f in m.files if f.name == m.carry.name)
    ):
        raise ManifestError(f"{where}: its carried batch is not in its last .log")
    bases = m.segment_bases
    if m.provisional and (m.replaces is not None or m.first_offset != 0):
        raise ManifestError(f"{where}: a provisional range starts at offset 0 in new segments")
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
    provisional: bool = False,
    native: bool | None = None,
    known: Mapping[str, StagedFile] | None = None,
    sync: bool = True,
    prefixes: Mapping[str, StagedFile] | None = None,
    carry_at: int | None = None,
) -> TaskManifest:
    """Task side, after writing the segment files: fsync them and describe them in a manifest.

    This is where staged bytes become durable: each file is fsynced and checksummed (CRC-32C)
    exactly once, here, through one open; the publish only renames (and fsyncs directories).

    Only segment files (`<20 digits>.log/.index/.timeindex/.txnindex`) are published; anything
    else a writer left there (partition.metadata, checkpoints) is ignored. Producer snapshots
    are left out by default: a range's writer only saw part of the log, and Kafka rebuilds
    producer state itself when no snapshot exists (§6 step 12).

    `native` (default: whether this process has the C loops) lets a job report what its
    executors ran: a cluster's executors may lack the build the driver has.

    `known`: files hard-linked from other staged ranges (already checksummed and fsynced), by
    name; one of the same size keeps its entry instead of being read again.

    `prefixes`: files (by name) that start with a copy of another staged file, appended to since
    (a continued segment): only the bytes after that copy are read for the checksum.

    `carry_at`: the position of the last batch in the last .log, which a later record share may
    take back (`TaskManifest.carry`: that file's bytes before it, checksummed on the way).

    `sync=False` checksums without fsyncs: for a range that will not be published as it is;
    its manifest says `durable=False`.
    """
    base = Path(staging_dir)
    files = []
    carry = None
    last_log = max((p.name for p in base.glob("*.log") if SEGMENT_FILE.match(p.name)), default="")
    for path in sorted(base.iterdir()):
        if not path.is_file() or not SEGMENT_FILE.match(path.name):
            continue
        if path.suffix == ".snapshot" and not include_snapshots:
            continue
        size = path.stat().st_size
        same = (known or {}).get(path.name)
        if same is not None and same.size == size:
            files.append(same)
            continue
        prefix = (prefixes or {}).get(path.name)
        mark = carry_at if path.name == last_log else None
        checksum, marked = _sync_and_checksum(
            path, sync, prefix if prefix and prefix.size <= size else None, mark
        )
        files.append(StagedFile(path.name, size, checksum))
        if marked is not None:
            carry = StagedFile(path.name, int(carry_at), marked)  # type: ignore[arg-type]
    if sync:
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
        provisional=provisional,
        native=native_loops.module is not None if native is None else native,
        durable=sync,
        carry=carry,
    )
    _validate_manifest(manifest)
    if write:
        write_manifest(manifest)
    return manifest


def copy_file(source: Path, dest: Path) -> None:
    """Copy a file's bytes kernel-side (`copy_file_range`: a reflink where the file system has
    them, else an in-kernel copy; never through this process's memory); a new file."""
    with open(source, "rb") as src, open(dest, "wb") as dst:
        left = os.fstat(src.fileno()).st_size
        try:
            while left > 0:
                copied = os.copy_file_range(src.fileno(), dst.fileno(), left)
                if copied == 0:
                    raise OSError(f"{source}: ended before its size while being copied")
                left -= copied
        except (AttributeError, OSError):  # no copy_file_range here (platform, file system)
            src.seek(0)
            dst.seek(0)
            dst.truncate()
            shutil.copyfileobj(src, dst, _CHUNK)


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
    for ext in SEGMENT_FILE_ORDER:
        path = source / segment_file_name(base_offset, ext)
        if path.exists():
            copy_file(path, dest / path.name)
            copied.append(dest / path.name)
    if not copied or copied[0].suffix != ".log":
        raise IngestError(
            f"{source}: no segment {segment_file_name(base_offset, 'log')} to continue"
        )
    return copied
