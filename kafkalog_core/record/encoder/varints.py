"""Varint fields as little-endian words and Arrow binary values, and the element-wise joins that
lay out whole records (steps 2 and 3 of the vectorized path; see `encode`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core.record.batch import RECORD_BATCH_OVERHEAD
from kafkalog_core.record.encoder.columns import binary_offsets, data_bytes
from kafkalog_core.record.varint import encode_varint, varint_bytes

# An inline binary_view value: int32 length then up to 12 bytes of data (Arrow columnar spec).
_VIEW_DTYPE = np.dtype([("length", "<i4"), ("lo", "<u8"), ("hi", "<u4")])
assert _VIEW_DTYPE.itemsize == 16
_VIEW_INLINE_MAX = 12


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


def varint_words(values: np.ndarray, max_size: int) -> np.ndarray:
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


def varint_fields_binary(fields: list[tuple[np.ndarray, np.ndarray]], n: int) -> pa.Array:
    """Concatenated zig-zag varints per row, e.g. [(lengths, sizes), (deltas, sizes), ...].

    A field may be given as 1-element arrays (the same value for every row). Rows of up to 12
    bytes are composed as little-endian words and handed to Arrow as inline binary_view values;
    anything longer takes the slower byte-matrix path.
    """
    if n == 0:
        return pa.array([], pa.large_binary())
    return prefix_binary(fields, varint_fields_words(fields, n), n)


def prefix_binary(
    fields: list[tuple[np.ndarray, np.ndarray]],
    words: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None,
    n: int,
) -> pa.Array:
    """Varint fields as Arrow values: inline views when composed as words, else byte matrix."""
    if words is None:
        return _matrix_to_binary(fields, sum(np.broadcast_to(s, (n,)) for _, s in fields))
    return _views_to_binary(*words)


def varint_fields_words(
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
                part = varint_words(values, max_sizes[i])
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
        spans = binary_offsets(column)
        if np.any(np.diff(spans)[column.is_null().to_numpy(zero_copy_only=False)] != 0):
            column = column.fill_null(b"")
    offsets = binary_offsets(column)
    if extra_rows or offsets.dtype != np.int64:
        extended = np.empty(n + 1 + extra_rows, dtype=np.int64)
        extended[: n + 1] = offsets
        extended[n + 1 :] = offsets[-1]
        offsets = extended
    return pa.Array.from_buffers(
        pa.large_binary(), n + extra_rows, [None, pa.py_buffer(offsets), column.buffers()[2]]
    )


def join_without_headers(
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
    words = varint_fields_words([(_ZERO, _ONE), *prefix_fields], n)
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
        middle = _plain(varint_fields_binary([(value_lengths, value_length_sizes)], n), 1)
    joined = pc.binary_join_element_wise(
        lead, _plain(keys, 1), middle, _plain(values, 1), pa.scalar(b"", pa.large_binary())
    )
    return data_bytes(joined)


def join_with_holes(
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
    return data_bytes(joined)
