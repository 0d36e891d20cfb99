"""Workload W of the benchmarks: 16-byte random keys, 100-byte random values, increasing ms
timestamps, no headers (the reference workload of docs/benchmarks.md), built without a
per-record loop."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def make_table(n: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 256, 16 * n, dtype=np.uint8)
    values = rng.integers(0, 256, 100 * n, dtype=np.uint8)

    def binary(width: int, data: np.ndarray) -> pa.Array:
        offsets = np.arange(n + 1, dtype=np.int32) * width
        return pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )

    timestamps = 1_700_000_000_000 + np.arange(n, dtype=np.int64)
    return pa.table(
        {"key": binary(16, keys), "value": binary(100, values), "timestamp": timestamps}
    )
