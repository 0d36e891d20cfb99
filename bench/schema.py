"""Benchmark: structured values (Avro, JSON) encoded from Arrow columns, against the same record
encode of a prebuilt bytes column.

Not a test. Run from the repo root:

    .venv/bin/python bench/schema.py [--rows 5000000] [--fallback-rows 1000000]
        [--ingest] [--master local[2]] [--out bench/out]

Rows: six columns like an orders table (order_id long, customer_id string, amount
decimal(10,2), currency string, event_time timestamp, quantity int, a few nulls), keyed by
order_id. The baseline encodes record batches (uncompressed, then zstd) whose values are a
prebuilt binary column of the same Avro bytes; each structured run encodes the values from the
six columns first and then the same batches. Printed: seconds (best of several, process CPU
time; wall time beside it) and each run's ratio to the baseline (issue 23's goal for Avro:
<= 1.2x). The Arrow-compute path (what runs without the C module) is timed on fewer rows.

`--ingest` also times whole ingest runs (`jobs.ingest.run`, the arrow task reader, direct
mode, zstd, 6 partitions keyed by customer_id) of a Parquet copy of the rows (written once under
--out, not timed): the value as the prebuilt Avro bytes column (the baseline), as Avro from
the six columns, and as JSON from them; and Spark's `df.write.parquet` of the same files.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.encode import best_of  # noqa: E402
from kafkalog_core import native  # noqa: E402
from kafkalog_core.record.batch import Compression  # noqa: E402
from kafkalog_core.record.encoder import BatchOptions, encode_records  # noqa: E402
from kafkalog_core.schema import (  # noqa: E402
    avro_schema_for,
    encode_avro,
    encode_json,
    frame_confluent,
)

COLUMNS = ["order_id", "customer_id", "amount", "currency", "event_time", "quantity"]


def make_orders(n: int, seed: int = 7) -> pa.StructArray:
    rng = np.random.default_rng(seed)
    order_id = np.arange(n, dtype=np.int64) * 7 + 1_000_000
    customers = np.array([f"customer-{i:05d}" for i in range(5000)], dtype=object)
    cents = np.zeros((n, 2), dtype=np.int64)  # decimal128: the unscaled value, 16 bytes LE
    cents[:, 0] = rng.integers(100, 10_000_000, n)
    amount = pa.Array.from_buffers(pa.decimal128(10, 2), n, [None, pa.py_buffer(cents)])
    currency = pa.array(rng.choice(["EUR", "USD", "GBP", "JPY"], n)).cast(pa.string())
    event_time = pa.array(
        1_714_564_800_000_000 + np.sort(rng.integers(0, 86_400_000_000, n)),
        pa.timestamp("us", "UTC"),
    )
    nulls = rng.random(n) < 0.02
    quantity = pa.array(rng.integers(1, 50, n).astype(np.int32), mask=nulls)
    return pa.StructArray.from_arrays(
        [
            pa.array(order_id),
            pa.array(customers[rng.integers(0, 5000, n)]).cast(pa.string()),
            amount,
            currency,
            event_time,
            quantity,
        ],
        COLUMNS,
    )


def keys_of(orders: pa.StructArray) -> pa.Array:
    ids = orders.field("order_id").to_numpy().astype(">i8")
    return pa.Array.from_buffers(
        pa.binary(),
        len(ids),
        [
            None,
            pa.py_buffer(np.arange(len(ids) + 1, dtype=np.int32) * 8),
            pa.py_buffer(ids.tobytes()),
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--fallback-rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ingest", action="store_true")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args(argv)
    assert native.schema_module is not None, "build the C module first (pip install -e .)"

    orders = make_orders(args.rows)
    keys = keys_of(orders)
    schema = avro_schema_for(orders.type)
    prebuilt = encode_avro(orders, schema)
    print(
        f"{args.rows:,} rows, 6 columns; Avro values average {prebuilt.nbytes / args.rows:.1f} bytes"
    )

    for codec in (Compression.NONE, Compression.ZSTD):
        options = BatchOptions(compression=codec)

        def batches(values, options=options):
            return encode_records({"key": keys, "value": values}, options=options).total_bytes

        runs = {
            "baseline: prebuilt bytes column": lambda: batches(prebuilt),
            "Avro from 6 columns": lambda: batches(encode_avro(orders, schema)),
            "Avro + registry framing": lambda: batches(
                frame_confluent(encode_avro(orders, schema), 17)
            ),
            "JSON from 6 columns": lambda: batches(encode_json(orders)),
        }
        print(f"\nrecord batches, compression {codec.name.lower()}:")
        base = None
        for name, run in runs.items():
            cpu, wall, _ = best_of(args.repeat, run)
            base = base or cpu
            print(f"  {name:34s} {cpu:7.3f} s cpu {wall:7.3f} s wall  {cpu / base:5.2f}x")

    print("\nvalues alone (no batches):")
    alone = {
        "Avro, C": lambda: encode_avro(orders, schema),
        "JSON, C": lambda: encode_json(orders),
    }
    for name, run in alone.items():
        cpu, wall, _ = best_of(args.repeat, run)
        print(
            f"  {name:34s} {cpu:7.3f} s cpu {wall:7.3f} s wall  {args.rows / cpu / 1e6:6.1f} M rows/s"
        )
    small = orders.slice(0, args.fallback_rows)
    module, native.schema_module = native.schema_module, None
    try:
        for name, run in {
            "Avro, Arrow path": lambda: encode_avro(small, schema),
            "JSON, Arrow path": lambda: encode_json(small),
        }.items():
            cpu, wall, _ = best_of(1, run)
            rate = args.fallback_rows / cpu / 1e6
            print(
                f"  {name:34s} {cpu:7.3f} s cpu {wall:7.3f} s wall  {rate:6.1f} M rows/s ({args.fallback_rows:,} rows)"
            )
    finally:
        native.schema_module = module
    if args.ingest:
        ingest_runs(orders, prebuilt, args)
    return 0


def ingest_runs(orders: pa.StructArray, prebuilt: pa.Array, args) -> None:
    """Whole ingest runs over a Parquet copy of the rows (see the module docstring)."""
    import pyarrow.parquet as pq

    from bench.ingest import remove_logs, settle, start_session, timed_parquet
    from jobs import ingest
    from jobs.ingestion.config.ingest_config import IngestConfig

    src = args.out / f"schema-src-{len(orders)}"
    if not src.exists():
        table = pa.Table.from_arrays([*orders.flatten(), prebuilt], [*COLUMNS, "avro"])
        src.mkdir(parents=True)
        for k, start in enumerate(range(0, len(orders), 1_000_000)):
            pq.write_table(table.slice(start, 1_000_000), src / f"part-{k:03d}.parquet")
    spark = start_session(args.master, None, None)
    values = {
        "baseline: prebuilt Avro bytes column": {"column": "avro", "format": "bytes"},
        "Avro from 6 columns": {"columns": COLUMNS, "format": "avro"},
        "JSON from 6 columns": {"columns": COLUMNS, "format": "json"},
    }
    print(f"\ningest runs ({args.master}, arrow task reader, direct mode, zstd), wall time:")
    base = None
    for name, value in values.items():
        root = args.out / "schema-logs"
        doc = {
            "source": {"format": "parquet", "path": str(src), "task_reader": "arrow"},
            "output": {"root": str(root), "write_mode": "direct"},
            "topics": {"orders": {"partitions": 6, "config": {"compression.type": "zstd"}}},
            "mapping": {
                "topic": "orders",
                "key": {"column": "customer_id", "format": "string"},
                "value": value,
                "timestamp": {"column": "event_time"},
            },
            "ordering": "source",
        }
        best = None
        for attempt in range(args.repeat):
            remove_logs(root)
            settle()
            start = time.perf_counter()
            result = ingest.run(
                spark, IngestConfig.from_dict(doc), run_id=f"b{attempt}", out=lambda *_: None
            )
            elapsed = time.perf_counter() - start
            assert result.status == "committed", result.summary
            best = elapsed if best is None else min(best, elapsed)
        base = base or best
        print(f"  {name:38s} {best:7.2f} s  {best / base:5.2f}x  ({result.task_reader} reader)")
    parquet = min(
        timed_parquet(spark, src, args.out / "schema-parquet", "snappy") for _ in range(args.repeat)
    )
    print(f"  {'df.write.parquet of the same files':38s} {parquet:7.2f} s  {parquet / base:5.2f}x")
    remove_logs(args.out / "schema-logs")
    spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
