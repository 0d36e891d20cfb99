"""`encode_records` with the optional C loops (`kafkalog_core._native`): plan, size and write.

Non-decreasing timestamps split in C (`plan_batches`); the rest split with numpy
(`split.split_batches`) and only sizes and writes run in C. Uncompressed pieces of
`encode_records_chunked` are planned piece by piece and written into reused, cache-sized
buffers, so a log append streams through them instead of materializing the whole encode.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from kafkalog_core.native import NativeColumn
from kafkalog_core.record.batch import (
    INT32_MAX,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    Compression,
)
from kafkalog_core.record.compression import FusedCodec, fused_codec
from kafkalog_core.record.encoder.columns import binary_lengths
from kafkalog_core.record.encoder.framing import (
    batch_header_rows,
    check_batch_sizes,
    compress_regions,
    finish_batches,
)
from kafkalog_core.record.encoder.options import BatchOptions, EncodedBatches
from kafkalog_core.record.encoder.split import fixed_sizes, most_per_batch, split_batches
from kafkalog_core.record.encoder.varints import varint_size_array

__all__ = ["encode_native", "split_parameters"]


def split_parameters(options: BatchOptions) -> tuple[int, int, int]:
    """(records budget, most records per batch, offsetDelta varint size) of `split_batches`."""
    most = most_per_batch(options.max_batch_bytes)
    return (
        options.max_batch_bytes - RECORD_BATCH_OVERHEAD,
        most,
        int(varint_size_array(np.array([most - 1]))[0]),
    )


def _batches_fit(
    loops: Any, columns: tuple[NativeColumn, ...], n: int, header_sizes: np.ndarray | None,
    options: BatchOptions,
) -> bool:  # fmt: skip
    """Whether no batch can exceed max_message_bytes, known before planning any: a batch of
    several records stays within max_batch_bytes (the split's estimates are upper bounds),
    and one record alone within a batch header plus its largest possible size."""
    key, value = (max(loops.max_length(n, c), 0) for c in columns[:2])
    suffix = 1 if header_sizes is None else int(header_sizes.max())
    # length varint (<= 5), attributes, two 1-byte deltas, key and value length varints (<= 5)
    single = RECORD_BATCH_OVERHEAD + 5 + 1 + 2 + 10 + key + value + suffix
    return max(options.max_batch_bytes, single) <= options.max_message_bytes


def encode_native(
    loops: Any,
    columns: tuple[NativeColumn, NativeColumn, NativeColumn | None],
    arrays: tuple[pa.Array, pa.Array, np.ndarray],
    timestamps: np.ndarray,
    context: np.ndarray,
    options: BatchOptions,
    base_offset: int,
    chunks: tuple[int, int] | None,
) -> Iterator[EncodedBatches]:
    """Encode with the C loops. Non-decreasing timestamps split in C (the numpy split handles
    the rest); uncompressed pieces (`chunks` = (chunk_bytes, buffers)) are planned piece by
    piece when no batch can exceed max_message_bytes, so the first is written at once."""
    keys, values, header_sizes = arrays
    n = timestamps.shape[0]
    suffix_sizes = None if columns[2] is None else header_sizes
    increasing = loops.non_decreasing(context, timestamps)
    uncompressed = options.compression is Compression.NONE
    if (
        chunks is not None
        and uncompressed
        and increasing
        and _batches_fit(loops, columns, n, suffix_sizes, options)
    ):
        yield from _native_stream(
            loops, columns, timestamps, context, options, base_offset, *chunks
        )
        return
    fused = None
    if not uncompressed and hasattr(loops, "write_compressed_batches"):
        fused = fused_codec(options.compression, options.compression_level)
    bodies = None  # each record's size from the plan, for the fused write (int32: see below)
    if increasing:
        starts = np.empty(n, dtype=np.int64)
        region_sizes = np.empty(n, dtype=np.int64)
        if (
            fused is not None
            and options.max_message_bytes <= INT32_MAX
            and _batches_fit(loops, columns, n, suffix_sizes, options)
        ):
            bodies = np.empty(n, dtype=np.int32)
        count, _ = loops.plan_batches(
            starts, region_sizes, timestamps, context, *columns, *split_parameters(options), 0,
            2**63 - 1, bodies,
        )  # fmt: skip
        starts, region_sizes = starts[:count], region_sizes[:count]
    else:
        fixed, _, _ = fixed_sizes(
            keys, values, binary_lengths(keys), binary_lengths(values), header_sizes
        )
        all_timestamps = np.concatenate((context, timestamps)) if context.size else timestamps
        starts, _ = split_batches(fixed, all_timestamps, options.max_batch_bytes, context.shape[0])
        region_sizes = np.empty(starts.shape[0], dtype=np.int64)
        loops.region_sizes(region_sizes, starts, timestamps, *columns)
    counts = np.diff(np.append(starts, n))
    header_rows, max_timestamps = batch_header_rows(
        options, base_offset, starts, counts, timestamps
    )
    if fused is not None:
        yield _write_fused(
            loops, columns, fused, header_rows, starts, counts, region_sizes, bodies,
            max_timestamps, timestamps, base_offset, options,
        )  # fmt: skip
        return
    if not uncompressed:
        data = np.empty(int(region_sizes.sum()), dtype=np.uint8)
        loops.write_batches(data, None, starts, timestamps, *columns)
        yield compress_regions(
            memoryview(data), region_sizes, header_rows, starts, counts, max_timestamps,
            base_offset, options,
        )  # fmt: skip
        return
    sizes = region_sizes + RECORD_BATCH_OVERHEAD
    check_batch_sizes(sizes, starts, base_offset, options.max_message_bytes)
    header_rows["length"] = sizes - LOG_OVERHEAD
    if chunks is None:
        out = np.empty(int(sizes.sum()), dtype=np.uint8)
        loops.write_batches(out, header_rows, starts, timestamps, *columns)
        yield finish_batches(out, sizes, starts, counts, max_timestamps, base_offset, crcs=False)
        return
    yield from _native_pieces(
        loops, columns, header_rows, starts, counts, sizes, max_timestamps, timestamps,
        base_offset, *chunks,
    )  # fmt: skip


def _write_fused(
    loops: Any,
    columns: tuple[NativeColumn, NativeColumn, NativeColumn | None],
    fused: FusedCodec,
    header_rows: np.ndarray,
    starts: np.ndarray,
    counts: np.ndarray,
    region_sizes: np.ndarray,
    bodies: np.ndarray | None,
    max_timestamps: np.ndarray,
    timestamps: np.ndarray,
    base_offset: int,
    options: BatchOptions,
) -> EncodedBatches:
    """Compressed batches (lz4, snappy) written by C in one pass: each batch's records go to a
    cache-sized scratch buffer and the codec writes its blocks straight behind the header.
    `out` is sized for the worst case; np.empty touches no pages of it that stay unused.
    `bodies`: the record sizes plan_batches found, or None (they are computed again); int32
    only when no batch can exceed max.message.bytes, so no record's size can overflow one."""
    bound = int((fused.bound(region_sizes) + RECORD_BATCH_OVERHEAD).sum())
    out = np.empty(bound, dtype=np.uint8)
    sizes = np.empty(starts.shape[0], dtype=np.int64)
    written = loops.write_compressed_batches(
        out, header_rows, starts, timestamps, *columns, bodies, sizes, fused.framing,
        fused.block_size, fused.compress_into,
    )  # fmt: skip
    check_batch_sizes(sizes, starts, base_offset, options.max_message_bytes)
    return finish_batches(
        out[:written], sizes, starts, counts, max_timestamps, base_offset, crcs=False
    )


def _rows(
    columns: tuple[NativeColumn, NativeColumn, NativeColumn | None], r0: int, r1: int
) -> list[NativeColumn | None]:
    """The columns' rows [r0, r1) for the C loops (zero-copy)."""
    return [None if c is None else (c[0][r0 : r1 + 1], c[1], c[2] + r0, c[3]) for c in columns]


def _native_stream(
    loops: Any,
    columns: tuple[NativeColumn, NativeColumn, NativeColumn | None],
    timestamps: np.ndarray,
    context: np.ndarray,
    options: BatchOptions,
    base_offset: int,
    chunk_bytes: int,
    buffers: int,
) -> Iterator[EncodedBatches]:
    """Plan, fill and yield one piece of about `chunk_bytes` at a time (buffer k % `buffers`).

    Planning from a piece's first batch gives the batches a whole plan would (see
    `plan_batches`), and `_batches_fit` has ruled out a batch over max_message_bytes.
    """
    n = timestamps.shape[0]
    split = split_parameters(options)
    starts_room = np.empty(n, dtype=np.int64)
    sizes_room = np.empty(n, dtype=np.int64)
    # each record's size from the plan, for the write (an int32 fits when batches do)
    bodies = np.empty(n, dtype=np.int32) if options.max_message_bytes <= INT32_MAX else None
    pool: list[np.ndarray] = []
    row = piece = 0
    while row < n:
        count, next_row = loops.plan_batches(
            starts_room, sizes_room, timestamps, context, *columns, *split, row, chunk_bytes,
            bodies,
        )  # fmt: skip
        starts = starts_room[:count].copy()
        sizes = sizes_room[:count] + RECORD_BATCH_OVERHEAD
        counts = np.diff(np.append(starts, next_row))
        header_rows, max_timestamps = batch_header_rows(
            options, base_offset, starts, counts, timestamps[:next_row]
        )
        check_batch_sizes(sizes, starts, base_offset, options.max_message_bytes)  # (cannot fail)
        header_rows["length"] = sizes - LOG_OVERHEAD
        out = _piece_buffer(pool, piece % buffers, int(sizes.sum()), chunk_bytes)
        piece_starts = starts - row
        loops.write_batches(
            out, header_rows, piece_starts, timestamps[row:next_row],
            *_rows(columns, row, next_row), bodies,
        )  # fmt: skip
        yield finish_batches(
            out, sizes, piece_starts, counts, max_timestamps, base_offset + row, crcs=False
        )
        row, piece = next_row, piece + 1


def _native_pieces(
    loops: Any,
    columns: tuple[NativeColumn, NativeColumn, NativeColumn | None],
    header_rows: np.ndarray,
    starts: np.ndarray,
    counts: np.ndarray,
    sizes: np.ndarray,
    max_timestamps: np.ndarray,
    timestamps: np.ndarray,
    base_offset: int,
    chunk_bytes: int,
    buffers: int,
) -> Iterator[EncodedBatches]:
    """Batches planned as a whole, written in pieces of about `chunk_bytes` (at least one
    batch each), piece k into buffer k % `buffers`."""
    n = timestamps.shape[0]
    batch_count = starts.shape[0]
    ends = np.cumsum(sizes)
    firsts = [0]
    while firsts[-1] < batch_count:
        done = int(ends[firsts[-1] - 1]) if firsts[-1] else 0
        stop = int(np.searchsorted(ends, done + chunk_bytes, side="right"))
        firsts.append(max(stop, firsts[-1] + 1))
    pool: list[np.ndarray] = []
    row_starts = np.append(starts, n)
    for k, (b0, b1) in enumerate(zip(firsts[:-1], firsts[1:], strict=True)):
        r0, r1 = int(row_starts[b0]), int(row_starts[b1])
        piece_starts = starts[b0:b1] - r0
        total = int(ends[b1 - 1] - (ends[b0 - 1] if b0 else 0))
        out = _piece_buffer(pool, k % buffers, total, chunk_bytes)
        loops.write_batches(
            out, header_rows[b0:b1], piece_starts, timestamps[r0:r1], *_rows(columns, r0, r1)
        )
        yield finish_batches(
            out,
            sizes[b0:b1],
            piece_starts,
            counts[b0:b1],
            max_timestamps[b0:b1],
            base_offset + r0,
            crcs=False,
        )


def _piece_buffer(pool: list[np.ndarray], slot: int, size: int, least: int) -> np.ndarray:
    """`size` bytes of the pool's buffer `slot` (made at least `least` bytes, grown when a
    piece needs more): a piece's bytes stay valid until its slot is taken again."""
    if slot == len(pool):
        pool.append(np.empty(max(size, least), dtype=np.uint8))
    elif pool[slot].shape[0] < size:
        pool[slot] = np.empty(size, dtype=np.uint8)
    return pool[slot][:size]
