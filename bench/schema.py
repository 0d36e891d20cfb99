"""Benchmark: structured values (Avro, JSON) encoded from Arrow columns, against the same record
encode of a prebuilt bytes column.

Not a test. Run from the repo root:

    .venv/bin/python bench/schema.py [--rows 5000000] [--fallback-rows 1000000]

Rows: six columns like an orders table (order_id long, customer_id string, amount
decimal(10,2), currency string, event_time timestamp, quantity int, a few nulls), keyed by
order_id. The baseline encodes record batches (uncompressed, then zstd) whose values are a
prebuilt binary column of the same Avro bytes; each structured run encodes the values from the
six columns first and then the same batches. Printed: seconds (best of several, process CPU
time; wall time beside it) and each run's ratio to the baseline (issue 23's goal for Avro:
<= 1.2x). The Arrow-compute path (what runs without the C module) is timed on fewer rows.
"""

from __future__ import annotations

import argparse
import sys
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
        ["order_id", "customer_id", "amount", "currency", "event_time", "quantity"],
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
