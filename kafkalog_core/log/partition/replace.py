"""Swap new segments in for old ones (Kafka's LocalLog.replaceSegments, §8.8).

The cleaner writes each replacement segment as `<base>.log.cleaned` (+ `.index.cleaned`, ...).
The swap then renames, in an order that leaves every crash point recoverable by a broker's
loader (log_loader.py, passes 1-3):

1. every new segment `.cleaned` -> `.swap`, highest base offset first: while any `.cleaned` is
   left, a loader deletes the `.swap` files at or above it and the `.cleaned` ones (rollback);
2. every old segment's files -> `.deleted`, lowest first (a loader deletes `.deleted` files);
3. every new segment `.swap` -> its final name, lowest first (a loader finishes the renames and
   drops old files inside a swapped segment's range), then the producer snapshots of old
   segments no new one replaces -> `.deleted`, and the directory is fsynced.

So once step 1 is done the swap is committed: every later crash completes it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from kafkalog_core.log.checkpoints import fsync_dir
from kafkalog_core.log.names import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_SUFFIXES,
    LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    log_file_name,
    producer_snapshot_file_name,
)

__all__ = ["SEGMENT_SUFFIXES", "Hook", "rename_segment_files", "replace_segments"]

# a segment's files, in the order Kafka's LogSegment.changeFileSuffixes renames them
SEGMENT_SUFFIXES = (LOG_FILE_SUFFIX, *INDEX_SUFFIXES)
Hook = Callable[[str, Path], None]  # (step, path) before a file system change (tests crash here)


def _no_hook(_step: str, _path: Path) -> None:
    return None


def rename_segment_files(
    partition_dir: Path, base_offset: int, old_suffix: str, new_suffix: str, hook: Hook = _no_hook
) -> None:
    """Rename the segment's existing files from `old_suffix` to `new_suffix` (.log first)."""
    stem = log_file_name(base_offset)[: -len(LOG_FILE_SUFFIX)]
    for suffix in SEGMENT_SUFFIXES:
        path = partition_dir / f"{stem}{suffix}{old_suffix}"
        if path.exists():
            hook("rename", path)
            os.replace(path, partition_dir / f"{stem}{suffix}{new_suffix}")


def replace_segments(
    partition_dir: str | os.PathLike[str],
    new_bases: Sequence[int],
    old_bases: Iterable[int],
    *,
    hook: Hook = _no_hook,
) -> None:
    """Swap the `.cleaned` segments at `new_bases` in for the segments at `old_bases`.

    Afterwards the old files are `.deleted` (the caller removes them, as a broker's delayed
    delete would); the segments' `.cleaned` files must all be complete and durable.
    """
    pdir = Path(partition_dir)
    new = sorted(new_bases)
    for base in reversed(new):
        rename_segment_files(pdir, base, CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX, hook)
    fsync_dir(pdir)
    replaced = set(new)
    old = sorted(old_bases)
    for base in old:
        rename_segment_files(pdir, base, "", DELETED_FILE_SUFFIX, hook)
    for base in new:
        rename_segment_files(pdir, base, SWAP_FILE_SUFFIX, "", hook)
    for base in old:  # UnifiedLog.deleteProducerSnapshots of the segments nothing replaces
        snapshot = pdir / producer_snapshot_file_name(base)
        if base not in replaced and snapshot.exists():
            hook("rename", snapshot)
            os.replace(snapshot, snapshot.with_name(snapshot.name + DELETED_FILE_SUFFIX))
    fsync_dir(pdir)
