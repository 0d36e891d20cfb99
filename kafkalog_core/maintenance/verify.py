"""Read-only verification of segments the way a broker would judge them (§3.5-3.7, §4, §6, §15).

`verify_segment` / `verify_partition` never open a file for writing, never create a missing
index and never rebuild (unlike `LogSegment.open` / `PartitionLog.open`): they read the .log
with `scan_segment` and the index files as bytes, and report per segment a status for the
.log (`ok`, `corrupt-tail`, `offset-overflow`) and for each index (`ok`, `missing`,
`zero-padded`, `wrong-entries`). An offset or time index is `ok` when every lookup through it
is right (`index_lookups`), whatever spacing it was written at; the row notes an index that
differs from what recovery builds at `index.interval.bytes`. The transaction index has one
right content and is compared byte for byte. `rebuild` acts on these reports and writes what
recovery would build.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kafkalog_core.errors import KafkaLogError, LogSegmentOffsetOverflowError
from kafkalog_core.log.checkpoints import EpochEntry, LeaderEpochCheckpointFile
from kafkalog_core.log.index.offset_index import DEFAULT_MAX_INDEX_SIZE, OffsetIndex
from kafkalog_core.log.index.time_index import TimeIndex
from kafkalog_core.log.index.txn_index import ENTRY_SIZE as TXN_ENTRY_SIZE
from kafkalog_core.log.index.txn_index import AbortedTxn
from kafkalog_core.log.names import (
    INDEX_FILE_SUFFIX,
    INDEX_SUFFIXES,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    offset_from_file_name,
    segment_log_files,
)
from kafkalog_core.log.producer_state import list_snapshots
from kafkalog_core.log.segment.scan import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    SegmentScan,
    TxnTracker,
    replay_transactions,
    scan_segment,
)
from kafkalog_core.maintenance.index_lookups import (
    IndexRule,
    offset_index_problem,
    strip_zero_entries,
    time_index_problem,
)

# statuses
OK: Final = "ok"
MISSING: Final = "missing"
ZERO_PADDED: Final = "zero-padded"
WRONG_ENTRIES: Final = "wrong-entries"  # an entry would send a reader to the wrong place
CORRUPT_TAIL: Final = "corrupt-tail"
OFFSET_OVERFLOW: Final = "offset-overflow"  # needs Kafka's segment split, not a rebuild
NOT_CHECKED: Final = "not-checked"


@dataclass
class IndexCheck:
    """One index file's verdict, and what recovery would write in its place (`expected`)."""

    path: Path
    status: str
    problem: str = ""
    expected: bytes = field(default=b"", repr=False)
    note: str = ""  # an ok index that recovery would space differently

    @property
    def needs_rebuild(self) -> bool:
        return self.status not in (OK, NOT_CHECKED)


@dataclass
class SegmentVerification:
    """The verdict on one segment; `rebuild` fills in the action fields."""

    log_path: Path
    base_offset: int
    size: int
    log_status: str
    index: IndexCheck
    time_index: IndexCheck
    txn_index: IndexCheck
    scan: SegmentScan | None = field(default=None, repr=False)
    problems: list[str] = field(default_factory=list)
    after_corrupt_segment: bool = False  # Kafka's recovery would delete this segment
    action: str = "none"
    bytes_quarantined: int = 0
    quarantine_file: str | None = None

    @property
    def indexes(self) -> tuple[IndexCheck, IndexCheck, IndexCheck]:
        return self.index, self.time_index, self.txn_index

    @property
    def is_ok(self) -> bool:
        return (
            self.log_status == OK
            and not self.after_corrupt_segment
            and not any(i.needs_rebuild for i in self.indexes)
        )

    def to_dict(self) -> dict[str, Any]:
        """One flat row (plain str/int/None values) for a Spark DataFrame or Arrow table."""
        invalid = self.scan.invalid if self.scan is not None else None
        return {
            "topic_partition": self.log_path.parent.name,
            "base_offset": self.base_offset,
            "log_file": self.log_path.name,
            "size_bytes": self.size,
            "log_status": self.log_status,
            "index_status": self.index.status,
            "time_index_status": self.time_index.status,
            "txn_index_status": self.txn_index.status,
            "bad_batch_reason": invalid.reason if invalid else None,
            "first_bad_offset": invalid.base_offset if invalid else None,
            "first_bad_position": invalid.position if invalid else None,
            "bytes_after_bad": self.scan.truncated_bytes if invalid and self.scan else 0,
            "after_corrupt_segment": self.after_corrupt_segment,
            "problem": "; ".join(self.problems) or None,
            "note": "; ".join(i.note for i in self.indexes if i.note) or None,
            "bytes_quarantined": self.bytes_quarantined,
            "quarantine_file": self.quarantine_file,
            "action": self.action,
        }


@dataclass
class PartitionVerification:
    """Every segment of a partition dir plus the partition-level files (§6 steps 11-12)."""

    dir: Path
    segments: list[SegmentVerification]
    log_end_offset: int
    stale_snapshots: list[Path] = field(default_factory=list)  # above the log end offset
    stale_epochs: list[EpochEntry] = field(default_factory=list)  # at/after the log end offset
    orphan_index_files: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)

    @property
    def is_ok(self) -> bool:
        return all(s.is_ok for s in self.segments) and not self.problems

    def to_rows(self) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.segments]


# ---- index comparison ----------------------------------------------------------------------------


def _expected_offset_index(scan: SegmentScan, path: Path) -> bytes:
    size = max(DEFAULT_MAX_INDEX_SIZE, (len(scan.index_offsets) + 1) * OffsetIndex.ENTRY_SIZE)
    index = OffsetIndex(path, scan.base_offset, size, load=False)  # in memory only
    index.append_many(scan.index_offsets, scan.index_positions)
    return index.to_bytes()


def _expected_time_index(scan: SegmentScan, path: Path) -> bytes:
    ts, off = scan.time_index_entries()
    size = max(DEFAULT_MAX_INDEX_SIZE, (len(ts) + 2) * TimeIndex.ENTRY_SIZE)
    index = TimeIndex(path, scan.base_offset, size, load=False)  # in memory only
    index.maybe_append_many(ts, off)
    return index.to_bytes()


def _first_txn_difference(disk: bytes, expected: bytes) -> str:
    for at in range(0, max(len(disk), len(expected)), TXN_ENTRY_SIZE):
        a, b = disk[at : at + TXN_ENTRY_SIZE], expected[at : at + TXN_ENTRY_SIZE]
        if a != b:
            shown = [
                str(AbortedTxn.from_bytes(x)) if len(x) == TXN_ENTRY_SIZE else "none"
                for x in (a, b)
            ]
            return f"entry {at // TXN_ENTRY_SIZE}: on disk {shown[0]}, expected {shown[1]}"
    return "same entries"


def _compare(path: Path, expected: bytes, describe: Callable[[bytes, bytes], str]) -> IndexCheck:
    """The file at `path` against the only right content, `expected`; `describe(disk,
    expected)` names the first difference. Trailing zeros after it are `zero-padded`."""
    try:
        disk = path.read_bytes()
    except FileNotFoundError:
        return IndexCheck(path, MISSING, f"{path.name} is missing", expected)
    if disk == expected:
        return IndexCheck(path, OK, "", expected)
    if len(disk) > len(expected) and disk.startswith(expected) and not any(disk[len(expected) :]):
        zeros = len(disk) - len(expected)
        return IndexCheck(path, ZERO_PADDED, f"{path.name}: {zeros} trailing zero bytes", expected)
    return IndexCheck(path, WRONG_ENTRIES, f"{path.name}: {describe(disk, expected)}", expected)


def _judge(
    path: Path, scan: SegmentScan, rule: IndexRule, expected: bytes, entry_size: int, interval: int
) -> IndexCheck:
    """An offset or time index by its lookups (`rule`): `ok` when none goes wrong, whatever
    its spacing; `zero-padded` when only trailing zero entries do; else `wrong-entries`."""
    try:
        disk = path.read_bytes()
    except FileNotFoundError:
        return IndexCheck(path, MISSING, f"{path.name} is missing", expected)
    problem = rule(disk, scan)
    if problem is None:
        note = ""
        if disk != expected:
            note = (
                f"{path.name}: {len(disk) // entry_size} entries, right for every lookup; "
                f"recovery at index.interval.bytes={interval} writes "
                f"{len(expected) // entry_size}"
            )
        return IndexCheck(path, OK, "", expected, note)
    body = strip_zero_entries(disk, entry_size)
    if len(body) < len(disk) and rule(body, scan) is None:
        zeros = len(disk) - len(body)
        return IndexCheck(path, ZERO_PADDED, f"{path.name}: {zeros} trailing zero bytes", expected)
    return IndexCheck(path, WRONG_ENTRIES, f"{path.name}: {problem}", expected)


def _txn_check(path: Path, scan: SegmentScan) -> IndexCheck:
    expected = b"".join(t.to_bytes() for t in scan.aborted_txns)
    if not path.exists() and not expected:
        return IndexCheck(path, OK, "", expected)  # no aborted txn needs one
    return _compare(path, expected, _first_txn_difference)


# ---- segments and partitions -----------------------------------------------------------------------


def _sibling(log_path: Path, suffix: str) -> Path:
    return log_path.with_name(log_path.name[: -len(LOG_FILE_SUFFIX)] + suffix)


def verify_segment(
    log_path: str | os.PathLike[str],
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    *,
    producer_state: Any = None,
    min_offset: int | None = None,
) -> SegmentVerification:
    """Check one segment's batches (CRC, sizes, magic, increasing offsets), judge its .index and
    .timeindex by their lookups and compare its .txnindex with what recovery would build.
    Strictly read-only.

    `producer_state` (a `TxnTracker`) carries open transactions from earlier segments; without
    it a transaction that began in an earlier segment is not seen (use `verify_partition`).
    """
    path = Path(log_path)
    base = offset_from_file_name(path.name)
    checks = [
        IndexCheck(_sibling(path, s), NOT_CHECKED)
        for s in (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)
    ]
    size = path.stat().st_size
    try:
        scan = scan_segment(
            path,
            index_interval_bytes=index_interval_bytes,
            producer_state=producer_state,
            check_offsets=True,
            min_offset=min_offset,
        )
    except LogSegmentOffsetOverflowError as e:
        return SegmentVerification(path, base, size, OFFSET_OVERFLOW, *checks, problems=[str(e)])
    index = _judge(
        checks[0].path,
        scan,
        offset_index_problem,
        _expected_offset_index(scan, path),
        OffsetIndex.ENTRY_SIZE,
        index_interval_bytes,
    )
    time_index = _judge(
        checks[1].path,
        scan,
        time_index_problem,
        _expected_time_index(scan, path),
        TimeIndex.ENTRY_SIZE,
        index_interval_bytes,
    )
    txn_index = _txn_check(checks[2].path, scan)
    problems = []
    log_status = OK
    if scan.invalid is not None:
        bad = scan.invalid
        log_status = CORRUPT_TAIL
        problems.append(
            f"{path.name}: {bad.reason} at position {bad.position} (batch base offset "
            f"{bad.base_offset}): {bad.detail}; {scan.truncated_bytes} bytes from there on"
        )
    problems += [c.problem for c in (index, time_index, txn_index) if c.status != OK]
    return SegmentVerification(
        path, base, size, log_status, index, time_index, txn_index, scan, problems
    )


def verify_partition(
    partition_dir: str | os.PathLike[str],
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    *,
    only_segments: Collection[int] | None = None,
) -> PartitionVerification:
    """`verify_segment` for every segment in offset order, with the producer state carried from
    one segment to the next, plus what a broker's load would change in the partition files:
    segments after a corrupt one, snapshots above the log end offset, leader-epoch entries at or
    after it, orphan index files. Strictly read-only.

    `only_segments` (base offsets of consecutive segments) verifies a slice of a big partition,
    so several tasks can share it: the open transactions of the segments before the slice are
    replayed from their headers; the partition-file checks run only in the slice holding the
    last segment (and see only what that slice knows)."""
    pdir = Path(partition_dir)
    tracker = TxnTracker.empty()
    segments: list[SegmentVerification] = []
    log_end: int | None = None
    next_offset = 0
    corrupt_seen = False
    logs = segment_log_files(pdir)
    all_bases = {offset_from_file_name(log.name) for log in logs}
    slice_only = False  # a slice without the last segment: no partition-file checks
    if only_segments is not None:
        wanted = set(only_segments)
        bases = [offset_from_file_name(log.name) for log in logs]
        first = next((k for k, base in enumerate(bases) if base in wanted), len(logs))
        for log in logs[:first]:
            replay_transactions(log, tracker)
        slice_only = not bases or bases[-1] not in wanted
        logs = [log for log, base in zip(logs, bases, strict=True) if base in wanted]
        if logs:
            next_offset = offset_from_file_name(logs[0].name)
    for log in logs:
        base = offset_from_file_name(log.name)
        v = verify_segment(
            log, index_interval_bytes, producer_state=tracker, min_offset=max(base, next_offset)
        )
        if corrupt_seen:
            v.after_corrupt_segment = True
            v.problems.append("follows a segment with a corrupt tail: recovery drops it")
        elif v.scan is not None:
            next_offset = v.scan.next_offset
            log_end = next_offset
            corrupt_seen = v.log_status == CORRUPT_TAIL
        segments.append(v)
    leo = 0 if log_end is None else log_end
    result = PartitionVerification(pdir, segments, leo)
    if not segments or slice_only:
        return result
    result.stale_snapshots = [p for off, p in list_snapshots(pdir) if off > leo]
    if result.stale_snapshots:
        names = ", ".join(p.name for p in result.stale_snapshots)
        result.problems.append(f"producer snapshots above the log end offset {leo}: {names}")
    epochs_file = LeaderEpochCheckpointFile(pdir / LEADER_EPOCH_CHECKPOINT_FILE)
    if epochs_file.exists():
        result.stale_epochs = [e for e in epochs_file.read() if e.start_offset >= leo]
        if result.stale_epochs:
            result.problems.append(
                f"leader-epoch-checkpoint entries at or after the log end offset {leo}: "
                f"{result.stale_epochs}"
            )
    bases = all_bases  # a slice's index files are not orphans of the others'
    for p in sorted(pdir.iterdir()):
        if p.name.endswith(INDEX_SUFFIXES):
            with contextlib.suppress(KafkaLogError):
                if offset_from_file_name(p.name) not in bases:
                    result.orphan_index_files.append(p)
    if result.orphan_index_files:
        result.problems.append(
            "index files without a .log: " + ", ".join(p.name for p in result.orphan_index_files)
        )
    return result


def verify_time_index(segment: Any) -> list[str]:
    """Problems of a `LogSegment`'s in-memory time index against its .log (empty = every lookup
    through it is right; both offset conventions, batch-level and 2.x record-level, are)."""
    scan = scan_segment(
        segment.log_path,
        base_offset=segment.base_offset,
        index_interval_bytes=segment.index_interval_bytes,
    )
    problem = time_index_problem(segment.time_index.to_bytes(), scan)
    return [] if problem is None else [f"{segment.time_index.path}: {problem}"]
