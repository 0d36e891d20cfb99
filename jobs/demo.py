"""The README's first command: a small Delta table in, a browsable Kafka log dir out.

    ./spark-submit.sh demo [--output DIR]          # DIR defaults to <repo>/demo-output

1. Writes two small, deterministic Delta tables with delta-rs (`deltalake.write_deltalake`):
   `customers` (a changelog: every customer has 1-3 versions) and `orders` (events with a map
   column of attributes). They live in the output root's meta area, the hidden sibling
   `.<DIR name>.kafkalog/demo-source/`, never inside DIR: a broker treats every subdirectory of a
   log dir as a partition dir.
2. Ingests them with `jobs.ingest.run` into two topics:
   - `customers`: keyed by customer_id, value = JSON of the row, CreateTime from updated_at,
     cleanup.policy=compact, zstd, a tiny segment.bytes so every partition has several segments
     and index entries;
   - `orders-events`: keyed by customer_id (Kafka's default partitioner), headers from the
     `attributes` map plus a constant `source` header, CreateTime from event_time, gzip.
3. Prints each run's summary, the first records of one segment and one offset index as
   `kafkalog dump-log` shows them, the output path and what to try next.

Re-running: the demo always starts clean. DIR and its meta area are deleted first (with a line
saying so) when DIR is the default `demo-output/` (git-ignored, the demo's own folder) or its meta
area holds the demo's `demo-source/`. Anything else that is not empty is never deleted: the demo
stops with an error.

From Python (a notebook, a test): `run_demo(spark, Path("demo-output"))`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from kafkalog_core.errors import KafkaLogError
from kafkalog_core.root.meta_area import meta_root

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from jobs.ingest import IngestResult

__all__ = [
    "DEFAULT_OUTPUT",
    "DemoError",
    "DemoResult",
    "customers_table",
    "main",
    "orders_table",
    "partition_dirs",
    "run_demo",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO_ROOT / "demo-output"
SOURCE_DIR = "demo-source"  # inside the meta area; its presence marks a demo's output

CUSTOMERS = 1000  # customers; each has 1-3 versions in the changelog table
ORDERS = 3000
CUSTOMER_PARTITIONS = 3
ORDER_PARTITIONS = 4
CUSTOMERS_TOPIC = "customers"
ORDERS_TOPIC = "orders-events"
CUSTOMER_SEGMENT_BYTES = 8192  # tiny on purpose: several segments per partition
BATCH_BYTES = 4096  # small record batches, so the small segments hold several of them
DUMP_LINES = 6  # lines shown of each dump-log output

_COUNTRIES = ("NL", "DE", "FR", "BE", "ES", "IT", "PL", "SE")
_FIRST = ("Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Leslie", "Tony")
_LAST = ("Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson")
_TIERS = ("bronze", "silver", "gold")
_CHANNELS = ("web", "app", "store")
_CAMPAIGNS = ("spring-sale", "newsletter", "none")
_EPOCH = datetime(2024, 5, 1, tzinfo=timezone.utc)


class DemoError(KafkaLogError):
    """The demo cannot run as asked (e.g. --output is a directory it did not create)."""


@dataclass
class DemoResult:
    """What the demo wrote: the log dir, its topics' partitions and the two ingest results."""

    output: Path
    source: Path
    customers: IngestResult
    orders: IngestResult
    partitions: dict[str, int] = field(default_factory=dict)  # topic -> partition count
    source_rows: dict[str, int] = field(default_factory=dict)  # table -> rows written


# ---------------------------------------------------------------------------------------------
# The source tables (deterministic: no randomness, no clock)


def customers_table(customers: int = CUSTOMERS) -> pa.Table:
    """A changelog: customer i has 1 + i % 3 versions, updated a few hours apart."""
    import pyarrow as pa

    rows: dict[str, list] = {
        "customer_id": [],
        "name": [],
        "email": [],
        "country": [],
        "tier": [],
        "updated_at": [],
    }
    for i in range(customers):
        name = f"{_FIRST[i % len(_FIRST)]} {_LAST[(i // len(_FIRST)) % len(_LAST)]}"
        for version in range(1 + i % 3):
            rows["customer_id"].append(f"c-{i:05d}")
            rows["name"].append(name)
            rows["email"].append(f"{name.split()[0].lower()}.{i}@example.com")
            rows["country"].append(_COUNTRIES[(i * 7 + version) % len(_COUNTRIES)])
            rows["tier"].append(_TIERS[min(version, len(_TIERS) - 1)])
            rows["updated_at"].append(_EPOCH + timedelta(minutes=i * 3, hours=version * 5))
    schema = pa.schema(
        [
            ("customer_id", pa.string()),
            ("name", pa.string()),
            ("email", pa.string()),
            ("country", pa.string()),
            ("tier", pa.string()),
            ("updated_at", pa.timestamp("us", tz="UTC")),
        ]
    )
    return pa.table(rows, schema=schema)


def orders_table(orders: int = ORDERS, customers: int = CUSTOMERS) -> pa.Table:
    """Order events: amount, event time, country and an `attributes` map (-> record headers)."""
    import pyarrow as pa

    rows: dict[str, list] = {
        "order_id": [],
        "customer_id": [],
        "amount": [],
        "currency": [],
        "country": [],
        "event_time": [],
        "attributes": [],
    }
    for i in range(orders):
        customer = (i * 7919) % customers
        rows["order_id"].append(100_000 + i)
        rows["customer_id"].append(f"c-{customer:05d}")
        rows["amount"].append(round(5 + (i * 37 % 20_000) / 100, 2))
        rows["currency"].append("EUR")
        rows["country"].append(_COUNTRIES[(customer * 7) % len(_COUNTRIES)])
        rows["event_time"].append(_EPOCH + timedelta(seconds=i * 41))
        attributes = [("channel", _CHANNELS[i % len(_CHANNELS)])]
        if i % 4 == 0:
            attributes.append(("campaign", _CAMPAIGNS[(i // 4) % len(_CAMPAIGNS)]))
        rows["attributes"].append(attributes)
    schema = pa.schema(
        [
            ("order_id", pa.int64()),
            ("customer_id", pa.string()),
            ("amount", pa.float64()),
            ("currency", pa.string()),
            ("country", pa.string()),
            ("event_time", pa.timestamp("us", tz="UTC")),
            ("attributes", pa.map_(pa.string(), pa.string())),
        ]
    )
    return pa.table(rows, schema=schema)


def write_source_tables(source: Path) -> dict[str, int]:
    """Both tables as Delta (version 0) under `source`; returns rows per table. `customers`
    records its change data feed, so `conf/ingest-changelog.yaml` reads it too."""
    from deltalake import write_deltalake

    written = {}
    for name, table in (("customers", customers_table()), ("orders", orders_table())):
        feed = {"delta.enableChangeDataFeed": "true"} if name == "customers" else None
        write_deltalake(str(source / name), table, mode="overwrite", configuration=feed)
        written[name] = table.num_rows
    return written


# ---------------------------------------------------------------------------------------------
# The two ingest configs (the same structure as conf/ingest-*.yaml)


def customers_config(source: Path, output: Path) -> dict:
    return {
        "source": {"format": "delta", "path": str(source / "customers")},
        "output": {"root": str(output)},
        "topics": {
            CUSTOMERS_TOPIC: {
                "partitions": CUSTOMER_PARTITIONS,
                "config": {
                    "cleanup.policy": "compact",
                    "compression.type": "zstd",
                    "segment.bytes": CUSTOMER_SEGMENT_BYTES,
                    "index.interval.bytes": 1024,  # and several offset/time index entries
                },
            }
        },
        "mapping": {
            "topic": CUSTOMERS_TOPIC,
            "key": {"column": "customer_id", "format": "string"},
            "value": {
                "columns": ["customer_id", "name", "email", "country", "tier", "updated_at"],
                "format": "json",
            },
            "timestamp": {"column": "updated_at"},
        },
        "ordering": ["updated_at", "customer_id"],
    }


def orders_config(source: Path, output: Path) -> dict:
    return {
        "source": {"format": "delta", "path": str(source / "orders")},
        "output": {"root": str(output)},
        "topics": {
            ORDERS_TOPIC: {
                "partitions": ORDER_PARTITIONS,
                "config": {"compression.type": "gzip", "segment.bytes": 65536},
            }
        },
        "mapping": {
            "topic": ORDERS_TOPIC,
            "key": {"column": "customer_id", "format": "string"},  # murmur2, as the producer
            "value": {
                "columns": [
                    "order_id",
                    "customer_id",
                    "amount",
                    "currency",
                    "country",
                    "event_time",
                ],
                "format": "json",
            },
            "headers": {"column": "attributes", "values": {"source": "'kafkalog-demo'"}},
            "timestamp": {"column": "event_time"},
        },
        "ordering": ["event_time", "order_id"],
    }


# ---------------------------------------------------------------------------------------------
# Output handling


def prepare_output(output: Path, out: Callable[[str], None] = print) -> Path:
    """Start clean: remove a previous demo's output and meta area; refuse anything else.

    Ours: the default output folder (git-ignored, reserved for the demo), or any DIR whose meta
    area holds the demo's source tables. Returns the directory for the Delta tables (inside the
    meta area).
    """
    output = Path(output).absolute()
    meta = meta_root(output)
    source = meta / SOURCE_DIR
    if output.exists() and not output.is_dir():
        raise DemoError(f"--output {output} exists and is not a directory")
    has_data = output.is_dir() and any(output.iterdir())
    ours = source.is_dir() or output == DEFAULT_OUTPUT.absolute()
    if (has_data or meta.exists()) and not ours:
        where = output if has_data else meta
        raise DemoError(
            f"--output {output}: {where} holds data the demo did not write; "
            "not touching it (choose another --output)"
        )
    if has_data or meta.exists():
        out(f"Replacing the previous demo output in {output}")
    shutil.rmtree(output, ignore_errors=True)
    shutil.rmtree(meta, ignore_errors=True)
    output.mkdir(parents=True, exist_ok=True)
    source.mkdir(parents=True)
    return source


def partition_dirs(output: Path) -> dict[str, list[Path]]:
    """topic -> its partition dirs directly under the log dir, by partition number."""
    found: dict[str, list[Path]] = {}
    for path in output.iterdir():
        topic, sep, number = path.name.rpartition("-")
        if path.is_dir() and sep and number.isdigit():
            found.setdefault(topic, []).append(path)
    return {t: sorted(ps, key=lambda p: int(p.name.rpartition("-")[2])) for t, ps in found.items()}


def dump_log(args: Sequence[str]) -> tuple[int, list[str]]:
    """`kafkalog dump-log ARGS` in-process; returns (exit status, stdout + stderr lines)."""
    from kafkalog_core.tools.cli import main as kafkalog_main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        status = kafkalog_main(["dump-log", *args])
    return status, buffer.getvalue().splitlines()


def _short(path: Path) -> str:
    """A path relative to the working directory when it is under it (shorter commands)."""
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd()))
    return str(path)


def _kafkalog_command() -> str:
    """The venv's `kafkalog` script (as typed from the working directory), else the bare name."""
    script = Path(sys.executable).parent / "kafkalog"
    return _short(script) if script.is_file() else "kafkalog"


def _dump_excerpt(title: str, args: Sequence[str], out: Callable[[str], None]) -> list[str]:
    """Print `title`, the command and the first DUMP_LINES lines of its output; returns them."""
    status, lines = dump_log(args)
    if status != 0:
        raise DemoError(f"kafkalog dump-log {' '.join(args)} failed: {' '.join(lines)[:500]}")
    out("")
    out(f"{title}:")
    out(f"$ kafkalog dump-log {' '.join(args)}")
    shown = lines[:DUMP_LINES]
    for line in shown:
        out(line)
    if len(lines) > len(shown):
        out(f"... ({len(lines) - len(shown)} more lines)")
    return shown


# ---------------------------------------------------------------------------------------------
# The demo


def run_demo(
    spark: SparkSession,
    output: Path,
    *,
    out: Callable[[str], None] = print,
    verbose: bool = False,
) -> DemoResult:
    """Build the source tables, ingest both topics into `output`, show what was written.
    `verbose` adds each ingest's internals (write mode, task reader, relayout)."""
    from jobs import ingest
    from jobs.ingestion.config.ingest_config import IngestConfig

    output = Path(output).absolute()
    started = time.monotonic()
    source = prepare_output(output, out)
    rows = write_source_tables(source)
    out(
        f"Wrote Delta tables with delta-rs: customers ({rows['customers']} rows), "
        f"orders ({rows['orders']} rows) in {_short(source)}"
    )

    results = {}
    for name, raw in (
        ("customers", customers_config(source, output)),
        ("orders", orders_config(source, output)),
    ):
        out("")
        out(f"Ingesting {name} -> topic {raw['mapping']['topic']}")
        config = IngestConfig.from_dict(raw)
        results[name] = ingest.run(
            spark,
            config,
            run_id=f"demo-{name}",
            batch_bytes=BATCH_BYTES,
            out=out,
            details=verbose,
        )

    dirs = partition_dirs(output)
    customers0 = output / f"{CUSTOMERS_TOPIC}-0"
    orders0 = output / f"{ORDERS_TOPIC}-0"
    first_log = orders0 / f"{0:020d}.log"
    customer_segments = sorted(customers0.glob("*.log"))
    index = customers0 / f"{0:020d}.index"

    _dump_excerpt(
        f"The first records of {ORDERS_TOPIC}-0 (gzip; headers from the attributes map)",
        ["--files", _short(first_log), "--deep-iteration", "--print-data-log"],
        out,
    )
    _dump_excerpt(
        f"{CUSTOMERS_TOPIC}-0 has {len(customer_segments)} segments "
        f"(segment.bytes={CUSTOMER_SEGMENT_BYTES}); "
        "the first one's offset index",
        ["--files", _short(index)],
        out,
    )

    out("")
    topics = ", ".join(f"{t} ({len(ps)} partitions)" for t, ps in sorted(dirs.items()))
    out(f"Done in {time.monotonic() - started:.0f}s. Topics: {topics}.")
    out(f"Kafka log dir: {output}")
    out("Next, try:")
    out(f"  ls {_short(customers0)}")
    last = customer_segments[-1] if customer_segments else customers0 / f"{0:020d}.log"
    out(
        f"  {_kafkalog_command()} dump-log --files {_short(last)} --deep-iteration --print-data-log"
    )
    return DemoResult(
        output=output,
        source=source,
        customers=results["customers"],
        orders=results["orders"],
        partitions={t: len(ps) for t, ps in dirs.items()},
        source_rows=rows,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """`./spark-submit.sh demo [--output DIR]`: exit 0, or 1 with one `kafkalog: error:` line."""
    parser = argparse.ArgumentParser(
        prog="demo",
        description=(
            "Build a small Delta table with delta-rs, ingest it into two Kafka topics and dump "
            "a segment. Every run starts clean (a previous demo output in DIR is replaced)."
        ),
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        metavar="DIR",
        help=f"the Kafka log dir to write (default: {_short(DEFAULT_OUTPUT)})",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also print how each ingest ran (write mode, task reader, segment layout)",
    )
    args = parser.parse_args(argv)
    try:
        from jobs.spark.session import get_or_create_session

        spark = get_or_create_session("kafkalog-demo")
        run_demo(spark, args.output, verbose=args.verbose)
    except KafkaLogError as error:
        print(f"kafkalog: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from jobs.spark.session import exit_driver

    exit_driver(main())
