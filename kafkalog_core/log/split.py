"""Splitting a segment whose offsets overflow it, as a broker's load does (§6 pass 4, §8.8).

A batch whose last offset is below its segment's base offset or more than Int.MAX above it
cannot be indexed: recovery raises LogSegmentOffsetOverflowException and the loader splits the
segment (LocalLog.splitOverflowedSegment). From the first batch on, each new segment takes the
batches whose last offsets fit its base offset; the next one starts at the first batch that
does not fit, named after that batch's base offset. A flipped bit in a base offset (which the
CRC does not cover) turns a healthy segment into such a one: the batch moves to a segment of its
own after the partition's end, the batches after it to one of their own in their old place.

The pieces are Kafka's, with two choices that keep a killed or repeated split safe:
- the first piece keeps the segment's own name (empty if its first batch does not fit it), so
  the swap replaces the old segment by name, never by offset range alone;
- a piece that cannot sit among the partition's other segments (offsets overlapping one of
  them, a name already taken, below the segment's base) ends the pieces: from its first batch
  on the bytes are a corrupt tail (`SplitPlan.stop` says why), which the caller quarantines.

How the pieces are put in place:
- pieces past the next segment ("outside": a raised base offset lands after the partition's
  end) are written as `.cleaned` and renamed into place one by one; they replace nothing, so a
  kill leaves a `.cleaned` file (deleted by the next load) or a finished segment, which the next
  plan recognises by its bytes;
- the pieces within the old segment's offset range are written as `.cleaned`, renamed `.swap`
  in descending offset order, and the swap is completed by the loader's passes 1-3
  (`swap.complete_interrupted_swaps`): a kill before the last `.swap` rename rolls it back, a
  kill after it is completed, by the next run and by a broker alike.
The pieces get no index files: whoever split writes them next (the loader's next pass over the
directory, the rebuild's index pass; a broker rebuilds a missing `.index` too).

`split_overflowed` is the sequence both callers run: plan, let the caller cut what no piece can
hold (the loader truncates it, the rebuild quarantines it), plan again, split.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from kafkalog_core.errors import KafkaLogError
from kafkalog_core.log.checkpoints import fsync_dir
from kafkalog_core.log.names import (
    CLEANED_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    log_file_name,
    offset_from_file_name,
)
from kafkalog_core.log.segment.scan import INT32_MAX, scan_segment
from kafkalog_core.log.swap import complete_interrupted_swaps

__all__ = [
    "Piece",
    "SplitPlan",
    "copy_range",
    "offset_ranges",
    "plan_split",
    "same_bytes",
    "split_overflowed",
    "split_segment",
]

_COPY_CHUNK = 8 << 20


def same_bytes(path: Path, fd: int, position: int, length: int) -> bool:
    """Whether `path` holds exactly the `length` bytes of `fd` from `position`."""
    if path.stat().st_size != length:
        return False
    with open(path, "rb") as f:
        done = 0
        while done < length:
            want = min(_COPY_CHUNK, length - done)
            if f.read(want) != os.pread(fd, want, position + done):
                return False
            done += want
    return True


def copy_range(fd: int, position: int, length: int, target: Path) -> None:
    """Write the `length` bytes of `fd` from `position` to `target`, durably (fsync)."""
    with open(target, "wb") as out:
        done = 0
        while done < length:
            chunk = os.pread(fd, min(_COPY_CHUNK, length - done), position + done)
            if not chunk:
                raise OSError(f"{target}: the source ended {length - done} bytes early")
            out.write(chunk)
            done += len(chunk)
        out.flush()
        os.fsync(out.fileno())


@dataclass(frozen=True)
class Piece:
    """One new segment: bytes [start, end) of the old .log, offsets [base_offset, next_offset)."""

    base_offset: int
    start: int
    end: int
    next_offset: int
    inside: bool  # within the old segment's offset range: swapped in with the others
    published: bool = False  # outside, and already in place (a killed run put it there)

    @property
    def name(self) -> str:
        return log_file_name(self.base_offset)


@dataclass(frozen=True)
class SplitPlan:
    """Kafka's pieces of one overflowing segment, and where they end."""

    log_path: Path
    pieces: tuple[Piece, ...]
    size: int
    stop: str = ""  # why the pieces end before the file does

    @property
    def valid_bytes(self) -> int:
        return self.pieces[-1].end if self.pieces else 0

    @property
    def tail_bytes(self) -> int:
        """Bytes no piece can hold: a corrupt tail, or batches no segment could take."""
        return self.size - self.valid_bytes


def plan_split(
    log_path: str | os.PathLike[str], others: Sequence[tuple[int, int]] = ()
) -> SplitPlan:
    """Kafka's split of `log_path` over its valid batches (recovery's walk, CRC-checked),
    among the partition's other segments, given as offset ranges `[base, next)`. Read-only."""
    path = Path(log_path)
    base = offset_from_file_name(path.name)
    scan = scan_segment(path, overflow_ok=True)
    bases, lasts = scan.batch_base_offsets, scan.batch_last_offsets
    bounds = np.append(scan.batch_positions, scan.valid_bytes)
    following = [b for b, _ in others if b > base]
    next_base = min(following) if following else None
    pieces: list[Piece] = []
    stop = "" if scan.invalid is None else f"{scan.invalid.reason}: {scan.invalid.detail}"
    fd = os.open(path, os.O_RDONLY)
    try:
        at = 0
        while not pieces or at < len(lasts):
            start = base if not pieces else int(bases[at])
            relative = lasts[at:] - start
            misfit = (relative < 0) | (relative > INT32_MAX)
            if not pieces and next_base is not None:  # the swap must not reach the next segment
                misfit |= lasts[at:] >= next_base
            misfit = np.flatnonzero(misfit)
            end = at + (int(misfit[0]) if len(misfit) else len(lasts) - at)
            piece = Piece(
                start,
                int(bounds[at]),
                int(bounds[end]),
                int(lasts[end - 1]) + 1 if end > at else start,
                inside=True,
            )
            if pieces:
                placed = _place(piece, base, next_base, others, pieces, path, fd)
                if isinstance(placed, str):
                    stop = f"batch at position {piece.start}: {placed}"
                    break
                piece = placed
            pieces.append(piece)
            at = end
    finally:
        os.close(fd)
    return SplitPlan(path, tuple(pieces), scan.size, "" if pieces[-1].end == scan.size else stop)


def _place(
    piece: Piece,
    base: int,
    next_base: int | None,
    others: Sequence[tuple[int, int]],
    pieces: list[Piece],
    path: Path,
    fd: int,
) -> Piece | str:
    """`piece` marked inside or outside (and published), or why it cannot be placed."""
    if piece.end == piece.start:
        return f"last offset below its base offset {piece.base_offset}"
    if piece.base_offset < base:
        return f"base offset {piece.base_offset} below the segment's {base}"
    if any(p.base_offset == piece.base_offset for p in pieces):
        return f"base offset {piece.base_offset} taken by another piece"
    inside = next_base is None or piece.next_offset <= next_base
    if next_base is not None and piece.base_offset < next_base < piece.next_offset:
        return f"offsets {piece.base_offset}..{piece.next_offset - 1} straddle segment {next_base}"
    existing = path.with_name(piece.name)
    published = False
    if not inside and existing.exists():
        published = same_bytes(existing, fd, piece.start, piece.end - piece.start)
        if not published:
            return f"{piece.name} exists with other bytes"
    for other, other_next in others:
        if published and other == piece.base_offset:
            continue
        if other < piece.next_offset and piece.base_offset < max(other_next, other + 1):
            return f"offsets {piece.base_offset}..{piece.next_offset - 1} overlap segment {other}"
    return replace(piece, inside=inside, published=published)


def split_segment(plan: SplitPlan) -> list[str]:
    """Put the pieces of `plan` (which must hold the whole file: no tail) in place of its
    segment, kill-safe (see the module docstring). Returns one action line per step."""
    if plan.tail_bytes:
        raise ValueError(f"{plan.log_path}: quarantine the {plan.tail_bytes} tail bytes first")
    path = plan.log_path
    directory = path.parent
    mtime = path.stat().st_mtime_ns  # the pieces keep the segment's age, as Kafka's split does

    def write(piece: Piece, fd: int) -> Path:
        cleaned = directory / (piece.name + CLEANED_FILE_SUFFIX)
        copy_range(fd, piece.start, piece.end - piece.start, cleaned)
        os.utime(cleaned, ns=(mtime, mtime))
        return cleaned

    actions = []
    fd = os.open(path, os.O_RDONLY)
    try:
        for piece in plan.pieces:
            if not piece.inside and not piece.published:
                os.replace(write(piece, fd), directory / piece.name)
                fsync_dir(directory)
                actions.append(
                    f"split {path.name}: offsets from {piece.base_offset} to {piece.name}"
                )
        inside = [(piece, write(piece, fd)) for piece in plan.pieces if piece.inside]
    finally:
        os.close(fd)
    fsync_dir(directory)
    for piece, cleaned in sorted(inside, key=lambda pair: pair[0].base_offset, reverse=True):
        os.replace(cleaned, directory / (piece.name + SWAP_FILE_SUFFIX))
    fsync_dir(directory)
    complete_interrupted_swaps(directory)
    fsync_dir(directory)
    names = ", ".join(piece.name for piece, _ in inside)
    actions.append(f"split {path.name}: swapped in {names}")
    return actions


def offset_ranges(segments: Sequence[tuple[int, int | None]], skip: int) -> list[tuple[int, int]]:
    """The `others` of `plan_split`: `[base, next)` of each `(base, next offset)` of a partition's
    segments, in offset order, but `segments[skip]`. A next offset of None (unknown: that
    segment overflows too, its own split will move what does not fit) is taken to reach the
    next segment; for the last one, its base alone."""
    ranges = []
    for k, (base, next_offset) in enumerate(segments):
        if k == skip:
            continue
        if next_offset is None:
            next_offset = segments[k + 1][0] if k + 1 < len(segments) else base + 1
        ranges.append((base, next_offset))
    return ranges


def split_overflowed(
    log_path: Path,
    others: Sequence[tuple[int, int]],
    cut_tail: Callable[[SplitPlan], Sequence[tuple[int, int]]],
) -> list[str]:
    """Split the overflowing segment `log_path` among `others` (`plan_split`), kill-safe.

    While batches remain that no piece can hold, `cut_tail(plan)` must remove the .log's bytes
    from `plan.valid_bytes` on (and whatever else its caller's rules say) and return the other
    segments' ranges after that; the split is then planned again. Returns `split_segment`'s
    action lines."""
    plan = plan_split(log_path, others)
    while plan.tail_bytes:
        others = cut_tail(plan)
        size = log_path.stat().st_size
        if size != plan.valid_bytes:
            raise KafkaLogError(
                f"{log_path}: {size} bytes after cutting its tail at {plan.valid_bytes}"
            )
        plan = plan_split(log_path, others)
    return split_segment(plan)
