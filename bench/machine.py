"""How much faster two cores run work that shares nothing: the ceiling for any scaling figure.

`bench/ingest.py --scaling` compares local[1] with local[2]; on a VM whose two vCPUs do not give
twice the throughput (shared hosts, memory bandwidth), no Spark job can scale by 2x either. This
runs the same fixed work in one process, then in two at once, and reports the throughput ratio
for a CPU-bound kind (zlib in C, cache-resident) and a memory-bound one (numpy copies of
buffers larger than the L3 cache).
"""

from __future__ import annotations

import time
import zlib
from concurrent.futures import ProcessPoolExecutor

import numpy as np

KINDS = ("cpu", "memory")


def _work(kind: str, rounds: int) -> float:
    """Seconds this process took for `rounds` of the kind's work."""
    if kind == "cpu":
        data = np.random.default_rng(1).integers(0, 16, 1 << 20, dtype=np.uint8).tobytes()
        start = time.perf_counter()
        for _ in range(rounds):
            zlib.compress(data, 6)
    else:
        src = np.ones(64 << 20, dtype=np.uint8)
        dst = np.empty_like(src)
        start = time.perf_counter()
        for _ in range(rounds):
            np.copyto(dst, src)
    return time.perf_counter() - start


def speedup(kind: str, rounds: int, workers: int = 2) -> float:
    """Throughput of `workers` processes running at once over one process's (ideal: workers)."""
    with ProcessPoolExecutor(workers) as pool:
        pool.submit(_work, kind, 1).result()  # start-up outside the timing
        one = pool.submit(_work, kind, rounds).result()
        start = time.perf_counter()
        list(pool.map(_work, [kind] * workers, [rounds] * workers))
        many = time.perf_counter() - start
    return throughput_ratio(one, many, workers)


def throughput_ratio(one_s: float, many_s: float, workers: int) -> float:
    """`workers` runs of the work in `many_s` against one run in `one_s`: x`workers` is ideal."""
    return workers * one_s / many_s


def machine_scaling(workers: int = 2) -> dict[str, float]:
    """{kind: speedup} for `workers` cores; about a second per kind."""
    return {"cpu": speedup("cpu", 40, workers), "memory": speedup("memory", 60, workers)}


if __name__ == "__main__":
    for kind, ratio in machine_scaling().items():
        print(f"{kind:8s} x{ratio:.2f} with 2 processes (ideal x2.00)")
