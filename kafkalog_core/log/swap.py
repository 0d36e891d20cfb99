"""Finishing or undoing an interrupted segment replacement, as a broker's load starts (§6 passes
1-3, §8.8).

A replacement (the cleaner's, or a split's) writes its new segments as `.cleaned`, renames them
`.swap` in descending offset order, then replaces the old segments. A kill before the last
`.swap` rename leaves a `.cleaned` file: every `.swap` at or above the lowest `.cleaned` offset
is deleted (rolled back). A kill after it is completed: the old files inside the swapped-in
offset range are deleted and the `.swap` files renamed into place. `.deleted` files (other than
KRaft's `.checkpoint.deleted`) and our own unfinished atomic writes go too.

The loader runs these passes first; a split runs them to complete its own swap, and the
rebuild job to finish a split a kill interrupted.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from kafkalog_core.errors import LogDirError
from kafkalog_core.log.names import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_SUFFIXES,
    KRAFT_CHECKPOINT_DELETED,
    LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    parse_segment_file_name,
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
