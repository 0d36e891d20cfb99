"""The encoder's shortcuts for uniform columns equal the scalar builder byte for byte.

`encode_records` folds varint sizes that are one value for every row into scalars, writes
1-byte varints without the lookup table and only sums record estimates over the non-uniform
head when splitting. Each batch it writes must equal `build_batch` (record by record) over the
same records, for uniform and almost-uniform key/value lengths, nulls, and any timestamps.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog_core.record.encoder import BatchOptions, Record, build_batch, encode_records


def _scalar_batches(keys, values, timestamps, encoded, epoch) -> list[bytes]:
    out = []
    for b in range(len(encoded)):
        base = int(encoded.base_offsets[b])
        first = base - encoded.start_offset
        count = int(encoded.record_counts[b])
        records = [
            Record(i - first, int(timestamps[i]), keys[i], values[i])
            for i in range(first, first + count)
        ]
        out.append(build_batch(records, base_offset=base, partition_leader_epoch=epoch))
    return out


@st.composite
def columns(draw):
    n = draw(st.integers(1, 300))
    # lengths around the 1-/2-byte varint boundary (63/64) and tiny ones
    key_len = draw(st.sampled_from([0, 1, 16, 63, 64, 70]))
    value_len = draw(st.sampled_from([0, 5, 63, 64, 100, 200]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    keys = [rng.bytes(key_len) for _ in range(n)]
    values = [rng.bytes(value_len) for _ in range(n)]
    variant = draw(st.sampled_from(["uniform", "one_longer", "null_keys", "null_value"]))
    if variant == "one_longer":
        values[draw(st.integers(0, n - 1))] += b"x" * draw(st.integers(1, 70))
    elif variant == "null_keys":
        keys = [None] * n
    elif variant == "null_value":
        values[draw(st.integers(0, n - 1))] = None
    step = draw(st.sampled_from(["increasing", "constant", "random", "missing"]))
    start = draw(st.integers(0, 2**41))
    if step == "increasing":
        timestamps = start + np.cumsum(rng.integers(0, 300, n))
    elif step == "constant":
        timestamps = np.full(n, start)
    elif step == "random":
        timestamps = start + rng.integers(0, 100_000, n)
    else:
        timestamps = np.full(n, -1)
    return keys, values, timestamps.astype(np.int64)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=columns(),
    max_batch_bytes=st.sampled_from([100, 300, 1024, 16384]),
    base_offset=st.integers(0, 2**40),
    epoch=st.sampled_from([-1, 0, 7]),
)
def test_vectorized_equals_scalar(data, max_batch_bytes, base_offset, epoch) -> None:
    keys, values, timestamps = data
    table = pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "timestamp": pa.array(timestamps, pa.int64()),
        }
    )
    options = BatchOptions(max_batch_bytes=max_batch_bytes, partition_leader_epoch=epoch)
    encoded = encode_records(table, base_offset=base_offset, options=options)
    assert int(encoded.record_counts.sum()) == len(values)
    expected = _scalar_batches(keys, values, timestamps, encoded, epoch)
    assert [bytes(encoded.batch(b)) for b in range(len(encoded))] == expected
    assert bytes(encoded.buffer) == b"".join(expected)
