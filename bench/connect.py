"""Spark Connect client vs classic session: the same ingest and full read, timed on both.

    python bench/connect.py --rows 1000000 --repeat 2

One local JVM (`--master`, default local[2]) serves both: the classic session is the JVM's own,
and it runs pyspark's Spark Connect plugin on a free port, whose client is the Connect session.
So the ratio is what the client path adds (gRPC, plans sent instead of made in process, results
as Arrow over the channel), not a network's latency. Inputs come from bench/ingest.py
(`make_source`, Parquet -> Kafka log) and bench/read.py (`make_input`, a log dir to read whole).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.spark_mode import connect_client, connect_server_conf, spark_mode  # noqa: E402


def sessions(master: str):
    """(classic session, Connect client) on one local JVM."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from tests.kafka_cluster import free_ports

    port = free_ports(1)[0]
    cores = master[master.index("[") + 1 : -1] if "[" in master else "2"
    classic = (
        SparkSession.builder.master(master)
        .appName("kafkalog-bench-connect")
        .config(map=connect_server_conf(port))
        .config("spark.driver.memory", "4g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.default.parallelism", cores)
        .config("spark.sql.shuffle.partitions", "8")
        .getOrCreate()
    )
    classic.sparkContext.setLogLevel("ERROR")
    return classic, connect_client(port)


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        os.sync()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--modes", default="arrow,direct", help="bench/ingest.py's --modes names")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    args = ap.parse_args(argv)

    from bench.ingest import make_source, timed_ingest
    from bench.read import aggregate, make_input

    src = make_source(args.out / f"connect-src-{args.rows}-{args.files}", args.rows, args.files)
    logs, _ = make_input(args.out, args.rows, 8)
    classic, client = sessions(args.master)
    kinds = (("classic", classic), ("connect", client))

    def ingest(spark, kind: str, mode: str, run_id: str) -> Callable[[], object]:
        root = args.out / f"connect-logs-{kind}"
        return lambda: timed_ingest(spark, src, root, run_id, None, mode, "producer")

    def read(spark) -> Callable[[], object]:
        frame = lambda: spark.read.format("kafkalog").option("subscribe", "bench")  # noqa: E731
        return lambda: aggregate(frame().load(str(logs)))

    cases = {
        f"ingest {m}": (lambda s, k, m=m: ingest(s, k, m, f"r-{m}")) for m in args.modes.split(",")
    }
    cases["full read"] = lambda s, k: read(s)
    figures: dict[str, dict[str, list[float]]] = {}
    for name, case in cases.items():
        for kind, spark in kinds:  # warm both: Python workers, JIT, the OS's page cache
            with spark_mode(kind):
                case(spark, kind)()
        for _ in range(args.repeat):  # interleaved, so a busy spell hits both alike
            for kind, spark in kinds:
                with spark_mode(kind):
                    took = best_of(1, case(spark, kind))
                figures.setdefault(name, {}).setdefault(kind, []).append(took)
    print(f"{args.rows:,} rows, {args.master}, best of {args.repeat}")
    print(f"{'':16s} {'classic s':>10s} {'connect s':>10s} {'connect/classic':>16s}")
    for name, times in figures.items():
        t = {kind: min(values) for kind, values in times.items()}
        ratio = t["connect"] / t["classic"]
        print(f"{name:16s} {t['classic']:10.2f} {t['connect']:10.2f} {ratio:15.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
