"""Retiring partition dirs an overwrite replaces: part of the journaled publish, never a delete
before the commit.

An overwrite (`df.write.format("kafkalog").mode("overwrite")`) replaces whole topics. Their
current partition dirs are moved, one rename each, into the run's staging in the meta area (a
sibling of the root on the same file system), then the new partition dirs are renamed in as for
any new partition; only after the ingest history records the run does the staging (and with it
the retired dirs) go away. A crash at any point leaves the journal, and the next run's
`recover_interrupted_publish` completes the swap or, when the new files are gone, moves the
retired dirs back: the root never loses the old data without holding the new.

Every step is idempotent and recognises its own result: a dir named in `plan.retired` that is
still in the root while its retired copy is absent is the old one (the new dir of that name is
renamed in only after every retirement).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from jobs.ingestion.staging.task_staging import staging_root
from kafkalog_core.log.checkpoints import OffsetCheckpointFile, fsync_dir
from kafkalog_core.log.names import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    parse_partition_dir_name,
)

RETIRED_DIR = "_retired"  # per run: the old partition dirs an overwrite replaced

_ALL_CHECKPOINTS = (
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    CLEANER_OFFSET_CHECKPOINT_FILE,
)


def retired_path(root: Path, run_id: str, dir_name: str) -> Path:
    return staging_root(root, run_id) / RETIRED_DIR / dir_name


def retire_partition_dirs(
    root: Path, run_id: str, retired: tuple[str, ...], hook: Callable[[str], None]
) -> None:
    """Move the replaced partition dirs out of the root (before any new dir goes in)."""
    moved = False
    for name in retired:
        target = retired_path(root, run_id, name)
        if target.exists() or not (root / name).exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        hook(f"retire:{name}")
        os.replace(root / name, target)
        moved = True
    if moved:
        fsync_dir(root)
        fsync_dir(retired_path(root, run_id, "x").parent)


def restore_retired_dirs(root: Path, run_id: str, retired: tuple[str, ...]) -> None:
    """Roll back: the retired dirs return to the root (only where no dir of that name is)."""
    for name in retired:
        source = retired_path(root, run_id, name)
        if source.exists() and not (root / name).exists():
            os.replace(source, root / name)
    fsync_dir(root)


def forget_retired_partitions(
    root: Path, retired: tuple[str, ...], published: set[tuple[str, int]], hook
) -> None:
    """Checkpoint entries of the replaced partitions: a rewritten partition starts at offset 0
    again (no log start offset, no cleaned prefix); one not rewritten is gone from every file."""
    gone: set[tuple[str, int]] = set()
    for name in retired:
        parsed = parse_partition_dir_name(name)
        gone.add((parsed.topic, parsed.partition))
    for file_name in _ALL_CHECKPOINTS:
        checkpoint = OffsetCheckpointFile(root / file_name)
        if not checkpoint.exists():
            continue
        entries = checkpoint.read()
        keep_published = file_name in (
            RECOVERY_POINT_CHECKPOINT_FILE,
            REPLICATION_OFFSET_CHECKPOINT_FILE,
        )
        updated = {
            tp: offset
            for tp, offset in entries.items()
            if tp not in gone or (keep_published and tp in published)
        }
        if updated != entries:
            hook(f"checkpoint:{file_name}")
            checkpoint.write(updated)
