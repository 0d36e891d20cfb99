"""Records of a log buffer -> one Arrow table (RECORD_SCHEMA): `decode_records`.

Consecutive v2 batches are decoded as one group: their records areas (decompressed when a
codec is set, else read where they lie) are walked together (walk.py) and turned into Arrow
columns at once, keys/values through zero-copy spans (spans.py). Legacy (magic 0/1) entries go
through legacy.py. Anything malformed is a `CorruptRecordError` naming the batch position, the
record and the problem: the group's signal is traced to the culprit batch, re-parsed alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.record.batch import (
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Compression,
    iter_batch_headers,
)
from kafkalog_core.record.decoder.spans import binary_from_spans
from kafkalog_core.record.decoder.walk import (
    Corrupt,
    Fields,
    native_fields,
    parse_headers,
    record_starts,
    walk_fields,
)
from kafkalog_core.record.legacy import decode_legacy_entry
from kafkalog_core.record.schema import (
    HEADER_STRUCT_TYPE,
    RECORD_SCHEMA,
    RECORD_SIZE_FIELD,
    VALUE_SIZE_FIELD,
)

T = TypeVar("T")
_MAX_GROUP_BYTES = 1 << 30  # keeps every position of one vectorized pass inside int32 views

_VALUE_SIZE_SCHEMA = RECORD_SCHEMA.set(RECORD_SCHEMA.get_field_index("value"), VALUE_SIZE_FIELD)


def decode_records(
    buf: bytes | bytearray | memoryview,
    *,
    start: int = 0,
    end: int | None = None,
    verify: bool = True,
    include_control: bool = False,
    with_sizes: bool = False,
    values: bool = True,
    headers: Iterable[BatchHeader] | None = None,
) -> pa.Table:
    """Every record of every batch in `buf[start:end]` (v2 and legacy mixed) as one table.

    Consecutive v2 batches are decoded in one vectorized pass. Control batches (transaction
    markers) are left out unless `include_control`, as a consumer would. `with_sizes` adds
    the `record_size` column (RECORD_SIZE_FIELD): each record's encoded bytes in its batch.
    `values=False` gives `value_size` (VALUE_SIZE_FIELD, -1 = null) in place of the `value`
    column, for readers that only ask whether a value is there (no copy of the value bytes).
    `headers` are the batches of `buf[start:end]` when the caller has already walked them
    (iter_batch_headers with the same `verify`), to save a second walk.
    """
    view = memoryview(buf)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    parts: list[pa.Table] = []
    group: list[BatchHeader] = []
    group_bytes = 0

    def flush() -> None:
        nonlocal group_bytes
        if group:
            parts.append(decode_v2_group(view, group, with_sizes=with_sizes, values=values))
            group.clear()
            group_bytes = 0

    if headers is None:
        headers = iter_batch_headers(view, start=start, end=end, verify=verify)
    for header in headers:
        if header.magic >= MAGIC_V2:
            if header.is_control and not include_control:
                continue
            if group_bytes + header.size > _MAX_GROUP_BYTES:
                flush()
            group.append(header)
            group_bytes += header.size
        else:
            flush()
            entry = decode_legacy_entry(view, header, verify=verify, with_sizes=with_sizes)
            parts.append(entry if values else _value_sizes(entry))
    flush()
    if not parts:
        schema = RECORD_SCHEMA if values else _value_sizes(RECORD_SCHEMA.empty_table()).schema
        return (schema.append(RECORD_SIZE_FIELD) if with_sizes else schema).empty_table()
    if len(parts) == 1:
        return parts[0]
    return pa.concat_tables(parts)


# ---------------------------------------------------------------------------------------------
# v2 decoding
# ---------------------------------------------------------------------------------------------


def _value_sizes(table: pa.Table) -> pa.Table:
    """`value` replaced by its byte length (-1 for null) in the same position."""
    at = table.schema.get_field_index("value")
    sizes = pc.fill_null(pc.binary_length(table.column("value")), -1).cast(pa.int32())
    return table.set_column(at, VALUE_SIZE_FIELD, sizes)


def _where(h: BatchHeader) -> str:
    return f"batch at position {h.position} (base offset {h.base_offset})"


def check_v2_bounds(view: memoryview, h: BatchHeader) -> None:
    if h.size < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"{_where(h)}: size {h.size} is smaller than the v2 batch overhead {RECORD_BATCH_OVERHEAD}"
        )
    if h.position + h.size > len(view):
        raise CorruptRecordError(
            f"{_where(h)}: truncated, declares {h.size} bytes but only {len(view) - h.position} remain"
        )
    if h.records_count < 0:
        raise CorruptRecordError(f"{_where(h)}: negative records count {h.records_count}")


def records_area(view: memoryview, h: BatchHeader) -> bytes | memoryview:
    raw = view[h.position + RECORD_BATCH_OVERHEAD : h.position + h.size]
    codec = h.compression  # raises CorruptRecordError for codec ids 5..7
    if codec is Compression.NONE:
        return raw
    from kafkalog_core.record.compression import decompress

    try:
        return decompress(codec, raw)
    except CorruptRecordError as error:
        raise CorruptRecordError(f"{_where(h)}: {codec.kafka_name} records: {error}") from None


@dataclass(slots=True)
class _Parsed:
    """Per-record numpy columns of one vectorized pass."""

    offset_delta: np.ndarray
    timestamp_delta: np.ndarray
    key: pa.Array
    value: pa.Array
    headers: pa.Array
    size: np.ndarray  # encoded bytes of each record: length varint + body


def _columns(
    arr: np.ndarray, buffer: pa.Buffer, f: Fields, limit: int, values: bool = True
) -> _Parsed:
    """Arrow key, value (or value size) and headers columns from the records' field positions."""
    n = f.start.shape[0]
    total_headers = int(f.headers_count.sum()) if n else 0
    if f.headers is not None:
        header_array = f.headers
    elif total_headers:
        record_end = f.start + f.size
        header_array, _ = parse_headers(
            arr, buffer, f.headers_pos, f.headers_count, record_end, limit, total_headers
        )
    else:
        header_array = pa.ListArray.from_arrays(
            pa.array(np.zeros(n + 1, np.int32)), pa.array([], HEADER_STRUCT_TYPE)
        )
    key = binary_from_spans(arr, buffer, f.key_pos, f.key_len)
    if values:
        value = binary_from_spans(arr, buffer, f.value_pos, f.value_len)
    else:
        value = pa.array(f.value_len.astype(np.int32))
    return _Parsed(f.offset_delta, f.timestamp_delta, key, value, header_array, f.size)


def decode_v2_group(
    view: memoryview, headers: list[BatchHeader], *, with_sizes: bool = False, values: bool = True
) -> pa.Table:
    """Decode the records of several v2 batches of `view` in one vectorized pass."""
    return _locating(headers, lambda hs: _decode_v2_group_fast(view, hs, with_sizes, values))


@dataclass(slots=True)
class RecordSpans:
    """Where every record of a group of v2 batches lies: `data` holds their records areas back to
    back (the log bytes themselves when no batch is compressed, else the decompressed areas),
    `fields` the positions of each record's fields in it, `counts` the records per batch."""

    data: bytes | memoryview
    arr: np.ndarray  # `data` as uint8
    fields: Fields
    counts: np.ndarray


def record_spans(view: memoryview, headers: list[BatchHeader]) -> RecordSpans:
    """The field positions of every record of consecutive v2 batches (one vectorized walk), for
    callers that rewrite records rather than read them (the log cleaner). A malformed batch is a
    CorruptRecordError naming it."""
    return _locating(headers, lambda hs: _record_spans(view, hs))


def _locating(headers: list[BatchHeader], walk: Callable[[list[BatchHeader]], T]) -> T:
    """`walk(headers)`, with a Corrupt signal turned into a CorruptRecordError naming the batch."""
    try:
        return walk(headers)
    except Corrupt as signal:
        if len(headers) == 1:
            raise _located(headers[0], signal) from None
        for header in headers:  # find the culprit batch and name it
            try:
                walk([header])
            except Corrupt as inner:
                raise _located(header, inner) from None
        raise CorruptRecordError(f"{_where(headers[0])} and following: {signal.problem}") from None


def _located(h: BatchHeader, signal: Corrupt) -> CorruptRecordError:
    compressed = "" if h.attributes & 0x07 == 0 else " (decompressed)"
    return CorruptRecordError(f"{_where(h)}, record {signal.record}{compressed}: {signal.problem}")


def _record_spans(view: memoryview, headers: list[BatchHeader]) -> RecordSpans:
    for h in headers:
        check_v2_bounds(view, h)
    all_plain = all(h.attributes & 0x07 == 0 for h in headers)
    if all_plain:
        # zero copy: walk the records where they lie in the log buffer
        base = headers[0].position
        data: bytes | memoryview = view[base : headers[-1].position + headers[-1].size]
        regions = [
            (h.position - base + RECORD_BATCH_OVERHEAD, h.position - base + h.size) for h in headers
        ]
    else:
        chunks = [records_area(view, h) for h in headers]
        data = b"".join(chunks)
        regions = []
        at = 0
        for chunk in chunks:
            regions.append((at, at + len(chunk)))
            at += len(chunk)
    arr = np.frombuffer(data, np.uint8)
    buffer = pa.py_buffer(data)
    counts = np.array([h.records_count for h in headers], np.int64)
    fields = native_fields(data, np.array(regions, np.int64).reshape(-1), counts)
    if fields is None:  # no C extension, or a malformed batch: the numpy walk
        starts_list = [
            record_starts(data, arr, lo, hi, h.records_count)
            for h, (lo, hi) in zip(headers, regions, strict=True)
        ]
        starts = starts_list[0] if len(starts_list) == 1 else np.concatenate(starts_list)
        fields = walk_fields(arr, buffer, starts, arr.shape[0])
    return RecordSpans(data, arr, fields, counts)


def _decode_v2_group_fast(
    view: memoryview, headers: list[BatchHeader], with_sizes: bool = False, values: bool = True
) -> pa.Table:
    spans = _record_spans(view, headers)
    arr, fields, counts = spans.arr, spans.fields, spans.counts
    buffer = pa.py_buffer(spans.data)
    parsed = _columns(arr, buffer, fields, arr.shape[0], values)
    starts = fields.start

    base_offsets = np.array([h.base_offset for h in headers], np.int64)
    base_ts = np.array([h.base_timestamp for h in headers], np.int64)
    max_ts = np.array([h.max_timestamp for h in headers], np.int64)
    log_append = np.array([bool(h.attributes & TIMESTAMP_TYPE_MASK) for h in headers])
    if len(headers) == 1:
        offsets = parsed.offset_delta + base_offsets[0]
        if log_append[0]:
            timestamps = np.full(starts.shape[0], max_ts[0], np.int64)
        else:
            timestamps = parsed.timestamp_delta + base_ts[0]
        ts_type = np.full(starts.shape[0], int(log_append[0]), np.int8)
    else:
        offsets = parsed.offset_delta + np.repeat(base_offsets, counts)
        timestamps = np.where(
            np.repeat(log_append, counts),
            np.repeat(max_ts, counts),
            parsed.timestamp_delta + np.repeat(base_ts, counts),
        )
        ts_type = np.repeat(log_append.astype(np.int8), counts)
    table = pa.Table.from_arrays(
        [
            pa.array(offsets),
            pa.array(timestamps),
            pa.array(ts_type),
            parsed.key,
            parsed.value,
            parsed.headers,
        ],
        schema=RECORD_SCHEMA if values else _VALUE_SIZE_SCHEMA,
    )
    if with_sizes:
        table = table.append_column(RECORD_SIZE_FIELD, pa.array(parsed.size.astype(np.int32)))
    return table
