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

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
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
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    Compression,
    TimestampType,
    make_attributes,
    pack_header,
)
from kafkalog_core.record.varint import encode_varint, varint_bytes

# the per-record loops in C; None (not built, KAFKALOG_NATIVE=0): the numpy/Arrow path runs
_native = native.module

DEFAULT_MAX_BATCH_BYTES = 1048576  # the target size of one batch (like batch.size, but 1 MiB)
DEFAULT_MAX_MESSAGE_BYTES = 1048588  # max.message.bytes default (1 MiB + 12)

__all__ = [
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "BatchOptions",
    "EncodedBatches",
    "Record",
    "build_batch",
    "encode_records",
    "encode_records_chunked",
    "record_timestamps",
    "split_context_rows",
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

# An inline binary_view value: int32 length then up to 12 bytes of data (Arrow columnar spec).
_VIEW_DTYPE = np.dtype([("length", "<i4"), ("lo", "<u8"), ("hi", "<u4")])
assert _VIEW_DTYPE.itemsize == 16
_VIEW_INLINE_MAX = 12

# continuation bits of a varint of k+1 bytes, as a little-endian word: byte j < k has bit 7 set
_CONTINUATION = np.array(
    [sum(0x80 << (8 * j) for j in range(k)) for k in range(8)], dtype=np.uint64
)


# ---------------------------------------------------------------------------------------------
# options and result
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchOptions:
    """How `encode_records` fills batch headers and where it splits batches.

    Defaults are what the Java producer writes for a non-idempotent, non-transactional send:
    producerId/epoch/baseSequence -1, partitionLeaderEpoch -1, CreateTime, no compression.
    `base_sequence` is the first batch's; later batches continue the sequence (with Kafka's
    wraparound) as one producer's consecutive batches would.
    """

    compression: Compression = Compression.NONE
    compression_level: int | None = None
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    log_append_time_ms: int | None = None
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    is_transactional: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "compression", Compression(self.compression))
        object.__setattr__(self, "timestamp_type", TimestampType(self.timestamp_type))
        if self.max_batch_bytes <= RECORD_BATCH_OVERHEAD:
            raise ConfigError(
                f"max_batch_bytes={self.max_batch_bytes} must be larger than the "
                f"{RECORD_BATCH_OVERHEAD}-byte batch header"
            )
        if self.max_message_bytes < RECORD_BATCH_OVERHEAD:
            raise ConfigError(
                f"max_message_bytes={self.max_message_bytes} is below the "
                f"{RECORD_BATCH_OVERHEAD}-byte batch header"
            )
        if self.timestamp_type is TimestampType.LOG_APPEND_TIME:
            if self.log_append_time_ms is None:
                raise ConfigError(
                    "timestamp_type=LogAppendTime needs log_append_time_ms (the broker's append "
                    "time written as every batch's maxTimestamp)"
                )
            if self.log_append_time_ms < 0:
                raise ConfigError(f"log_append_time_ms={self.log_append_time_ms} must be >= 0")
        if self.is_transactional and self.producer_id == NO_PRODUCER_ID:
            raise ConfigError("is_transactional=True needs a producer_id (it is -1)")
        if self.producer_id != NO_PRODUCER_ID:
            if self.producer_epoch < 0:
                raise ConfigError(
                    f"producer_id={self.producer_id} needs producer_epoch >= 0, got {self.producer_epoch}"
                )
            if self.base_sequence < 0:
                raise ConfigError(
                    f"producer_id={self.producer_id} needs base_sequence >= 0, got {self.base_sequence}"
                )
        if not -(2**31) <= self.partition_leader_epoch <= INT32_MAX:
            raise ConfigError(
                f"partition_leader_epoch={self.partition_leader_epoch} is not an int32"
            )
        if not -(2**15) <= self.producer_epoch < 2**15:
            raise ConfigError(f"producer_epoch={self.producer_epoch} is not an int16")
        if not -1 <= self.base_sequence <= INT32_MAX:
            raise ConfigError(f"base_sequence={self.base_sequence} must be -1 or 0..{INT32_MAX}")


@dataclass(frozen=True, slots=True, eq=False)
class EncodedBatches:
    """Encoded batches laid out back to back in `buffer`, with one array entry per batch.

    `buffer` is a bytes-like object (a `memoryview` over Arrow- or Python-owned memory; it keeps
    that memory alive): write it to a file as is, or take `batch(i)`.
    """

    buffer: memoryview
    positions: np.ndarray  # int64: byte position of each batch in `buffer`
    sizes: np.ndarray  # int64: total bytes of each batch (length + 12)
    base_offsets: np.ndarray  # int64
    last_offsets: np.ndarray  # int64
    max_timestamps: np.ndarray  # int64: the header's maxTimestamp
    record_counts: np.ndarray  # int64
    start_offset: int = 0  # base_offset given to encode_records: next_offset when empty

    def __len__(self) -> int:
        return int(self.positions.shape[0])

    def batch(self, i: int) -> memoryview:
        """The bytes of batch `i`."""
        start = int(self.positions[i])
        return self.buffer[start : start + int(self.sizes[i])]

    @property
    def total_bytes(self) -> int:
        return len(self.buffer)

    @property
    def next_offset(self) -> int:
        """The offset after the last record (the log end offset after appending these)."""
        return int(self.last_offsets[-1]) + 1 if len(self) else self.start_offset


# ---------------------------------------------------------------------------------------------
# scalar path
# ---------------------------------------------------------------------------------------------

HeaderPair = tuple[str | bytes, bytes | None]


@dataclass(slots=True)
class Record:
    """One record for `build_batch`: any offset delta (gaps are fine), timestamp -1 or >= 0."""

    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[HeaderPair] = field(default_factory=tuple)


def _header_key_bytes(key: str | bytes | None, where: str) -> bytes:
    if key is None:
        raise InvalidRecordError(
            f"{where}: header key is null (Kafka header keys must be non-null)"
        )
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


def _encode_record_body(record: Record, timestamp_delta: int, where: str) -> bytes:
    """attributes .. last header of one record (everything its length varint counts)."""
    parts = [b"\x00", encode_varint(timestamp_delta), encode_varint(record.offset_delta)]
    for blob in (record.key, record.value):
        if blob is None:
            parts.append(b"\x01")  # varint(-1)
        else:
            parts.append(encode_varint(len(blob)))
            parts.append(bytes(blob))
    headers = record.headers or ()
    parts.append(encode_varint(len(headers)))
    for h_key, h_value in headers:
        key = _header_key_bytes(h_key, where)
        parts.append(encode_varint(len(key)))
        parts.append(key)
        if h_value is None:
            parts.append(b"\x01")
        else:
            parts.append(encode_varint(len(h_value)))
            parts.append(bytes(h_value))
    return b"".join(parts)


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression: Compression = Compression.NONE,
    compression_level: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
    delete_horizon_ms: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    last_offset_delta: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Encode one v2 batch record by record, with every header field settable.

    This is the path for control batches, tests and the cleaner (gaps in offset deltas, a kept
    lastOffsetDelta, a delete horizon, empty batches). Defaults follow MemoryRecordsBuilder:
    baseTimestamp = the delete horizon if set, else the first record's timestamp, else -1;
    maxTimestamp = -1 raised by each strictly greater record timestamp (pass `max_timestamp` for
    LogAppendTime); lastOffsetDelta = the last record's offset delta (0 for an empty batch).
    An empty batch is written uncompressed, like DefaultRecordBatch.writeEmptyHeader.
    """
    records = list(records)
    previous = -1
    for index, record in enumerate(records):
        where = f"record {index} (offset {base_offset + record.offset_delta})"
        if not 0 <= record.offset_delta <= INT32_MAX or record.offset_delta <= previous:
            raise InvalidRecordError(
                f"record {index}: offset delta {record.offset_delta} must be in 0..{INT32_MAX} "
                f"and larger than the previous record's ({previous})"
            )
        previous = record.offset_delta
        if record.timestamp < NO_TIMESTAMP:
            raise InvalidRecordError(
                f"{where}: timestamp {record.timestamp} is negative (only -1 allowed)"
            )

    if base_timestamp is None:
        if delete_horizon_ms is not None:
            base_timestamp = delete_horizon_ms
        elif records:
            base_timestamp = records[0].timestamp
        else:
            base_timestamp = NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = NO_TIMESTAMP
        for record in records:
            if record.timestamp > max_timestamp:
                max_timestamp = record.timestamp
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset_delta if records else 0
    if not records:
        compression = Compression.NONE

    chunks = []
    for index, record in enumerate(records):
        body = _encode_record_body(
            record,
            record.timestamp - base_timestamp,
            f"record {index} (offset {base_offset + record.offset_delta})",
        )
        chunks.append(encode_varint(len(body)))
        chunks.append(body)
    payload = b"".join(chunks)
    compression = Compression(compression)
    if compression is not Compression.NONE:
        from kafkalog_core.record.compression import compress

        payload = compress(compression, payload, compression_level)

    attributes = make_attributes(
        compression,
        TimestampType(timestamp_type),
        is_transactional,
        is_control,
        delete_horizon_ms is not None,
    )
    out = bytearray(RECORD_BATCH_OVERHEAD + len(payload))
    out[RECORD_BATCH_OVERHEAD:] = payload
    pack_header(
        out,
        0,
        base_offset=base_offset,
        length=len(out) - LOG_OVERHEAD,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=len(records),
    )
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# vectorized path: input normalization
# ---------------------------------------------------------------------------------------------


def _column(records: Any, name: str) -> pa.Array | None:
    """Column `name` of a Table / RecordBatch / mapping as one Array, or None when absent."""
    if isinstance(records, pa.Table | pa.RecordBatch):
        if name not in records.schema.names:
            return None
        column = records.column(name)
    elif isinstance(records, Mapping):
        if name not in records:
            return None
        column = records[name]
    else:
        raise TypeError(
            f"records must be a pyarrow Table/RecordBatch or a mapping, not {type(records)!r}"
        )
    if isinstance(column, pa.ChunkedArray):
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if not isinstance(column, pa.Array):
        column = pa.array(column)
    return column


def _as_binary(column: pa.Array, name: str, *, large: bool = True) -> pa.Array:
    """Key/value/header bytes as large_binary, or with `large=False` as binary or large_binary
    whichever is zero-copy (strings are reinterpreted, not copied)."""
    t = column.type
    if pa.types.is_null(t):
        return pa.nulls(len(column), pa.large_binary())
    if pa.types.is_large_binary(t):
        return column
    if not large:
        if pa.types.is_binary(t):
            return column
        if pa.types.is_string(t):
            return column.view(pa.binary())
        if pa.types.is_large_string(t):
            return column.view(pa.large_binary())
    if (
        pa.types.is_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_string_view(t)
    ):
        return column.cast(pa.large_binary())
    raise InvalidRecordError(f"column {name!r} has type {t}; expected binary or string")


def _lengths(column: pa.Array) -> np.ndarray:
    """Byte length of each element, -1 for null (the varint Kafka writes for a null)."""
    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        return (
            pc.binary_length(column).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        )
    offsets = _offsets(column)
    lengths = np.subtract(offsets[1:], offsets[:-1], dtype=np.int64)
    if column.null_count:
        lengths[column.is_null().to_numpy(zero_copy_only=False)] = -1
    return lengths


_TIMESTAMP_MS_DIVISOR = {"s": None, "ms": 1, "us": 1000, "ns": 1000000}


def _timestamps(column: pa.Array | None, n: int) -> np.ndarray:
    """Timestamps in ms as int64; missing column or null = -1 (NO_TIMESTAMP)."""
    if column is None:
        return np.full(n, NO_TIMESTAMP, dtype=np.int64)
    t = column.type
    if pa.types.is_timestamp(t):
        raw = column.cast(pa.int64()).fill_null(NO_TIMESTAMP).to_numpy(zero_copy_only=False)
        nulls = column.is_null().to_numpy(zero_copy_only=False)
        values = raw * 1000 if t.unit == "s" else raw // _TIMESTAMP_MS_DIVISOR[t.unit]
        values = values.astype(np.int64)
        values[nulls] = NO_TIMESTAMP
        return values
    if pa.types.is_integer(t):
        column = column.cast(pa.int64())
        if column.null_count:
            column = column.fill_null(NO_TIMESTAMP)
        return column.to_numpy(zero_copy_only=False)
    raise InvalidRecordError(f"column 'timestamp' has type {t}; expected int64 ms or a timestamp")


# ---------------------------------------------------------------------------------------------
# vectorized path: varints as Arrow binary values
# ---------------------------------------------------------------------------------------------


# a varint needs more than k bytes when zigzag(v) >= 2**7k, i.e. when the folded value
# (v for v >= 0, -v-1 for v < 0) is >= 2**(7k-1)
_SIZE_LIMITS = [1 << (7 * k - 1) for k in range(1, 10)]
_WORD_TABLE_SIZE = 1 << 16
_word_table: np.ndarray | None = None


def varint_size_array(
    values: np.ndarray, *, at_least_minus_one: bool = False, top: int | None = None
) -> np.ndarray:
    """Zig-zag varint size of each int64 value; a few comparisons, only up to the largest value.

    `at_least_minus_one` promises values >= -1 (lengths, deltas, sizes): -1 and 0..63 are all
    one byte, so the sign folding can be skipped. `top` (with it) is the known largest value,
    which saves the pass that finds it.
    """
    values = np.asarray(values, dtype=np.int64)
    # fold: v for v >= 0, -v-1 for v < 0; zigzag(v) >= 2**7k  <=>  folded >= 2**(7k-1)
    folded = values if at_least_minus_one else values ^ (values >> 63)
    if top is None or not at_least_minus_one:
        top = int(folded.max()) if folded.size else 0
    if top < _SIZE_LIMITS[0]:
        return np.ones(values.shape, dtype=np.int64)
    sizes = np.add(folded >= _SIZE_LIMITS[0], 1, dtype=np.int64)
    for limit in _SIZE_LIMITS[1:]:
        if top < limit:
            break
        sizes += folded >= limit
    return sizes


def _table() -> np.ndarray:
    """Varint words of every value in -32768..32767 (index value + 32768), built once."""
    global _word_table
    if _word_table is None:
        v = np.arange(_WORD_TABLE_SIZE, dtype=np.int64) - _WORD_TABLE_SIZE // 2
        _word_table = _spread(((v << 1) ^ (v >> 63)).view(np.uint64), 3)
    return _word_table


def _spread(unsigned: np.ndarray, width: int) -> np.ndarray:
    """Zig-zagged values (< 2**(7*width), width <= 8) -> varint bytes as a little-endian word.

    The 7-bit groups go to byte lanes; a byte gets its continuation bit when any higher lane is
    non-zero (lanes are <= 0x7F, so `lane + 0x7F` sets bit 7 exactly for non-zero lanes).
    """
    word = unsigned & np.uint64(0x7F)
    for k in range(1, width):
        word |= (unsigned << np.uint64(k)) & np.uint64(0x7F << (8 * k))
    if width == 1:
        return word
    higher = word >> np.uint64(8)
    for step in (8, 16, 32):
        if step >= 8 * (width - 1):
            break
        higher |= higher >> np.uint64(step)
    higher += np.uint64(0x7F7F7F7F7F7F7F7F)
    higher &= np.uint64(0x8080808080808080)
    return word | higher


def _varint_words(values: np.ndarray, max_size: int) -> np.ndarray:
    """Each value's zig-zag varint (max_size <= 8 bytes) as a little-endian uint64 word.

    Values in -32768..32767 (all of them when max_size <= 2) are looked up in a 64K table
    indexed by value + 32768; others are computed with `_spread`.
    """
    v = np.asarray(values, dtype=np.int64)
    low, high = int(v.min()), int(v.max())
    if low == high:  # one value for every row: a 1-element word
        return _spread(np.array([(low << 1) ^ (low >> 63)], dtype=np.uint64), max_size)
    half = _WORD_TABLE_SIZE // 2
    if low >= 0 and high < 64:  # one byte: the zig-zag value itself
        return np.left_shift(v, 1).view(np.uint64)
    if -half <= low and high < half:
        if low >= 0:
            return _table()[half:][v]  # index by the value itself: no offset pass
        return _table()[v + half]
    return _spread(((v << 1) ^ (v >> 63)).view(np.uint64), max_size)


def _views_to_binary(lengths: np.ndarray, lo: np.ndarray, hi: np.ndarray | None) -> pa.Array:
    """Inline binary_view values (<= 12 bytes each) -> a large_binary array (compacted by Arrow)."""
    n = lengths.shape[0]
    views = np.empty(n, dtype=_VIEW_DTYPE)
    views["length"] = lengths
    views["lo"] = lo
    views["hi"] = 0 if hi is None else hi
    array = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views)])
    return array.cast(pa.large_binary())


def _matrix_to_binary(fields: list[tuple[np.ndarray, np.ndarray]], total: np.ndarray) -> pa.Array:
    """General (slower) path: fields as (varint values, sizes); row-wise compaction in numpy."""
    n = total.shape[0]
    mats = []
    masks = []
    for values, sizes in fields:
        sizes = np.broadcast_to(sizes, (n,))
        width = int(sizes.max()) if n else 1
        mat, _ = varint_bytes(np.broadcast_to(values, (n,)), width)
        mats.append(mat)
        masks.append(np.arange(width) < sizes[:, None])
    data = np.hstack(mats)[np.hstack(masks)]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(total, out=offsets[1:])
    return pa.Array.from_buffers(
        pa.large_binary(),
        n,
        [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))],
    )


_ZERO = np.zeros(1, dtype=np.int64)
_ONE = np.ones(1, dtype=np.int64)
ATTRIBUTES_FIELD = (_ZERO, _ONE)  # the record attributes byte: always 0


def _varint_fields_binary(fields: list[tuple[np.ndarray, np.ndarray]], n: int) -> pa.Array:
    """Concatenated zig-zag varints per row, e.g. [(lengths, sizes), (deltas, sizes), ...].

    A field may be given as 1-element arrays (the same value for every row). Rows of up to 12
    bytes are composed as little-endian words and handed to Arrow as inline binary_view values;
    anything longer takes the slower byte-matrix path.
    """
    if n == 0:
        return pa.array([], pa.large_binary())
    return _prefix_binary(fields, _varint_fields_words(fields, n), n)


def _prefix_binary(
    fields: list[tuple[np.ndarray, np.ndarray]],
    words: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None,
    n: int,
) -> pa.Array:
    """Varint fields as Arrow values: inline views when composed as words, else byte matrix."""
    if words is None:
        return _matrix_to_binary(fields, sum(np.broadcast_to(s, (n,)) for _, s in fields))
    return _views_to_binary(*words)


def _varint_fields_words(
    fields: list[tuple[np.ndarray, np.ndarray]], n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """(total size, low word, high word) of each row's concatenated varints, or None when a row
    needs more than 12 bytes. Fields are packed into at most two groups of <= 8 bytes.

    A field's bit position is kept as (per-row array, plain int): fields of one size for all
    rows only move the int, and a constant field's word is shifted by it for free (1-element),
    so the common case runs few passes over the rows.
    """
    max_sizes = []
    constant = []
    variable = []
    fixed_total = 0
    for _, sizes in fields:
        top = int(sizes.max())
        max_sizes.append(top)
        constant.append(sizes.shape[0] == 1 or top == int(sizes.min()))
        if constant[-1]:
            fixed_total += top
        else:
            variable.append(sizes)
    # pack consecutive fields into groups whose widest row fits one 64-bit word
    groups: list[list[int]] = [[]]
    width = 0
    for i, m in enumerate(max_sizes):
        if width + m > 8 and groups[-1]:
            groups.append([])
            width = 0
        groups[-1].append(i)
        width += m
    if max(max_sizes) > 8 or len(groups) > 2:
        return None
    if variable:
        total = variable[0] + fixed_total
        for sizes in variable[1:]:
            total += sizes
    else:
        total = np.full(n, fixed_total, dtype=np.int64)
    if sum(max_sizes) > _VIEW_INLINE_MAX and int(total.max()) > _VIEW_INLINE_MAX:
        return None
    words = []
    group_shift: tuple[np.ndarray | None, int] = (None, 0)
    for g, group in enumerate(groups):
        word = None
        shift_rows: np.ndarray | None = None  # uint64 bits per row (variable-size fields)
        shift_bits = 0  # bits of constant-size fields, added on top of shift_rows
        for k, i in enumerate(group):
            values, sizes = fields[i]
            if values is not _ZERO:
                part = _varint_words(values, max_sizes[i])
                if shift_rows is not None and shift_bits and part.shape[0] != 1:
                    shift_rows += np.uint64(shift_bits)  # fold once, reused by later fields
                    shift_bits = 0
                if shift_bits:
                    part = part << np.uint64(shift_bits)
                if shift_rows is not None:
                    part = part << shift_rows
                if word is None:
                    word = part
                elif word.shape == part.shape:
                    word |= part
                else:
                    word = word | part
            if k == len(group) - 1 and not (g == 0 and len(groups) == 2):
                break  # the last field's size moves nothing (the total is computed above)
            if constant[i]:
                shift_bits += 8 * max_sizes[i]
            else:
                step = np.left_shift(sizes, 3).view(np.uint64)
                if shift_rows is None:
                    shift_rows = step
                else:
                    shift_rows += step
        words.append(np.zeros(n, dtype=np.uint64) if word is None else np.broadcast_to(word, (n,)))
        if g == 0:
            group_shift = (shift_rows, shift_bits)
    lo = words[0]
    hi = None
    if len(words) == 2:
        shift_rows, shift_bits = group_shift
        if shift_rows is not None:
            first = shift_rows + np.uint64(shift_bits) if shift_bits else shift_rows
            lo = lo | (words[1] << first)
            hi = words[1] >> (np.uint64(64) - first)
        else:
            lo = lo | (words[1] << np.uint64(shift_bits))
            hi = words[1] >> np.uint64(64 - shift_bits)
    return total, lo, hi


# Out-of-line binary_view value: length, first 4 bytes, data buffer index, offset in that buffer.
_VIEW_REF_DTYPE = np.dtype(
    [("length", "<i4"), ("prefix", "<u4"), ("buffer", "<i4"), ("offset", "<i4")]
)
_START_ROW = 80  # side-buffer bytes per batch start: lead byte, 61-byte header, prefix (<= 12)


def _plain(column: pa.Array, extra_rows: int = 0) -> pa.Array:
    """The same large_binary values without a validity bitmap, plus `extra_rows` empty rows.

    Zero-copy for the data, only offsets are rebuilt. A null must contribute no bytes (its
    length is written as -1 in the prefix); Arrow nulls normally span nothing, and a null that
    does span bytes is cleared first.
    """
    n = len(column)
    if column.null_count:
        spans = _offsets(column)
        if np.any(np.diff(spans)[column.is_null().to_numpy(zero_copy_only=False)] != 0):
            column = column.fill_null(b"")
    offsets = _offsets(column)
    if extra_rows or offsets.dtype != np.int64:
        extended = np.empty(n + 1 + extra_rows, dtype=np.int64)
        extended[: n + 1] = offsets
        extended[n + 1 :] = offsets[-1]
        offsets = extended
    return pa.Array.from_buffers(
        pa.large_binary(), n + extra_rows, [None, pa.py_buffer(offsets), column.buffers()[2]]
    )


def _offsets(column: pa.Array) -> np.ndarray:
    """The n+1 offsets of a binary (int32) or large_binary (int64) array, honouring slicing."""
    dtype = np.int64 if pa.types.is_large_binary(column.type) else np.int32
    return np.frombuffer(column.buffers()[1], dtype=dtype)[
        column.offset : column.offset + len(column) + 1
    ]


def _large(column: pa.Array) -> pa.Array:
    return column if pa.types.is_large_binary(column.type) else column.cast(pa.large_binary())


def _join_without_headers(
    keys: pa.Array,
    values: pa.Array,
    prefix_fields: list[tuple[np.ndarray, np.ndarray]],
    value_lengths: np.ndarray,
    value_length_sizes: np.ndarray,
    header_rows: np.ndarray,
    starts: np.ndarray,
) -> np.ndarray | None:
    """The whole uncompressed log (CRCs still 0) from one 4-input element-wise join.

    Row i of the first input is the previous record's headersCount byte (0x00), then for a
    batch's first record its 61-byte header, then record i's prefix; one extra row carries the
    last record's headersCount. Fewer pieces per record keep Arrow's per-piece cost down.
    Returns None when a row does not fit an inline view (the general path then runs). The
    result may run past the last batch; callers cut it at the total size.
    """
    n = value_lengths.shape[0]
    words = _varint_fields_words([(_ZERO, _ONE), *prefix_fields], n)
    if words is None:
        return None
    total, lo, hi = words
    # the first record has no lead byte: drop it (the lead is 0x00, the words shift down a byte)
    total[0] -= 1
    if lo.shape != (n,) or not lo.flags.writeable:
        lo = np.array(np.broadcast_to(lo, (n,)))
    first_lo = int(lo[0]) >> 8
    if hi is not None:
        if hi.shape != (n,) or not hi.flags.writeable:
            hi = np.array(np.broadcast_to(hi, (n,)))
        first_lo |= (int(hi[0]) & 0xFF) << 56
        hi[0] >>= np.uint64(8)
    lo[0] = first_lo
    views = np.zeros(n + 1, dtype=_VIEW_DTYPE)
    views["length"][:n] = total
    views["length"][n] = 1
    views["lo"][:n] = lo
    if hi is not None:
        views["hi"][:n] = hi
    # a batch's first record: an out-of-line value in a side buffer [lead | header | prefix]
    batch_count = starts.shape[0]
    first_words = np.zeros((batch_count, 2), dtype="<u8")
    first_words[:, 0] = np.broadcast_to(lo, (n,))[starts]
    if hi is not None:
        first_words[:, 1] = np.broadcast_to(hi, (n,))[starts]
    first_bytes = first_words.view(np.uint8).reshape(batch_count, 16)
    side = np.zeros((batch_count, _START_ROW), dtype=np.uint8)
    header_end = 1 + RECORD_BATCH_OVERHEAD
    side[1:, header_end - 1 : header_end + 15] = first_bytes[1:]  # its lead byte lands under...
    side[0, header_end : header_end + 16] = first_bytes[0]  # (the first record has no lead)
    side[:, 1:header_end] = header_rows.view(np.uint8).reshape(batch_count, -1)  # ...the header
    ref_offsets = np.arange(batch_count, dtype=np.int64) * _START_ROW
    ref_offsets[0] += 1
    refs = views.view(_VIEW_REF_DTYPE)
    refs["length"][starts] = RECORD_BATCH_OVERHEAD + total[starts]
    first4 = side.reshape(-1)[ref_offsets[:, None] + np.arange(4)]
    refs["prefix"][starts] = np.ascontiguousarray(first4).view("<u4").reshape(-1)
    refs["buffer"][starts] = 0
    refs["offset"][starts] = ref_offsets
    lead = pa.Array.from_buffers(
        pa.binary_view(), n + 1, [None, pa.py_buffer(views), pa.py_buffer(side)]
    ).cast(pa.large_binary())
    if int(value_lengths.min()) == int(value_lengths.max()):  # one valueLength for all
        middle = pa.scalar(encode_varint(int(value_lengths[0])), pa.large_binary())
    else:
        middle = _plain(_varint_fields_binary([(value_lengths, value_length_sizes)], n), 1)
    joined = pc.binary_join_element_wise(
        lead, _plain(keys, 1), middle, _plain(values, 1), pa.scalar(b"", pa.large_binary())
    )
    return _data_bytes(joined)


def _join_with_holes(
    prefix: pa.Array,
    keys: pa.Array,
    middle: pa.Array,
    values: pa.Array,
    suffix: pa.Array | pa.Scalar,
    header_rows: np.ndarray,
    starts: np.ndarray,
) -> np.ndarray:
    """General uncompressed layout: a 61-byte header hole before each batch's first record."""
    n = len(keys)
    hole_lengths = np.zeros(n, dtype=np.int64)
    hole_lengths[starts] = RECORD_BATCH_OVERHEAD
    hole_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(hole_lengths, out=hole_offsets[1:])
    holes = pa.Array.from_buffers(
        pa.large_binary(),
        n,
        [None, pa.py_buffer(hole_offsets), pa.py_buffer(header_rows.view(np.uint8))],
    )
    joined = pc.binary_join_element_wise(
        holes,
        prefix,
        keys,
        middle,
        values,
        suffix,
        pa.scalar(b"", pa.large_binary()),
        null_handling="replace",
        null_replacement=b"",
    )
    return _data_bytes(joined)


# ---------------------------------------------------------------------------------------------
# vectorized path: headers
# ---------------------------------------------------------------------------------------------


def _headers_suffix(
    column: pa.Array | None, n: int, base_offset: int
) -> tuple[pa.Array | None, np.ndarray]:
    """headersCount + headers of each record as a binary array (None = no headers at all)."""
    if column is None:
        return None, np.ones(1, dtype=np.int64)  # one 0x00 headersCount byte for every row
    if len(column) != n:
        raise InvalidRecordError(f"column 'headers' has {len(column)} rows but 'value' has {n}")
    if column.null_count == n:
        return None, np.ones(1, dtype=np.int64)
    t = column.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t)):
        raise InvalidRecordError(
            f"column 'headers' has type {t}; expected list<struct<key: string, value: binary>> "
            "or map<string, binary>"
        )
    filled = column.fill_null(pa.scalar([], type=t)) if column.null_count else column
    offsets = filled.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    start, stop = int(offsets[0]), int(offsets[-1])
    if pa.types.is_map(t):
        h_keys = filled.keys.slice(start, stop - start)
        h_values = filled.items.slice(start, stop - start)
    else:
        entries = filled.values.slice(start, stop - start)
        if not pa.types.is_struct(entries.type) or entries.type.num_fields != 2:
            raise InvalidRecordError(
                f"column 'headers' has entries of type {entries.type}; expected struct<key, value>"
            )
        h_keys, h_values = entries.flatten()
    counts = np.diff(offsets)
    h_keys = _as_binary(h_keys, "headers.key")
    h_values = _as_binary(h_values, "headers.value")
    if h_keys.null_count:
        first = int(np.flatnonzero(h_keys.is_null().to_numpy(zero_copy_only=False))[0])
        record = int(np.searchsorted(offsets - start, first, side="right")) - 1
        raise InvalidRecordError(
            f"record {record} (offset {base_offset + record}): header {first - (offsets[record] - start)} "
            "has a null key (Kafka header keys must be non-null)"
        )
    key_lengths = _lengths(h_keys)
    value_lengths = _lengths(h_values)
    entry = pc.binary_join_element_wise(
        _varint_fields_binary([(key_lengths, varint_size_array(key_lengths))], len(key_lengths)),
        h_keys,
        _varint_fields_binary(
            [(value_lengths, varint_size_array(value_lengths))], len(value_lengths)
        ),
        h_values,
        pa.scalar(b"", pa.large_binary()),
        null_handling="replace",
        null_replacement=b"",
    )
    per_record = pc.binary_join(
        pa.LargeListArray.from_arrays(pa.array(offsets - start, pa.int64()), entry),
        pa.scalar(b"", pa.large_binary()),
    )
    suffix = pc.binary_join_element_wise(
        _varint_fields_binary([(counts, varint_size_array(counts))], n),
        per_record,
        pa.scalar(b"", pa.large_binary()),
    )
    return suffix, _lengths(suffix)


# ---------------------------------------------------------------------------------------------
# vectorized path: batch boundaries
# ---------------------------------------------------------------------------------------------


def _length_sizes(lengths: np.ndarray) -> np.ndarray:
    """varint sizes of lengths (>= -1); a 1-element array when all rows have the same size."""
    if lengths.shape[0] == 0:
        return np.ones(0, dtype=np.int64)
    low, high = int(lengths.min()), int(lengths.max())
    one_low = varint_size_array(np.array([low]), at_least_minus_one=True)
    if int(one_low[0]) == int(varint_size_array(np.array([high]), at_least_minus_one=True)[0]):
        return one_low
    return varint_size_array(lengths, at_least_minus_one=True, top=high)


# The smallest record: length, attributes, timestampDelta, offsetDelta, keyLength, valueLength
# and headersCount of one byte each (null or empty key and value, no headers).
_SMALLEST_RECORD = 7


def _most_per_batch(max_batch_bytes: int) -> int:
    """An upper bound on the records of one batch, from the target alone (never from the data,
    so that every encode of the same records agrees on it)."""
    budget = max_batch_bytes - RECORD_BATCH_OVERHEAD
    return int(min(budget // _SMALLEST_RECORD + 1, INT32_MAX))


def split_context_rows(options: BatchOptions) -> int:
    """How many records before the first one take part in the batch split (`most - 1`).

    `encode_records(..., context_timestamps=ts)` with the timestamps of (up to) this many
    records right before the input splits the input exactly as an encode that started earlier
    would from there on, provided the input starts where that encode starts a batch.
    """
    return _most_per_batch(options.max_batch_bytes) - 1


def _split_batches(
    fixed: np.ndarray, timestamps: np.ndarray, max_batch_bytes: int, context: int = 0
) -> tuple[np.ndarray, bool]:
    """Start index of each batch: greedy, closing a batch before it would exceed the target.

    `fixed[i]` is record i's body size without its timestampDelta and offsetDelta varints;
    `timestamps` are the `context` records before the input followed by the input's. A record's
    real size depends on its batch (the deltas), so the split uses an upper bound per record:
    offsetDelta sized for `most - 1`, the most records a batch can hold, and timestampDelta for
    the largest distance to any of the `most - 1` records before it (its possible batch starts).
    The bound of record i depends only on record i and the records within `most - 1` before it
    (fewer at the start of `timestamps`), so a greedy split that starts at a batch start of
    another encode, with that encode's records before it as context, continues it exactly.
    Every batch fits `max_batch_bytes` (a single larger record gets a batch of its own); a batch
    may close a few records earlier than an exact check would (~1%).
    """
    n = fixed.shape[0]
    budget = max_batch_bytes - RECORD_BATCH_OVERHEAD
    most = _most_per_batch(max_batch_bytes)
    offset_delta_size = int(varint_size_array(np.array([most - 1]))[0])
    total = timestamps.shape[0]
    increasing = total < 2 or bool(np.all(timestamps[1:] >= timestamps[:-1]))
    if increasing:
        # non-decreasing: the farthest possible batch start is `most - 1` records back (or the
        # first record); differences of two slices, no shifted copy of the timestamps
        delta = np.empty(n, dtype=np.int64)
        head = min(max(most - 1 - context, 0), n)  # records whose window reaches record 0
        np.subtract(timestamps[context : context + head], timestamps[0], out=delta[:head])
        lag = context + head - most + 1
        np.subtract(
            timestamps[context + head :], timestamps[lag : total - most + 1], out=delta[head:]
        )
        body = varint_size_array(delta, at_least_minus_one=True)
        del delta
    else:
        body = _window_delta_sizes(timestamps, most, context)
    body += fixed
    body += offset_delta_size
    body += varint_size_array(body, at_least_minus_one=True)
    # from `uniform_from` on every record has the same estimate: batches there are a fixed count
    # (exactly what the greedy search would choose)
    differs = np.flatnonzero(body != body[-1])
    uniform_from = int(differs[-1]) + 1 if differs.size else 0
    # the greedy search below only reads sums up to one batch past `uniform_from`
    reach = min(n, uniform_from + most + 1) if uniform_from else 0
    cumulative = np.zeros(reach + 1, dtype=np.int64)
    np.cumsum(body[:reach], out=cumulative[1:])
    starts = []
    start = 0
    search = cumulative.searchsorted
    while start < n and start < uniform_from:
        end = int(search(cumulative[start] + budget, side="right")) - 1
        if end <= start:
            end = start + 1
        starts.append(start)
        start = end
    if start < n:
        per_batch = max(1, budget // int(body[-1]))
        return (
            np.concatenate((np.array(starts, dtype=np.int64), np.arange(start, n, per_batch))),
            increasing,
        )
    return np.array(starts, dtype=np.int64), increasing


def _window_delta_sizes(timestamps: np.ndarray, most: int, first: int) -> np.ndarray:
    """For records `first..`: the largest timestampDelta size against any record up to
    `most - 1` back (the window clamped at record 0).

    Exact sliding-window min/max (van Herk/Gil-Werman): per block of `most` records a running
    min/max from the block start and one from the block end; a window spans at most two blocks,
    so its min is min(suffix of the first, prefix of the second). The result is exact, so it
    does not depend on where the blocks are aligned.
    """
    total = timestamps.shape[0]
    if most >= total:  # every window starts at record 0
        low = np.minimum.accumulate(timestamps)
        high = np.maximum.accumulate(timestamps)
    else:
        blocks = -(-total // most)
        padded = np.empty(blocks * most, dtype=np.int64)
        padded[:total] = timestamps
        padded[total:] = timestamps[-1]
        low = _window_extreme(np.minimum, padded, total, most)
        high = _window_extreme(np.maximum, padded, total, most)
    # the delta ranges over [ts - high, ts - low] and a varlong's size peaks at an end: the
    # size of ts - low >= 0, or of ts - high <= 0 whose zig-zag folds to high - ts - 1
    mine = timestamps[first:]
    far = np.subtract(mine, low[first:])
    np.subtract(high[first:], mine, out=high[first:])
    high[first:] -= 1
    np.maximum(far, high[first:], out=far)
    return varint_size_array(far, at_least_minus_one=True)


def _window_extreme(ufunc: np.ufunc, padded: np.ndarray, total: int, most: int) -> np.ndarray:
    """Running `ufunc` (min or max) over each window of `most` records ending at 0..total-1."""
    blocks = padded.shape[0] // most
    prefix = ufunc.accumulate(padded.reshape(blocks, most), axis=1).reshape(-1)
    # running from each block's end: accumulate the reversed array, read it reversed (a view)
    suffix = ufunc.accumulate(padded[::-1].reshape(blocks, most), axis=1).reshape(-1)[::-1]
    out = prefix[:total]  # windows clamped at record 0 are block 0's prefix
    ufunc(suffix[: total - most + 1], prefix[most - 1 : total], out=out[most - 1 :])
    return out


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
    timestamps as context, gives exactly the whole encode's batches (see `_split_batches`).

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
    value_column = _column(records, "value")
    if value_column is None:
        raise InvalidRecordError("records have no 'value' column")
    n = len(value_column)
    values = _as_binary(value_column, "value", large=False)
    key_column = _column(records, "key")
    keys = (
        pa.nulls(n, pa.large_binary())
        if key_column is None
        else _as_binary(key_column, "key", large=False)
    )
    if len(keys) != n:
        raise InvalidRecordError(f"column 'key' has {len(keys)} rows but 'value' has {n}")
    timestamps = _timestamps(_column(records, "timestamp"), n)
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
    headers, header_sizes = _headers_suffix(_column(records, "headers"), n, base_offset)
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

    key_lengths = _lengths(keys)
    value_lengths = _lengths(values)
    fixed, key_length_sizes, value_length_sizes = _fixed_sizes(
        keys, values, key_lengths, value_lengths, header_sizes
    )
    starts, increasing = _split_batches(
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
            out = _join_without_headers(
                keys, values, prefix_fields, value_lengths, value_length_sizes, header_rows, starts
            )
        if out is None:
            prefix = _prefix_binary(prefix_fields, _varint_fields_words(prefix_fields, n), n)
            middle = _varint_fields_binary([(value_lengths, value_length_sizes)], n)
            out = _join_with_holes(
                prefix, _large(keys), middle, _large(values), suffix, header_rows, starts
            )
        out = out[: int(sizes.sum())]
        if not out.flags.writeable:  # Arrow handed back shared memory: take a private copy
            out = out.copy()
        yield _finish(out, sizes, starts, counts, max_timestamps, base_offset)
        return

    prefix = _prefix_binary(prefix_fields, _varint_fields_words(prefix_fields, n), n)
    middle = _varint_fields_binary([(value_lengths, value_length_sizes)], n)
    joined = pc.binary_join_element_wise(
        prefix,
        _large(keys),
        middle,
        _large(values),
        suffix,
        pa.scalar(b"", pa.large_binary()),
        null_handling="replace",
        null_replacement=b"",
    )
    yield _compress_regions(
        memoryview(_data_bytes(joined)),
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
    from kafkalog_core.record.compression import compress

    batch_count = starts.shape[0]
    region_offsets = np.zeros(batch_count + 1, dtype=np.int64)
    np.cumsum(region_sizes, out=region_offsets[1:])
    codec, level = options.compression, options.compression_level
    payloads = [
        compress(codec, data[a:b], level)
        for a, b in zip(region_offsets[:-1].tolist(), region_offsets[1:].tolist(), strict=True)
    ]
    sizes = np.fromiter((len(p) for p in payloads), dtype=np.int64, count=batch_count)
    sizes += RECORD_BATCH_OVERHEAD
    _check_sizes(sizes, starts, base_offset, options.max_message_bytes)
    header_rows["length"] = sizes - LOG_OVERHEAD
    header_bytes = header_rows.tobytes()
    parts = []
    for b, payload in enumerate(payloads):
        parts.append(header_bytes[b * RECORD_BATCH_OVERHEAD : (b + 1) * RECORD_BATCH_OVERHEAD])
        parts.append(payload)
    out = np.frombuffer(bytearray(b"".join(parts)), dtype=np.uint8)
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
    key_length_sizes = _length_sizes(key_lengths)
    value_length_sizes = _length_sizes(value_lengths)
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
    """(records budget, most records per batch, offsetDelta varint size) of `_split_batches`."""
    most = _most_per_batch(options.max_batch_bytes)
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
        fixed, _, _ = _fixed_sizes(keys, values, _lengths(keys), _lengths(values), header_sizes)
        all_timestamps = np.concatenate((context, timestamps)) if context.size else timestamps
        starts, _ = _split_batches(fixed, all_timestamps, options.max_batch_bytes, context.shape[0])
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
        value_column = _column(records, "value")
        n = 0 if value_column is None else len(value_column)
    return _timestamps(_column(records, "timestamp"), n)


def _context_timestamps(context: Any, options: BatchOptions) -> np.ndarray:
    """The last `split_context_rows` context timestamps as int64 (empty for None)."""
    if context is None:
        return np.zeros(0, dtype=np.int64)
    if isinstance(context, pa.Array | pa.ChunkedArray):
        context = _timestamps(context, len(context))
    keep = split_context_rows(options)
    context = np.asarray(context, dtype=np.int64).reshape(-1)
    context = context[max(context.shape[0] - keep, 0) :] if keep else context[:0]
    if context.size and int(context.min()) < NO_TIMESTAMP:
        raise InvalidRecordError("context_timestamps has a negative timestamp (only -1 allowed)")
    return context


def _data_bytes(joined: pa.Array) -> np.ndarray:
    """The data of a large_binary array as a uint8 numpy array (writable when Arrow allows)."""
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64)
    first = int(offsets[joined.offset])
    last = int(offsets[joined.offset + len(joined)])
    return np.frombuffer(joined.buffers()[2], dtype=np.uint8, count=last - first, offset=first)


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
