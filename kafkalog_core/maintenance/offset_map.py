"""The cleaner's map of the latest offset per key (Kafka's SkimpyOffsetMap, §8.2).

Kafka hashes each key with MD5 and keeps 16-byte digest -> offset: keys are equal when their
MD5 digests are, so two different keys that collide count as one key and the older record of
the pair is removed, exactly as a broker's cleaner removes it. This map does the same (it holds
digests, never keys): an entry of 24 bytes per distinct key, however many records carry it, in
a table at most 3/4 full that grows as keys come (32-64 bytes per key once it is large), so a
round's memory is bounded by its distinct keys, not by the bytes of its segments.

Kafka's map has a fixed size (log.cleaner.dedupe.buffer.size / threads / 24 slots, filled to
log.cleaner.io.buffer.load.factor); when it holds that many keys the round stops there, and the
rest of the dirty log waits for the next round. `max_keys` is that limit (`max_keys_for`).

With the C extension the map is an open-addressing table (`_native_keys.c`); without it, Arrow
hash joins and group-bys give the same answers. MD5 is computed in C, or vectorized in numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kafkalog_core import native

__all__ = [
    "DEFAULT_DEDUPE_BUFFER_SIZE",
    "DEFAULT_LOAD_FACTOR",
    "OffsetMap",
    "PutResult",
    "key_digests",
    "max_keys_for",
]

DEFAULT_DEDUPE_BUFFER_SIZE = 134_217_728  # log.cleaner.dedupe.buffer.size
DEFAULT_LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor (the map's, despite the name)
_BYTES_PER_ENTRY = 24  # 16-byte MD5 + 8-byte offset
_INT_MAX = 2**31 - 1


def max_keys_for(
    dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE,
    threads: int = 1,
    load_factor: float = DEFAULT_LOAD_FACTOR,
) -> int:
    """Keys one cleaning round maps at most: `(slots * load factor).toInt` of Kafka's map."""
    memory = min(dedupe_buffer_size // threads, _INT_MAX)
    slots = memory // _BYTES_PER_ENTRY
    return int(slots * load_factor)


# ---------------------------------------------------------------------------------------------
# MD5 of key spans
# ---------------------------------------------------------------------------------------------

_SHIFTS = np.array(
    [7, 12, 17, 22] * 4 + [5, 9, 14, 20] * 4 + [4, 11, 16, 23] * 4 + [6, 10, 15, 21] * 4
)
_SINES = (np.abs(np.sin(np.arange(1, 65, dtype=np.float64))) * 2**32).astype(np.uint32)
_WORD = [i if i < 16 else (5 * i + 1) % 16 if i < 32 else (3 * i + 5) % 16 if i < 48 else 7 * i % 16 for i in range(64)]  # fmt: skip
_INIT = np.array([0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476], np.uint32)


def key_digests(
    data: bytes | memoryview | np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """The MD5 digest of each span data[start : start + length], as an (n, 16) uint8 array."""
    starts = np.ascontiguousarray(starts, np.int64)
    lengths = np.ascontiguousarray(lengths, np.int64)
    out = np.empty((starts.shape[0], 16), np.uint8)
    if native.module is not None:
        native.module.md5_spans(data, starts, lengths, out)
        return out
    arr = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
    blocks = (lengths + 8) // 64 + 1  # the message, 0x80, zeros, 8-byte bit length
    for count in np.unique(blocks).tolist():
        rows = np.flatnonzero(blocks == count)
        out[rows] = _md5_rows(arr, starts[rows], lengths[rows], int(count))
    return out


def _md5_rows(arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray, blocks: int) -> np.ndarray:
    """RFC 1321 for spans that all pad to `blocks` 64-byte blocks, one array op per step."""
    width = 64 * blocks
    at = np.arange(width)
    inside = at < lengths[:, None]
    message = np.where(
        inside,
        arr[np.minimum(starts[:, None] + at, max(arr.shape[0] - 1, 0))] if arr.shape[0] else 0,
        0,
    ).astype(np.uint8)
    message[np.arange(starts.shape[0]), lengths] = 0x80
    message[:, width - 8 :] = (lengths * 8).astype("<u8").view(np.uint8).reshape(-1, 8)
    words = message.view("<u4").astype(np.uint32)
    state = np.tile(_INIT, (starts.shape[0], 1))
    with np.errstate(over="ignore"):
        for b in range(blocks):
            m = words[:, 16 * b : 16 * b + 16]
            a, bb, c, d = (state[:, k].copy() for k in range(4))
            for i in range(64):
                if i < 16:
                    f = (bb & c) | (~bb & d)
                elif i < 32:
                    f = (d & bb) | (~d & c)
                elif i < 48:
                    f = bb ^ c ^ d
                else:
                    f = c ^ (bb | ~d)
                f = f + a + _SINES[i] + m[:, _WORD[i]]
                s = int(_SHIFTS[i])
                a, d, c = d, c, bb
                bb = bb + ((f << np.uint32(s)) | (f >> np.uint32(32 - s)))
            state += np.stack([a, bb, c, d], axis=1)
    return state.astype("<u4").view(np.uint8).reshape(-1, 16)


# ---------------------------------------------------------------------------------------------
# the map
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PutResult:
    """How far `put` got: entries [0, put) are in the map; `full` when it stopped early."""

    put: int
    full: bool


class OffsetMap:
    """Digest -> latest offset, with Kafka's size limit (`max_keys`)."""

    def __init__(self, max_keys: int | None = None) -> None:
        self.max_keys = max_keys_for() if max_keys is None else int(max_keys)
        if self.max_keys < 1:
            raise ValueError(f"an offset map of {self.max_keys} keys cannot map a single key")
        self.size = 0
        self._native = native.module
        if self._native is not None:
            self._table = np.full(3 * 4096, -1, np.int64)  # 4096 slots of 24 bytes
        else:
            self._arrow = pa.table(
                {
                    "hi": pa.array([], pa.uint64()),
                    "lo": pa.array([], pa.uint64()),
                    "offset": pa.array([], pa.int64()),
                }
            )

    @property
    def nbytes(self) -> int:
        """Memory the map holds now."""
        return self._table.nbytes if self._native is not None else self._arrow.nbytes

    def put(self, digests: np.ndarray, offsets: np.ndarray) -> PutResult:
        """Put (digest, offset) pairs in offset order: Kafka's `map.put` per keyed record.

        Kafka checks the size before every put, a key already present included: once the map
        holds `max_keys` keys, the entry at hand and all later ones stay out (`full`).
        """
        digests = np.ascontiguousarray(digests, np.uint8).reshape(-1, 16)
        offsets = np.ascontiguousarray(offsets, np.int64)
        if self._native is not None:
            return self._put_native(digests, offsets)
        return self._put_arrow(digests, offsets)

    def _put_native(self, digests: np.ndarray, offsets: np.ndarray) -> PutResult:
        done = 0
        n = offsets.shape[0]
        while True:
            step, self.size, stop = self._native.offset_map_put(
                self._table, self.size, self.max_keys, digests[done:], offsets[done:]
            )
            done += step
            if stop != 2:
                return PutResult(done, stop == 1)
            # one more key would fill 3/4 of the slots: grow (4x while small) and go on
            slots = self._table.shape[0] // 3
            bigger = np.full(3 * slots * (4 if slots < 1 << 22 else 2), -1, np.int64)
            self._native.offset_map_move(self._table, bigger)
            self._table = bigger
            if done >= n:  # pragma: no cover - stop 2 is only reported before an entry
                return PutResult(done, False)

    def _put_arrow(self, digests: np.ndarray, offsets: np.ndarray) -> PutResult:
        n = offsets.shape[0]
        if n == 0:
            return PutResult(0, False)
        hi, lo = _halves(digests)
        # how many keys the map holds before each entry: its own plus the new ones seen so far
        chunk = pa.table({"hi": hi, "lo": lo, "row": np.arange(n, dtype=np.int64)})
        known = chunk.join(self._arrow.select(["hi", "lo"]), ["hi", "lo"], join_type="left semi")
        old = np.zeros(n, bool)
        old[known.column("row").to_numpy()] = True
        first = np.zeros(n, bool)
        _, first_rows = np.unique(np.stack([hi, lo], axis=1), axis=0, return_index=True)
        first[first_rows] = True
        new = first & ~old
        before = self.size + np.concatenate(([0], np.cumsum(new)[:-1]))
        over = np.flatnonzero(before >= self.max_keys)
        put = int(over[0]) if over.size else n
        if put:
            rows = pa.table({"hi": hi[:put], "lo": lo[:put], "offset": offsets[:put]})
            merged = pa.concat_tables([self._arrow, rows])
            self._arrow = (
                merged.group_by(["hi", "lo"])
                .aggregate([("offset", "max")])
                .rename_columns(["hi", "lo", "offset"])
            )
            self.size = self._arrow.num_rows
        return PutResult(put, bool(over.size))

    def get(self, digests: np.ndarray) -> np.ndarray:
        """The mapped offset of each digest, -1 when the map does not hold it."""
        digests = np.ascontiguousarray(digests, np.uint8).reshape(-1, 16)
        n = digests.shape[0]
        out = np.empty(n, np.int64)
        if self._native is not None:
            self._native.offset_map_get(self._table, digests, out)
            return out
        out.fill(-1)
        if n:
            hi, lo = _halves(digests)
            rows = pa.table({"hi": hi, "lo": lo, "row": np.arange(n, dtype=np.int64)})
            found = rows.join(self._arrow, ["hi", "lo"], join_type="inner")
            out[found.column("row").to_numpy()] = found.column("offset").to_numpy()
        return out


def _halves(digests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    words = digests.view("<u8").reshape(-1, 2)
    return np.ascontiguousarray(words[:, 0]), np.ascontiguousarray(words[:, 1])
