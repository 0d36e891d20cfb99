"""The atomic publish (Kafka's swap protocol), its journal, recovery and staging cleanup."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jobs.ingestion.commit.plan import PartitionPlan, PublishPlan
from jobs.ingestion.commit.retire import (
    forget_retired_partitions,
    restore_retired_dirs,
    retire_partition_dirs,
    retired_path,
)
from jobs.ingestion.run.meta import PublishError
from jobs.ingestion.staging.task_staging import (
    ASSEMBLY_DIR,
    CHECKPOINT_FILES,
    SEGMENT_FILE_ORDER,
    StagedFile,
    TaskManifest,
    segment_file_name,
    staging_root,
    verify_manifest,
)
from kafkalog_core.log.checkpoints import (
    LeaderEpochCache,
    LeaderEpochCheckpointFile,
    MetaProperties,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    atomic_write,
    fsync_dir,
    topic_id_from_str,
)
from kafkalog_core.log.segment.log_segment import LogSegment
from kafkalog_core.root.meta_area import meta_root, publish_journal_path

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
    journal = publish_journal_path(root)
    meta = meta_root(root)

    history = None
    if record_history:
        from jobs.ingestion.run.history import IngestHistory

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
            if p.is_new and (root / p.dir_name).exists() and p.dir_name not in plan.retired:
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

    # Phase 0 (overwrite only): the replaced partition dirs leave the root for the run's staging,
    # so that a new dir found in the root below is ours.
    retire_partition_dirs(root, run_id, plan.retired, hook)

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
        if not p.manifests:
            hook(f"empty:{p.dir_name}")
            _write_empty_segment(assembly)
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
            for ext in SEGMENT_FILE_ORDER:
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

    # Phase 4: root checkpoints (other partitions' entries preserved), meta.properties; the
    # entries of replaced partitions reset or dropped.
    _update_root_checkpoints(root, plan, hook)
    if plan.retired:
        published = {(p.topic, p.partition) for p in plan.partitions}
        forget_retired_partitions(root, plan.retired, published, hook)


# --- metadata files ----------------------------------------------------------------------------
def _write_empty_segment(pdir: Path) -> None:
    """The empty first segment of a partition no record went to, as a broker creates it (files
    a crashed attempt left in the assembly dir are made again)."""
    for ext in SEGMENT_FILE_ORDER:
        (pdir / segment_file_name(0, ext)).unlink(missing_ok=True)
    LogSegment.open(pdir, 0).close()


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
    journal = publish_journal_path(root)
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


def _retired(root: Path, plan: PublishPlan, p: PartitionPlan) -> Path:
    return retired_path(root, plan.run_id, p.dir_name)


def _roll_back(plan: PublishPlan, root: Path) -> bool:
    """Undo a publish that never reached its commit (no .swap/final file of ours anywhere)."""
    for p in plan.partitions:
        if p.is_new:
            old_in_root = p.dir_name in plan.retired and not _retired(root, plan, p).exists()
            if (
                (root / p.dir_name).exists()
                and not old_in_root
                and not _assembly_dir(root, plan.run_id, p).exists()
            ):
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
    restore_retired_dirs(root, plan.run_id, plan.retired)
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
    journal = publish_journal_path(output_root)
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
