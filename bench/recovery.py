"""Benchmark: segment recovery / index rebuild throughput (MB/s, one core).

Not a test. Run from the repo root:

    .venv/bin/python bench/recovery.py [--records 1000000] [--dir /tmp/kafkalog-bench-recovery] [--repeat 5]

Input: workload W of bench/log_append.py (16 B keys, 100 B values, ~16 KiB uncompressed batches,
segment.bytes 64 MiB, index.interval.bytes 4096), written once by PartitionLog.

Timed: `LogSegment.recover()` on every segment, i.e. what PartitionLog.open does after an unclean
shutdown: read the .log, walk every batch header, CRC-32C every batch, rebuild the offset and
time indexes, leader-epoch cache and txn state, write the trimmed indexes. The files are in the
page cache (this measures the engine, not the disk). Also timed: the whole unclean
`PartitionLog.open` of the directory with its index files deleted. Best of --repeat.
The rebuilt indexes are checked to equal the ones written at append time, byte for byte.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.log_append import CONFIG  # noqa: E402
from bench.workload import make_table  # noqa: E402
from kafkalog_core.log.checkpoints import LeaderEpochCache  # noqa: E402
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.log.segment.log_segment import LogSegment


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/kafkalog-bench-recovery"))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    d = args.dir / "bench-0"
    shutil.rmtree(args.dir, ignore_errors=True)
    log = PartitionLog.create(d, CONFIG, leader_epoch=0)
    log.append_records(make_table(args.records), max_batch_bytes=16384, now_ms=0)
    log.close(fsync=False)
    bases = [s.base_offset for s in log.segments]
    total = log.size_in_bytes
    written = {p.name: p.read_bytes() for p in d.iterdir() if p.suffix in (".index", ".timeindex")}

    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        for base in bases:
            seg = LogSegment(d, base, index_interval_bytes=CONFIG.index_interval_bytes)
            seg.recover(leader_epoch_cache=LeaderEpochCache(entries=[]))
            seg.close()
        best = min(best, time.perf_counter() - start)
    rebuilt = {p.name: p.read_bytes() for p in d.iterdir() if p.suffix in (".index", ".timeindex")}
    assert rebuilt == written, "rebuilt indexes differ from the ones written at append time"

    best_open = float("inf")
    for _ in range(args.repeat):
        for p in d.iterdir():
            if p.suffix in (".index", ".timeindex"):
                p.unlink()
        start = time.perf_counter()
        opened = PartitionLog.open(d, CONFIG, had_clean_shutdown=False)
        opened.close(fsync=False)
        best_open = min(best_open, time.perf_counter() - start)
    mb = total / 1e6
    print(
        f"records={args.records} bytes={total} ({mb:.1f} MB) segments={len(bases)} batches~{total // 16384}"
    )
    print(f"LogSegment.recover, all segments:        {best:.3f} s  -> {mb / best:,.0f} MB/s")
    print(
        f"PartitionLog.open (unclean, no indexes): {best_open:.3f} s  -> {mb / best_open:,.0f} MB/s"
    )
    print("rebuilt .index/.timeindex == written at append time: yes")
    shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
