"""The frame every maintenance job runs in: list, spread over tasks, lock, report, exit.

A maintenance job reads (and with `--apply` changes) a log dir root that a broker or our ingest
job wrote. The driver only lists partition directories (one `scandir`) and plans; the reading
happens in Spark tasks, a list of work units per task, so a root of thousands of partitions is
not read serially on the driver. Units are dealt to tasks by weight (bytes), largest first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.ingestion.commit.publish import default_run_id
from jobs.ingestion.run.meta import IngestError
from jobs.spark.errors import task_error
from jobs.spark.task_log import task_failure_log
from jobs.spark.tasks import default_parallelism, run_tasks
from kafkalog_core.errors import KafkaLogError
from kafkalog_core.log.names import (
    live_partition_dirs,
    offset_from_file_name,
    segment_log_files,
)
from kafkalog_core.maintenance.cleaner import CleanerSettings
from kafkalog_core.root.run_lock import ReadLock, RunLock

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Unit = Mapping[str, Any]  # a JSON-able description of one piece of work (a partition, a segment)
UnitTask = Callable[[Unit], "pa.Table | Iterable[Mapping[str, Any]]"]


class MaintenanceError(IngestError):
    """A maintenance run cannot proceed; the message names the partition, segment or file."""


@dataclass(frozen=True, order=True)
class PartitionRef:
    """One partition directory of a log dir root."""

    topic: str
    partition: int
    dir_name: str

    def unit(self, **extra: Any) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "dir": self.dir_name, **extra}


def list_partitions(
    log_dir: str | os.PathLike[str], topics: Sequence[str] = ()
) -> list[PartitionRef]:
    """The live partition directories of `log_dir` (one `scandir`), sorted by topic, partition.

    Skipped as `names.live_partition_dirs` says: anything a broker does not load as a topic's
    log, and the KRaft metadata log (read for topic settings, never maintained here).
    `topics` filters when given.
    """
    root = Path(log_dir)
    if not root.is_dir():
        raise MaintenanceError(f"log dir {root} does not exist or is not a directory")
    wanted = set(topics)
    refs = [
        PartitionRef(topic, partition, path.name)
        for topic, partition, path in live_partition_dirs(root)
        if not wanted or topic in wanted
    ]
    if wanted:
        missing = wanted - {r.topic for r in refs}
        if missing:
            raise MaintenanceError(f"log dir {root} has no partition of topic(s) {sorted(missing)}")
    return sorted(refs)


def deal_units(units: Sequence[Unit], slots: int, weight_key: str = "bytes") -> list[list[Unit]]:
    """Units in `slots` groups of about equal weight: largest first onto the lightest group."""
    slots = max(1, min(slots, len(units)))
    groups: list[list[Unit]] = [[] for _ in range(slots)]
    loads = [0] * slots
    order = sorted(range(len(units)), key=lambda i: -int(units[i].get(weight_key, 0) or 0))
    for i in order:
        lightest = loads.index(min(loads))
        groups[lightest].append(units[i])
        loads[lightest] += max(1, int(units[i].get(weight_key, 0) or 0))
    return [g for g in groups if g]


def plan_slices(
    units: Sequence[Unit],
    segments_of: Callable[[Unit], list[tuple[int, int]]],
    slots: int,
    *,
    split: bool = True,
) -> list[dict[str, Any]]:
    """Weight each partition's unit by its bytes (`segments_of(unit)`: (base offset, bytes) in
    offset order); with `split`, a partition bigger than a fair share (total / slots) becomes
    several units of consecutive segments (`only_segments`), so one hot partition does not
    hold up the whole job."""
    parts = {id(u): segments_of(u) for u in units}
    total = sum(b for segs in parts.values() for _, b in segs)
    share = max(1, total // max(1, slots))
    planned: list[dict[str, Any]] = []
    for unit in units:
        segments = parts[id(unit)]
        size = sum(b for _, b in segments)
        if not split or size <= share or len(segments) < 2:
            planned.append({**unit, "bytes": size})
            continue
        group: list[int] = []
        group_bytes = 0
        for base, nbytes in segments:
            group.append(base)
            group_bytes += nbytes
            if group_bytes >= share:
                planned.append({**unit, "bytes": group_bytes, "only_segments": group})
                group, group_bytes = [], 0
        if group:
            planned.append({**unit, "bytes": group_bytes, "only_segments": group})
    return planned


def _as_table(result: pa.Table | Iterable[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    if isinstance(result, pa.Table):
        return result.select(schema.names).cast(schema)
    return pa.Table.from_pylist(list(result), schema=schema)


def ipc_bytes(table: pa.Table) -> bytes:
    """A table as one Arrow IPC stream: how task results and shuffled blocks travel."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def ipc_table(blob: bytes) -> pa.Table:
    """The table of one `ipc_bytes` stream."""
    return pa.ipc.open_stream(blob).read_all()


def run_units(
    spark: SparkSession,
    units: Sequence[Unit],
    task: UnitTask,
    schema: pa.Schema,
    *,
    tasks: int | None = None,
    weight_key: str = "bytes",
) -> pa.Table:
    """Run `task` on every unit in Spark tasks; the rows they return, as one Arrow table.

    Each unit runs exactly once per successful task attempt; the result is collected, so a
    side-effecting task (an `--apply`) is never re-run to recompute a lazy DataFrame. A
    KafkaLogError in a task comes back as one MaintenanceError line naming the unit.
    """
    if not units:
        return schema.empty_table()

    # each task's units as JSON text, as a task has always seen them (lists, string keys)
    slots = tasks or max(1, default_parallelism(spark) * 2)
    groups = [json.dumps(g, sort_keys=True) for g in deal_units(units, slots, weight_key)]

    def run_group(i: int) -> Iterator[bytes]:
        tables = [schema.empty_table()]
        for unit in json.loads(groups[i]):
            try:
                tables.append(_as_table(task(unit), schema))
            except KafkaLogError as error:
                where = unit.get("dir") or unit.get("path") or unit
                raise MaintenanceError(f"{where}: {error}") from None
        yield ipc_bytes(pa.concat_tables(tables))

    try:
        with task_failure_log(spark):
            blobs = run_tasks(spark, len(groups), run_group)
        rows = pa.concat_tables([ipc_table(blob) for blob in blobs])
    except KafkaLogError:
        raise
    except Exception as error:  # a Spark failure: surface our own error line if any
        raise MaintenanceError(str(task_error(error))) from None
    return rows.cast(schema) if rows.num_rows else schema.empty_table()


# ---- segment sizes: the weights of the work units ------------------------------------------
DRIVER_LISTING_LIMIT = 256  # partition dirs the driver lists itself; more: a pass in the tasks
SIZE_SCHEMA = pa.schema([("dir", pa.string()), ("base_offset", pa.int64()), ("bytes", pa.int64())])


def segment_sizes(
    spark: SparkSession,
    root: Path,
    units: Sequence[Unit],
    *,
    tasks: int | None = None,
    driver_limit: int = DRIVER_LISTING_LIMIT,
) -> dict[str, list[tuple[int, int]]]:
    """(base offset, bytes) of every .log of each unit's partition dir, in offset order.

    A few hundred dirs are listed on the driver (a scandir each costs far less than the
    ~0.25 s a Spark job takes to start); a root of thousands goes through a pass in the tasks,
    so the driver never walks it serially.
    """
    if len(units) <= driver_limit:
        return {u["dir"]: _segment_sizes(root / u["dir"]) for u in units}

    def task(unit: Unit) -> list[dict[str, Any]]:
        return [
            {"dir": unit["dir"], "base_offset": base, "bytes": size}
            for base, size in _segment_sizes(root / unit["dir"])
        ]

    rows = run_units(spark, units, task, SIZE_SCHEMA, tasks=tasks)
    segments: dict[str, list[tuple[int, int]]] = {u["dir"]: [] for u in units}
    for row in rows.sort_by("base_offset").to_pylist():
        segments[row["dir"]].append((row["base_offset"], row["bytes"]))
    return segments


def _segment_sizes(partition_dir: Path) -> list[tuple[int, int]]:
    return [
        (offset_from_file_name(p.name), p.stat().st_size) for p in segment_log_files(partition_dir)
    ]


# ---- run ids, "now", the lock --------------------------------------------------------------
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}([T ][0-9:.]+)?(Z|[+-]\d{2}:?\d{2})?")


def parse_now(text: str | int | None) -> int:
    """`--now` as epoch milliseconds: an integer (ms) or an ISO date/time (naive = UTC)."""
    if text is None or text == "":
        return int(time.time() * 1000)
    if isinstance(text, int):
        return text
    value = str(text).strip()
    if value.lstrip("-").isdigit():
        return int(value)
    if not _ISO.fullmatch(value):
        raise MaintenanceError(
            f"--now {text!r}: expected epoch milliseconds or an ISO time like 2024-05-01T12:00:00Z"
        )
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as error:
        raise MaintenanceError(f"--now {text!r}: {error}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def new_run_id(job: str) -> str:
    """A sortable unique run id naming the job, e.g. `retention-20240501T120000-host-123`."""
    return f"{job}-{default_run_id()}"


@contextlib.contextmanager
def maintenance_lock(
    log_dir: str | os.PathLike[str],
    run_id: str,
    *,
    read_only: bool = False,
    out: Callable[[str], None] = print,
) -> Iterator[RunLock]:
    """The ingest job's run lock of `log_dir`, held for the block: a run that writes never
    overlaps another run; read-only runs (`read_only`) share it among themselves, and on a
    log dir whose meta area cannot be written they run unlocked with a warning."""
    lock = (ReadLock if read_only else RunLock)(Path(log_dir).absolute(), run_id)
    with lock:
        if isinstance(lock, ReadLock) and lock.unlocked_because:
            out(f"kafkalog: warning: running without the run lock: {lock.unlocked_because}")
        yield lock


@dataclass(frozen=True)
class RunSetup:
    """What every maintenance run starts from: the root, its run id, "now", the partitions
    to work on and their topic configs."""

    root: Path
    run_id: str
    now_ms: int
    refs: list[PartitionRef]
    configs: dict[str, Any]  # topic -> ResolvedTopicConfig


def prepare_run(
    job: str,
    log_dir: str | os.PathLike[str],
    *,
    run_id: str | None,
    now: str | int | None,
    topics: Sequence[str],
    topic_config: str | os.PathLike[str] | None,
) -> RunSetup:
    """List the partitions (one scandir) and resolve their topic configs (driver side)."""
    from jobs.maintenance.topic_configs import resolve_topic_configs

    root = Path(log_dir).absolute()
    refs = list_partitions(root, topics)
    configs = resolve_topic_configs(root, sorted({r.topic for r in refs}), topic_config)
    return RunSetup(root, run_id or new_run_id(job), parse_now(now), refs, configs)


# ---- results and the command line -------------------------------------------------------------
@dataclass
class MaintenanceResult:
    """What a maintenance run returns to a notebook: the report rows and the printed summary.

    `report` is the rows as a Spark DataFrame, made on first use (a command-line run that only
    prints its summary never pays for it).
    """

    job: str
    run_id: str
    rows: pa.Table
    summary: str
    problems: int = 0  # > 0 makes the command exit 1 (verify found damage, an apply failed)
    warnings: list[str] = field(default_factory=list)
    spark: SparkSession | None = field(default=None, repr=False)
    _report: DataFrame | None = field(default=None, init=False, repr=False)

    @property
    def report(self) -> DataFrame | None:
        if self._report is None and self.spark is not None:
            self._report = self.spark.createDataFrame(self.rows, schema=_spark_schema(self.rows))
        return self._report


def _spark_schema(rows: pa.Table):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(rows.schema)


def maintenance_arg_parser(job: str, description: str) -> argparse.ArgumentParser:
    """The arguments every maintenance job takes; each job adds its own."""
    parser = argparse.ArgumentParser(prog=f"spark-submit.sh {job}", description=description)
    parser.add_argument("--log-dir", required=True, help="the log dir root (topic-partition dirs)")
    parser.add_argument(
        "--topic-config",
        help="topic configs: a .properties or YAML file, or a dir of <topic>.properties "
        "(default: the ingest history's, else Kafka's defaults)",
    )
    parser.add_argument("--report", help="append the report to this Delta table")
    parser.add_argument("--run-id", help="this run's id (default: job name + time + host + pid)")
    parser.add_argument("--topics", help="comma-separated topics (default: all)")
    parser.add_argument(
        "--now", help="the time the rules are judged at: epoch ms or ISO time (default: now)"
    )
    parser.add_argument("--tasks", type=int, help="Spark tasks (default: 2 x default parallelism)")
    return parser


_CLEANER_SETTINGS = (
    ("--dedupe-buffer-size", "dedupe_buffer_size", "log.cleaner.dedupe.buffer.size"),
    ("--cleaner-threads", "threads", "log.cleaner.threads (divides the buffers)"),
    ("--io-buffer-size", "io_buffer_size", "log.cleaner.io.buffer.size"),
    ("--message-max-bytes", "max_io_buffer_size", "message.max.bytes"),
    ("--producer-id-expiration-ms", "producer_id_expiration_ms", "producer.id.expiration.ms"),
)


def add_cleaner_settings(parser: argparse.ArgumentParser) -> None:
    """The broker's cleaner settings, for compact and the audit alike (they run one round)."""
    defaults = CleanerSettings()
    broker = parser.add_argument_group("the broker's cleaner settings (Kafka's defaults)")
    for flag, name, help_text in _CLEANER_SETTINGS:
        default = getattr(defaults, name)
        broker.add_argument(
            flag, dest=name, type=int, default=default, help=f"{help_text} [{default}]"
        )


def cleaner_settings(args: argparse.Namespace) -> CleanerSettings:
    """The CleanerSettings the arguments of `add_cleaner_settings` name."""
    return CleanerSettings(
        **{name: getattr(args, name) for _flag, name, _help in _CLEANER_SETTINGS}
    )


def human_bytes(n: float) -> str:
    """A byte count a person reads: B, KiB, MiB or GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def topics_arg(text: str | None) -> tuple[str, ...]:
    return tuple(t.strip() for t in (text or "").split(",") if t.strip())


def run_cli(
    job: str,
    argv: Sequence[str] | None,
    parser: argparse.ArgumentParser,
    run: Callable[..., MaintenanceResult],
    job_kwargs: Callable[[argparse.Namespace], dict[str, Any]] = lambda _args: {},
) -> int:
    """Parse, start Spark, call `run(spark, log_dir, <common options>, **job_kwargs(args))`
    (which prints its summary); exit 0, or 1 when the run found problems, or 1 with one
    `kafkalog: error:` line when it could not run."""
    args = parser.parse_args(argv)
    try:
        from jobs.spark.session import get_or_create_session

        spark = get_or_create_session(f"kafkalog-{job}")
        result = run(
            spark,
            args.log_dir,
            topic_config=args.topic_config,
            report=args.report,
            run_id=args.run_id,
            topics=topics_arg(args.topics),
            now=args.now,
            tasks=args.tasks,
            **job_kwargs(args),
        )
    except KafkaLogError as error:
        print(f"kafkalog: error: {error}", file=sys.stderr)
        return 1
    return 1 if result.problems else 0
