"""Benchmark: encode 1,000,000 records with kafkalog's encoder vs kafka-python's builder.

Not a test. Run from the repo root:

    .venv/bin/python bench/encode.py [--records 1000000] [--kafka-python-records 100000]

Records: 16-byte random keys, 100-byte random values, increasing timestamps, no headers.
Batch targets 16 KiB and 1 MiB. kafka-python (pure Python, one record at a time) is timed on a
subset and reported per record; our encoder is timed on all records. Each figure is the best of
several runs after a warm-up (so the first large allocation's page faults are not what is
measured), in process CPU time and in wall time: on a shared machine CPU time is the steadier
of the two. kafka-python gets exactly the batch boundaries our encoder chose, so both write the
same batches.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workload import make_table  # noqa: E402
from kafkalog_core.record.batch import Compression  # noqa: E402
from kafkalog_core.record.encoder import BatchOptions, encode_records  # noqa: E402


def best_of(repeat: int, run) -> tuple[float, float, object]:
    """(best CPU seconds, best wall seconds, last result) over `repeat` runs after a warm-up."""
    result = run()
    cpu, wall = [], []
    for _ in range(repeat):
        del result
        start_cpu, start_wall = time.process_time(), time.perf_counter()
        result = run()
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start_wall)
    return min(cpu), min(wall), result


def kafka_python_run(table: pa.Table, counts: np.ndarray, limit: int):
    """kafka-python's DefaultRecordBatchBuilder over our batch boundaries, first `limit` records."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    keys = table.column("key").to_pylist()[:limit]
    values = table.column("value").to_pylist()[:limit]
    timestamps = table.column("timestamp").to_pylist()[:limit]

    def run() -> int:
        i = 0
        for count in counts.tolist():
            if i >= limit:
                break
            builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 2**31 - 1)
            for delta in range(min(count, limit - i)):
                builder.append(delta, timestamps[i], keys[i], values[i], [])
                i += 1
            builder.build()
        return i

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--kafka-python-records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    table = make_table(args.records)
    print(f"records: {args.records:,} (16 B keys, 100 B values, no headers)")
    for target in (16 * 1024, 1024 * 1024):
        options = BatchOptions(max_batch_bytes=target)
        our_cpu, our_wall, encoded = best_of(
            args.repeat, lambda o=options: encode_records(table, options=o)
        )
        run = kafka_python_run(table, encoded.record_counts, args.kafka_python_records)
        kp_cpu, kp_wall, kp_n = best_of(3, run)
        print(
            f"batch {target // 1024:>5} KiB: {len(encoded):>6} batches, {encoded.total_bytes / 1e6:.1f} MB\n"
            f"    kafkalog     {args.records / our_cpu / 1e6:6.2f} M rec/s CPU, {args.records / our_wall / 1e6:6.2f} M rec/s wall"
            f" ({our_cpu * 1000:.0f} ms CPU for {args.records:,} records)\n"
            f"    kafka-python {kp_n / kp_cpu / 1e6:6.3f} M rec/s CPU, {kp_n / kp_wall / 1e6:6.3f} M rec/s wall"
            f" (timed on the first {kp_n:,} records)\n"
            f"    ratio        {kp_cpu / kp_n * args.records / our_cpu:5.1f}x CPU, "
            f"{kp_wall / kp_n * args.records / our_wall:5.1f}x wall"
        )
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        options = BatchOptions(max_batch_bytes=16 * 1024, compression=codec)
        cpu, wall, encoded = best_of(
            max(1, args.repeat // 2), lambda o=options: encode_records(table, options=o)
        )
        print(
            f"batch    16 KiB {codec.kafka_name:>6}: kafkalog {args.records / cpu / 1e6:6.2f} M rec/s CPU, "
            f"{args.records / wall / 1e6:6.2f} M rec/s wall ({encoded.total_bytes / 1e6:.1f} MB out)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
