"""The host a benchmark ran on: its facts, and how much faster two cores run work that shares
nothing, the ceiling for any scaling figure.

    .venv/bin/python bench/machine.py

`bench/ingest.py --scaling` compares local[1] with local[2]; on a VM whose two vCPUs do not give
twice the throughput (shared hosts, memory bandwidth), no Spark job can scale by 2x either. This
runs the same fixed work in one process, then in two at once, and reports the throughput ratio
for a CPU-bound kind (zlib in C, cache-resident) and a memory-bound one (numpy copies of
buffers larger than the L3 cache).
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from importlib import metadata
from pathlib import Path

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


def _proc_field(path: str, name: str) -> str | None:
    """The value of `name: value` in a /proc text file (Linux), or None."""
    try:
        for line in Path(path).read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
    except OSError:
        return None
    return None


def _java_version() -> str:
    try:
        run = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    text = (run.stderr or run.stdout).strip()  # java -version prints to stderr
    return text.splitlines()[0] if text else "?"


def host_facts() -> dict[str, str]:
    """What the benchmark tables state about their machine: cores, memory, disk cache, versions."""
    memory_kb = _proc_field("/proc/meminfo", "MemTotal")
    try:
        dirty_ratio = Path("/proc/sys/vm/dirty_ratio").read_text().strip() + "%"
    except OSError:
        dirty_ratio = "?"
    versions = {}
    for package in ("pyspark", "pyarrow", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return {
        "vCPUs": str(os.cpu_count()),
        "CPU": _proc_field("/proc/cpuinfo", "model name") or platform.processor() or "?",
        "memory": f"{int(memory_kb.split()[0]) / 2**20:.1f} GiB" if memory_kb else "?",
        "vm.dirty_ratio": dirty_ratio,
        "kernel": platform.release(),
        "python": platform.python_version(),
        **versions,
        "java": _java_version(),
    }


if __name__ == "__main__":
    for name, value in host_facts().items():
        print(f"{name:15s} {value}")
    for kind, ratio in machine_scaling().items():
        print(f"{kind:8s} x{ratio:.2f} with 2 processes (ideal x2.00)")
