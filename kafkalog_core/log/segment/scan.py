"""The read-only batch walk of segment recovery (§3.5), shared by `LogSegment.recover` and
`verify`: one implementation of "what would recovery build from this .log".

`scan_segment` walks batch headers over the memory-mapped file, CRC-32C-checks every batch on
memoryviews and parses no records except control batches. It writes nothing: it returns a
`SegmentScan` with the valid bytes, the index entries recovery would write and where and why
the walk stopped. Callers decide what to do with it (recover truncates and writes the indexes,
verify compares them with the files on disk).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import numpy as np
from crc32c import crc32c

from kafkalog_core.errors import CorruptRecordError, LogSegmentOffsetOverflowError
from kafkalog_core.log.index.txn_index import AbortedTxn
from kafkalog_core.log.mapped import populate
from kafkalog_core.log.names import offset_from_file_name
from kafkalog_core.record.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    HEADER,
    HEADER_SIZE_UP_TO_MAGIC,
    LEGACY_RECORD_OVERHEAD_V0,
    LOG_OVERHEAD,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_MASK,
    BatchHeader,
    compute_crc,
    read_header,
)

INT32_MAX: Final = 2**31 - 1
NO_TIMESTAMP: Final = -1
DEFAULT_INDEX_INTERVAL_BYTES: Final = 4096

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")

# control record types (§1.5)
CONTROL_ABORT: Final = 0
CONTROL_COMMIT: Final = 1

# why the walk stopped before the end of the file
CRC_MISMATCH: Final = "crc-mismatch"
BAD_SIZE: Final = "size"
BAD_MAGIC: Final = "magic"
OFFSETS_NOT_INCREASING: Final = "offsets-not-increasing"
PARTIAL_BATCH: Final = "partial-batch"


@dataclass
class TxnTracker:
    """Minimal producer bookkeeping for recovery when no ProducerStateManager is given.

    Tracks, per producer, the first offset of its open transaction and answers Kafka's
    lastStableOffset(completedTxn): the first offset of the earliest *other* open transaction,
    else marker offset + 1. That is all the `.txnindex` needs (§4).
    """

    open_txns: dict[int, int]  # producer id -> currentTxnFirstOffset
    map_end_offset: int = 0

    @classmethod
    def empty(cls) -> TxnTracker:
        return cls(open_txns={})

    def on_batch(self, header: BatchHeader, control_type: int | None) -> AbortedTxn | None:
        """Apply one batch; return the AbortedTxn an ABORT marker completes, if any."""
        result: AbortedTxn | None = None
        pid = header.producer_id
        if pid >= 0:
            if control_type is not None:
                first = self.open_txns.pop(pid, None)
                if first is not None and control_type == CONTROL_ABORT:
                    others = self.open_txns.values()
                    lso = min(others) if others else header.last_offset + 1
                    result = AbortedTxn(pid, first, header.last_offset, lso)
            elif header.is_transactional and pid not in self.open_txns:
                self.open_txns[pid] = header.base_offset
        self.map_end_offset = header.last_offset + 1
        return result


@dataclass(frozen=True, slots=True)
class InvalidBatch:
    """The first batch recovery would not keep: where, why, and its claimed base offset."""

    position: int
    reason: str  # CRC_MISMATCH, BAD_SIZE, BAD_MAGIC, OFFSETS_NOT_INCREASING, PARTIAL_BATCH
    base_offset: int | None  # as its header says (None when fewer than 8 bytes remain)
    detail: str


@dataclass
class SegmentScan:
    """What recovery would build from one .log (§3.5), without having written anything."""

    log_path: Path
    base_offset: int
    size: int  # bytes in the .log
    valid_bytes: int  # bytes up to the first invalid batch
    index_offsets: np.ndarray  # offset-index entries: batch last offsets ...
    index_positions: np.ndarray  # ... and batch start positions
    walk_timestamps: np.ndarray  # time-index entries written during the walk ...
    walk_offsets: np.ndarray  # ... (without the final entry, see `time_index_entries`)
    batch_positions: np.ndarray  # every valid batch: its start position ...
    batch_base_offsets: np.ndarray  # ... its base offset ...
    batch_last_offsets: np.ndarray  # ... its last offset ...
    batch_max_timestamps: np.ndarray  # ... and its max timestamp (what index lookups rely on)
    max_timestamp: int
    offset_of_max_timestamp: int
    next_offset: int  # last valid offset + 1 (the base offset when no batch is valid)
    batch_count: int
    aborted_txns: list[AbortedTxn] = field(default_factory=list)
    invalid: InvalidBatch | None = None

    @property
    def truncated_bytes(self) -> int:
        """Bytes recovery would cut: the first invalid batch and everything after it."""
        return self.size - self.valid_bytes

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1

    def time_index_entries(self) -> tuple[np.ndarray, np.ndarray]:
        """(timestamps, offsets) of the whole time index recovery leaves, final entry included
        (the closing maybeAppend of the max timestamp, written when it is larger)."""
        ts, off = self.walk_timestamps, self.walk_offsets
        last_ts = int(ts[-1]) if len(ts) else NO_TIMESTAMP
        if self.max_timestamp > last_ts:
            ts = np.append(ts, np.int64(self.max_timestamp))
            off = np.append(off, np.int64(self.offset_of_max_timestamp))
        return ts, off


def control_type_of(batch: memoryview | bytes, header: BatchHeader) -> int | None:
    """The control record type of a control batch (None if it holds no record)."""
    from kafkalog_core.record.decoder import RecordBatch

    record = RecordBatch(batch, replace(header, position=0)).control_record()
    return None if record is None else record.type


def replay_batches(
    headers: Iterable[BatchHeader],
    batch_bytes: Callable[[BatchHeader], bytes | memoryview],
    tracker: TxnTracker,
) -> None:
    """Feed a segment's batches to `tracker` from their headers (no CRC; `batch_bytes` reads
    only a producer's control batches, for their marker): the open transactions a later
    segment inherits. The loader hands in its LogSegment's reads, verify a mapped file's."""
    for header in headers:
        control = None
        if header.producer_id >= 0 and header.is_control:
            control = control_type_of(batch_bytes(header), header)
        tracker.on_batch(header, control)


def replay_transactions(log_path: str | os.PathLike[str], tracker: TxnTracker) -> None:
    """`replay_batches` over one .log, memory-mapped. Stops quietly at a corrupt or partial
    tail, as recovery would."""
    from kafkalog_core.log.mapped import mapped_file
    from kafkalog_core.record.batch import iter_batch_headers

    with mapped_file(Path(log_path)) as view:
        try:
            replay_batches(
                iter_batch_headers(view),
                lambda header: view[header.position : header.position + header.size],
                tracker,
            )
        except CorruptRecordError:
            return


def latest_epoch(cache: Any) -> int | None:
    """A leader-epoch cache's latest epoch (property or method), None when it has none."""
    if cache is None:
        return None
    latest = cache.latest_epoch
    latest = latest() if callable(latest) else latest
    return None if latest is None or latest < 0 else int(latest)


def header_at(
    buf: bytes | bytearray | memoryview, at: int, file_position: int, path: Path
) -> BatchHeader:
    """A BatchHeader parsed at `at` of `buf`, reporting `file_position` as its position."""
    try:
        if buf[at + 16] == MAGIC_V2 and len(buf) - at >= RECORD_BATCH_OVERHEAD:
            return BatchHeader(*HEADER.unpack_from(buf, at), position=file_position)
        return replace(read_header(buf, at), position=file_position)
    except CorruptRecordError as e:
        raise CorruptRecordError(f"{path}: {e} (file position {file_position})") from None


def _legacy_problem(
    view: memoryview, p: int, total: int, check_crc: bool = True
) -> tuple[str, str] | None:
    """(reason, detail) when the v0/v1 message at `p` of `view` fails Kafka's isValid (its
    CRC unchecked without `check_crc`)."""
    magic = view[p + 16]
    if magic not in (MAGIC_V0, MAGIC_V1):
        return BAD_MAGIC, f"unknown magic byte {magic}"
    try:
        header = read_header(view, p)
    except CorruptRecordError as e:
        return BAD_SIZE, str(e)
    minimum = LEGACY_RECORD_OVERHEAD_V0 + 12
    if total < minimum:
        return BAD_SIZE, f"size {total} is smaller than the minimum {minimum}"
    if check_crc and compute_crc(view, header) != header.crc:
        return CRC_MISMATCH, f"stored CRC {header.crc} does not match the computed CRC"
    return None


def scan_segment(
    log_path: str | os.PathLike[str],
    *,
    fd: int | None = None,
    size: int | None = None,
    base_offset: int | None = None,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    producer_state: Any = None,
    leader_epoch_cache: Any = None,
    check_offsets: bool = False,
    min_offset: int | None = None,
    overflow_ok: bool = False,
    check_crc: bool = True,
) -> SegmentScan:
    """Walk a .log the way recovery does and return what recovery would build (§3.5).

    `fd` reuses an open handle (else the file is opened read-only); `size` and `base_offset`
    default to the file's size and name. `producer_state` is a `TxnTracker` (default: a fresh
    one), a `ProducerStateManager` (`update`) or anything with `on_batch(header, control_type)`;
    `leader_epoch_cache` needs `latest_epoch` and `assign(epoch, start_offset)`. Both are fed as
    the walk goes, like recovery does.

    `check_offsets` (stricter than Kafka's recovery, which only checks CRC and sizes) also stops
    at a batch whose offsets do not increase: below `min_offset` (default: the base offset) or
    not above the previous batch's last offset. Raises LogSegmentOffsetOverflowError for a batch
    whose offset does not fit the segment (Kafka splits such a segment), unless `overflow_ok`
    (the walk that plans the split: such batches are walked like the others).
    Without `check_crc` the walk goes past a batch whose CRC does not match, as a reader's
    does: the indexes a broker's own writes would have given the whole .log (`rebuild_indexes`).
    """
    path = Path(log_path)
    base = offset_from_file_name(path.name) if base_offset is None else int(base_offset)
    own_fd = fd is None
    if own_fd:
        fd = os.open(path, os.O_RDONLY)
    assert fd is not None
    try:
        if size is None:
            size = os.fstat(fd).st_size
        return _walk(
            path,
            fd,
            size,
            base,
            index_interval_bytes,
            producer_state if producer_state is not None else TxnTracker.empty(),
            leader_epoch_cache,
            check_offsets,
            base if min_offset is None else min_offset,
            overflow_ok,
            check_crc,
        )
    finally:
        if own_fd:
            os.close(fd)


def _walk(
    path: Path,
    fd: int,
    size: int,
    base: int,
    interval: int,
    tracker: Any,
    epoch_cache: Any,
    check_offsets: bool,
    min_offset: int,
    overflow_ok: bool,
    check_crc: bool = True,
) -> SegmentScan:
    """The header walk over large chunks: CRC, index entries, epochs, txns."""
    offsets: list[int] = []
    positions: list[int] = []
    stamps: list[int] = []
    stamp_offsets: list[int] = []
    batch_positions: list[int] = []
    batch_bases: list[int] = []
    batch_lasts: list[int] = []
    batch_stamps: list[int] = []
    aborted_txns: list[AbortedTxn] = []
    max_ts, max_off = NO_TIMESTAMP, base
    last_index_ts = NO_TIMESTAMP
    last_index_entry = 0
    valid = 0
    count = 0
    prev_last = min_offset - 1
    next_offset = base
    invalid: tuple[str, str] | None = None
    epoch = latest_epoch(epoch_cache)
    # a TxnTracker, or a ProducerStateManager (its `update` has the same contract)
    on_batch = getattr(tracker, "on_batch", None) or tracker.update
    unpack_header = HEADER.unpack_from
    unpack_i32 = _I32.unpack_from
    unpack_u32 = _U32.unpack_from
    with _mapped(fd, size) as chunk:
        view = chunk
        n = len(chunk)
        p = 0
        while p < n - HEADER_SIZE_UP_TO_MAGIC:
            length = unpack_i32(chunk, p + 8)[0]
            if length < LEGACY_RECORD_OVERHEAD_V0:
                # CorruptRecordException from the header walk
                invalid = (BAD_SIZE, f"size field {length} < {LEGACY_RECORD_OVERHEAD_V0}")
                break
            total = length + LOG_OVERHEAD
            if p + total > n:
                invalid = (PARTIAL_BATCH, f"declares {total} bytes, {size - valid} remain")
                break
            magic = chunk[p + 16]
            if magic == MAGIC_V2:
                if total < RECORD_BATCH_OVERHEAD:
                    invalid = (BAD_SIZE, f"size {total} < {RECORD_BATCH_OVERHEAD}")
                    break
                if (
                    check_crc
                    and crc32c(view[p + ATTRIBUTES_OFFSET : p + total])
                    != unpack_u32(chunk, p + 17)[0]
                ):
                    invalid = (CRC_MISMATCH, "stored CRC-32C does not match the batch")
                    break
                (bo, _, ple, _, _, attrs, lod, _, batch_max_ts, pid, _, _, _) = unpack_header(
                    chunk, p
                )
                last_offset = bo + lod
            else:
                invalid = _legacy_problem(view, p, total, check_crc)
                if invalid is not None:
                    break
                header = header_at(chunk, p, p, path)
                bo, ple, attrs, pid = header.base_offset, -1, header.attributes, -1
                last_offset, batch_max_ts = header.last_offset, header.max_timestamp
            if check_offsets and (bo <= prev_last or last_offset < bo):
                invalid = (
                    OFFSETS_NOT_INCREASING,
                    f"offsets {bo}..{last_offset} after {prev_last}",
                )
                break
            relative = last_offset - base
            if (relative < 0 or relative > INT32_MAX) and not overflow_ok:
                raise LogSegmentOffsetOverflowError(
                    f"Detected offset overflow at offset {last_offset} in segment "
                    f"{path} (position {p})"
                )
            if batch_max_ts > max_ts:
                max_ts, max_off = batch_max_ts, last_offset
            if valid - last_index_entry > interval:
                offsets.append(last_offset)
                positions.append(valid)
                if max_ts > last_index_ts:
                    stamps.append(max_ts)
                    stamp_offsets.append(max_off)
                    last_index_ts = max_ts
                last_index_entry = valid
            batch_positions.append(valid)
            batch_bases.append(bo)
            batch_lasts.append(last_offset)
            batch_stamps.append(batch_max_ts)
            valid += total
            count += 1
            prev_last = last_offset
            next_offset = last_offset + 1
            if magic == MAGIC_V2:
                if ple >= 0 and epoch_cache is not None and (epoch is None or ple > epoch):
                    epoch_cache.assign(ple, bo)
                    epoch = ple
                if pid >= 0 or (attrs & (CONTROL_MASK | TRANSACTIONAL_MASK)):
                    header = BatchHeader(*unpack_header(chunk, p), position=p)
                    control_type = None
                    if attrs & CONTROL_MASK:
                        control_type = control_type_of(view[p : p + total], header)
                    aborted = on_batch(header, control_type)
                    if aborted is not None:
                        aborted_txns.append(aborted)
                elif hasattr(tracker, "map_end_offset"):
                    tracker.map_end_offset = last_offset + 1
            p += total
    if invalid is None and valid < size:
        invalid = (PARTIAL_BATCH, f"{size - valid} bytes too few for a batch header")
    return SegmentScan(
        log_path=path,
        base_offset=base,
        size=size,
        valid_bytes=valid,
        index_offsets=np.asarray(offsets, np.int64),
        index_positions=np.asarray(positions, np.int64),
        walk_timestamps=np.asarray(stamps, np.int64),
        walk_offsets=np.asarray(stamp_offsets, np.int64),
        batch_positions=np.asarray(batch_positions, np.int64),
        batch_base_offsets=np.asarray(batch_bases, np.int64),
        batch_last_offsets=np.asarray(batch_lasts, np.int64),
        batch_max_timestamps=np.asarray(batch_stamps, np.int64),
        max_timestamp=max_ts,
        offset_of_max_timestamp=max_off,
        next_offset=next_offset,
        batch_count=count,
        aborted_txns=aborted_txns,
        invalid=None if invalid is None else _invalid_at(fd, valid, size, *invalid),
    )


@contextmanager
def _mapped(fd: int, size: int) -> Iterator[memoryview]:
    """The first `size` bytes of the open file, memory-mapped read-only with its page tables
    filled up front (mapped.populate): no copy, where 32 MiB preads copied every byte."""
    if size <= 0:
        yield memoryview(b"")
        return
    mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    populate(mapped)
    view = memoryview(mapped)[:size]
    try:
        yield view
    finally:
        view.release()
        with suppress(BufferError):  # a caller may still hold a slice: the GC closes it then
            mapped.close()


def _invalid_at(fd: int, position: int, size: int, reason: str, detail: str) -> InvalidBatch:
    head = os.pread(fd, 8, position) if size - position >= 8 else b""
    claimed = _I64.unpack(head)[0] if len(head) == 8 else None
    return InvalidBatch(position, reason, claimed, detail)


def index_entries_for_appends(
    sizes: np.ndarray, since: int, interval: int
) -> tuple[np.ndarray, int]:
    """Kafka's index rule over consecutive appends of `sizes` bytes: which appends get an
    index entry (bytes since the last entry > interval, checked before the append is counted)
    and the bytes since the last entry afterwards.

    When every append is larger than the interval, each one after the first gets an entry (the
    first if `since` already exceeds it): no loop. Otherwise a loop over plain ints.
    """
    n = sizes.shape[0]
    if n and int(sizes.min()) > interval:
        entries = np.arange(0 if since > interval else 1, n)
        return entries, int(sizes[-1]) + (since if n == 1 and since <= interval else 0)
    hits: list[int] = []
    for i, size in enumerate(sizes.tolist()):
        if since > interval:
            hits.append(i)
            since = 0
        since += size
    return np.asarray(hits, dtype=np.int64), since
