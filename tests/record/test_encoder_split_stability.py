"""The batch split does not depend on where an encode starts.

A record's size estimate in `split_batches` depends only on the record and the `most - 1`
records before it (`most` from max_batch_bytes alone). So for every batch start c of a one-shot
encode of rows[0:n], encoding rows[c:n] with the timestamps of the (up to) `most - 1` rows before
c as context gives exactly the one-shot batches from c on, and so does a chunked encode that
carries each chunk's last batch over (the ingest writer). The split itself is checked against a
record-by-record reference of the rule.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog_core.errors import InvalidRecordError
from kafkalog_core.record.batch import RECORD_BATCH_OVERHEAD
from kafkalog_core.record.encoder import (
    BatchOptions,
    encode_records,
    split_context_rows,
)
from kafkalog_core.record.encoder.split import split_batches
from kafkalog_core.record.varint import encode_varint

BATCH_BYTES = [62, 68, 100, 200, 500, 1500, 16384]


def _size(v: int) -> int:
    return len(encode_varint(int(v)))


def _reference_starts(fixed, timestamps, max_batch_bytes, context) -> list[int]:
    """The rule, record by record: offsetDelta sized for most - 1, timestampDelta for the
    farthest of the records up to most - 1 back (clamped at the first timestamp), greedy."""
    budget = max_batch_bytes - RECORD_BATCH_OVERHEAD
    most = budget // 7 + 1
    estimates = []
    for r, f in enumerate(fixed.tolist()):
        i = context + r
        window = timestamps[max(0, i - most + 1) : i + 1]
        ts_size = max(_size(timestamps[i] - window.min()), _size(timestamps[i] - window.max()))
        body = f + ts_size + _size(most - 1)
        estimates.append(body + _size(body))
    starts, start, n = [], 0, len(estimates)
    while start < n:
        end, used = start, 0
        while end < n and used + estimates[end] <= budget:
            used += estimates[end]
            end += 1
        starts.append(start)
        start = max(end, start + 1)
    return starts


def _timestamps(draw, rng, n: int) -> np.ndarray:
    kind = draw(st.sampled_from(["increasing", "decreasing", "random", "jumps", "missing", "mix"]))
    start = draw(st.integers(0, 2**41))
    if kind == "increasing":
        ts = start + np.cumsum(rng.integers(0, draw(st.sampled_from([2, 300, 10**6])), n))
    elif kind == "decreasing":
        ts = start + 10**9 - np.cumsum(rng.integers(0, 5000, n))
    elif kind == "random":
        ts = start + rng.integers(0, draw(st.sampled_from([50, 100_000, 10**12])), n)
    elif kind == "jumps":  # long flat runs with rare big jumps: deltas cross varint sizes
        ts = start + np.cumsum((rng.random(n) < 0.03) * rng.integers(-(10**7), 10**7, n))
        ts = np.maximum(ts, 0)
    elif kind == "missing":
        ts = np.full(n, -1)
    else:  # -1 among real timestamps
        ts = start + rng.integers(0, 10**6, n)
        ts[rng.random(n) < 0.2] = -1
    return ts.astype(np.int64)


@st.composite
def streams(draw):
    n = draw(st.integers(1, 400))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # value lengths: random, with uniform runs (the split's fixed-count tail) and big outliers
    lengths = rng.integers(0, draw(st.sampled_from([5, 80, 300])), n)
    for _ in range(draw(st.integers(0, 3))):
        a = int(rng.integers(0, n))
        lengths[a : a + int(rng.integers(1, n + 1))] = int(rng.integers(0, 150))
    if draw(st.booleans()):
        lengths[-int(rng.integers(1, n + 1)) :] = int(rng.integers(0, 150))
    if draw(st.booleans()):
        lengths[int(rng.integers(0, n))] = 2000
    values = [rng.bytes(int(v)) for v in lengths]
    keys = [None if rng.random() < 0.2 else rng.bytes(int(rng.integers(0, 20))) for _ in range(n)]
    return keys, values, _timestamps(draw, rng, n)


def _table(keys, values, timestamps) -> pa.Table:
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "timestamp": pa.array(timestamps, pa.int64()),
        }
    )


def _batches(encoded) -> list[bytes]:
    return [bytes(encoded.batch(b)) for b in range(len(encoded))]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=streams(), max_batch_bytes=st.sampled_from(BATCH_BYTES))
def test_encode_from_any_batch_start_with_context_continues_the_one_shot(data, max_batch_bytes):
    keys, values, timestamps = data
    n = len(values)
    table = _table(keys, values, timestamps)
    options = BatchOptions(max_batch_bytes=max_batch_bytes, max_message_bytes=1 << 30)
    whole = encode_records(table, options=options)
    expected = _batches(whole)
    most = split_context_rows(options) + 1
    starts = whole.base_offsets.tolist()
    step = max(1, len(starts) // 30)  # ~30 cut points per example, always the last batch
    for b in sorted({*range(0, len(starts), step), len(starts) - 1}):
        c = starts[b]
        k = min(c, most - 1)
        part = encode_records(
            table.slice(c),
            base_offset=c,
            options=options,
            context_timestamps=timestamps[c - k : c],
        )
        assert _batches(part) == expected[b:]
        assert part.base_offsets.tolist() == whole.base_offsets[b:].tolist()
        if c > k:  # older context is ignored
            longer = encode_records(
                table.slice(c), base_offset=c, options=options, context_timestamps=timestamps[:c]
            )
            assert _batches(longer) == expected[b:]
    assert int(whole.record_counts.sum()) == n


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=streams(),
    max_batch_bytes=st.sampled_from(BATCH_BYTES),
    chunk_rows=st.integers(1, 120),
)
def test_chunked_encode_carrying_the_last_batch_equals_the_one_shot(
    data, max_batch_bytes, chunk_rows
):
    """The ingest writer's loop: encode a chunk, keep all batches but the last, carry the last
    batch's rows into the next chunk and the kept rows' timestamps as context."""
    keys, values, timestamps = data
    n = len(values)
    table = _table(keys, values, timestamps)
    options = BatchOptions(max_batch_bytes=max_batch_bytes, max_message_bytes=1 << 30)
    expected = _batches(encode_records(table, options=options))
    context_rows = split_context_rows(options)
    out, first = [], 0
    while first < n:
        stop = min(n, first + chunk_rows)
        while True:
            encoded = encode_records(
                table.slice(first, stop - first),
                base_offset=first,
                options=options,
                context_timestamps=timestamps[max(0, first - context_rows) : first],
            )
            if stop == n or len(encoded) > 1:
                break
            stop = min(n, stop + chunk_rows)  # one batch holds the chunk: widen it
        keep = len(encoded) if stop == n else len(encoded) - 1
        out.extend(_batches(encoded)[:keep])
        first = int(encoded.base_offsets[keep]) if keep < len(encoded) else n
    assert out == expected


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=streams(), max_batch_bytes=st.sampled_from(BATCH_BYTES), context=st.integers(0, 60))
def test_split_follows_the_rule(data, max_batch_bytes, context):
    """Both timestamp paths (non-decreasing slices, sliding min/max) give the rule's split."""
    keys, values, timestamps = data
    context = min(context, len(values) - 1)
    fixed = np.array([3 + len(v) for v in values[context:]], dtype=np.int64)
    starts, _ = split_batches(fixed, timestamps, max_batch_bytes, context)
    assert starts.tolist() == _reference_starts(fixed, timestamps, max_batch_bytes, context)
    ordered = np.sort(timestamps)
    starts, increasing = split_batches(fixed, ordered, max_batch_bytes, context)
    assert increasing
    assert starts.tolist() == _reference_starts(fixed, ordered, max_batch_bytes, context)


def test_split_depends_on_the_target_only():
    """`most` comes from max_batch_bytes (smallest record: 7 bytes), not from the records."""
    assert split_context_rows(BatchOptions(max_batch_bytes=16384)) == (16384 - 61) // 7
    assert split_context_rows(BatchOptions(max_batch_bytes=62)) == 0
    assert split_context_rows(BatchOptions(max_batch_bytes=2**40)) == 2**31 - 2


def test_context_timestamps_are_validated():
    table = _table([b"k"], [b"v"], np.array([5], dtype=np.int64))
    with pytest.raises(InvalidRecordError, match="context_timestamps"):
        encode_records(table, context_timestamps=np.array([3, -2]))
    arrow = encode_records(table, context_timestamps=pa.array([1, 2], pa.timestamp("ms")))
    numpy = encode_records(table, context_timestamps=np.array([1, 2]))
    assert bytes(arrow.buffer) == bytes(numpy.buffer)
