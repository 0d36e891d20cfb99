"""Batch boundaries: a producer-style greedy split on the uncompressed size, one `searchsorted`
per batch (step 1 of the vectorized path)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kafkalog_core.record.batch import INT32_MAX, RECORD_BATCH_OVERHEAD
from kafkalog_core.record.encoder.options import BatchOptions
from kafkalog_core.record.encoder.varints import varint_size_array


def length_sizes(lengths: np.ndarray) -> np.ndarray:
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


def most_per_batch(max_batch_bytes: int) -> int:
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
    return most_per_batch(options.max_batch_bytes) - 1


def split_batches(
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
    most = most_per_batch(max_batch_bytes)
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


def fixed_sizes(
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
