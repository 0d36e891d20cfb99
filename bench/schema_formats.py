"""Benchmark: key/value encodes and decodes of the schema formats, per format, in one run.

Not a test. Run from the repo root:

    .venv/bin/python bench/schema_formats.py [--rows 200000]

Rows: an order of 6 columns (long id, string customer, decimal amount, string currency,
timestamp, int quantity), nulls in two of them. Each format's `Encoding` (what the ingest job's
tasks and the data source writer run) encodes the same struct column, framed for a registry;
Avro, on the vectorized path, is the baseline every ratio is printed against. Protobuf runs
the protobuf runtime once per record (the general path), JSON Schema the JSON encoder plus the
row check: structural only; with a `maximum` (checked by column); with a `pattern` on the
currency (the `jsonschema` validator on the column's distinct values); with `minProperties`
on the record (the validator on every row, timed on at most 20,000 rows and given per row). Then the
read side's `decode_column` of each format's bytes. Best of 3, wall time.
"""

from __future__ import annotations

import argparse
import sys
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafkalog_core.schema.avro_schema import avro_schema_for  # noqa: E402
from kafkalog_core.schema.decode import Decoding, decode_column  # noqa: E402
from kafkalog_core.schema.encoding import Encoding  # noqa: E402
from kafkalog_core.schema.json_schema import json_schema_for  # noqa: E402
from kafkalog_core.schema.protobuf import parse_proto, proto_for  # noqa: E402


def orders(n: int) -> pa.StructArray:
    rng = np.random.default_rng(7)
    cents = rng.integers(0, 10**7, n)
    return pa.StructArray.from_arrays(
        [
            pa.array(np.arange(n, dtype=np.int64)),
            pa.array([f"customer-{i % 5000}" if i % 10 else None for i in range(n)]),
            pa.array([Decimal(int(c)).scaleb(-2) for c in cents], pa.decimal128(12, 2)),
            pa.array(np.array(["EUR", "USD", "CHF"])[rng.integers(0, 3, n)]),
            pa.array(
                1_700_000_000_000_000 + np.arange(n, dtype=np.int64) * 1000,
                pa.timestamp("us", tz="UTC"),
            ),
            pa.array(rng.integers(1, 20, n).astype(np.int32), mask=rng.random(n) < 0.05),
        ],
        names=["id", "customer", "amount", "currency", "at", "quantity"],
    )


def best(fn, repeat: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args(argv)
    values = orders(args.rows)
    t = values.type
    json_schema = json_schema_for(t, "Order")

    def with_property(name: str, extra: dict) -> dict:
        """The derived schema with more keywords on one (nullable) property."""
        plain = json_schema["properties"][name]["oneOf"][1]
        sub = {"oneOf": [{"type": "null"}, {**plain, **extra}]}
        return {**json_schema, "properties": {**json_schema["properties"], name: sub}}

    bounded = with_property("quantity", {"maximum": 100})
    patterned = with_property("currency", {"pattern": "^[A-Z]{3}$"})
    proto = parse_proto(proto_for(t, "Order", "shop"))
    encodings = {
        "avro (baseline)": Encoding("value", "avro", avro_schema_for(t, "Order", "shop"), 1),
        "json": Encoding("value", "json"),
        "json_schema, structural": Encoding("value", "json_schema", json_schema, 2),
        "json_schema, maximum (by column)": Encoding("value", "json_schema", bounded, 3),
        "json_schema, pattern (distinct values)": Encoding("value", "json_schema", patterned, 3),
        "protobuf (runtime per record)": Encoding("value", "protobuf", proto, 4),
    }
    print(f"{args.rows:,} rows of {t}")
    print(f"{'encode':44s} {'seconds':>8s} {'rows/s':>12s} {'x avro':>8s}")
    base = None
    encoded = {}
    for name, encoding in encodings.items():
        seconds, out = best(lambda e=encoding: e.encode(values))
        encoded[name] = out
        base = base or seconds
        print(f"{name:44s} {seconds:8.3f} {args.rows / seconds:12,.0f} {seconds / base:8.2f}")
    few = values.slice(0, min(len(values), 20_000))
    per_row_schema = {**json_schema, "minProperties": 1}
    seconds, _ = best(
        lambda: Encoding("value", "json_schema", per_row_schema, 3).encode(few), repeat=1
    )
    name = "json_schema, minProperties (validator per row)"
    per_row = seconds / len(few)
    print(
        f"{name:44s} {per_row * args.rows:8.3f} {1 / per_row:12,.0f} {per_row * args.rows / base:8.2f}"
    )
    decodings = {
        "avro (baseline)": Decoding(
            "value",
            "avro",
            True,
            encodings["avro (baseline)"].schema,
            {1: encodings["avro (baseline)"].schema},
        ),
        "json_schema, structural": Decoding(
            "value", "json_schema", True, json_schema, {2: json_schema}
        ),
        "protobuf (runtime per record)": Decoding("value", "protobuf", True, proto, {4: proto}),
    }
    print(f"{'decode':44s} {'seconds':>8s} {'rows/s':>12s} {'x avro':>8s}")
    base = None
    for name, decoding in decodings.items():
        seconds, _ = best(lambda d=decoding, n=name: decode_column(encoded[n], d), repeat=2)
        base = base or seconds
        print(f"{name:44s} {seconds:8.3f} {args.rows / seconds:12,.0f} {seconds / base:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
