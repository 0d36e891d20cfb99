"""Where each record's fields lie in a group of v2 records areas (§1.3): the record walk.

A records area can only be walked sequentially, because each record's length varint says where
the next one starts. So the Python part per record is reduced to chasing that one varint
(`record_starts`, which even switches to a vectorized stride guess while consecutive records
have the same size); every other field is then decoded for all records at once with numpy
(`walk_fields`, `varints`, `parse_headers`). When the optional C extension
(`kafkalog_core._native_decode`) is built, `native_fields` finds every record's field positions
in one C pass instead, and the numpy walk only runs to name the problem of a group it refused.

A malformed record raises the private `Corrupt` signal (record index + problem); decode.py
turns it into a located `CorruptRecordError`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.native import decode_module
from kafkalog_core.record.decoder.spans import binary_from_spans
from kafkalog_core.record.schema import HEADER_STRUCT_TYPE, HEADERS_TYPE
from kafkalog_core.record.varint import decode_varint, encode_varint

# attributes(1) + timestampDelta(>=1) + offsetDelta(>=1) + keyLength(>=1) + valueLength(>=1)
# + headersCount(>=1): the smallest body a record length varint can announce.
MIN_RECORD_BODY = 6
MIN_RECORD_SIZE = 1 + MIN_RECORD_BODY

_SPECULATE_AFTER = 8  # equal-size records in a row before guessing the rest by stride


class Corrupt(Exception):
    """Internal signal of the vectorized pass: something is wrong, find out where and what."""

    def __init__(self, record: int, problem: str) -> None:
        super().__init__(problem)
        self.record = record
        self.problem = problem


def record_starts(
    data: bytes | memoryview, arr: np.ndarray, start: int, end: int, count: int
) -> np.ndarray:
    """Positions of the `count` records of one records area [start, end) (the sequential part).

    Raises Corrupt for a count that cannot fit, a bad length varint, or a records area that
    ends before ("premature EOF") or after ("records still remaining") the last record.
    """
    if count == 0:
        if end != start:
            raise Corrupt(0, f"{end - start} bytes of records remain after the declared 0 records")
        return np.empty(0, np.int64)
    if count > (end - start) // MIN_RECORD_SIZE:
        raise Corrupt(
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
            raise Corrupt(
                i, f"premature EOF: record {i} of {count} starts at the end of the records"
            )
        append(pos)
        b = data[pos]
        if b < 0x80:
            if b & 1:
                raise Corrupt(i, "negative record length")
            size = 1 + (b >> 1)
        elif pos + 1 < end and data[pos + 1] < 0x80:  # 2-byte length: records of 64..8191 bytes
            u = (b & 0x7F) | (data[pos + 1] << 7)
            if u & 1:
                raise Corrupt(i, "negative record length")
            size = 2 + (u >> 1)
        else:
            try:
                length, after = decode_varint(data, pos)
            except CorruptRecordError as error:
                raise Corrupt(i, f"record length: {error}") from None
            if length < 0:
                raise Corrupt(i, f"negative record length {length}")
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
            raise Corrupt(
                count - 1,
                f"incorrect declared batch size, records still remaining ({end - pos} bytes after "
                f"record {count - 1})",
            )
        raise Corrupt(
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


def varints(
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
        raise Corrupt(bad, "a varint lies outside the records")
    b = arr[pos]
    value = (b & 0x7F).astype(np.uint64)
    more = b >= 0x80
    k = 1
    while more.all():  # dense phase
        if k >= max_bytes:
            raise Corrupt(0, f"varint is too long (more than {max_bytes} bytes)")
        if highest + k >= limit:
            bad = int(np.flatnonzero(pos + k >= limit)[0])
            raise Corrupt(bad, "a varint runs past the end of the records")
        b = arr[pos + k]
        value |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        more = b >= 0x80
        k += 1
    size = np.full(n, k, np.int64)
    idx = np.flatnonzero(more)
    while idx.size:  # sparse phase
        if k >= max_bytes:
            raise Corrupt(int(idx[0]), f"varint is too long (more than {max_bytes} bytes)")
        p = pos[idx] + k
        if int(p.max()) >= limit:
            raise Corrupt(
                int(idx[np.argmax(p >= limit)]), "a varint runs past the end of the records"
            )
        b = arr[p]
        value[idx] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        size[idx] += 1
        idx = idx[b >= 0x80]
        k += 1
    signed = (value >> np.uint64(1)).view(np.int64) ^ -(value & np.uint64(1)).view(np.int64)
    return signed, size


@dataclass(slots=True)
class Fields:
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


def native_fields(
    data: bytes | memoryview, regions: np.ndarray, counts: np.ndarray
) -> Fields | None:
    """The C walk of every records area; None when it is not built or refuses a batch."""
    if decode_module is None:
        return None
    room = (regions[1::2] - regions[0::2]) // MIN_RECORD_SIZE
    if (counts > room).any():  # a count that cannot fit: never allocate for it
        return None
    out = np.empty((decode_module.FIELDS, int(counts.sum())), np.int64)
    if decode_module.record_fields(data, regions, counts, out) >= 0:
        return None  # malformed somewhere: the numpy walk names the problem
    return Fields(*out)


def walk_fields(arr: np.ndarray, buffer: pa.Buffer, starts: np.ndarray, limit: int) -> Fields:
    """The numpy walk: each field of every record, field by field across records."""
    n = starts.shape[0]
    length, lsize = varints(arr, starts, limit, 5)
    record_end = starts + lsize + length
    if (length < MIN_RECORD_BODY).any():
        bad = int(np.flatnonzero(length < MIN_RECORD_BODY)[0])
        raise Corrupt(
            bad, f"record length {int(length[bad])} is below the minimum {MIN_RECORD_BODY}"
        )
    pos = starts + lsize + 1  # skip the (unused) record attributes byte
    ts_delta, s = varints(arr, pos, limit, 10)
    pos += s
    offset_delta, s = varints(arr, pos, limit, 5)
    pos += s
    key_len, s = varints(arr, pos, limit, 5)
    pos += s
    key_pos = pos
    require(key_len >= -1, "negative key length below -1")
    pos = key_pos + np.maximum(key_len, 0)
    require(pos <= record_end, "key runs past the end of its record")
    value_len, s = varints(arr, pos, limit, 5)
    value_pos = pos + s
    require(value_len >= -1, "negative value length below -1")
    pos = value_pos + np.maximum(value_len, 0)
    require(pos <= record_end, "value runs past the end of its record")
    count, s = varints(arr, pos, limit, 5)
    pos += s
    require(count >= 0, "negative headers count")
    require(count <= record_end - pos, "headers count larger than the remaining record bytes")
    headers_pos = pos
    headers = None
    if n and int(count.sum()):  # walked once: the column comes with where the headers end
        headers, pos = parse_headers(arr, buffer, pos, count, record_end, limit, int(count.sum()))
    if not np.array_equal(pos, record_end):
        bad = int(np.flatnonzero(pos != record_end)[0])
        raise Corrupt(
            bad,
            f"record length mismatch: declared {int(length[bad])} bytes, fields take "
            f"{int(pos[bad] - starts[bad] - lsize[bad])}",
        )
    return Fields(
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


def require(ok: np.ndarray, problem: str) -> None:
    if not ok.all():
        raise Corrupt(int(np.argmin(ok)), problem)


def parse_headers(
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
        kl, s = varints(arr, p, limit, 5)
        if (kl < 0).any():
            raise Corrupt(int(rows[np.argmin(kl >= 0)]), "negative header key length")
        p = p + s
        hk_pos[slot] = p
        hk_len[slot] = kl
        p = p + kl
        if (p > end).any():
            raise Corrupt(
                int(rows[np.argmax(p > end)]), "header key runs past the end of its record"
            )
        vl, s = varints(arr, p, limit, 5)
        if (vl < -1).any():
            raise Corrupt(int(rows[np.argmin(vl >= -1)]), "header value length below -1")
        p = p + s
        hv_pos[slot] = p
        hv_len[slot] = vl
        p = p + np.maximum(vl, 0)
        if (p > end).any():
            raise Corrupt(
                int(rows[np.argmax(p > end)]), "header value runs past the end of its record"
            )
        pos[rows] = p
    keys = binary_from_spans(arr, buffer, hk_pos, hk_len, string=True)
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:
        raise Corrupt(0, "a header key is not valid UTF-8") from None
    values = binary_from_spans(arr, buffer, hv_pos, hv_len)
    structs = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_STRUCT_TYPE))
    lists = pa.ListArray.from_arrays(pa.array(list_offsets.astype(np.int32)), structs)
    return lists.cast(HEADERS_TYPE), pos
