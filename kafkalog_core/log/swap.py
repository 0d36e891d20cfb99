"""Segment replacement (§8.8): Kafka's replaceSegments (`replace_segments`), and finishing or
undoing an interrupted one, as a broker's load starts (§6 passes 1-3,
`complete_interrupted_swaps`).

A replacement (the cleaner's, or a split's) writes its new segments as `.cleaned`, renames them
`.swap` in descending offset order, then replaces the old segments. A kill before the last
`.swap` rename leaves a `.cleaned` file: every `.swap` at or above the lowest `.cleaned` offset
is deleted (rolled back). A kill after it is completed: the old files inside the swapped-in
offset range are deleted and the `.swap` files renamed into place. `.deleted` files (other than
KRaft's `.checkpoint.deleted`) and our own unfinished atomic writes go too.

The loader runs these passes first; a split runs them to complete its own swap, and the
rebuild job to finish a split a kill interrupted.

`replace_segments` does a replacement the way LocalLog.replaceSegments does, in an order a kill
at any point leaves recoverable by the passes above:

1. every new segment `.cleaned` -> `.swap`, highest base offset first (the commit point: once
   no `.cleaned` is left, a load completes the swap instead of rolling it back);
2. every old segment's files -> `.deleted`, lowest first;
3. every new segment `.swap` -> its final name, lowest first, then the producer snapshots of
   old segments no new one replaces -> `.deleted`, and the directory is fsynced.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kafkalog_core.errors import LogDirError
from kafkalog_core.log.checkpoints import fsync_dir
from kafkalog_core.log.names import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_SUFFIXES,
    KRAFT_CHECKPOINT_DELETED,
    LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    log_file_name,
    parse_segment_file_name,
    producer_snapshot_file_name,
    unfinished_write_of,
)
from kafkalog_core.log.segment.log_segment import LogSegment


@dataclass
class SwapOutcome:
    """The files passes 1-3 deleted, replaced and renamed (names only)."""

    deleted_files: list[str] = field(default_factory=list)
    replaced_by_swap: list[str] = field(default_factory=list)
    swaps_completed: list[str] = field(default_factory=list)


def complete_interrupted_swaps(dir: Path) -> SwapOutcome:
    """Passes 1-3 over one partition directory (see the module docstring)."""
    outcome = SwapOutcome()

    def delete(path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        outcome.deleted_files.append(path.name)

    swap_files: list[Path] = []
    cleaned_files: list[Path] = []
    min_cleaned = None
    for p in sorted(dir.iterdir()):
        if not p.is_file():
            continue
        name = p.name
        if name.endswith(DELETED_FILE_SUFFIX):
            if not KRAFT_CHECKPOINT_DELETED.match(name):
                delete(p)
        elif unfinished_write_of(name) is not None:  # its target is intact or rebuilt
            delete(p)
        elif name.endswith(CLEANED_FILE_SUFFIX):
            with contextlib.suppress(LogDirError):
                off = parse_segment_file_name(name).base_offset
                min_cleaned = off if min_cleaned is None else min(min_cleaned, off)
            cleaned_files.append(p)
        elif name.endswith(SWAP_FILE_SUFFIX):
            swap_files.append(p)
    valid_swaps = []
    for p in swap_files:
        try:
            off = parse_segment_file_name(p.name).base_offset
        except LogDirError:
            continue
        if min_cleaned is not None and off >= min_cleaned:
            delete(p)  # part of an unfinished split/clean: roll back
        else:
            valid_swaps.append(p)
    for p in cleaned_files:
        delete(p)
    # pass 2: the swapped-in segments replace every segment file inside their range
    swap_logs = [p for p in valid_swaps if p.name.endswith(LOG_FILE_SUFFIX + SWAP_FILE_SUFFIX)]
    if swap_logs:
        lo = min(parse_segment_file_name(p.name).base_offset for p in swap_logs)
        hi = 0
        for p in swap_logs:
            base = parse_segment_file_name(p.name).base_offset
            seg = LogSegment(dir, base, file_suffix=SWAP_FILE_SUFFIX)
            hi = max(hi, seg.read_next_offset())
            seg.release_handles()
        for p in sorted(dir.iterdir()):
            if not p.is_file() or p.name.endswith(SWAP_FILE_SUFFIX):
                continue
            try:
                parsed = parse_segment_file_name(p.name)
            except LogDirError:
                continue
            if (
                parsed.extension in (LOG_FILE_SUFFIX, *INDEX_SUFFIXES)
                and lo <= parsed.base_offset < hi
            ):
                p.unlink()
                outcome.replaced_by_swap.append(p.name)
    # pass 3
    for p in valid_swaps:
        target = p.with_name(p.name[: -len(SWAP_FILE_SUFFIX)])
        os.replace(p, target)
        outcome.swaps_completed.append(p.name)
    return outcome


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
