"""Zig-zag varints as Kafka writes them (ByteUtils.java), scalar and vectorized.

Zig-zag maps signed to unsigned (`(v << 1) ^ (v >> 63)`), then protobuf base-128 groups,
least significant first, MSB = "more follows". A 32-bit varint has at most 5 bytes, a varlong 10.

The vectorized functions work on numpy int64 arrays: sizes and bytes for many values at once, and
decoding of many varints at known positions of one buffer. They are what keeps per-record
Python loops off the encode and decode hot paths.
"""

from __future__ import annotations

import numpy as np

from kafkalog_core.errors import CorruptRecordError

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10

# ---------------------------------------------------------------------------------------------
# scalar
# ---------------------------------------------------------------------------------------------


def zigzag(value: int) -> int:
    """Signed -> unsigned zig-zag for values in the int64 range."""
    return (value << 1) ^ (value >> 63) if value < 0 else value << 1


def unzigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def encode_varint(value: int) -> bytes:
    """Zig-zag varint (works for int32 and int64 values alike)."""
    unsigned = zigzag(value) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


encode_varlong = encode_varint


def size_of_varint(value: int) -> int:
    unsigned = zigzag(value) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while unsigned >= 0x80:
        unsigned >>= 7
        size += 1
    return size


def decode_unsigned_varint(
    buf: bytes | bytearray | memoryview, position: int, *, max_bytes: int = MAX_VARINT_BYTES
) -> tuple[int, int]:
    """Decode one unsigned varint (base-128, no zig-zag: the lengths and counts of Kafka's
    flexible-version messages) at `position`; returns (value, position after it).

    Raises CorruptRecordError for a varint longer than `max_bytes` ("Varint is too long") or one
    that runs past the end of `buf`.
    """
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        at = position + i
        if at >= end:
            raise CorruptRecordError(f"varint at position {position} runs past the end of the data")
        byte = buf[at]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, at + 1
        shift += 7
    raise CorruptRecordError(
        f"varint at position {position} is too long (more than {max_bytes} bytes)"
    )


def decode_varint(
    buf: bytes | bytearray | memoryview, position: int, *, max_bytes: int = MAX_VARINT_BYTES
) -> tuple[int, int]:
    """Decode one zig-zag varint at `position`; returns (value, position after it), with the
    errors of `decode_unsigned_varint`."""
    raw, after = decode_unsigned_varint(buf, position, max_bytes=max_bytes)
    return unzigzag(raw), after


def decode_varlong(buf: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    return decode_varint(buf, position, max_bytes=MAX_VARLONG_BYTES)


# ---------------------------------------------------------------------------------------------
# vectorized
# ---------------------------------------------------------------------------------------------

# thresholds[k] = 2**(7*(k+1)): an unsigned value below it fits in k+1 bytes
_THRESHOLDS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def zigzag_array(values: np.ndarray) -> np.ndarray:
    """Zig-zag encode an int64 array (as uint64)."""
    v = values.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Encoded size (1..10) of each int64 value's zig-zag varint, as int64."""
    unsigned = zigzag_array(values)
    return (np.searchsorted(_THRESHOLDS, unsigned, side="right") + 1).astype(np.int64)


def varint_bytes(
    values: np.ndarray, width: int = MAX_VARLONG_BYTES
) -> tuple[np.ndarray, np.ndarray]:
    """Encode many values: returns (matrix uint8 [n, width], sizes int64 [n]).

    Row i holds value i's varint in its first sizes[i] bytes; the rest of the row is garbage
    zeros. `width` may be reduced (e.g. 5 for int32 fields) when values are known to fit.
    """
    unsigned = zigzag_array(values)
    sizes = varint_sizes(values)
    n = unsigned.shape[0]
    matrix = np.empty((n, width), dtype=np.uint8)
    rest = unsigned.copy()
    for k in range(width):
        low = (rest & np.uint64(0x7F)).astype(np.uint8)
        more = (sizes > k + 1).astype(np.uint8) << 7
        matrix[:, k] = low | more
        rest >>= np.uint64(7)
    return matrix, sizes


def decode_varints_at(
    data: np.ndarray,
    positions: np.ndarray,
    *,
    max_bytes: int = MAX_VARINT_BYTES,
    limit: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Decode one zig-zag varint at each of `positions` in the uint8 array `data`.

    Returns (values int64, sizes int64). `limit` (default len(data)) is the end of the region
    the varints must lie in. Raises CorruptRecordError naming the first bad position when a
    varint is longer than `max_bytes` or crosses `limit`.
    """
    limit = data.shape[0] if limit is None else limit
    positions = positions.astype(np.int64, copy=False)
    n = positions.shape[0]
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if np.any(positions >= limit) or np.any(positions < 0):
        bad = int(positions[(positions >= limit) | (positions < 0)][0])
        raise CorruptRecordError(f"varint at position {bad} lies outside the record data")
    result = np.zeros(n, dtype=np.uint64)
    sizes = np.zeros(n, dtype=np.int64)
    active = np.ones(n, dtype=bool)
    for k in range(max_bytes):
        idx = positions + k
        in_range = idx < limit
        if np.any(active & ~in_range):
            bad = int(positions[active & ~in_range][0])
            raise CorruptRecordError(f"varint at position {bad} runs past the end of the data")
        byte = data[np.where(active, idx, 0)].astype(np.uint64)
        result |= np.where(active, (byte & np.uint64(0x7F)) << np.uint64(7 * k), np.uint64(0))
        ends_here = active & (byte < 0x80)
        sizes[ends_here] = k + 1
        active &= ~ends_here
        if not active.any():
            break
    if active.any():
        bad = int(positions[active][0])
        raise CorruptRecordError(
            f"varint at position {bad} is too long (more than {max_bytes} bytes)"
        )
    signed = (result >> np.uint64(1)).view(np.int64) ^ -(result & np.uint64(1)).view(np.int64)
    return signed, sizes
