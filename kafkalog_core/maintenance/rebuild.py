"""Rebuild what `verify` finds wrong: indexes written atomically, corrupt tails quarantined,
segments whose offsets overflow them split.

Safe to kill at any point and idempotent:
- a split goes through `.cleaned` -> `.swap` (the engine's `log/split.py`, the split a load
  does too); the next run finishes or rolls back a killed one first, as a broker's load would;
- every index is written to `<name>.tmp`, fsynced and renamed over the old one;
- a corrupt tail is copied into `<segment>.log.quarantine` (fsynced, renamed into place) BEFORE
  the .log is truncated; a re-run after a kill between the two finds its own copy (same bytes)
  and only truncates, so the tail is neither lost nor stored twice;
- segments after a corrupt one (Kafka's recovery deletes them) are renamed whole to their
  quarantine name first, so an interrupted run never leaves them behind a shortened segment;
- a second run finds everything ok and writes nothing;
- a copy killed before its rename (`<quarantine name>.tmp`) holds nothing the .log lost (the
  truncate comes after the rename): the next rebuild deletes it first, and retention lists it
  (and deletes it with `--apply`) meanwhile; so does the next rebuild with an index's `.tmp`.

The quarantine name ends in neither `.log` nor an index suffix, so a broker's loader and our
`LogLoader` ignore it. Kafka's recovery deletes a truncated tail; we keep it for forensics, and
the retention job deletes it once it is older than its topic's retention.ms (counted from the
quarantine: the file's mtime).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

from kafkalog_core.log.checkpoints import (
    LeaderEpochCache,
    LeaderEpochCheckpointFile,
    atomic_write,
    fsync_dir,
)
from kafkalog_core.log.names import (
    CLEANED_FILE_SUFFIX,
    INDEX_SUFFIXES,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_FILE_SUFFIX,
    QUARANTINE_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TMP_FILE_SUFFIX,
    quarantine_file_name,
    quarantine_files,
    unfinished_write_of,
)
from kafkalog_core.log.segment.scan import DEFAULT_INDEX_INTERVAL_BYTES, TxnTracker
from kafkalog_core.log.split import (
    SplitPlan,
    copy_range,
    offset_ranges,
    same_bytes,
    split_overflowed,
)
from kafkalog_core.log.swap import complete_interrupted_swaps
from kafkalog_core.maintenance.verify import (
    CORRUPT_TAIL,
    OFFSET_OVERFLOW,
    IndexCheck,
    PartitionVerification,
    SegmentVerification,
    verify_partition,
    verify_segment,
)

QUARANTINE_SUFFIX = QUARANTINE_FILE_SUFFIX  # this module's name for it, kept for its importers
_COPY_CHUNK = 8 << 20


def _all_zero(fd: int, position: int, length: int) -> bool:
    """Whether the bytes from `position` are zeros only: a preallocated (`preallocate=true`)
    .log's unused tail, which holds no data and needs no quarantine."""
    done = 0
    while done < length:
        chunk = os.pread(fd, min(_COPY_CHUNK, length - done), position + done)
        if not chunk or any(chunk):
            return False
        done += len(chunk)
    return True


def _quarantine_names(log_path: Path, suffix: str) -> Iterator[Path]:
    for n in itertools.count():
        yield log_path.with_name(quarantine_file_name(log_path.name, n, suffix))


def quarantine_tail(log_path: Path, position: int, suffix: str = QUARANTINE_SUFFIX) -> Path | None:
    """Move the bytes of `log_path` from `position` on into a quarantine file next to it.

    The copy is durable (fsync + rename + directory fsync) before the .log is truncated. A
    quarantine file already holding exactly these bytes (a run killed before the truncate) is
    reused. Returns the quarantine file, or None when nothing but zeros followed `position`.
    """
    size = log_path.stat().st_size
    length = size - position
    fd = os.open(log_path, os.O_RDWR)
    target: Path | None = None
    try:
        if _all_zero(fd, position, length):
            _truncate(fd, position)
            return None
        for target in _quarantine_names(log_path, suffix):
            if not target.exists():
                tmp = target.with_name(target.name + ".tmp")
                copy_range(fd, position, length, tmp)
                os.replace(tmp, target)
                fsync_dir(log_path.parent)
                break
            if same_bytes(target, fd, position, length):
                break  # our own copy from a run killed before the truncate
        _truncate(fd, position)
    finally:
        os.close(fd)
    return target


def _truncate(fd: int, position: int) -> None:
    """Cut the .log at `position` (after its tail is safe in quarantine)."""
    os.ftruncate(fd, position)
    os.fsync(fd)


def quarantine_whole(log_path: Path, suffix: str = QUARANTINE_SUFFIX) -> Path:
    """Rename a whole segment's .log to a free quarantine name and drop its indexes (they are
    derived data; the loader would delete them as orphans anyway)."""
    target = next(p for p in _quarantine_names(log_path, suffix) if not p.exists())
    os.replace(log_path, target)
    os.utime(target)  # its age (retention's clock for it) counts from the quarantine, as a tail's
    fsync_dir(log_path.parent)
    stem = log_path.name[: -len(LOG_FILE_SUFFIX)]
    for index_suffix in INDEX_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            (log_path.parent / (stem + index_suffix)).unlink()
    return target


def remove_unfinished_writes(
    partition_dir: Path, suffix: str = QUARANTINE_SUFFIX, log_name: str | None = None
) -> list[str]:
    """Delete what a killed rebuild left half-written (of the segment `log_name` only, when
    given): `<quarantine name>.tmp` copies (their bytes are still in the .log or a finished
    quarantine file) and `<segment>.<index>.tmp` files (the index is rebuilt from the .log).
    Returns one action line per file."""
    copies = quarantine_files(partition_dir, suffix, unfinished=True, log_name=log_name)
    prefix = "" if log_name is None else log_name[: -len(LOG_FILE_SUFFIX)] + "."
    indexes = [  # a snapshot's or the epoch checkpoint's .tmp is left to its writer
        p
        for p in sorted(partition_dir.glob(prefix + "*" + TMP_FILE_SUFFIX))
        if unfinished_write_of(p.name) in INDEX_SUFFIXES
    ]
    for path in copies + indexes:
        path.unlink(missing_ok=True)
    return [f"deleted unfinished quarantine copy {p.name}" for p in copies] + [
        f"deleted unfinished index write {p.name}" for p in indexes
    ]


def _write_index(check: IndexCheck, rebuild_all: bool) -> bool:
    """Write `check.expected` atomically when the file needs it; True if written."""
    if not (check.needs_rebuild or rebuild_all):
        return False
    if not check.needs_rebuild and not check.expected and not check.path.exists():
        return False  # no aborted txn: no .txnindex needed, even with rebuild_all
    atomic_write(check.path, check.expected)
    return True


def _apply(v: SegmentVerification, rebuild_all: bool, suffix: str) -> SegmentVerification:
    """Quarantine the corrupt tail of one verified segment, then write its indexes."""
    if v.log_status == OFFSET_OVERFLOW or v.scan is None:
        v.action = "none: offsets overflow the segment (rebuild_partition splits it)"
        return v
    actions = []
    if v.log_status == CORRUPT_TAIL:
        target = quarantine_tail(v.log_path, v.scan.valid_bytes, suffix)
        if target is None:
            actions.append(f"cut {v.scan.truncated_bytes} zero bytes (preallocated tail)")
        else:
            v.bytes_quarantined, v.quarantine_file = v.scan.truncated_bytes, target.name
            actions.append(f"quarantined {v.bytes_quarantined} tail bytes to {target.name}")
    written = [c.path.name for c in v.indexes if _write_index(c, rebuild_all)]
    if written:
        actions.append("rebuilt " + ", ".join(written))
    v.action = "; ".join(actions) or "none"
    return v


def rebuild_segment(
    log_path: str | os.PathLike[str],
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    *,
    rebuild_all: bool = False,
    quarantine_suffix: str = QUARANTINE_SUFFIX,
    producer_state: TxnTracker | None = None,
) -> SegmentVerification:
    """Verify one segment and rebuild what is not ok (every index with `rebuild_all`); a
    corrupt tail goes to a quarantine file. Returns the verification with the action taken."""
    path = Path(log_path)
    removed = remove_unfinished_writes(path.parent, quarantine_suffix, path.name)
    v = _apply(
        verify_segment(path, index_interval_bytes, producer_state=producer_state),
        rebuild_all,
        quarantine_suffix,
    )
    if removed:
        v.action = "; ".join(removed + ([] if v.action == "none" else [v.action]))
    return v


def _finish_interrupted_split(partition_dir: Path) -> list[str]:
    """Complete (all of its files reached `.swap`) or roll back (a `.cleaned` remains) a split a
    kill interrupted, as a broker's load would (§6 passes 1-3). Only when one is pending: the
    same passes delete other writers' leftovers, which rebuild otherwise leaves alone."""
    if not any(
        p.name.endswith((CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)) for p in partition_dir.iterdir()
    ):
        return []
    report = complete_interrupted_swaps(partition_dir)
    return [f"deleted {name} (an interrupted split or clean)" for name in report.deleted_files] + [
        f"completed the swap of {name}" for name in report.swaps_completed
    ]


def _offset_ranges(segments: list[SegmentVerification], skip: int) -> list[tuple[int, int]]:
    """[base, next) of every segment but `segments[skip]` (`split.offset_ranges`); the offsets
    of one that overflows too (no scan) are unknown."""
    known = [(s.base_offset, None if s.scan is None else s.scan.next_offset) for s in segments]
    return offset_ranges(known, skip)


def _quarantine_split_tail(
    pv: PartitionVerification, k: int, suffix: str, actions: list[str], plan: SplitPlan
) -> list[tuple[int, int]]:
    """What no piece of segment `k`'s split can hold, quarantined with the segments after it
    (recovery drops them after a corrupt tail); the offset ranges of those before it."""
    log_path = pv.segments[k].log_path
    for later in reversed(pv.segments[k + 1 :]):
        if later.log_path.exists():
            target = quarantine_whole(later.log_path, suffix)
            actions.append(f"quarantined {later.log_path.name} whole to {target.name}")
    target = quarantine_tail(log_path, plan.valid_bytes, suffix)
    if target is None:
        actions.append(f"cut {plan.tail_bytes} zero bytes (preallocated tail)")
    else:
        actions.append(
            f"quarantined {plan.tail_bytes} tail bytes of {log_path.name} to "
            f"{target.name} ({plan.stop})"
        )
    return _offset_ranges(pv.segments[: k + 1], k)


def _split_overflowing(
    pv: PartitionVerification, index_interval_bytes: int, suffix: str
) -> PartitionVerification:
    """Split each segment whose offsets overflow it, the last one first (so the segments after
    it are known), the way a broker's load does; then verify the partition again. Batches no
    piece can hold are a corrupt tail: quarantined with the segments after it, as recovery
    would drop them."""
    actions = list(pv.actions)
    for _ in range(len(pv.segments)):
        over = [
            k
            for k, v in enumerate(pv.segments)
            if v.log_status == OFFSET_OVERFLOW and not v.after_corrupt_segment
        ]
        if not over:
            break
        k = over[-1]
        v = pv.segments[k]
        cut = functools.partial(_quarantine_split_tail, pv, k, suffix, actions)
        actions += split_overflowed(v.log_path, _offset_ranges(pv.segments, k), cut)
        pv = verify_partition(pv.dir, index_interval_bytes)
    pv.actions = actions
    return pv


def rebuild_partition(
    partition_dir: str | os.PathLike[str],
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    *,
    rebuild_all: bool = False,
    quarantine_suffix: str = QUARANTINE_SUFFIX,
) -> PartitionVerification:
    """`rebuild_segment` for a whole partition, the way a broker's load leaves it (§6): a
    segment whose offsets overflow it split (`log/split.py`), segments after a corrupt one
    quarantined whole (Kafka deletes them), producer snapshots
    above the new log end offset deleted, leader-epoch entries at or after it dropped
    (truncateFromEnd), orphan index files and what a killed rebuild left half-written deleted."""
    removed = remove_unfinished_writes(Path(partition_dir), quarantine_suffix)
    removed += _finish_interrupted_split(Path(partition_dir))
    pv = verify_partition(partition_dir, index_interval_bytes)
    pv.actions.extend(removed)
    pv = _split_overflowing(pv, index_interval_bytes, quarantine_suffix)
    # later segments first: a kill then still leaves the corrupt segment to be found next run
    for v in reversed(pv.segments):
        if v.after_corrupt_segment:
            target = quarantine_whole(v.log_path, quarantine_suffix)
            v.bytes_quarantined, v.quarantine_file = v.size, target.name
            v.action = "quarantined whole segment (after a corrupt one)"
    for v in pv.segments:
        if not v.after_corrupt_segment:
            _apply(v, rebuild_all, quarantine_suffix)
    for p in pv.stale_snapshots:
        p.unlink(missing_ok=True)
        pv.actions.append(f"deleted {p.name}")
    if pv.stale_epochs:
        cache = LeaderEpochCache(LeaderEpochCheckpointFile(pv.dir / LEADER_EPOCH_CHECKPOINT_FILE))
        cache.truncate_from_end(pv.log_end_offset)
        cache.write()
        pv.actions.append(f"leader-epoch-checkpoint truncated from {pv.log_end_offset}")
    for p in pv.orphan_index_files:
        p.unlink(missing_ok=True)
        pv.actions.append(f"deleted orphan {p.name}")
    return pv
