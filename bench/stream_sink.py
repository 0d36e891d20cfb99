"""Benchmark: `writeStream.format("kafkalog")` against `writeStream.format("parquet")`.

Not a test. Run from the repo root:

    .venv/bin/python bench/stream_sink.py [--records 2000000] [--partitions 4]
        [--per-trigger 500000 100000] [--master 'local[2]'] [--repeat 2] [--out bench/out]

Input (generated once, cached under --out, not timed): workload W (16 B random keys, 100 B
random values) over `--partitions` partitions of topic `bench`, as bench/read.py makes it.

Timed (best of --repeat, a fresh checkpoint and output each run): one streaming query per sink
reads the log dir with `readStream.format("kafkalog")` from the earliest offsets,
`maxOffsetsPerTrigger` = each `--per-trigger` (so records / per-trigger micro-batches), with
Trigger.AvailableNow, and writes (key, value) with `writeStream.format("kafkalog")` (topic
copy, --partitions partitions, murmur2 of the key) or `writeStream.format("parquet")`
(snappy). Both pay the same read; the difference is the sink: kafkalog's is a staged,
journaled, exactly-once publish per micro-batch, Parquet's a file per task and a manifest.

Prints rows/s per sink and micro-batch size, the ratio kafkalog / parquet of the times, and the
load average (the machine may be shared: absolute times are noisy, the ratios less so).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.ingest import start_session  # noqa: E402
from bench.read import TOPIC, best_of, make_input  # noqa: E402


def run_query(spark, logs: Path, sink: str, out: Path, per_trigger: int, partitions: int) -> int:
    """One AvailableNow query from the log dir into `sink` at `out`; the rows it wrote."""
    shutil.rmtree(out, ignore_errors=True)
    writer = (
        spark.readStream.format("kafkalog")
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .load(str(logs))
        .select("key", "value")
        .writeStream.option("checkpointLocation", str(out / "_checkpoint"))
        .trigger(availableNow=True)
    )
    if sink == "kafkalog":
        writer = (
            writer.format("kafkalog")
            .option("topic", "copy")
            .option("topics.copy.partitions", str(partitions))
        )
    else:
        writer = writer.format("parquet")
    query = writer.start(str(out / "data"))
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return sum(p["numInputRows"] for p in query.recentProgress)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--per-trigger", type=int, nargs="+", default=[500_000, 100_000])
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    args = ap.parse_args(argv)

    logs, _ = make_input(args.out, args.records, args.partitions)
    spark = start_session(args.master, None, None)
    spark.sparkContext.setLogLevel("ERROR")
    work = args.out / "stream-sink"
    for per_trigger in args.per_trigger:
        batches = -(-args.records // per_trigger)
        print(f"{args.records} records, {per_trigger} a micro-batch ({batches} batches):")
        times = {}
        for sink in ("kafkalog", "parquet"):
            seconds, rows = best_of(
                args.repeat,
                sink,
                lambda sink=sink, per_trigger=per_trigger: run_query(
                    spark, logs, sink, work / sink, per_trigger, args.partitions
                ),
            )
            assert rows == args.records, (sink, rows)
            times[sink] = seconds
            print(f"  {sink:10s} {args.records / seconds:12,.0f} rows/s ({seconds:.2f} s)")
        print(f"  ratio kafkalog / parquet: {times['kafkalog'] / times['parquet']:.2f}")
    print(f"load average: {os.getloadavg()}")
    spark.stop()
    return 0


if __name__ == "__main__":
    started = time.time()
    code = main()
    print(f"({time.time() - started:.0f} s in all)")
    sys.exit(code)
