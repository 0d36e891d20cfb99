"""Record batches -> Arrow records (RECORD_SCHEMA): the read path of dump-log and the Spark reader.

Why it is shaped this way: a v2 records area (§1.3) can only be walked sequentially, because
each record's length varint says where the next one starts. So the Python part per record is
reduced to chasing that one varint (`_record_starts`, which even switches to a vectorized
stride guess while consecutive records have the same size). Everything else is decoded for all
records of many batches at once with numpy. When the optional C extension
(`kafkalog_core._native_decode`) is built, one C pass finds every record's field positions
instead and the numpy walk only runs to name the problem of a group the C pass refused, and keys/values become Arrow arrays through a
zero-copy `binary_view` over the records bytes that Arrow then compacts to `binary` in C++.

Validation is strict and typed: anything malformed is a `CorruptRecordError` naming the batch
position, the record and the problem (the vectorized pass raises a private signal; the culprit
batch is then re-parsed alone to produce a precise message).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.lib.stride_tricks import as_strided

from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.native import decode_module
from kafkalog_core.record.batch import (
    CONTROL_MASK,
    INT32_MAX,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Compression,
    ensure_valid,
    is_valid,
    iter_batch_headers,
)
from kafkalog_core.record.control import (
    ControlRecordType,
    parse_control_record_key,
    parse_end_txn_marker_value,
)
from kafkalog_core.record.legacy import decode_legacy_entry
from kafkalog_core.record.schema import (
    HEADER_STRUCT_TYPE,
    HEADERS_TYPE,
    RECORD_SCHEMA,
    RECORD_SIZE_FIELD,
    VALUE_SIZE_FIELD,
)
from kafkalog_core.record.varint import decode_varint, encode_varint

__all__ = [
    "HEADERS_TYPE",
    "RECORD_SCHEMA",
    "ControlRecord",
    "RecordBatch",
    "decode_records",
    "read_batches",
]

# attributes(1) + timestampDelta(>=1) + offsetDelta(>=1) + keyLength(>=1) + valueLength(>=1)
# + headersCount(>=1): the smallest body a record length varint can announce.
MIN_RECORD_BODY = 6
MIN_RECORD_SIZE = 1 + MIN_RECORD_BODY
_MAX_GROUP_BYTES = 1 << 30  # keeps every position of one vectorized pass inside int32 views
_SPECULATE_AFTER = 8  # equal-size records in a row before guessing the rest by stride
_INLINE = 12  # binary_view stores values of up to 12 bytes inline
_VALUE_SIZE_SCHEMA = RECORD_SCHEMA.set(RECORD_SCHEMA.get_field_index("value"), VALUE_SIZE_FIELD)


class _Corrupt(Exception):
    """Internal signal of the vectorized pass: something is wrong, find out where and what."""

    def __init__(self, record: int, problem: str) -> None:
        super().__init__(problem)
        self.record = record
        self.problem = problem


# ---------------------------------------------------------------------------------------------
# control records (§1.5)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """The record of a control batch: its type and, for COMMIT/ABORT markers, the coordinator epoch."""

    type: ControlRecordType
    coordinator_epoch: int | None

    @property
    def is_end_txn_marker(self) -> bool:
        return self.type in (ControlRecordType.ABORT, ControlRecordType.COMMIT)


def _parse_control(key: bytes | None, value: bytes | None, where: str) -> ControlRecord:
    try:
        ctype = parse_control_record_key(key)
        epoch = None
        if ctype in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            epoch = parse_end_txn_marker_value(value)
    except CorruptRecordError as error:
        raise CorruptRecordError(f"{where}: {error}") from None
    return ControlRecord(type=ctype, coordinator_epoch=epoch)


# ---------------------------------------------------------------------------------------------
# the batch view
# ---------------------------------------------------------------------------------------------


class RecordBatch:
    """A view of one batch in a buffer: header fields without parsing, records on demand.

    Works for v2 batches and for legacy (magic 0/1) top-level messages alike, so a reader of a
    mixed log (old segments, fetch responses) sees one type.
    """

    __slots__ = ("_buf", "_verify", "header")

    def __init__(
        self, buf: bytes | bytearray | memoryview, header: BatchHeader, *, verify: bool = False
    ) -> None:
        """`verify` also checks the CRCs of a legacy wrapper's inner messages in `records()`."""
        self._buf = memoryview(buf)
        self.header = header
        self._verify = verify

    def __repr__(self) -> str:
        h = self.header
        return (
            f"RecordBatch(position={h.position}, magic={h.magic}, base_offset={h.base_offset}, "
            f"last_offset={h.last_offset}, count={h.records_count}, size={h.size})"
        )

    @property
    def record_count(self) -> int:
        return self.header.records_count

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    def is_valid(self) -> bool:
        return is_valid(self._buf, self.header)

    def ensure_valid(self) -> None:
        ensure_valid(self._buf, self.header)

    def raw(self) -> memoryview:
        """The batch's bytes."""
        return self._buf[self.header.position : self.header.position + self.header.size]

    def records_data(self) -> bytes | memoryview:
        """The records area, decompressed: what the record walker reads (v2 only)."""
        h = self.header
        _check_v2_bounds(self._buf, h)
        return _records_data(self._buf, h)

    def records(self) -> pa.Table:
        """All records of the batch as a RECORD_SCHEMA table (control records included)."""
        if self.header.magic < MAGIC_V2:
            return decode_legacy_entry(self._buf, self.header, verify=self._verify)
        return _decode_v2_group(self._buf, [self.header])

    def sequences(self) -> np.ndarray:
        """Each record's producer sequence: baseSequence + offsetDelta with Kafka's int32 wrap.

        -1 for every record when the batch has no baseSequence (non-idempotent producer).
        """
        h = self.header
        deltas = self.records().column("offset").to_numpy() - h.base_offset
        if h.base_sequence < 0:
            return np.full(deltas.shape[0], -1, np.int64)
        return (h.base_sequence + deltas) % (INT32_MAX + 1)

    def control_record(self) -> ControlRecord | None:
        """Type (and coordinator epoch for COMMIT/ABORT) of a control batch; None otherwise."""
        h = self.header
        if not h.is_control:
            return None
        table = self.records()
        where = f"control batch at position {h.position} (base offset {h.base_offset})"
        if table.num_rows == 0:
            raise CorruptRecordError(f"{where}: holds no control record")
        return _parse_control(
            table.column("key")[0].as_py(), table.column("value")[0].as_py(), where
        )


def read_batches(
    buf: bytes | bytearray | memoryview,
    *,
    start: int = 0,
    end: int | None = None,
    verify: bool = True,
) -> Iterator[RecordBatch]:
    """The batches of a log buffer as RecordBatch views (FileLogInputStream semantics, §1.8)."""
    for header in iter_batch_headers(buf, start=start, end=end, verify=verify):
        yield RecordBatch(buf, header, verify=verify)


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
    the `record_size` column (RECORD_SIZE_FIELD): what the compaction audit counts as freed.
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
            parts.append(_decode_v2_group(view, group, with_sizes=with_sizes, values=values))
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


def _check_v2_bounds(view: memoryview, h: BatchHeader) -> None:
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


def _records_data(view: memoryview, h: BatchHeader) -> bytes | memoryview:
    raw = view[h.position + RECORD_BATCH_OVERHEAD : h.position + h.size]
    codec = h.compression  # raises CorruptRecordError for codec ids 5..7
    if codec is Compression.NONE:
        return raw
    from kafkalog_core.record.compression import decompress

    try:
        return decompress(codec, raw)
    except CorruptRecordError as error:
        raise CorruptRecordError(f"{_where(h)}: {codec.kafka_name} records: {error}") from None


def _record_starts(
    data: bytes | memoryview, arr: np.ndarray, start: int, end: int, count: int
) -> np.ndarray:
    """Positions of the `count` records of one records area [start, end) (the sequential part).

    Raises _Corrupt for a count that cannot fit, a bad length varint, or a records area that
    ends before ("premature EOF") or after ("records still remaining") the last record.
    """
    if count == 0:
        if end != start:
            raise _Corrupt(0, f"{end - start} bytes of records remain after the declared 0 records")
        return np.empty(0, np.int64)
    if count > (end - start) // MIN_RECORD_SIZE:
        raise _Corrupt(
            0, f"premature EOF: {count} records declared but only {end - start} bytes of records"
        )
    pieces: list[np.ndarray] = []
    scalar: list[int] = []
    append = scalar.append
    pos = start
    i = 0
    prev = -1
    run = 0
    while i < count:
        if pos >= end:
            raise _Corrupt(
                i, f"premature EOF: record {i} of {count} starts at the end of the records"
            )
        append(pos)
        b = data[pos]
        if b < 0x80:
            if b & 1:
                raise _Corrupt(i, "negative record length")
            size = 1 + (b >> 1)
        elif pos + 1 < end and data[pos + 1] < 0x80:  # 2-byte length: records of 64..8191 bytes
            u = (b & 0x7F) | (data[pos + 1] << 7)
            if u & 1:
                raise _Corrupt(i, "negative record length")
            size = 2 + (u >> 1)
        else:
            try:
                length, after = decode_varint(data, pos)
            except CorruptRecordError as error:
                raise _Corrupt(i, f"record length: {error}") from None
            if length < 0:
                raise _Corrupt(i, f"negative record length {length}")
            size = after - pos + length
        pos += size
        i += 1
        if size == prev:
            run += 1
            if run >= _SPECULATE_AFTER and i < count:
                # Records of one producer often have identical sizes: guess the next starts by
                # stride and confirm them all with one vectorized varint decode.
                pieces.append(np.array(scalar, np.int64))
                scalar.clear()
                pos, i = _speculate(arr, pos, end, i, count, size, pieces)
                run = 0
                prev = -1
                continue
        else:
            prev = size
            run = 0
    if scalar:
        pieces.append(np.array(scalar, np.int64))
    if pos != end:
        if pos < end:
            raise _Corrupt(
                count - 1,
                f"incorrect declared batch size, records still remaining ({end - pos} bytes after "
                f"record {count - 1})",
            )
        raise _Corrupt(
            count - 1, f"premature EOF: the last record runs {pos - end} bytes past the end"
        )
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


@functools.lru_cache(maxsize=1024)
def _length_prefix(size: int) -> np.ndarray | None:
    """The length varint every record of exactly `size` bytes starts with."""
    for width in range(1, 6):
        expected = encode_varint(size - width)
        if len(expected) == width:
            return np.frombuffer(expected, np.uint8)
    return None


def _speculate(
    arr: np.ndarray, pos: int, end: int, i: int, count: int, size: int, pieces: list[np.ndarray]
) -> tuple[int, int]:
    """Accept as many following records of exactly `size` bytes as the bytes confirm.

    A record of `size` bytes starts with one specific length varint, so confirming a guessed
    start is comparing one or two bytes, not decoding a varint.
    """
    pattern = _length_prefix(size)
    if pattern is None:
        return pos, i
    width = pattern.shape[0]
    chunk = 64
    while i < count:
        m = min(chunk, count - i, (end - pos) // size)
        if m <= 0:
            return pos, i
        cand = pos + size * np.arange(m, dtype=np.int64)
        ok = arr[cand] == pattern[0]
        for k in range(1, width):
            ok &= arr[cand + k] == pattern[k]
        bad = m if ok.all() else int(np.argmin(ok))
        if bad:
            pieces.append(cand[:bad])
            pos += size * bad
            i += bad
        if bad < m:
            return pos, i
        chunk *= 4
    return pos, i


def _varints(
    arr: np.ndarray, pos: np.ndarray, limit: int, max_bytes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Decode zig-zag varints at `pos` (all must lie below `limit`). Returns (values, sizes).

    While every varint still continues, a byte pass works on whole arrays; after that only the
    still-continuing ones are gathered again, so typical 1-2 byte fields cost one or two passes.
    """
    n = pos.shape[0]
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    highest = int(pos.max())
    if highest >= limit or int(pos.min()) < 0:
        bad = int(np.flatnonzero((pos >= limit) | (pos < 0))[0])
        raise _Corrupt(bad, "a varint lies outside the records")
    b = arr[pos]
    value = (b & 0x7F).astype(np.uint64)
    more = b >= 0x80
    k = 1
    while more.all():  # dense phase
        if k >= max_bytes:
            raise _Corrupt(0, f"varint is too long (more than {max_bytes} bytes)")
        if highest + k >= limit:
            bad = int(np.flatnonzero(pos + k >= limit)[0])
            raise _Corrupt(bad, "a varint runs past the end of the records")
        b = arr[pos + k]
        value |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        more = b >= 0x80
        k += 1
    size = np.full(n, k, np.int64)
    idx = np.flatnonzero(more)
    while idx.size:  # sparse phase
        if k >= max_bytes:
            raise _Corrupt(int(idx[0]), f"varint is too long (more than {max_bytes} bytes)")
        p = pos[idx] + k
        if int(p.max()) >= limit:
            raise _Corrupt(
                int(idx[np.argmax(p >= limit)]), "a varint runs past the end of the records"
            )
        b = arr[p]
        value[idx] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        size[idx] += 1
        idx = idx[b >= 0x80]
        k += 1
    signed = (value >> np.uint64(1)).view(np.int64) ^ -(value & np.uint64(1)).view(np.int64)
    return signed, size


def _binary_from_spans(
    arr: np.ndarray,
    buffer: pa.Buffer,
    starts: np.ndarray,
    lengths: np.ndarray,
    *,
    string: bool = False,
) -> pa.Array:
    """Arrow binary (or string) array of arr[starts[i] : starts[i] + lengths[i]] (-1 = null).

    Builds a zero-copy binary_view over `buffer` (16 bytes per element, computed with numpy)
    and lets Arrow's C++ cast compact it into a contiguous `binary` array.
    """
    n = starts.shape[0]
    valid = lengths >= 0
    lens = np.where(valid, lengths, 0)
    total = arr.shape[0]
    views = np.zeros((n, 16), np.uint8)
    if n:
        safe = starts + _INLINE <= total
        if total >= _INLINE:
            window = as_strided(
                arr, shape=(total - _INLINE + 1, _INLINE), strides=(1, 1), writeable=False
            )
            head = window[np.where(safe, starts, 0)]
        else:
            head = np.zeros((n, _INLINE), np.uint8)
        if not safe.all():  # the last few bytes of the buffer: fill byte by byte
            for row in np.flatnonzero(~safe):
                s = int(starts[row])
                chunk = arr[s : min(total, s + _INLINE)]
                head[row] = 0
                head[row, : chunk.shape[0]] = chunk
        short = lens < _INLINE
        if short.any():  # inline values are zero-padded
            head[short] *= np.arange(_INLINE) < lens[short, None]
        views[:, 4:16] = head
        words = views.view(np.int32)
        words[:, 0] = lens
        big = lens > _INLINE
        if big.any():
            words[big, 2] = 0
            words[big, 3] = starts[big]
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    view_type = pa.string_view() if string else pa.binary_view()
    viewed = pa.Array.from_buffers(view_type, n, [validity, pa.py_buffer(views), buffer])
    return viewed.cast(pa.string() if string else pa.binary())


@dataclass(slots=True)
class _Parsed:
    """Per-record numpy columns of one vectorized pass."""

    offset_delta: np.ndarray
    timestamp_delta: np.ndarray
    key: pa.Array
    value: pa.Array
    headers: pa.Array
    size: np.ndarray  # encoded bytes of each record: length varint + body


@dataclass(slots=True)
class _Fields:
    """Where each record's fields lie in the records bytes (one row per record)."""

    start: np.ndarray
    size: np.ndarray  # length varint + body
    timestamp_delta: np.ndarray
    offset_delta: np.ndarray
    key_pos: np.ndarray
    key_len: np.ndarray  # -1 = null
    value_pos: np.ndarray
    value_len: np.ndarray
    headers_pos: np.ndarray  # after headersCount
    headers_count: np.ndarray
    headers: pa.Array | None = None  # the headers column when the walk already built it


def _native_fields(
    data: bytes | memoryview, regions: np.ndarray, counts: np.ndarray
) -> _Fields | None:
    """The C walk of every records area; None when it is not built or refuses a batch."""
    if decode_module is None:
        return None
    room = (regions[1::2] - regions[0::2]) // MIN_RECORD_SIZE
    if (counts > room).any():  # a count that cannot fit: never allocate for it
        return None
    out = np.empty((decode_module.FIELDS, int(counts.sum())), np.int64)
    if decode_module.record_fields(data, regions, counts, out) >= 0:
        return None  # malformed somewhere: the numpy walk names the problem
    return _Fields(*out)


def _walk_fields(arr: np.ndarray, buffer: pa.Buffer, starts: np.ndarray, limit: int) -> _Fields:
    """The numpy walk: each field of every record, field by field across records."""
    n = starts.shape[0]
    length, lsize = _varints(arr, starts, limit, 5)
    record_end = starts + lsize + length
    if (length < MIN_RECORD_BODY).any():
        bad = int(np.flatnonzero(length < MIN_RECORD_BODY)[0])
        raise _Corrupt(
            bad, f"record length {int(length[bad])} is below the minimum {MIN_RECORD_BODY}"
        )
    pos = starts + lsize + 1  # skip the (unused) record attributes byte
    ts_delta, s = _varints(arr, pos, limit, 10)
    pos += s
    offset_delta, s = _varints(arr, pos, limit, 5)
    pos += s
    key_len, s = _varints(arr, pos, limit, 5)
    pos += s
    key_pos = pos
    _check(key_len >= -1, "negative key length below -1")
    pos = key_pos + np.maximum(key_len, 0)
    _check(pos <= record_end, "key runs past the end of its record")
    value_len, s = _varints(arr, pos, limit, 5)
    value_pos = pos + s
    _check(value_len >= -1, "negative value length below -1")
    pos = value_pos + np.maximum(value_len, 0)
    _check(pos <= record_end, "value runs past the end of its record")
    count, s = _varints(arr, pos, limit, 5)
    pos += s
    _check(count >= 0, "negative headers count")
    _check(count <= record_end - pos, "headers count larger than the remaining record bytes")
    headers_pos = pos
    headers = None
    if n and int(count.sum()):  # walked once: the column comes with where the headers end
        headers, pos = _parse_headers(arr, buffer, pos, count, record_end, limit, int(count.sum()))
    if not np.array_equal(pos, record_end):
        bad = int(np.flatnonzero(pos != record_end)[0])
        raise _Corrupt(
            bad,
            f"record length mismatch: declared {int(length[bad])} bytes, fields take "
            f"{int(pos[bad] - starts[bad] - lsize[bad])}",
        )
    return _Fields(
        starts,
        record_end - starts,
        ts_delta,
        offset_delta,
        key_pos,
        key_len,
        value_pos,
        value_len,
        headers_pos,
        count,
        headers,
    )


def _columns(
    arr: np.ndarray, buffer: pa.Buffer, f: _Fields, limit: int, values: bool = True
) -> _Parsed:
    """Arrow key, value (or value size) and headers columns from the records' field positions."""
    n = f.start.shape[0]
    total_headers = int(f.headers_count.sum()) if n else 0
    if f.headers is not None:
        header_array = f.headers
    elif total_headers:
        record_end = f.start + f.size
        header_array, _ = _parse_headers(
            arr, buffer, f.headers_pos, f.headers_count, record_end, limit, total_headers
        )
    else:
        header_array = pa.ListArray.from_arrays(
            pa.array(np.zeros(n + 1, np.int32)), pa.array([], HEADER_STRUCT_TYPE)
        )
    key = _binary_from_spans(arr, buffer, f.key_pos, f.key_len)
    if values:
        value = _binary_from_spans(arr, buffer, f.value_pos, f.value_len)
    else:
        value = pa.array(f.value_len.astype(np.int32))
    return _Parsed(f.offset_delta, f.timestamp_delta, key, value, header_array, f.size)


def _check(ok: np.ndarray, problem: str) -> None:
    if not ok.all():
        raise _Corrupt(int(np.argmin(ok)), problem)


def _parse_headers(
    arr: np.ndarray,
    buffer: pa.Buffer,
    pos: np.ndarray,
    count: np.ndarray,
    record_end: np.ndarray,
    limit: int,
    total: int,
) -> tuple[pa.Array, np.ndarray]:
    """Headers of all records, decoded header-index by header-index across records.

    Returns the headers column and where each record's headers end."""
    pos = pos.copy()
    list_offsets = np.zeros(count.shape[0] + 1, np.int64)
    np.cumsum(count, out=list_offsets[1:])
    hk_pos = np.empty(total, np.int64)
    hk_len = np.empty(total, np.int64)
    hv_pos = np.empty(total, np.int64)
    hv_len = np.empty(total, np.int64)
    for j in range(int(count.max())):
        rows = np.flatnonzero(count > j)
        slot = list_offsets[rows] + j
        p = pos[rows]
        end = record_end[rows]
        kl, s = _varints(arr, p, limit, 5)
        if (kl < 0).any():
            raise _Corrupt(int(rows[np.argmin(kl >= 0)]), "negative header key length")
        p = p + s
        hk_pos[slot] = p
        hk_len[slot] = kl
        p = p + kl
        if (p > end).any():
            raise _Corrupt(
                int(rows[np.argmax(p > end)]), "header key runs past the end of its record"
            )
        vl, s = _varints(arr, p, limit, 5)
        if (vl < -1).any():
            raise _Corrupt(int(rows[np.argmin(vl >= -1)]), "header value length below -1")
        p = p + s
        hv_pos[slot] = p
        hv_len[slot] = vl
        p = p + np.maximum(vl, 0)
        if (p > end).any():
            raise _Corrupt(
                int(rows[np.argmax(p > end)]), "header value runs past the end of its record"
            )
        pos[rows] = p
    keys = _binary_from_spans(arr, buffer, hk_pos, hk_len, string=True)
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:
        raise _Corrupt(0, "a header key is not valid UTF-8") from None
    values = _binary_from_spans(arr, buffer, hv_pos, hv_len)
    structs = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_STRUCT_TYPE))
    lists = pa.ListArray.from_arrays(pa.array(list_offsets.astype(np.int32)), structs)
    return lists.cast(HEADERS_TYPE), pos


def _decode_v2_group(
    view: memoryview, headers: list[BatchHeader], *, with_sizes: bool = False, values: bool = True
) -> pa.Table:
    """Decode the records of several v2 batches of `view` in one vectorized pass."""
    try:
        return _decode_v2_group_fast(view, headers, with_sizes, values)
    except _Corrupt as signal:
        if len(headers) == 1:
            raise _located(headers[0], signal) from None
        for header in headers:  # find the culprit batch and name it
            try:
                _decode_v2_group_fast(view, [header])
            except _Corrupt as inner:
                raise _located(header, inner) from None
        raise CorruptRecordError(f"{_where(headers[0])} and following: {signal.problem}") from None


def _located(h: BatchHeader, signal: _Corrupt) -> CorruptRecordError:
    compressed = "" if h.attributes & 0x07 == 0 else " (decompressed)"
    return CorruptRecordError(f"{_where(h)}, record {signal.record}{compressed}: {signal.problem}")


def _decode_v2_group_fast(
    view: memoryview, headers: list[BatchHeader], with_sizes: bool = False, values: bool = True
) -> pa.Table:
    for h in headers:
        _check_v2_bounds(view, h)
    all_plain = all(h.attributes & 0x07 == 0 for h in headers)
    if all_plain:
        # zero copy: walk the records where they lie in the log buffer
        base = headers[0].position
        data: bytes | memoryview = view[base : headers[-1].position + headers[-1].size]
        regions = [
            (h.position - base + RECORD_BATCH_OVERHEAD, h.position - base + h.size) for h in headers
        ]
    else:
        chunks = [_records_data(view, h) for h in headers]
        data = b"".join(chunks)
        regions = []
        at = 0
        for chunk in chunks:
            regions.append((at, at + len(chunk)))
            at += len(chunk)
    arr = np.frombuffer(data, np.uint8)
    buffer = pa.py_buffer(data)
    counts = np.array([h.records_count for h in headers], np.int64)
    fields = _native_fields(data, np.array(regions, np.int64).reshape(-1), counts)
    if fields is None:  # no C extension, or a malformed batch: the numpy walk
        starts_list = [
            _record_starts(data, arr, lo, hi, h.records_count)
            for h, (lo, hi) in zip(headers, regions, strict=True)
        ]
        starts = starts_list[0] if len(starts_list) == 1 else np.concatenate(starts_list)
        fields = _walk_fields(arr, buffer, starts, arr.shape[0])
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


def is_control_batch(header: BatchHeader) -> bool:
    """Attribute bit 5 on a v2 batch (kept here so readers need not import batch masks)."""
    return header.magic >= MAGIC_V2 and bool(header.attributes & CONTROL_MASK)
