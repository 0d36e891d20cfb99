"""Kafka's key -> partition mapping: murmur2 + toPositive, scalar and vectorized (§11).

A record with a non-null serialized key and no explicit partition goes to
`toPositive(murmur2(key)) % numPartitions` (`BuiltInPartitioner.partitionForKey`). Writing a
topic's log offline only matches what a producer would have done if this hash is bit-exact.

`murmur2_array` hashes a whole Arrow column without a per-key Python loop: keys are sorted by
their number of 4-byte blocks, so at block step j the keys still hashing form a prefix and each
step is a handful of uint32 numpy operations over that prefix (numpy array arithmetic wraps mod
2^32, exactly Java's int arithmetic). The few keys much longer than the rest finish in the
scalar code, which is cheaper than thousands of numpy steps over a tiny prefix. When the C
loops are built (`kafkalog_core.native`), one C pass hashes the column instead; the numpy path
is kept for installs without them and gives the same hashes (tested against kafka-python).
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from kafkalog_core import native
from kafkalog_core.errors import ConfigError

__all__ = ["murmur2", "murmur2_array", "partition_for_keys", "to_positive"]

SEED = 0x9747B28C
M = 0x5BD1E995
R = 24
_MASK32 = 0xFFFFFFFF
_M_U32 = np.uint32(M)

# Below this many keys still hashing, the vectorized loop hands the rest to the scalar code.
_VECTOR_MIN_ACTIVE = 8

KeysLike = pa.Array | pa.ChunkedArray

_native = native.module  # None: the numpy path below runs


def _to_signed32(h: int) -> int:
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def _mix_block(h: int, k: int) -> int:
    k = (k * M) & _MASK32
    k ^= k >> R
    k = (k * M) & _MASK32
    return ((h * M) & _MASK32) ^ k


def _finish(h: int, data: bytes | memoryview, block_start: int) -> int:
    """Hash blocks from `block_start` (a multiple of 4) on, the tail and the final avalanche."""
    length = len(data)
    end = length & ~3
    count = (end - block_start) // 4
    if count > 0:
        for k in struct.unpack_from(f"<{count}I", data, block_start):
            h = _mix_block(h, k)
    tail = length & 3
    if tail == 3:
        h ^= data[end + 2] << 16
    if tail >= 2:
        h ^= data[end + 1] << 8
    if tail >= 1:
        h ^= data[end]
        h = (h * M) & _MASK32
    h ^= h >> 13
    h = (h * M) & _MASK32
    h ^= h >> 15
    return h


def murmur2(data: bytes | bytearray | memoryview | str) -> int:
    """Utils.murmur2: the 32-bit MurmurHash2 Kafka uses for keys, as a signed int32.

    A str is hashed as its UTF-8 bytes, which is what StringSerializer produces.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    view = memoryview(data).cast("B")
    return _to_signed32(_finish((SEED ^ len(view)) & _MASK32, view, 0))


def to_positive(h: int) -> int:
    """Utils.toPositive: clear the sign bit (NOT abs(): to_positive(-5) == 2147483643)."""
    return h & 0x7FFFFFFF


def _as_binary_chunks(keys: KeysLike | object) -> list[pa.Array]:
    """Normalize keys to binary/large_binary arrays (strings are reinterpreted as UTF-8 bytes)."""
    if isinstance(keys, pa.ChunkedArray):
        chunks = list(keys.chunks)
    elif isinstance(keys, pa.Array):
        chunks = [keys]
    else:
        chunks = [pa.array(keys)]
    out = []
    for chunk in chunks:
        if pa.types.is_dictionary(chunk.type):
            chunk = chunk.dictionary_decode()
        t = chunk.type
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            pass
        elif pa.types.is_string(t):
            chunk = chunk.view(pa.binary())
        elif pa.types.is_large_string(t):
            chunk = chunk.view(pa.large_binary())
        elif pa.types.is_null(t):
            chunk = pa.nulls(len(chunk), pa.binary())
        else:
            try:  # binary_view, string_view, fixed_size_binary
                chunk = chunk.cast(pa.large_binary())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise TypeError(f"keys must be binary or string, not {t}") from e
        out.append(chunk)
    return out


def _murmur2_fixed(block: np.ndarray) -> np.ndarray:
    """murmur2 of n keys of one length L, given as an (n, L) uint8 matrix, as uint32.

    Keys of one length (UUIDs, fixed-width ids) need no per-key gathers: block j of every key is
    one column of the matrix read as little-endian words.
    """
    n, length = block.shape
    nblocks = length >> 2
    h = np.full(n, (SEED ^ length) & 0xFFFFFFFF, dtype=np.uint32)
    if nblocks:
        words = (
            np.ascontiguousarray(block[:, : 4 * nblocks]).view("<u4").astype(np.uint32, copy=False)
        )
        for j in range(nblocks):
            k = words[:, j] * _M_U32
            k ^= k >> np.uint32(R)
            k *= _M_U32
            h *= _M_U32
            h ^= k
    tail = length & 3
    start = 4 * nblocks
    if tail >= 3:
        h ^= block[:, start + 2].astype(np.uint32) << np.uint32(16)
    if tail >= 2:
        h ^= block[:, start + 1].astype(np.uint32) << np.uint32(8)
    if tail >= 1:
        h ^= block[:, start].astype(np.uint32)
        h *= _M_U32
    h ^= h >> np.uint32(13)
    h *= _M_U32
    h ^= h >> np.uint32(15)
    return h


def _murmur2_chunk(arr: pa.Array) -> np.ndarray:
    n = len(arr)
    if _native is not None:
        hashes = np.empty(n, dtype=np.int32)
        _native.murmur2_column(hashes, native.column(arr))
        return hashes
    result = np.zeros(n, dtype=np.uint32)
    if n == 0:
        return result.view(np.int32)
    offset_type = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=offset_type)[arr.offset : arr.offset + n + 1]
    offsets = offsets.astype(np.int64)
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    )
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    if not arr.null_count and int(lengths.min()) == int(lengths.max()):
        first, size = int(offsets[0]), int(lengths[0])
        block = data[first : first + n * size].reshape(n, size)
        return _murmur2_fixed(block).view(np.int32)
    valid = np.ones(n, dtype=bool)
    if arr.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        lengths = np.where(valid, lengths, 0)

    # Sort by block count, longest first: at step j the keys still hashing are a prefix.
    nblocks = lengths >> 2
    order = np.argsort(-nblocks, kind="stable")
    s_starts = starts[order]
    s_nblocks = nblocks[order]
    h = np.uint32(SEED) ^ lengths[order].astype(np.uint32)
    # active_counts[j] = number of keys with more than j blocks (a prefix of the sorted keys)
    max_blocks = int(s_nblocks[0])
    active_counts = n - np.searchsorted(s_nblocks[::-1], np.arange(max_blocks), side="right")
    if max_blocks:
        # A little-endian uint32 read at every byte position: one gather per block step.
        words = np.ndarray(shape=(len(data) - 3,), dtype="<u4", buffer=data, strides=(1,)).astype(
            np.uint32, copy=False
        )
    done_at = max_blocks
    for j in range(max_blocks):
        count = int(active_counts[j])
        if count < _VECTOR_MIN_ACTIVE:
            done_at = j
            break
        k = words[s_starts[:count] + 4 * j]
        k *= _M_U32
        k ^= k >> np.uint32(R)
        k *= _M_U32
        hp = h[:count]
        hp *= _M_U32
        hp ^= k

    # Keys with blocks left at `done_at`: finish them one by one (few, long keys).
    scalar_rows = int(active_counts[done_at]) if done_at < max_blocks else 0
    scalar_done = np.zeros(n, dtype=bool)
    for i in range(scalar_rows):
        start = int(s_starts[i])
        key = memoryview(data[start : start + int(lengths[order[i]])])
        h[i] = _finish(int(h[i]), key, 4 * done_at)
        scalar_done[i] = True

    # Tails (length % 4) and avalanche for the vectorized rows.
    vec = ~scalar_done
    s_lengths = lengths[order]
    tail = s_lengths & 3
    tail_start = s_starts + (s_lengths & ~3)
    for extra, shift in ((3, 16), (2, 8)):
        idx = np.nonzero(vec & (tail >= extra))[0]
        if idx.size:
            h[idx] ^= data[tail_start[idx] + (extra - 1)].astype(np.uint32) << np.uint32(shift)
    idx = np.nonzero(vec & (tail >= 1))[0]
    if idx.size:
        h[idx] ^= data[tail_start[idx]].astype(np.uint32)
        h[idx] *= _M_U32
    hv = h[vec]
    hv ^= hv >> np.uint32(13)
    hv *= _M_U32
    hv ^= hv >> np.uint32(15)
    h[vec] = hv

    result[order] = h
    result[~valid] = 0
    return result.view(np.int32)


def murmur2_array(keys: KeysLike) -> np.ndarray:
    """murmur2 of every key of a binary/string Arrow (chunked) array, as int32; null -> 0.

    Use `partition_for_keys` (null -> -1) or the array's validity to tell a null key from a key
    that happens to hash to 0.
    """
    chunks = _as_binary_chunks(keys)
    if not chunks:
        return np.zeros(0, dtype=np.int32)
    return np.concatenate([_murmur2_chunk(c) for c in chunks]).astype(np.int32, copy=False)


def partition_for_keys(keys: KeysLike, num_partitions: int) -> np.ndarray:
    """BuiltInPartitioner.partitionForKey for a column: toPositive(murmur2) % n; null key -> -1.

    Null keys go to the sticky partitioner in Kafka, which is not reproducible from the key, so
    they are reported as -1 for the caller to place.
    """
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, (int, np.integer)):
        raise ConfigError(f"num_partitions={num_partitions!r} is invalid: must be an int >= 1")
    if num_partitions < 1:
        raise ConfigError(f"num_partitions={num_partitions} is invalid: must be an int >= 1")
    chunks = _as_binary_chunks(keys)
    if not chunks:
        return np.zeros(0, dtype=np.int32)
    hashes = np.concatenate([_murmur2_chunk(c) for c in chunks])
    parts = ((hashes.view(np.uint32) & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)).astype(
        np.int32
    )
    nulls = np.concatenate(
        [
            c.is_null().to_numpy(zero_copy_only=False)
            if c.null_count
            else np.zeros(len(c), dtype=bool)
            for c in chunks
        ]
    )
    parts[nulls] = -1
    return parts
