"""Record batch v2 encoder: Arrow columns -> Kafka batches, vectorized; plus a scalar `build_batch`.

How the vectorized path lays out bytes (KAFKA_LOG_FACTS.md §1.1-§1.4). A record is

    length | attributes(0) | timestampDelta | offsetDelta | keyLength | key | valueLength | value
    | headersCount | headers

and every field except key, value and headers is a small varint whose value is known once the
batch boundaries are. So the encoder

1. computes per-record sizes with numpy and decides the batch boundaries (a producer-style
   greedy split on the uncompressed size; one `searchsorted` per batch, nothing per record);
2. composes each record's "prefix" (length .. keyLength) and "middle" (valueLength) as
   little-endian words in numpy and hands them to Arrow as `binary_view` values, which Arrow
   compacts in C++;
3. lets Arrow concatenate the pieces element-wise so that the result's data buffer *is* the
   encoded log. Without record headers the pieces are
   `[previous headersCount 0x00][61-byte header if first of a batch][prefix] | key | middle |
   value` (four inputs: Arrow's cost is per piece); otherwise `header hole | prefix | key |
   middle | value | headersCount+headers` (headers are serialized with the same element-wise
   joins). For compressed batches the records region of each batch is compressed with one C
   call and the headers are written around the results;
4. fills all headers at once from a numpy structured array and computes one CRC-32C per batch.

Python-level work is per batch, never per record, for binary/string keys and values with or
without headers (headers are serialized with the same element-wise concatenation).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c

from kafkalog_core import native
from kafkalog_core.errors import ConfigError, InvalidRecordError, RecordTooLargeError
from kafkalog_core.native import NativeColumn
from kafkalog_core.record.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    INT32_MAX,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    Compression,
    TimestampType,
    make_attributes,
)
from kafkalog_core.record.encoder.columns import (
    as_binary,
    as_large_binary,
    binary_lengths,
    data_bytes,
    record_column,
    timestamps_ms,
)
from kafkalog_core.record.encoder.headers import headers_suffix
from kafkalog_core.record.encoder.options import BatchOptions, EncodedBatches
from kafkalog_core.record.encoder.split import (
    length_sizes,
    most_per_batch,
    split_batches,
    split_context_rows,
)
from kafkalog_core.record.encoder.varints import (
    ATTRIBUTES_FIELD,
    join_with_holes,
    join_without_headers,
    prefix_binary,
    varint_fields_binary,
    varint_fields_words,
    varint_size_array,
)

# the per-record loops in C; None (not built, KAFKALOG_NATIVE=0): the numpy/Arrow path runs
_native = native.module


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


# ---------------------------------------------------------------------------------------------
# vectorized path: encode_records
# ---------------------------------------------------------------------------------------------


def encode_records(
    records: Any,
    *,
    base_offset: int = 0,
    options: BatchOptions = BatchOptions(),
    context_timestamps: Any = None,
) -> EncodedBatches:
    """Encode Arrow columns `key`, `value`, `timestamp`, `headers` into v2 batches.

    Offsets are contiguous from `base_offset`. baseTimestamp is each batch's first record's
    timestamp, maxTimestamp the largest (or -1). With LogAppendTime the records keep their
    producer timestamps and deltas and maxTimestamp is `log_append_time_ms`: the bytes a broker
    leaves after stamping LogAppendTime in place (LogValidator; seen in real broker logs).

    `context_timestamps` (int64 ms, oldest first; numpy or an Arrow timestamp column) are the
    timestamps of records right before `records` that are not encoded but take part in the
    batch split; only the last `split_context_rows(options)` matter. Encoding a stream in pieces
    that each start at a batch start of the whole stream's encode, with the stream's preceding
    timestamps as context, gives exactly the whole encode's batches (see `split_batches`).

    Raises InvalidRecordError (bad timestamp, null header key, bad column) and
    RecordTooLargeError (a batch over `max_message_bytes`).
    """
    (encoded,) = _encode(records, base_offset, options, context_timestamps, None)
    return encoded


DEFAULT_CHUNK_BYTES = 8 << 20  # encode_records_chunked: ~8 MiB of batches per chunk


def encode_records_chunked(
    records: Any,
    *,
    base_offset: int = 0,
    options: BatchOptions = BatchOptions(),
    chunk_bytes: int | None = DEFAULT_CHUNK_BYTES,
    buffers: int = 1,
) -> Iterator[EncodedBatches]:
    """`encode_records` in pieces of whole batches of about `chunk_bytes`, for writing as you go.

    The batches are exactly `encode_records`', and every check runs before the first piece is
    yielded (oversize batches included: see `_batches_fit`). Uncompressed with the C loops, the
    pieces take turns in `buffers` cache-sized buffers: a log append streams through them
    instead of materializing the whole encode. Piece k's bytes stay valid until piece
    k + `buffers` is asked for (with 2, one piece can be written while the next is encoded);
    without the C loops, compressed, or with `chunk_bytes` None, the whole encode comes as one
    piece.
    """
    if buffers < 1:
        raise ConfigError(f"buffers={buffers} must be >= 1")
    chunks = None if chunk_bytes is None else (chunk_bytes, buffers)
    return _encode(records, base_offset, options, None, chunks)


def _encode(
    records: Any,
    base_offset: int,
    options: BatchOptions,
    context_timestamps: Any,
    chunks: tuple[int, int] | None,
) -> Iterator[EncodedBatches]:
    """The body of `encode_records`: one EncodedBatches, or with `chunks` = (chunk_bytes,
    buffers) pieces in reused buffers (C loops, uncompressed)."""
    value_column = record_column(records, "value")
    if value_column is None:
        raise InvalidRecordError("records have no 'value' column")
    n = len(value_column)
    values = as_binary(value_column, "value", large=False)
    key_column = record_column(records, "key")
    keys = (
        pa.nulls(n, pa.large_binary())
        if key_column is None
        else as_binary(key_column, "key", large=False)
    )
    if len(keys) != n:
        raise InvalidRecordError(f"column 'key' has {len(keys)} rows but 'value' has {n}")
    timestamps = timestamps_ms(record_column(records, "timestamp"), n)
    if timestamps.shape[0] != n:
        raise InvalidRecordError(
            f"column 'timestamp' has {timestamps.shape[0]} rows but 'value' has {n}"
        )
    bad = np.flatnonzero(timestamps < NO_TIMESTAMP)
    if bad.size:
        i = int(bad[0])
        raise InvalidRecordError(
            f"record {i} (offset {base_offset + i}): timestamp {int(timestamps[i])} is negative "
            "(only -1 = no timestamp is allowed)"
        )
    headers, header_sizes = headers_suffix(record_column(records, "headers"), n, base_offset)
    if n == 0:
        yield EncodedBatches(
            memoryview(b""),
            *(np.zeros(0, dtype=np.int64) for _ in range(6)),
            start_offset=base_offset,
        )
        return
    if base_offset < 0 or base_offset + n - 1 > 2**63 - 1:
        raise InvalidRecordError(f"base_offset {base_offset} with {n} records is out of range")

    context = _context_timestamps(context_timestamps, options)
    loops = _native
    if loops is not None:
        columns = (
            native.column(keys),
            native.column(values),
            None if headers is None else native.column(headers),
        )
        yield from _encode_native(
            loops, columns, (keys, values, header_sizes), timestamps, context, options,
            base_offset, chunks,
        )  # fmt: skip
        return

    key_lengths = binary_lengths(keys)
    value_lengths = binary_lengths(values)
    fixed, key_length_sizes, value_length_sizes = _fixed_sizes(
        keys, values, key_lengths, value_lengths, header_sizes
    )
    starts, increasing = split_batches(
        fixed,
        np.concatenate((context, timestamps)) if context.size else timestamps,
        options.max_batch_bytes,
        context.shape[0],
    )
    counts = np.diff(np.append(starts, n))

    # exact per-record deltas and sizes within the chosen batches
    # (subtractions write into the repeated arrays: no extra temporaries)
    offset_deltas = np.repeat(starts, counts)
    np.subtract(np.arange(n, dtype=np.int64), offset_deltas, out=offset_deltas)
    base_timestamps = timestamps[starts]
    timestamp_deltas = np.repeat(base_timestamps, counts)
    np.subtract(timestamps, timestamp_deltas, out=timestamp_deltas)
    timestamp_delta_sizes = varint_size_array(timestamp_deltas, at_least_minus_one=increasing)
    offset_delta_sizes = varint_size_array(
        offset_deltas, at_least_minus_one=True, top=int(counts.max()) - 1
    )
    bodies = fixed + timestamp_delta_sizes
    bodies += offset_delta_sizes
    body_sizes = varint_size_array(bodies, at_least_minus_one=True)
    record_sizes = bodies + body_sizes
    region_sizes = np.add.reduceat(record_sizes, starts)
    del record_sizes

    prefix_fields = [
        (bodies, body_sizes),
        ATTRIBUTES_FIELD,
        (timestamp_deltas, timestamp_delta_sizes),
        (offset_deltas, offset_delta_sizes),
        (key_lengths, key_length_sizes),
    ]
    suffix = headers if headers is not None else pa.scalar(b"\x00", pa.large_binary())

    compressed = options.compression is not Compression.NONE
    header_rows, max_timestamps = _header_rows(options, base_offset, starts, counts, timestamps)

    if not compressed:
        sizes = region_sizes + RECORD_BATCH_OVERHEAD
        _check_sizes(sizes, starts, base_offset, options.max_message_bytes)
        header_rows["length"] = sizes - LOG_OVERHEAD
        out = None
        if headers is None:
            out = join_without_headers(
                keys, values, prefix_fields, value_lengths, value_length_sizes, header_rows, starts
            )
        if out is None:
            prefix = prefix_binary(prefix_fields, varint_fields_words(prefix_fields, n), n)
            middle = varint_fields_binary([(value_lengths, value_length_sizes)], n)
            out = join_with_holes(
                prefix,
                as_large_binary(keys),
                middle,
                as_large_binary(values),
                suffix,
                header_rows,
                starts,
            )
        out = out[: int(sizes.sum())]
        if not out.flags.writeable:  # Arrow handed back shared memory: take a private copy
            out = out.copy()
        yield _finish(out, sizes, starts, counts, max_timestamps, base_offset)
        return

    prefix = prefix_binary(prefix_fields, varint_fields_words(prefix_fields, n), n)
    middle = varint_fields_binary([(value_lengths, value_length_sizes)], n)
    joined = pc.binary_join_element_wise(
        prefix,
        as_large_binary(keys),
        middle,
        as_large_binary(values),
        suffix,
        pa.scalar(b"", pa.large_binary()),
        null_handling="replace",
        null_replacement=b"",
    )
    yield _compress_regions(
        memoryview(data_bytes(joined)),
        region_sizes,
        header_rows,
        starts,
        counts,
        max_timestamps,
        base_offset,
        options,
    )


def _header_rows(
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


def _compress_regions(
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
    _check_sizes(sizes, starts, base_offset, options.max_message_bytes)
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
    return _finish(out, sizes, starts, counts, max_timestamps, base_offset)


def _fixed_sizes(
    keys: pa.Array,
    values: pa.Array,
    key_lengths: np.ndarray,
    value_lengths: np.ndarray,
    header_sizes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each record's bytes without its length, timestampDelta and offsetDelta varints (what the
    split estimates from), and the varint sizes of the key and value lengths."""
    key_length_sizes = length_sizes(key_lengths)
    value_length_sizes = length_sizes(value_lengths)
    # sizes that are one value for all rows stay 1-element arrays and fold into a scalar
    fixed = key_lengths if keys.null_count == 0 else np.maximum(key_lengths, 0)
    fixed = fixed + (value_lengths if values.null_count == 0 else np.maximum(value_lengths, 0))
    scalar = 1  # attributes
    for sizes in (key_length_sizes, value_length_sizes, header_sizes):
        if sizes.shape[0] == 1:
            scalar += int(sizes[0])
        else:
            fixed += sizes
    fixed += scalar
    return fixed, key_length_sizes, value_length_sizes


def _split_parameters(options: BatchOptions) -> tuple[int, int, int]:
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


def _encode_native(
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
    if increasing:
        starts = np.empty(n, dtype=np.int64)
        region_sizes = np.empty(n, dtype=np.int64)
        count, _ = loops.plan_batches(
            starts, region_sizes, timestamps, context, *columns, *_split_parameters(options), 0,
            2**63 - 1,
        )  # fmt: skip
        starts, region_sizes = starts[:count], region_sizes[:count]
    else:
        fixed, _, _ = _fixed_sizes(
            keys, values, binary_lengths(keys), binary_lengths(values), header_sizes
        )
        all_timestamps = np.concatenate((context, timestamps)) if context.size else timestamps
        starts, _ = split_batches(fixed, all_timestamps, options.max_batch_bytes, context.shape[0])
        region_sizes = np.empty(starts.shape[0], dtype=np.int64)
        loops.region_sizes(region_sizes, starts, timestamps, *columns)
    counts = np.diff(np.append(starts, n))
    header_rows, max_timestamps = _header_rows(options, base_offset, starts, counts, timestamps)
    if not uncompressed:
        data = np.empty(int(region_sizes.sum()), dtype=np.uint8)
        loops.write_batches(data, None, starts, timestamps, *columns)
        yield _compress_regions(
            memoryview(data), region_sizes, header_rows, starts, counts, max_timestamps,
            base_offset, options,
        )  # fmt: skip
        return
    sizes = region_sizes + RECORD_BATCH_OVERHEAD
    _check_sizes(sizes, starts, base_offset, options.max_message_bytes)
    header_rows["length"] = sizes - LOG_OVERHEAD
    if chunks is None:
        out = np.empty(int(sizes.sum()), dtype=np.uint8)
        loops.write_batches(out, header_rows, starts, timestamps, *columns)
        yield _finish(out, sizes, starts, counts, max_timestamps, base_offset, crcs=False)
        return
    yield from _native_pieces(
        loops, columns, header_rows, starts, counts, sizes, max_timestamps, timestamps,
        base_offset, *chunks,
    )  # fmt: skip


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
    split = _split_parameters(options)
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
        header_rows, max_timestamps = _header_rows(
            options, base_offset, starts, counts, timestamps[:next_row]
        )
        _check_sizes(sizes, starts, base_offset, options.max_message_bytes)  # (cannot fail)
        header_rows["length"] = sizes - LOG_OVERHEAD
        out = _piece_buffer(pool, piece % buffers, int(sizes.sum()), chunk_bytes)
        piece_starts = starts - row
        loops.write_batches(
            out, header_rows, piece_starts, timestamps[row:next_row],
            *_rows(columns, row, next_row), bodies,
        )  # fmt: skip
        yield _finish(
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
        yield _finish(
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


def _finish(
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
        _fill_crcs(out, positions, sizes)
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


def record_timestamps(records: Any) -> np.ndarray:
    """The `timestamp` column of `records` as `encode_records` reads it (int64 ms, -1 = none)."""
    if isinstance(records, pa.Table | pa.RecordBatch):
        n = records.num_rows
    else:
        value_column = record_column(records, "value")
        n = 0 if value_column is None else len(value_column)
    return timestamps_ms(record_column(records, "timestamp"), n)


def _context_timestamps(context: Any, options: BatchOptions) -> np.ndarray:
    """The last `split_context_rows` context timestamps as int64 (empty for None)."""
    if context is None:
        return np.zeros(0, dtype=np.int64)
    if isinstance(context, pa.Array | pa.ChunkedArray):
        context = timestamps_ms(context, len(context))
    keep = split_context_rows(options)
    context = np.asarray(context, dtype=np.int64).reshape(-1)
    context = context[max(context.shape[0] - keep, 0) :] if keep else context[:0]
    if context.size and int(context.min()) < NO_TIMESTAMP:
        raise InvalidRecordError("context_timestamps has a negative timestamp (only -1 allowed)")
    return context


def _check_sizes(sizes: np.ndarray, starts: np.ndarray, base_offset: int, limit: int) -> None:
    over = np.flatnonzero(sizes > limit)
    if over.size:
        b = int(over[0])
        raise RecordTooLargeError(
            f"batch at offset {base_offset + int(starts[b])} is {int(sizes[b])} bytes, larger than "
            f"max_message_bytes={limit} (max.message.bytes)"
        )


def _fill_crcs(out: np.ndarray, positions: np.ndarray, sizes: np.ndarray) -> None:
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
