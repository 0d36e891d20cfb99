"""Move a written segment to another base offset without encoding it again.

A v2 batch's CRC covers its bytes from the attributes on (§1.1); the base offset sits before
them, so moving a batch is one 8-byte write. The .index and .timeindex hold offsets relative to
the segment's base offset (§3.1) and stay as they are; the .txnindex holds absolute offsets and
shifts; the file names carry the base offset. So a writer that stages segments before it knows
where its records land in the partition (the data-source writer: its tasks cannot count first)
moves them into place afterwards, and the bytes equal what writing at the final offsets gives.
`moved_batches` hands a segment's batches, moved, to another log's `append_batches` (a staged
range that turns out to continue an existing segment: new rolls and index entries, same batches).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import numpy as np

from kafkalog_core.errors import CorruptRecordError, KafkaLogError
from kafkalog_core.log.index.txn_index import AbortedTxn
from kafkalog_core.log.names import (
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    log_file_name,
    offset_from_file_name,
)
from kafkalog_core.record.batch import BASE_OFFSET_OFFSET, MAGIC_V2, iter_batch_headers
from kafkalog_core.record.encoder import EncodedBatches

_INT64 = struct.Struct(">q")
_TXN_ENTRY_SIZE = 34


class RebaseError(KafkaLogError):
    """A segment cannot be moved: not record batch v2, or the move would overlap a file."""


def _v2_headers(path: Path, buf) -> list:
    """The batch headers of a segment's bytes; RebaseError unless all are record batch v2."""
    try:
        headers = list(iter_batch_headers(buf))
    except CorruptRecordError as error:
        raise RebaseError(f"{path}: {error}") from None
    for header in headers:
        if header.magic != MAGIC_V2:
            raise RebaseError(
                f"{path}: batch at position {header.position} has magic {header.magic}; "
                "only record batch v2 can move without re-encoding"
            )
    return headers


def _shift_batches(path: Path, delta: int) -> int:
    """Add `delta` to every batch's base offset, in place. Returns the batches moved."""
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "r+b") as fh, mmap.mmap(fh.fileno(), 0) as buf:
        headers = _v2_headers(path, buf)
        for header in headers:
            _INT64.pack_into(buf, header.position + BASE_OFFSET_OFFSET, header.base_offset + delta)
        # No msync here: the patched pages are in the page cache like any write, and whoever
        # makes the file durable fsyncs it (msync would force out every dirty page of a file
        # staged without fsync, which the relayout then copies anyway).
    return len(headers)


def _shift_txn_index(path: Path, delta: int) -> None:
    data = path.read_bytes()
    if len(data) % _TXN_ENTRY_SIZE:
        raise RebaseError(f"{path}: size {len(data)} is not a multiple of {_TXN_ENTRY_SIZE}")
    shifted = b"".join(
        AbortedTxn(
            e.producer_id, e.first_offset + delta, e.last_offset + delta,
            e.last_stable_offset + delta, e.version,
        ).to_bytes()
        for e in (AbortedTxn.from_bytes(data, at) for at in range(0, len(data), _TXN_ENTRY_SIZE))
    )  # fmt: skip
    path.write_bytes(shifted)


def rebase_segment(log_path: str | os.PathLike[str], new_base_offset: int) -> Path:
    """Move the segment of `log_path` (and its index files) to `new_base_offset`; returns the
    new .log path. For files private to a writer (a staging dir): it rewrites in place."""
    path = Path(log_path)
    old_base = offset_from_file_name(path.name)
    delta = new_base_offset - old_base
    if delta == 0:
        return path
    stem_new = log_file_name(new_base_offset)[: -len(LOG_FILE_SUFFIX)]
    siblings = [
        path.with_name(path.name[: -len(LOG_FILE_SUFFIX)] + suffix)
        for suffix in (
            LOG_FILE_SUFFIX,
            INDEX_FILE_SUFFIX,
            TIME_INDEX_FILE_SUFFIX,
            TXN_INDEX_FILE_SUFFIX,
        )
    ]
    targets = [p.with_name(stem_new + p.name[len(stem_new) :]) for p in siblings]
    for target in targets:
        if target.exists():
            raise RebaseError(f"cannot move {path.name} to {target.name}: the file exists")
    _shift_batches(path, delta)
    if siblings[3].exists():
        _shift_txn_index(siblings[3], delta)
    for source, target in zip(siblings, targets, strict=True):
        if source.exists():
            os.replace(source, target)
    return targets[0]


def rebase_segments(log_paths: list[Path], first_offset: int) -> list[Path]:
    """Move a run of consecutive segments (oldest first) so the first starts at `first_offset`,
    keeping their spacing. Moving up goes newest first, down oldest first, so no move lands on
    a file still to be moved."""
    if not log_paths:
        return []
    delta = first_offset - offset_from_file_name(log_paths[0].name)
    order = list(reversed(log_paths)) if delta > 0 else list(log_paths)
    moved = {p: rebase_segment(p, offset_from_file_name(p.name) + delta) for p in order}
    return [moved[p] for p in log_paths]


def moved_batches(
    log_path: str | os.PathLike[str],
    delta: int,
    *,
    start: int = 0,
    piece_bytes: int = 64 << 20,
) -> Iterator[EncodedBatches]:
    """The batches of a segment from byte position `start` (a batch boundary), base offsets plus
    `delta`, in pieces of about `piece_bytes` (whole batches), ready for
    `PartitionLog.append_batches`; the file is not changed.

    With `delta` 0 a piece is a slice of the memory-mapped file itself (no copy in Python: the
    append writes it straight from the page cache); a piece's buffer is released when the next
    one is asked for, so use each before advancing. Otherwise a piece is a copy with its base
    offsets patched (8 bytes per batch).
    """
    path = Path(log_path)
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= start:
            return
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            headers = _v2_headers(path, memoryview(buf)[start:])
            at = 0
            while at < len(headers):
                first = headers[at].position
                stop = at + 1
                while stop < len(headers) and headers[stop].position - first < piece_bytes:
                    stop += 1
                piece = _moved_piece(buf, start, headers[at:stop], delta)
                try:
                    yield piece
                finally:
                    with suppress(BufferError):
                        piece.buffer.release()
                at = stop
        finally:
            with suppress(BufferError):  # a caller still holding a piece: the GC closes it then
                buf.close()


def _moved_piece(buf: mmap.mmap, start: int, headers: list, delta: int) -> EncodedBatches:
    """Batches `headers` (positions relative to `start`) of the mapped file as one piece."""
    first = headers[0].position
    end = headers[-1].position + headers[-1].size
    if delta == 0:
        piece: memoryview | bytearray = memoryview(buf)[start + first : start + end]
    else:
        piece = bytearray(buf[start + first : start + end])
        for h in headers:
            _INT64.pack_into(piece, h.position - first + BASE_OFFSET_OFFSET, h.base_offset + delta)

    def column(values) -> np.ndarray:
        return np.fromiter(values, dtype=np.int64, count=len(headers))

    bases = column(h.base_offset + delta for h in headers)
    return EncodedBatches(
        buffer=memoryview(piece),
        positions=column(h.position - first for h in headers),
        sizes=column(h.size for h in headers),
        base_offsets=bases,
        last_offsets=bases + column(h.last_offset_delta for h in headers),
        max_timestamps=column(h.max_timestamp for h in headers),
        record_counts=column(h.records_count for h in headers),
        start_offset=int(bases[0]),
    )
