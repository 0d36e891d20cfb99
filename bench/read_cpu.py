"""Benchmark: CPU per format("kafkalog") query, per process (JVM, each Python worker).

Not a test. Wall time means little on a shared machine; CPU from /proc does. Run from the repo
root on bench/read.py's input (make it first with bench/read.py):

    .venv/bin/python bench/read_cpu.py [--records 5000000] [--partitions 8] [--full] [--repeat 3]

Prints, per query after two warm-up queries, the CPU seconds each process under the driver
spent (java = the JVM; python = Spark's schema, planning and task workers and their daemons).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.ingest import start_session  # noqa: E402
from bench.read import TOPIC, aggregate, narrow_offsets  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def process_cpu() -> dict[int, tuple[str, float]]:
    """{pid: (name, CPU s of it and its reaped children)} of this process's descendants."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        table[int(entry)] = (int(fields[1]), name, sum(int(x) for x in fields[11:15]) / TICK)
    found: dict[int, tuple[str, float]] = {}
    todo = [os.getpid()]
    while todo:
        parent = todo.pop()
        for pid, (ppid, name, cpu) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = (name, cpu)
                todo.append(pid)
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="also the full read")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    args = ap.parse_args(argv)
    logs = args.out / f"read-input-{args.records}-{args.partitions}" / "logs"
    spark = start_session("local[2]", None, None)
    import pyspark_kafkalog

    pyspark_kafkalog.register(spark)
    start, end, _ = narrow_offsets(args.partitions, args.records)

    def query(**options: str) -> None:
        aggregate(spark.read.format("kafkalog").options(subscribe=TOPIC, **options).load(str(logs)))

    cases = [("1% offset range", {"startingOffsets": start, "endingOffsets": end})]
    if args.full:
        cases.append(("full read", {}))
    for _, options in cases * 2:  # warm-up: workers, imports, JIT, page cache
        query(**options)
    print(f"load average: {os.getloadavg()}")
    for name, options in cases:
        for run in range(args.repeat):
            before = process_cpu()
            query(**options)
            after = process_cpu()
            spent = {
                pid: (n, cpu - before.get(pid, (n, 0.0))[1]) for pid, (n, cpu) in after.items()
            }
            busy = sorted((f"{n}[{pid}] {c:.2f}" for pid, (n, c) in spent.items() if c > 0.005))
            total = sum(c for _, c in spent.values())
            print(f"{name} run {run + 1}: {total:.2f} s CPU: {', '.join(busy)}", flush=True)
    print(f"load average: {os.getloadavg()}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
