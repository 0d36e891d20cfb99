"""Record batch v2 encoder: Arrow columns -> Kafka batches, vectorized (`encode_records`).

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

This module holds the API and the numpy/Arrow path; `native_path` the same steps with the C
loops, `framing` step 4 (headers, sizes, CRCs, compressed regions) for both, `split` step 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core import native
from kafkalog_core.errors import ConfigError, InvalidRecordError
from kafkalog_core.record.batch import (
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    Compression,
)
from kafkalog_core.record.encoder.columns import (
    as_binary,
    as_large_binary,
    binary_lengths,
    data_bytes,
    record_column,
    timestamps_ms,
)
from kafkalog_core.record.encoder.framing import (
    batch_header_rows,
    check_batch_sizes,
    compress_regions,
    finish_batches,
)
from kafkalog_core.record.encoder.headers import headers_suffix
from kafkalog_core.record.encoder.native_path import encode_native
from kafkalog_core.record.encoder.options import BatchOptions, EncodedBatches
from kafkalog_core.record.encoder.split import fixed_sizes, split_batches, split_context_rows
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
        yield from encode_native(
            loops, columns, (keys, values, header_sizes), timestamps, context, options,
            base_offset, chunks,
        )  # fmt: skip
        return

    key_lengths = binary_lengths(keys)
    value_lengths = binary_lengths(values)
    fixed, key_length_sizes, value_length_sizes = fixed_sizes(
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
    header_rows, max_timestamps = batch_header_rows(
        options, base_offset, starts, counts, timestamps
    )

    if not compressed:
        sizes = region_sizes + RECORD_BATCH_OVERHEAD
        check_batch_sizes(sizes, starts, base_offset, options.max_message_bytes)
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
        yield finish_batches(out, sizes, starts, counts, max_timestamps, base_offset)
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
    yield compress_regions(
        memoryview(data_bytes(joined)),
        region_sizes,
        header_rows,
        starts,
        counts,
        max_timestamps,
        base_offset,
        options,
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
