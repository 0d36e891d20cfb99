"""Benchmark: structured values (Avro, JSON) encoded from Arrow columns, against the same record
encode of a prebuilt bytes column.

Not a test. Run from the repo root:

    .venv/bin/python bench/schema.py [--rows 5000000] [--fallback-rows 1000000] [--repeat 3]
        [--ingest] [--changelog] [--no-encode] [--stages] [--master local[2]] [--out bench/out]

Rows: six columns like an orders table (order_id long, customer_id string, amount
decimal(10,2), currency string, event_time timestamp, quantity int, a few nulls), keyed by
order_id. The baseline encodes record batches (uncompressed, then zstd) whose values are a
prebuilt binary column of the same Avro bytes; each structured run encodes the values from the
six columns first and then the same batches. Printed: seconds (best of several, process CPU
time; wall time beside it) and each run's ratio to the baseline (the goal for Avro: <= 1.2x).
The Arrow-compute path (what runs without the C module) is timed on fewer rows. `--no-encode`
skips these figures.

Whole ingest runs (`jobs.ingest.run`) over Parquet copies of the rows (written once under
--out, not timed), in one Spark session: every kind once on 100k rows first (not timed), then
the kinds take turns for --repeat rounds. Printed per kind: the best wall time, the least CPU
time (this driver, the JVM and the Python workers under it) and their ratios to the group's
baseline, the write mode, the task reader and the run's timings (read, write, place, relayout,
publish); `--stages` adds Spark's stages (`bench.ingest.stage_report`).

- `--ingest`: the arrow task reader, direct mode, zstd, 6 partitions keyed by customer_id: the
  value as the prebuilt Avro bytes column (the baseline), as Avro from the six columns
  (goal: <= 1.2x), and as JSON from them; and Spark's `df.write.parquet` of the same files.
- `--changelog`: conf/ingest-changelog.yaml as it is (compacted topic of 6 partitions keyed by
  the string customer_id, zstd, `ordering: [updated_at, customer_id]`, task reader and write
  mode auto), over a Parquet source of `--rows` change rows (`make_customers`) instead of the
  Delta change feed, the value JSON of six columns; against Spark's `df.write.parquet` of the
  same files (snappy) (goal: <= 1.0x); and the same ingest with `ordering: source` (the direct
  mode: no sort), which shows what the ordering costs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.encode import best_of  # noqa: E402
from bench.ingest import (  # noqa: E402
    jvm_pid,
    remove_logs,
    settle,
    stage_report,
    start_session,
    timed_parquet,
)
from bench.rss import descendants  # noqa: E402
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
WARM_ROWS = 100_000  # rows of the untimed warm-up runs
CHANGELOG_COLUMNS = ["customer_id", "name", "email", "country", "updated_at", "loyalty_points"]


def _strings(rng: np.random.Generator, vocabulary: list[str], n: int) -> pa.Array:
    """`n` strings drawn from `vocabulary` (vectorized: a take, no per-row Python)."""
    return pa.array(vocabulary, pa.string()).take(pa.array(rng.integers(0, len(vocabulary), n)))


def _times(rng: np.random.Generator, n: int, *, ordered: bool) -> pa.Array:
    """`n` instants within one day (microseconds, UTC), in order or not."""
    us = rng.integers(0, 86_400_000_000, n)
    return pa.array(
        1_714_564_800_000_000 + (np.sort(us) if ordered else us), pa.timestamp("us", "UTC")
    )


def _ints_with_nulls(rng: np.random.Generator, n: int, high: int) -> pa.Array:
    """int32 values in [1, high), about 2% null."""
    return pa.array(rng.integers(1, high, n).astype(np.int32), mask=rng.random(n) < 0.02)


def make_orders(n: int, seed: int = 7) -> pa.StructArray:
    rng = np.random.default_rng(seed)
    order_id = np.arange(n, dtype=np.int64) * 7 + 1_000_000
    customers = [f"customer-{i:05d}" for i in range(5000)]
    cents = np.zeros((n, 2), dtype=np.int64)  # decimal128: the unscaled value, 16 bytes LE
    cents[:, 0] = rng.integers(100, 10_000_000, n)
    amount = pa.Array.from_buffers(pa.decimal128(10, 2), n, [None, pa.py_buffer(cents)])
    return pa.StructArray.from_arrays(
        [
            pa.array(order_id),
            _strings(rng, customers, n),
            amount,
            _strings(rng, ["EUR", "USD", "GBP", "JPY"], n),
            _times(rng, n, ordered=True),
            _ints_with_nulls(rng, n, 50),
        ],
        COLUMNS,
    )


def make_customers(n: int, seed: int = 11) -> pa.StructArray:
    """A change feed of `n` customer rows (conf/ingest-changelog.yaml's columns plus
    loyalty_points): n/4 customers with about four changes each, in no particular order."""
    rng = np.random.default_rng(seed)
    firsts = [f"First{i:03d}" for i in range(300)]
    lasts = [f"Lastname{i:03d}" for i in range(300)]
    first, last = _strings(rng, firsts, n), _strings(rng, lasts, n)
    ids = _strings(rng, [f"customer-{i:07d}" for i in range(max(1, n // 4))], n)
    email = pc.utf8_lower(pc.binary_join_element_wise(first, ".", last, "@example.com", ""))
    return pa.StructArray.from_arrays(
        [
            ids,
            pc.binary_join_element_wise(first, last, " "),
            email,
            _strings(rng, ["NL", "DE", "FR", "BE", "US", "GB", "ES", "IT"], n),
            _times(rng, n, ordered=False),
            _ints_with_nulls(rng, n, 10_000),
        ],
        CHANGELOG_COLUMNS,
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
    parser.add_argument("--changelog", action="store_true")
    parser.add_argument("--no-encode", action="store_true", help="skip the encode-only figures")
    parser.add_argument("--stages", action="store_true", help="Spark's stages, from its event log")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args(argv)
    assert native.schema_module is not None, "build the C module first (pip install -e .)"

    orders = make_orders(args.rows)
    prebuilt = encode_avro(orders, avro_schema_for(orders.type))
    print(
        f"{args.rows:,} rows, 6 columns; Avro values average {prebuilt.nbytes / args.rows:.1f} bytes"
    )

    if not args.no_encode:
        encode_runs(orders, prebuilt, args)
    if args.ingest or args.changelog:
        ingest_runs(orders, prebuilt, args)
    return 0


def encode_runs(orders: pa.StructArray, prebuilt: pa.Array, args) -> None:
    """Record batches of the values from the six columns against the prebuilt bytes column,
    then the values alone (C loops, and the Arrow path on fewer rows)."""
    keys = keys_of(orders)
    schema = avro_schema_for(orders.type)
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


def ingest_runs(orders: pa.StructArray, prebuilt: pa.Array, args) -> None:
    """Whole ingest runs over Parquet copies of the rows, in one Spark session (see the module
    docstring): each kind once on the first `WARM_ROWS` rows (not timed), then the kinds take
    turns, round after round, and each keeps its best time."""
    tables = {}
    if args.ingest:
        tables["orders"] = pa.Table.from_arrays([*orders.flatten(), prebuilt], [*COLUMNS, "avro"])
    if args.changelog:
        tables["changelog"] = pa.Table.from_struct_array(make_customers(args.rows))
    sources = {g: _parquet_source(args.out / f"{g}-src-{args.rows}", t) for g, t in tables.items()}
    warm = {
        g: _parquet_source(args.out / f"{g}-src-warm", t.slice(0, WARM_ROWS))
        for g, t in tables.items()
    }
    events = args.out / "schema-events" if args.stages else None
    spark = start_session(args.master, events, None)
    spark.sparkContext.setJobGroup("warmup", "warmup")  # JIT, workers, the sources' pages
    for _, kind in _kinds(warm, args).values():
        _timed(spark, kind, args, "warm", min(WARM_ROWS, args.rows))
    kinds = _kinds(sources, args)
    load = [os.getloadavg()]
    best: dict[str, tuple[float, object]] = {}  # the best wall time and its run's result
    least: dict[str, float] = {}  # the least CPU time
    for r in range(args.repeat):
        for name, (short, kind) in kinds.items():
            # the group names the path as bench.ingest.stage_report labels its stages
            path = "parquet" if isinstance(kind, Path) else "ingest-arrow"
            spark.sparkContext.setJobGroup(f"{path}|{short}|{r}", name)
            t, cpu, result = _timed(spark, kind, args, f"r{r}", args.rows)
            print(f"  round {r + 1}: {name:40s} {t:7.2f} s wall {cpu:7.2f} s cpu", flush=True)
            if name not in best or t < best[name][0]:
                best[name] = (t, result)
            least[name] = min(cpu, least.get(name, cpu))
            load.append(os.getloadavg())
    app_id = spark.sparkContext.applicationId
    spark.stop()
    remove_logs(args.out / "schema-logs")
    shutil.rmtree(args.out / "schema-parquet", ignore_errors=True)

    print(
        f"\ningest runs, {args.rows:,} rows, {args.master}, best of {args.repeat}, wall and CPU time:"
    )
    for group, baseline in (
        ("orders", "orders: prebuilt Avro bytes column"),
        ("changelog", "changelog: df.write.parquet"),
    ):
        for name, (t, result) in best.items():
            if not name.startswith(group):
                continue
            how = ""
            if result is not None:
                stages = ", ".join(f"{k} {v / 1000:.1f}" for k, v in result.timings_ms.items())
                how = f"  {result.write_mode} mode, {result.task_reader} reader; s: {stages}"
            ratio, cpu = t / best[baseline][0], least[name] / least[baseline]
            print(
                f"  {name:40s} {t:7.2f} s {ratio:5.2f}x, cpu {least[name]:6.2f} s {cpu:5.2f}x"
                f" {baseline.split(': ')[1]}{how}"
            )
    for name, (_, result) in best.items():
        if result is not None and name.startswith("changelog"):
            print(f"  {name}:\n    " + "\n    ".join(result.summary.splitlines()[-2:]))
    loads = np.array(load)
    print(
        f"load average (1 min) over the runs: {loads[:, 0].min():.1f}-{loads[:, 0].max():.1f}"
        f" (cores: {os.cpu_count()})"
    )
    if events is not None:
        stage_report(events, app_id)


def _kinds(sources: dict[str, Path], args) -> dict[str, tuple[str, object]]:
    """name -> (short name, the ingest's config, or the source `df.write.parquet` copies)."""
    kinds: dict[str, tuple[str, object]] = {}
    if "orders" in sources:
        src = sources["orders"]
        kinds |= {
            "orders: prebuilt Avro bytes column": (
                "bytes",
                _orders_config(src, args, "avro", "bytes"),
            ),
            "orders: Avro from 6 columns": ("avro", _orders_config(src, args, COLUMNS, "avro")),
            "orders: JSON from 6 columns": ("json", _orders_config(src, args, COLUMNS, "json")),
            "orders: df.write.parquet": ("orders", src),
        }
    if "changelog" in sources:
        src = sources["changelog"]
        kinds |= {
            "changelog: conf/ingest-changelog.yaml": ("changelog", _changelog_config(src, args)),
            "changelog: the same in source order": (
                "changelog-source",
                _changelog_config(src, args, "ordering=source"),
            ),
            "changelog: df.write.parquet": ("changelog", src),
        }
    return kinds


def _parquet_source(path: Path, table: pa.Table) -> Path:
    """`table` as Parquet files of 1M rows under `path` (written once, not timed)."""
    import pyarrow.parquet as pq

    if not (path / "_COMPLETE").exists():
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        for k, start in enumerate(range(0, table.num_rows, 1_000_000)):
            pq.write_table(table.slice(start, 1_000_000), path / f"part-{k:03d}.parquet")
        (path / "_COMPLETE").touch()
    return path


def _orders_config(src: Path, args, columns, value_format: str):
    """The orders ingest: arrow task reader, direct mode, zstd, 6 partitions by customer_id."""
    from jobs.ingestion.config.ingest_config import IngestConfig

    value = {"column" if isinstance(columns, str) else "columns": columns, "format": value_format}
    return IngestConfig.from_dict(
        {
            "source": {"format": "parquet", "path": str(src), "task_reader": "arrow"},
            "output": {"root": str(args.out / "schema-logs"), "write_mode": "direct"},
            "topics": {"orders": {"partitions": 6, "config": {"compression.type": "zstd"}}},
            "mapping": {
                "topic": "orders",
                "key": {"column": "customer_id", "format": "string"},
                "value": value,
                "timestamp": {"column": "event_time"},
            },
            "ordering": "source",
        }
    )


def _changelog_config(src: Path, args, *more: str):
    """conf/ingest-changelog.yaml as it is (topic settings, mapping, ordering, auto reader and
    write mode), over the Parquet rows instead of a Delta change feed, the value from 6 columns;
    `more`: further overrides (`dotted.key=value`)."""
    from jobs.ingestion.config.ingest_config import load_ingest_config

    example = Path(__file__).resolve().parents[1] / "conf" / "ingest-changelog.yaml"
    return load_ingest_config(
        example,
        [
            f"source={{format: parquet, path: '{src}'}}",
            f"output.root={args.out / 'schema-logs'}",
            f"mapping.value.columns=[{', '.join(CHANGELOG_COLUMNS)}]",
            *more,
        ],
    )


def _timed(spark, kind, args, run_id: str, rows: int):
    """(wall seconds, CPU seconds, the ingest result or None) of one ingest (`kind` an
    IngestConfig) or one `df.write.parquet` (`kind` the source path). The CPU is this driver's
    and the JVM's with every process under it (the Python workers): on a machine shared with
    other work it is the steadier figure, as wall time follows the share of the cores a run
    gets."""
    from jobs import ingest

    remove_logs(args.out / "schema-logs")
    settle()
    jvm = jvm_pid(spark)
    cpu = time.process_time() + _tree_cpu(jvm)
    if isinstance(kind, Path):
        elapsed, result = timed_parquet(spark, kind, args.out / "schema-parquet", "snappy"), None
    else:
        start = time.perf_counter()
        result = ingest.run(spark, kind, run_id=run_id, out=lambda *_: None)
        elapsed = time.perf_counter() - start
        assert result.status == "committed" and result.records == rows, result.summary
    return elapsed, time.process_time() + _tree_cpu(jvm) - cpu, result


def _tree_cpu(root: int) -> float:
    """CPU seconds (user + system, with those of its reaped children) of `root` and every live
    process under it."""
    ticks = 0
    for pid in {root, *descendants(root)}:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # from field 3 (state) on
        ticks += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    raise SystemExit(main())
