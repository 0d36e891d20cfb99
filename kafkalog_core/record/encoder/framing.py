"""The v2 batch header around encoded records, shared by the numpy and the C paths of `encode`.

Step 4 of the vectorized path (see `encode`'s doc): every header of a run is filled at once from
a numpy structured array (`HEADER_DTYPE`), compressed batches get their headers written around
the compressed records regions, sizes are checked against max.message.bytes, and one CRC-32C
per batch is computed; `finish_batches` hands the laid-out bytes back as `EncodedBatches`.
"""

from __future__ import annotations

import numpy as np
from crc32c import crc32c

from kafkalog_core.errors import RecordTooLargeError
from kafkalog_core.record.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    INT32_MAX,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TimestampType,
    make_attributes,
)
from kafkalog_core.record.encoder.options import BatchOptions, EncodedBatches

__all__ = [
    "HEADER_DTYPE",
    "batch_header_rows",
    "check_batch_sizes",
    "compress_regions",
    "fill_crcs",
    "finish_batches",
]

# The v2 header as a packed numpy record: lets all headers of a run be filled at once.
HEADER_DTYPE = np.dtype(
    [
        ("base_offset", ">i8"),
        ("length", ">i4"),
        ("partition_leader_epoch", ">i4"),
        ("magic", "i1"),
        ("crc", ">u4"),
        ("attributes", ">i2"),
        ("last_offset_delta", ">i4"),
        ("base_timestamp", ">i8"),
        ("max_timestamp", ">i8"),
        ("producer_id", ">i8"),
        ("producer_epoch", ">i2"),
        ("base_sequence", ">i4"),
        ("records_count", ">i4"),
    ]
)
assert HEADER_DTYPE.itemsize == RECORD_BATCH_OVERHEAD


def batch_header_rows(
    options: BatchOptions,
    base_offset: int,
    starts: np.ndarray,
    counts: np.ndarray,
    timestamps: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Every header but length and CRC of the batches at `starts` (rows of `timestamps`, which
    ends with the last batch's last record), and their maxTimestamps."""
    header_rows = np.zeros(starts.shape[0], dtype=HEADER_DTYPE)
    header_rows["base_offset"] = base_offset + starts
    header_rows["partition_leader_epoch"] = options.partition_leader_epoch
    header_rows["magic"] = MAGIC_V2
    header_rows["attributes"] = make_attributes(
        options.compression, options.timestamp_type, options.is_transactional
    )
    header_rows["last_offset_delta"] = counts - 1
    header_rows["base_timestamp"] = timestamps[starts]
    if options.timestamp_type is TimestampType.LOG_APPEND_TIME:
        max_timestamps = np.full(starts.shape[0], options.log_append_time_ms, dtype=np.int64)
    else:
        max_timestamps = np.maximum(np.maximum.reduceat(timestamps, starts), NO_TIMESTAMP)
    header_rows["max_timestamp"] = max_timestamps
    header_rows["producer_id"] = options.producer_id
    header_rows["producer_epoch"] = options.producer_epoch
    if options.base_sequence == NO_SEQUENCE:
        header_rows["base_sequence"] = NO_SEQUENCE
    else:  # incrementSequence with wraparound past Int.MAX: the records before each batch
        header_rows["base_sequence"] = (options.base_sequence + starts) % (INT32_MAX + 1)
    header_rows["records_count"] = counts
    return header_rows, max_timestamps


def compress_regions(
    data: memoryview,
    region_sizes: np.ndarray,
    header_rows: np.ndarray,
    starts: np.ndarray,
    counts: np.ndarray,
    max_timestamps: np.ndarray,
    base_offset: int,
    options: BatchOptions,
) -> EncodedBatches:
    """Compress each batch's records region (laid out back to back in `data`), one C call per
    batch, and put the headers around the results."""
    from kafkalog_core.record.compression import compress_many

    batch_count = starts.shape[0]
    region_offsets = np.zeros(batch_count + 1, dtype=np.int64)
    np.cumsum(region_sizes, out=region_offsets[1:])
    payloads = compress_many(
        options.compression,
        data,
        zip(region_offsets[:-1].tolist(), region_offsets[1:].tolist(), strict=True),
        options.compression_level,
    )
    sizes = np.fromiter(map(len, payloads), dtype=np.int64, count=batch_count)
    sizes += RECORD_BATCH_OVERHEAD
    check_batch_sizes(sizes, starts, base_offset, options.max_message_bytes)
    header_rows["length"] = sizes - LOG_OVERHEAD
    # each payload copied once into place, the headers with one numpy scatter
    out = np.empty(int(sizes.sum()), dtype=np.uint8)
    positions = np.zeros(batch_count, dtype=np.int64)
    np.cumsum(sizes[:-1], out=positions[1:])
    headers = np.frombuffer(header_rows.tobytes(), np.uint8).reshape(-1, RECORD_BATCH_OVERHEAD)
    out[positions[:, None] + np.arange(RECORD_BATCH_OVERHEAD)] = headers
    target = memoryview(out)
    for at, payload in zip((positions + RECORD_BATCH_OVERHEAD).tolist(), payloads, strict=True):
        target[at : at + len(payload)] = payload
    return finish_batches(out, sizes, starts, counts, max_timestamps, base_offset)


def finish_batches(
    out: np.ndarray,
    sizes: np.ndarray,
    starts: np.ndarray,
    counts: np.ndarray,
    max_timestamps: np.ndarray,
    base_offset: int,
    *,
    crcs: bool = True,
) -> EncodedBatches:
    """Batches laid out back to back in `out` (headers and records in place); with `crcs`
    fill in their CRCs (the C loops have already)."""
    positions = np.zeros(sizes.shape[0], dtype=np.int64)
    np.cumsum(sizes[:-1], out=positions[1:])
    if crcs:
        fill_crcs(out, positions, sizes)
    return EncodedBatches(
        memoryview(out),
        positions,
        sizes,
        base_offset + starts,
        base_offset + starts + counts - 1,
        max_timestamps,
        counts,
        start_offset=base_offset,
    )


def check_batch_sizes(sizes: np.ndarray, starts: np.ndarray, base_offset: int, limit: int) -> None:
    over = np.flatnonzero(sizes > limit)
    if over.size:
        b = int(over[0])
        raise RecordTooLargeError(
            f"batch at offset {base_offset + int(starts[b])} is {int(sizes[b])} bytes, larger than "
            f"max_message_bytes={limit} (max.message.bytes)"
        )


def fill_crcs(out: np.ndarray, positions: np.ndarray, sizes: np.ndarray) -> None:
    """CRC-32C over [21, end) of every batch, stored big-endian at byte 17."""
    view = memoryview(out)
    crcs = np.array(
        [
            crc32c(view[p + ATTRIBUTES_OFFSET : p + s])
            for p, s in zip(positions.tolist(), sizes.tolist(), strict=True)
        ],
        dtype=">u4",
    )
    index = positions[:, None] + (CRC_OFFSET + np.arange(4))
    out[index] = crcs.view(np.uint8).reshape(-1, 4)
