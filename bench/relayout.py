"""Benchmark: where one relayout task's time goes (jobs/ingestion/relayout/shares.py), no Spark.

Not a test. Run from the repo root:

    .venv/bin/python bench/relayout.py [--shares 2] [--share-mb 80] [--repeat 3] [--profile]

One partition written by `--shares` direct write tasks in one pass (`write_task_direct`, as
the ingest's tasks write it: task 0's share as segments, the others as records) of about
`--share-mb` MB each, 1 MiB batches, segment.bytes 1 GiB (Kafka's default), placed by the
driver. Timed: the write tasks' staging finalize (fsync + CRC-32C of task 0's segments) and
`relayout_partition`, split by phase (wrapped functions: the first share's tail copied and cut,
reading the staged records, the encode, `append_batches`, the close, the finalize's fsync and
CRC-32C).
Each timed run starts after `os.sync()`, with the staged files in the page cache (as they are
when the relayout stage follows the write stage). `--profile` prints a cProfile of one run.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jobs.ingestion.relayout.shares as relayout_mod  # noqa: E402
import jobs.ingestion.staging.task_staging as staging  # noqa: E402
import jobs.ingestion.tasks.writer as writer_mod  # noqa: E402
from jobs.ingestion.commit.place import place_ranges
from jobs.ingestion.relayout.shares import plan_relayout, relayout_partition
from jobs.ingestion.tasks.planner import OnePassPlan
from jobs.ingestion.tasks.writer import WriterSettings, write_task_direct
from kafkalog_core.config import LogConfig  # noqa: E402
from kafkalog_core.log.partition.append import batch_options_for
from kafkalog_core.log.partition.partition_log import PartitionLog

TOPIC = "t"
VALUE_BYTES = 100
KEY_BYTES = 16


def records(n: int, seed: int = 7) -> pa.Table:
    """n records of one partition: 16 B keys, 100 B random values, increasing timestamps."""
    rng = np.random.default_rng(seed)

    def binary(width: int) -> pa.Array:
        data = rng.integers(0, 256, n * width, dtype=np.uint8).tobytes()
        offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32).tobytes()
        return pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )

    return pa.table(
        {
            "topic": pa.array([TOPIC] * n),
            "partition": pa.array(np.zeros(n, dtype=np.int32)),
            "key": binary(KEY_BYTES),
            "value": binary(VALUE_BYTES),
            "timestamp": pa.array(1_700_000_000_000 + np.arange(n, dtype=np.int64) // 50),
        }
    )


class Laps:
    """Wall time spent inside wrapped functions, by label (outermost call only per label)."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner, name: str, label: str) -> None:
        real = getattr(owner, name)
        depth = [0]

        def timed(*a, **k):
            depth[0] += 1
            t0 = time.perf_counter()
            try:
                result = real(*a, **k)
                if hasattr(result, "__next__"):  # a generator: time its steps as they run
                    return self._timed_iter(result, label)
                return result
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    self.total[label] += time.perf_counter() - t0

        setattr(owner, name, timed)
        self._undo.append(lambda: setattr(owner, name, real))

    def _timed_iter(self, it, label: str):
        while True:
            t0 = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                self.total[label] += time.perf_counter() - t0
                return
            self.total[label] += time.perf_counter() - t0
            yield item

    def undo(self) -> None:
        for fn in reversed(self._undo):
            fn()
        self._undo.clear()


def write_shares(root: Path, table: pa.Table, shares: int, settings: WriterSettings):
    """The partition's shares as `shares` direct tasks stage them, placed; (manifests, finalize
    s)."""
    n = table.num_rows
    cuts = np.linspace(0, n, shares + 1).astype(int)
    plan = OnePassPlan({})
    laps = Laps()
    laps.wrap(staging, "_sync_and_checksum", "finalize: fsync + CRC-32C")
    manifests = []
    for i in range(shares):
        rows = table.slice(int(cuts[i]), int(cuts[i + 1] - cuts[i])).to_batches(100_000)
        manifests += list(write_task_direct(iter(rows), i, "0", plan, settings))
    laps.undo()
    return place_ranges(manifests, {}), laps.total["finalize: fsync + CRC-32C"]


def timed_relayout(job, settings: WriterSettings, key: str) -> tuple[float, dict[str, float]]:
    laps = Laps()
    laps.wrap(relayout_mod, "_continue_tail", "the first share's tail: copy, cut, resume")
    laps.wrap(relayout_mod, "record_share_rows", "read staged records (mmap)")
    laps.wrap(writer_mod, "encode_records", "encode")
    laps.wrap(PartitionLog, "append_batches", "append_batches (write + index)")
    laps.wrap(PartitionLog, "close", "close")
    laps.wrap(staging, "_sync_and_checksum", "finalize: fsync + CRC-32C")
    laps.wrap(staging, "fsync_dir", "finalize: fsync dir")
    cpu0, t0 = time.process_time(), time.perf_counter()
    try:
        relayout_partition(job, key, "0", settings)
    finally:
        laps.undo()
    elapsed = time.perf_counter() - t0
    laps.total["(cpu time of the task)"] = time.process_time() - cpu0
    return elapsed, dict(laps.total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shares", type=int, default=2)
    parser.add_argument("--share-mb", type=float, default=80.0)
    parser.add_argument("--batch-bytes", type=int, default=1 << 20)
    parser.add_argument("--segment-bytes", type=int, default=1 << 30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("/tmp/kafkalog-relayout-bench"))
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)

    per_record = KEY_BYTES + VALUE_BYTES + 10  # ~ encoded size of one record
    n = int(args.shares * args.share_mb * 1e6 / per_record)
    table = records(n)
    config = LogConfig.from_dict({"segment.bytes": str(args.segment_bytes)})
    shutil.rmtree(args.out, ignore_errors=True)
    root = args.out / "logs"
    settings = WriterSettings(
        output_root=str(root),
        run_id="bench",
        configs={TOPIC: config},
        batch_options={
            TOPIC: batch_options_for(
                config, leader_epoch=0, now_ms=0, max_batch_bytes=args.batch_bytes
            )
        },
    )
    manifests, t_finalize = write_shares(root, table, args.shares, settings)
    size = sum(m.size_bytes for m in manifests)
    print(
        f"{args.shares} shares, {n:,} records, {size / 1e6:.1f} MB staged; the write tasks' "
        f"finalize (fsync + CRC-32C) {t_finalize:.3f} s"
    )
    kept, jobs = plan_relayout(manifests)
    assert len(jobs) == 1 and not kept, "expected one partition to relayout"
    best, cpu = None, None
    for r in range(args.repeat):
        os.sync()
        total, laps = timed_relayout(jobs[0], settings, f"relayout-{r}")
        print(f"run {r}: relayout_partition {total:.3f} s")
        for label, s in sorted(laps.items(), key=lambda kv: -kv[1]):
            print(f"    {label:45s} {s:.3f} s")
        best = total if best is None else min(best, total)
        cpu = (
            laps["(cpu time of the task)"]
            if cpu is None
            else min(cpu, laps["(cpu time of the task)"])
        )
    print(
        f"best of {args.repeat}: {best:.3f} s wall ({size / 1e6 / best:.0f} MB/s), {cpu:.3f} s cpu"
    )
    if args.profile:
        os.sync()
        profiler = cProfile.Profile()
        profiler.enable()
        relayout_partition(jobs[0], "relayout-profile", "0", settings)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    shutil.rmtree(args.out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
