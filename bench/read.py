"""Benchmark: `format("kafkalog")` reads (and writes) against Spark's Parquet, same rows.

Not a test. Run from the repo root:

    .venv/bin/python bench/read.py [--records 5000000] [--partitions 8] [--master 'local[2]'] [--remote]
        [--repeat 2] [--out bench/out] [--write] [--no-read]

Input (generated once, deterministic, cached under --out, not timed): workload W (16 B random
keys, 100 B random values, increasing ms timestamps) over `--partitions` partitions of topic
`bench`, written by the core's PartitionLog as the data-source writer writes it (1 MiB batches,
uncompressed, default segment.bytes); the same rows, in Spark's Kafka-source columns (key,
value, topic, partition, offset, timestamp, timestampType), as one snappy Parquet file per
partition.

Timed (files in the page cache after a warm-up; os.sync() before each run; best of --repeat):
- full read: `groupBy("partition").agg(count("*"), sum(length("value")))` over
  `spark.read.format("kafkalog")` and over `spark.read.parquet`; the results must agree;
  ratio kafkalog / parquet (goal <= 1.0).
- narrow read: the same aggregate over 1% of every partition (startingOffsets/endingOffsets
  in the middle of the log); ratio narrow / full kafkalog read (goal <= 0.05).
- every column (context): both sides into Spark's no-op sink. Parquet's aggregate above reads
  two columns; a Python data source gets no column pruning, so all seven cross into the JVM.
- with --write: the Parquet rows' (key, value, timestamp) written with
  `df.write.format("kafkalog")` (topic bench, --partitions partitions, murmur2 of the key) and
  with `df.write.parquet` (snappy); ratio kafkalog / parquet (goal <= 1.0).

Prints every run, the ratios and the load average (the machine may be shared: absolute times
are noisy, the ratios less so).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.ingest import du, settle, start_session  # noqa: E402
from bench.workload import make_table  # noqa: E402
from jobs.ingestion.tasks.writer import DEFAULT_BATCH_BYTES  # noqa: E402
from kafkalog_core.config import LogConfig  # noqa: E402
from kafkalog_core.log.partition.partition_log import PartitionLog  # noqa: E402
from tests.kafka_cluster import free_ports  # noqa: E402
from tests.spark_mode import connect_client, connect_server_conf, spark_mode  # noqa: E402

TOPIC = "bench"


def make_input(out: Path, records: int, partitions: int) -> tuple[Path, Path]:
    """(log dir, Parquet dir) of the same rows; reused when already there."""
    base = out / f"read-input-{records}-{partitions}"
    logs, parquet = base / "logs", base / "parquet"
    done = base / "_COMPLETE"
    if done.exists():
        return logs, parquet
    shutil.rmtree(base, ignore_errors=True)
    parquet.mkdir(parents=True)
    per_partition = -(-records // partitions)
    for p in range(partitions):
        n = min(per_partition, records - p * per_partition)
        table = make_table(n, seed=p + 1)
        log = PartitionLog.create(logs / f"{TOPIC}-{p}", LogConfig(), leader_epoch=0)
        log.append_records(table, max_batch_bytes=DEFAULT_BATCH_BYTES, now_ms=0)
        log.close(fsync=False)
        rows = pa.table(
            {
                "key": table.column("key"),
                "value": table.column("value"),
                "topic": pa.array([TOPIC] * n, pa.string()),
                "partition": pa.array(np.full(n, p, np.int32)),
                "offset": pa.array(np.arange(n, dtype=np.int64)),
                "timestamp": table.column("timestamp").cast(pa.timestamp("ms", tz="UTC")),
                "timestampType": pa.array(np.zeros(n, np.int32)),
            }
        )
        pq.write_table(rows, parquet / f"part-{p:05d}.parquet", compression="snappy")
    done.write_text(f"{records} {partitions}")
    return logs, parquet


def best_of(repeat: int, name: str, fn: Callable[[], object]) -> tuple[float, object]:
    times, result = [], None
    for r in range(repeat):
        settle()
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
        print(f"  {name:28s} run {r + 1}: {times[-1]:7.2f} s", flush=True)
    return min(times), result


def aggregate(frame) -> list[tuple[int, int, int]]:
    from pyspark.sql import functions as F

    rows = frame.groupBy("partition").agg(F.count("*"), F.sum(F.length("value"))).collect()
    return sorted(tuple(r) for r in rows)


def narrow_offsets(partitions: int, records: int) -> tuple[str, str, int]:
    """startingOffsets/endingOffsets JSON of 1% of every partition, from its middle."""
    per_partition = -(-records // partitions)
    sizes = [min(per_partition, records - p * per_partition) for p in range(partitions)]
    starts = {str(p): n // 2 for p, n in enumerate(sizes)}
    ends = {str(p): n // 2 + max(n // 100, 1) for p, n in enumerate(sizes)}
    wanted = sum(ends[k] - starts[k] for k in starts)
    return json.dumps({TOPIC: starts}), json.dumps({TOPIC: ends}), wanted


def run_reads(spark, logs: Path, parquet: Path, args) -> None:
    def kafkalog(**options: str):
        reader = spark.read.format("kafkalog").option("subscribe", TOPIC)
        for name, value in options.items():
            reader = reader.option(name, value)
        return reader.load(str(logs))

    aggregate(kafkalog())  # warm-up: Python workers, imports, page cache
    aggregate(spark.read.parquet(str(parquet)))
    full_k, got_k = best_of(args.repeat, "kafkalog full read", lambda: aggregate(kafkalog()))
    full_p, got_p = best_of(
        args.repeat, "parquet full read", lambda: aggregate(spark.read.parquet(str(parquet)))
    )
    if got_k != got_p:
        raise SystemExit(f"results differ: kafkalog {got_k} parquet {got_p}")
    start, end, wanted = narrow_offsets(args.partitions, args.records)
    t_narrow, got_n = best_of(
        args.repeat,
        "kafkalog 1% offset range",
        lambda: aggregate(kafkalog(startingOffsets=start, endingOffsets=end)),
    )
    if sum(c for _, c, _ in got_n) != wanted:
        raise SystemExit(f"narrow read returned {got_n}, expected {wanted} records")

    # Context: Parquet above reads two columns (pruned); a Python data source gets no column
    # pruning, so every column crosses into the JVM. Both sides, every column, no-op sink:
    def every_column(frame) -> None:
        frame.write.format("noop").mode("overwrite").save()

    all_k, _ = best_of(args.repeat, "kafkalog every column", lambda: every_column(kafkalog()))
    all_p, _ = best_of(
        args.repeat, "parquet every column", lambda: every_column(spark.read.parquet(str(parquet)))
    )
    mb = du(logs) / 1e6
    print(f"\nread, {args.records:,} records ({mb:,.0f} MB of segments), {args.master}")
    for name, t in [
        ("kafkalog full, aggregate", full_k),
        ("parquet full, aggregate", full_p),
        ("kafkalog 1% offset range", t_narrow),
        ("kafkalog every column", all_k),
        ("parquet every column", all_p),
    ]:
        print(f"{name:26s} {t:7.2f} s")
    print(f"ratio kafkalog / parquet, aggregate:    {full_k / full_p:.2f}  (goal <= 1.0)")
    print(f"ratio narrow / full:                    {t_narrow / full_k:.3f} (goal <= 0.05)")
    print(f"ratio kafkalog / parquet, every column: {all_k / all_p:.2f}")


def run_writes(spark, parquet: Path, args) -> None:
    source = spark.read.parquet(str(parquet)).select("key", "value", "timestamp")
    logs_out, parquet_out = args.out / "write-logs", args.out / "write-parquet"

    def clean() -> None:
        for d in (logs_out, logs_out.parent / f".{logs_out.name}.kafkalog", parquet_out):
            shutil.rmtree(d, ignore_errors=True)

    def kafkalog() -> None:
        clean()
        (
            source.write.format("kafkalog")
            .mode("append")
            .option("topic", TOPIC)
            .option(f"topics.{TOPIC}.partitions", str(args.partitions))
            .save(str(logs_out))
        )

    def parquet_write() -> None:
        clean()
        source.write.parquet(str(parquet_out))

    kafkalog()  # warm-up
    parquet_write()
    t_k, _ = best_of(args.repeat, "kafkalog write", kafkalog)
    size_k = du(logs_out)
    t_p, _ = best_of(args.repeat, "parquet write", parquet_write)
    size_p = du(parquet_out)
    clean()
    print(f"\nwrite, {args.records:,} records, {args.master}")
    print(f"df.write.format('kafkalog') {t_k:7.2f} s  {size_k / 1e6:8,.0f} MB")
    print(f"df.write.parquet            {t_p:7.2f} s  {size_p / 1e6:8,.0f} MB")
    print(f"ratio kafkalog / parquet: {t_k / t_p:.2f}  (goal <= 1.0)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    ap.add_argument("--write", action="store_true", help="also time df.write")
    ap.add_argument("--no-read", action="store_true", help="skip the read benchmarks")
    ap.add_argument(
        "--remote",
        action="store_true",
        help="every query through a Spark Connect client of this run's JVM (pyspark's Connect "
        "plugin on a free port); bench/connect.py times both side by side",
    )
    args = ap.parse_args(argv)

    logs, parquet = make_input(args.out, args.records, args.partitions)
    port = free_ports(1)[0] if args.remote else None
    spark = start_session(
        args.master, None, None, extra_conf=connect_server_conf(port) if port else None
    )
    # --remote: every timed query through a Spark Connect client of this JVM
    timed = connect_client(port) if port else spark
    import pyspark_kafkalog

    with spark_mode("connect" if port else "classic"):  # how pyspark builds Columns
        pyspark_kafkalog.register(timed)  # the bench puts the repo on sys.path only
        print(f"load average at start: {os.getloadavg()}")
        if not args.no_read:
            run_reads(timed, logs, parquet, args)
        if args.write:
            run_writes(timed, parquet, args)
        print(f"load average at end: {os.getloadavg()}")
        if timed is not spark:
            timed.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
