"""Benchmark: the maintenance jobs on a generated log dir, against named baselines, one run.

Not a test. Run from the repo root:

    .venv/bin/python bench/maintenance.py [--gb 1.0] [--partitions 16] [--master 'local[2]'] [--repeat 2]
    .venv/bin/python bench/maintenance.py --compact [--gb 1.0] [--partitions 16]

Input: a log dir of `--partitions` partitions of workload W (16 B random keys, 100 B values,
16 KiB batches, segment.bytes 64 MiB, index.interval.bytes 4096), `--gb` in total, written once
by PartitionLog; the same records also as Parquet (key, value, timestamp) for the audit's
baseline.

Timed (files in the page cache; best of --repeat):
- baseline A: the core's single-process recovery of every segment of the dir, one after the
  other (`LogSegment.recover`: what a broker's serial restart does);
- `rebuild-index --mode verify` and `--mode rebuild --all` under --master: MB/s and the ratio
  baseline A / job (goal >= 1.8 on 2 cores);
- baseline B: `spark.read.parquet(...).groupBy("key").count()` over the same records (forced
  with the no-op sink);
- `compaction-audit --all-topics`: records/s and the ratio job / baseline B (goal <= 1.5);
- with `--compact`, a second log dir of the same size whose records repeat every key once (half
  of them superseded), rolled so all of it is cleanable, and its records as Parquet with their
  offsets: baseline C, `spark.read.parquet(...)` -> the latest row per key (`max_by` over the
  offset) -> `write.parquet`, against `compact --apply` on a fresh copy of the dir (the copy is
  not timed): the ratio job / baseline C (goal <= 1.5).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.log_append import CONFIG  # noqa: E402
from bench.workload import make_table  # noqa: E402
from kafkalog_core.log.checkpoints import LeaderEpochCache  # noqa: E402
from kafkalog_core.log.names import offset_from_file_name, segment_log_files  # noqa: E402
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.log.segment.log_segment import LogSegment

RECORD_BYTES = 126  # on-disk bytes per record of workload W (16 KiB batches), measured


def build(
    root: Path, parquet: Path, gb: float, partitions: int, with_parquet: bool = True
) -> tuple[int, int]:
    """Write the log dir and the Parquet copy; (bytes of .log files, records)."""
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(parquet, ignore_errors=True)
    parquet.mkdir(parents=True)
    per_partition = int(gb * 1e9 / RECORD_BYTES / partitions)
    total = 0
    for p in range(partitions):
        table = make_table(per_partition, seed=p + 1)
        log = PartitionLog.create(root / f"bench-{p}", CONFIG, leader_epoch=0)
        log.append_records(table, max_batch_bytes=16384, now_ms=0)
        log.close(fsync=False)
        total += log.size_in_bytes
        if with_parquet:
            pq.write_table(table, parquet / f"part-{p:04d}.parquet")
    return total, per_partition * partitions


def serial_recovery(root: Path) -> float:
    """Baseline A: every segment recovered in one process, one after the other."""
    start = time.perf_counter()
    for pdir in sorted(p for p in root.iterdir() if p.is_dir()):
        for log in segment_log_files(pdir):
            seg = LogSegment(
                pdir,
                offset_from_file_name(log.name),
                index_interval_bytes=CONFIG.index_interval_bytes,
            )
            seg.recover(leader_epoch_cache=LeaderEpochCache(entries=[]))
            seg.close()
    return time.perf_counter() - start


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/kafkalog-bench-maintenance"))
    ap.add_argument(
        "--no-audit", action="store_true", help="verify/rebuild only (no Parquet copy, no audit)"
    )
    ap.add_argument(
        "--compact", action="store_true", help="only compact against baseline C (see the doc)"
    )
    args = ap.parse_args(argv)
    if args.compact:
        return bench_compact(args)

    from jobs import compaction_audit, rebuild_index
    from jobs.spark.session import get_or_create_session

    root, parquet = args.dir / "logs", args.dir / "parquet"
    size, records = build(root, parquet, args.gb, args.partitions, not args.no_audit)
    mb = size / 1e6
    print(f"log dir: {args.partitions} partitions, {mb:,.0f} MB, {records:,} records")

    spark = get_or_create_session("kafkalog-bench-maintenance", {"spark.master": args.master})
    spark.sparkContext.setLogLevel("ERROR")
    quiet = {"out": lambda _line: None}
    rebuild_index.run(spark, str(root), **quiet)  # warm-up: JVM, Python workers, imports

    base_a = best_of(args.repeat, lambda: serial_recovery(root))
    verify = best_of(args.repeat, lambda: rebuild_index.run(spark, str(root), **quiet))
    rebuild = best_of(
        args.repeat,
        lambda: rebuild_index.run(spark, str(root), mode="rebuild", rebuild_all=True, **quiet),
    )
    print(f"baseline A, serial single-process recovery: {base_a:6.2f} s  {mb / base_a:7,.0f} MB/s")
    for name, t in (("rebuild-index verify", verify), ("rebuild-index rebuild --all", rebuild)):
        print(f"{name:<43} {t:6.2f} s  {mb / t:7,.0f} MB/s  ratio {base_a / t:.2f}x (goal >= 1.8)")

    if args.no_audit:
        spark.stop()
        shutil.rmtree(args.dir, ignore_errors=True)
        return 0

    def parquet_group_by() -> None:
        frame = spark.read.parquet(str(parquet)).groupBy("key").count()
        frame.write.format("noop").mode("overwrite").save()

    base_b = best_of(args.repeat, parquet_group_by)
    audit = best_of(
        args.repeat, lambda: compaction_audit.run(spark, str(root), all_topics=True, **quiet)
    )
    print_against("baseline B, parquet groupBy(key).count()", base_b, records)
    print_against("compaction-audit --all-topics", audit, records, base_b)
    spark.stop()
    shutil.rmtree(args.dir, ignore_errors=True)
    return 0


def print_against(name: str, seconds: float, records: int, baseline: float | None = None) -> None:
    """One timing line: seconds, records/s and, against a baseline, the ratio of the times."""
    line = f"{name:<56} {seconds:6.2f} s  {records / seconds:11,.0f} rec/s"
    if baseline is not None:
        line += f"  ratio {seconds / baseline:.2f}x the time (goal <= 1.5)"
    print(line)


def half_superseded(n: int, seed: int) -> pa.Table:
    """Workload W with every key written twice, in random order: half the records superseded."""
    table = make_table(n, seed)
    rng = np.random.default_rng(seed + 1000)
    twice = rng.permutation(np.concatenate([np.arange(n // 2), np.arange(n // 2)]))
    table = table.slice(0, twice.shape[0])
    return table.set_column(0, "key", table.column("key").take(pa.array(twice)))


def bench_compact(args: argparse.Namespace) -> int:
    from pyspark.sql import functions as F

    from jobs import compact
    from jobs.spark.session import get_or_create_session

    source, parquet = args.dir / "changelog", args.dir / "changelog-parquet"
    work, out = args.dir / "work" / "logs", args.dir / "baseline-out"
    shutil.rmtree(args.dir, ignore_errors=True)
    parquet.mkdir(parents=True)
    per_partition = int(args.gb * 1e9 / RECORD_BYTES / args.partitions)
    size = records = 0
    for p in range(args.partitions):
        table = half_superseded(per_partition, seed=p + 1)
        log = PartitionLog.create(source / f"bench-{p}", CONFIG, leader_epoch=0)
        log.append_records(table, max_batch_bytes=16384, now_ms=0)
        log.roll()  # all of it below the active segment: cleanable
        log.close(fsync=False)
        size += log.size_in_bytes
        records += table.num_rows
        offsets = pa.array(np.arange(table.num_rows, dtype=np.int64))
        with_offsets = table.append_column("partition", pa.array(np.full(table.num_rows, p)))
        pq.write_table(
            with_offsets.append_column("offset", offsets), parquet / f"part-{p:04d}.parquet"
        )
    topics = args.dir / "topics.yaml"
    topics.write_text(f"topics:\n  bench: {{cleanup.policy: compact, segment.bytes: {64 << 20}}}\n")
    mb = size / 1e6
    print(
        f"changelog dir: {args.partitions} partitions, {mb:,.0f} MB, {records:,} records, half superseded"
    )

    spark = get_or_create_session("kafkalog-bench-compact", {"spark.master": args.master})
    spark.sparkContext.setLogLevel("ERROR")

    def baseline() -> None:
        frame = spark.read.parquet(str(parquet))
        latest = frame.groupBy("partition", "key").agg(
            F.max_by(F.struct("value", "timestamp", "offset"), "offset").alias("latest")
        )
        latest.select("partition", "key", "latest.*").write.mode("overwrite").parquet(str(out))

    def fresh_copy() -> None:
        shutil.rmtree(work.parent, ignore_errors=True)
        shutil.copytree(source, work)

    def run_compact() -> float:
        fresh_copy()
        start = time.perf_counter()
        compact.run(spark, str(work), apply=True, topic_config=str(topics), out=lambda _l: None)
        return time.perf_counter() - start

    fresh_copy()
    compact.run(spark, str(work), topic_config=str(topics), out=lambda _l: None)  # warm-up
    base_c = best_of(args.repeat, baseline)
    job = min(run_compact() for _ in range(args.repeat))
    kept = sum(p.stat().st_size for p in work.rglob("*.log"))
    print_against("baseline C, parquet -> max_by(offset) per key -> parquet", base_c, records)
    print_against(f"compact --apply ({mb:,.0f} MB -> {kept / 1e6:,.0f} MB)", job, records, base_c)
    spark.stop()
    shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
