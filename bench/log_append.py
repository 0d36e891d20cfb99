"""Benchmark: append 1,000,000 records through PartitionLog vs a plain sequential file write.

Not a test. Run from the repo root:

    .venv/bin/python bench/log_append.py [--records 1000000] [--dir /tmp/kafkalog-bench] [--repeat 3]

Workload W: 16-byte random keys, 100-byte random values, increasing timestamps, ~16 KiB
uncompressed batches, default index.interval.bytes (4096), segment.bytes 64 MiB.

- kafkalog: `PartitionLog.create` + `append_records(table, max_batch_bytes=16384)` + `close(fsync=False)`:
  encode, write the .log segments, build offset/time indexes, roll, write trimmed indexes.
  `append_records` streams the encode in pieces and, by default, appends each piece on a
  writer thread while the next is encoded; it is also timed single-threaded
  (`write_behind=False`) and both ratios are printed.
- baseline: write the same bytes (the .log segments kafkalog wrote, read into memory before the
  clock starts) to one new file with a plain sequential write in 1 MiB chunks, then close.
  Neither side fsyncs; both start without their output file (a rewrite would first free the
  old file's page cache inside the timed region).

Prints both times (best of --repeat) and the ratio baseline/kafkalog (goal >= 0.5).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workload import make_table  # noqa: E402
from kafkalog_core.config import LogConfig  # noqa: E402
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.record.encoder import encode_records  # noqa: E402

CONFIG = LogConfig.from_dict({"segment.bytes": str(64 << 20)})


def run_kafkalog(table: pa.Table, dir: Path, write_behind: bool = True) -> tuple[float, int, int]:
    """encode + write + index: append_records on an Arrow table."""
    shutil.rmtree(dir, ignore_errors=True)
    start = time.perf_counter()
    log = PartitionLog.create(dir, CONFIG, leader_epoch=0)
    log.append_records(table, max_batch_bytes=16384, now_ms=0, write_behind=write_behind)
    log.close(fsync=False)
    elapsed = time.perf_counter() - start
    return elapsed, log.size_in_bytes, len(log.segments)


def run_append_batches(table: pa.Table, dir: Path) -> float:
    """write + index only: append_batches of batches encoded beforehand (not timed)."""
    shutil.rmtree(dir, ignore_errors=True)
    log = PartitionLog.create(dir, CONFIG, leader_epoch=0)
    encoded = encode_records(table, options=log.batch_options(0, 16384))
    start = time.perf_counter()
    log.append_batches(encoded)
    log.close(fsync=False)
    return time.perf_counter() - start


def segment_bytes(dir: Path) -> bytes:
    """The partition's .log segments, concatenated in offset order: what the baseline writes."""
    return b"".join(p.read_bytes() for p in sorted(dir.glob("*.log")))


def run_baseline(data: bytes, path: Path) -> float:
    view = memoryview(data)
    chunk = 1 << 20
    path.unlink(missing_ok=True)
    start = time.perf_counter()
    with open(path, "wb") as f:
        for offset in range(0, len(view), chunk):
            f.write(view[offset : offset + chunk])
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/kafkalog-bench-append"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    table = make_table(args.records)
    args.dir.mkdir(parents=True, exist_ok=True)
    ours, single, base, write_only = [], [], [], []
    size = segments = 0
    for _ in range(args.repeat):
        single.append(run_kafkalog(table, args.dir / "bench-0", write_behind=False)[0])
        t, size, segments = run_kafkalog(table, args.dir / "bench-0")
        ours.append(t)
        data = segment_bytes(args.dir / "bench-0")
        assert len(data) == size
        base.append(run_baseline(data, args.dir / "plain.bin"))
        del data
        write_only.append(run_append_batches(table, args.dir / "bench-0"))
    t_ours, t_single, t_base, t_write = min(ours), min(single), min(base), min(write_only)
    mb = size / 1e6
    print(f"records={args.records} bytes={size} ({mb:.1f} MB) segments={segments}")
    print(f"plain sequential write:                      {t_base:.3f} s  ({mb / t_base:.0f} MB/s)")
    print(
        f"PartitionLog.append_records (encode+write+index): {t_ours:.3f} s  ({mb / t_ours:.0f} MB/s, {args.records / t_ours:,.0f} rec/s)"
    )
    print(
        f"  same, write_behind=False (one thread):       {t_single:.3f} s  ({mb / t_single:.0f} MB/s)"
    )
    print(
        f"PartitionLog.append_batches (write+index):   {t_write:.3f} s  ({mb / t_write:.0f} MB/s)"
    )
    print(
        f"ratio append_records (plain time / kafkalog time): {t_base / t_ours:.2f}  (goal >= 0.5)"
    )
    print(f"  single-threaded: {t_base / t_single:.2f}")
    print(f"ratio append_batches (plain time / kafkalog time): {t_base / t_write:.2f}")
    shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
