"""The ingest job: a table in, Kafka partition directories out.

    ./spark-submit.sh ingest --config conf/ingest-changelog.yaml [--run-id ID] [--output DIR]

From a notebook or an Airflow PythonOperator: `jobs.ingest.run(spark, config)`.

How a run goes (every step before "publish" touches only the run's staging area):
1. Take the output root's run lock; finish or roll back a publish a crash interrupted; drop
   stale staging. A run id (or a Delta source version) already committed is a no-op. A change
   data feed (`source.changes: cdf`) is read after the last version ingested
   (`change_feed_start`; delta-rs stages it in the run's staging, `CHANGE_FEED_DIR`).
2. Read the source, map columns to records (`jobs.ingestion.mapping.spark_mapping`), validated per row (the
   direct mode without a reject path: stage 1 in Spark, partitioning and checks in the write
   tasks, `arrow_mapping.checked_records`).
3. Pick the write mode (`write_mode_choice`; the summary says which and why). `range`:
   range-partition the records by (topic, partition, ordering) and sort within tasks, so every
   Kafka partition is a run of consecutive tasks and a hot partition is split over several.
   `direct` (source order only): no shuffle; every input split writes its own share of each
   partition, in the order it read them.
4. One write pass, no counting pass (`OnePassPlan`, `mapInArrow` -> `write_task` /
   `write_task_direct`): each task drives the core's PartitionLog in its attempt's own staging
   dir and returns manifests. A share that surely starts its partition is written in place from
   the log end offset (continuing the published last segment); a share that may continue an
   earlier task's is staged as its rows (`record_share`), not encoded. range: a task's first
   partition may continue earlier tasks' ranges; direct: every partition of a task after the
   first may. With the arrow task reader (`jobs.ingestion.source.arrow_reader`: Parquet paths and
   tables, delta-rs files, local or on a store pyarrow opens, plain-column mappings) the tasks
   read the files themselves with pyarrow, as Spark's own splits (`arrow_splits`), or, on a
   session of few task slots, a task per group of partitions reading every split and writing its
   partitions whole, so nothing is staged as rows (`direct_tasks_choice`); in the range
   mode with a plain-column ordering they sort runs into the run's staging instead of Spark's
   shuffle and the write tasks read their ranges from them (`arrow_range`).
5. The driver gives the staged shares their offsets in task order (`commit.place_ranges`).
   A partition staged in several shares (splits, tasks) is encoded as one writer encodes it
   (`jobs.ingestion.relayout.shares`: the first share's last batch is cut and its rows, then every
   record share's, go through the single writer's encoder; at most one Spark task per core), so
   its batches, bytes and segment count do not depend on the split or task count.
6. The driver checks the ranges chain and publishes atomically (`jobs.ingestion.commit`);
   checkpoints and the ingest history record come last.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.ingestion.commit.plan import RunInfo, plan_publish
from jobs.ingestion.commit.publish import PublishResult, default_run_id, publish
from jobs.ingestion.commit.run import open_run, place_staged, segments_to_continue
from jobs.ingestion.commit.state import scan_existing_state
from jobs.ingestion.commit.topic_ids import check_topic_ids, resolve_topic_ids
from jobs.ingestion.config.ingest_config import IngestConfig, build_arg_parser, config_from_args
from jobs.ingestion.mapping.arrow_mapping import checked_records
from jobs.ingestion.mapping.rules import (
    ORDER_COLUMN,
    PARTITION_IN_COLUMN,
    RECORD_COLUMNS,
    MappingRules,
    mapping_rules,
)
from jobs.ingestion.mapping.spark_mapping import (
    invalid_record_error,
    map_records,
    map_records_with_rejects,
    prepare_records,
)
from jobs.ingestion.mapping.structured import structured_values
from jobs.ingestion.ranges.bounds import task_routing
from jobs.ingestion.relayout.shares import relayout, spark_runner
from jobs.ingestion.run.history import IngestHistory, format_summary
from jobs.ingestion.run.reach import require_shared_root
from jobs.ingestion.source.arrow_reader import ArrowReadPlan, plan_arrow_read
from jobs.ingestion.source.splits import split_settings
from jobs.ingestion.source.table_files import source_files
from jobs.ingestion.staging.task_staging import TaskManifest, run_start_ms, staging_root
from jobs.ingestion.tasks.arrow_range import (
    ArrowRangePlan,
    plan_arrow_range,
    write_range_with_arrow,
)
from jobs.ingestion.tasks.arrow_tasks import write_with_arrow
from jobs.ingestion.tasks.planner import OnePassPlan, TopicPartition, partition_owners
from jobs.ingestion.tasks.writer import (
    DEFAULT_BATCH_BYTES,
    PerTopic,
    WriterSettings,
    write_task,
    write_task_direct,
)
from jobs.maintenance.common import parse_now
from jobs.schemas.resolve import (
    forget_resolved_encodings,
    record_writer_schemas,
    resolved_encodings,
)
from jobs.schemas.store import WriterSchemaStore
from jobs.spark.errors import task_error
from jobs.spark.sources import SourceRead, SourceSpec, read_source
from jobs.spark.task_log import task_failure_log
from jobs.spark.tasks import default_parallelism, input_splits
from kafkalog_core.errors import ConfigError, KafkaLogError
from kafkalog_core.log.partition.append import batch_options_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LEADER_EPOCH = 0  # what a fresh topic's first leader stamps on every batch
CHANGE_FEED_DIR = "change-feed"  # in the run's staging: a change data feed read by delta-rs

_MANIFEST_SCHEMA = "manifest string"

# write_mode auto picks `direct` only up to this many partitions: a direct task keeps one open
# log per partition. (No split count limit: the relayout lays a partition's shares out as one
# writer, so its segment count follows its bytes, not the splits; see jobs.ingestion.relayout.shares.)
DIRECT_MAX_PARTITIONS = 256

# direct_tasks auto takes `partitions` on at most this many task slots. Each partition-owning
# task reads the whole source, so its time holds one whole read: with C slots it pays (C - 1)
# reads more than the splits' layout, which pays the staged rows' write and read instead; that
# wins here at C = 2 (docs/benchmarks.md) and loses as C grows.
PARTITION_TASKS_MAX_SLOTS = 2


@dataclass
class IngestResult:
    """What a run did; `summary` is the short text the job prints."""

    run_id: str
    status: str  # committed | no-op
    records: int = 0
    partitions: dict[str, list[int]] = field(default_factory=dict)
    rejected: int = 0
    source: str = ""
    source_version: int | None = None
    timings_ms: dict[str, int] = field(default_factory=dict)
    summary: str = ""
    brief: str = ""  # the summary's first part: records, partitions and offsets, no internals
    write_mode: str = ""  # range | direct (see choose_write_mode); "" for a no-op
    direct_tasks: str = ""  # splits | partitions: the arrow reader's direct layout, else ""
    task_reader: str = ""  # spark | arrow (see _arrow_read_plan); "" for a no-op


def _config_hash(config: IngestConfig) -> str:
    text = json.dumps(repr(config), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _range_sorted(
    mapped: DataFrame, tasks: int, source: DataFrame, config: IngestConfig
) -> tuple[DataFrame, frozenset[int]]:
    """(`mapped` in `tasks` contiguous runs of its sorted (topic, partition, order) keys, sorted
    within each task; the tasks that start every partition they hold): routed by bounds from a
    sample of `source` (`range_bounds`: no sampling job over the mapping), or by Spark's range
    partitioner for ordering types it cannot bound."""
    keys = ["topic", "partition", ORDER_COLUMN]
    try:
        routing = task_routing(source, config, tasks, mapped.schema)
    except KafkaLogError:
        raise
    except Exception as error:  # the bounds job is a Spark job: its failure reads as a run's
        raise _spark_error(error) from None
    if routing is None:
        return mapped.repartitionByRange(tasks, *keys).sortWithinPartitions(*keys), frozenset()
    # A given partition count: adaptive execution never coalesces these partitions, so a
    # write task's partition id is its task (`routing.partition_starts` name tasks).
    ranged = mapped.repartitionById(tasks, routing.task).sortWithinPartitions(*keys)
    return ranged, routing.partition_starts


def choose_write_mode(config: IngestConfig, tasks: int | None, splits: int | None) -> str:
    """`range` or `direct` for this run (see `write_mode_choice`)."""
    return write_mode_choice(config, tasks, splits)[0]


def write_mode_choice(
    config: IngestConfig, tasks: int | None, splits: int | None
) -> tuple[str, str]:
    """(`range` or `direct`, why) for this run (see `IngestConfig.write_mode`); the summary
    prints the why, so no fall-back is silent.

    auto takes `direct` (no shuffle: about two thirds of the time of `range` with Spark's
    reader) when the records keep the source order, no task count was asked for and the topics
    have at most `DIRECT_MAX_PARTITIONS` partitions; otherwise `range`. Any number of input
    splits: each writes a share of every partition it holds, and the relayout lays those out as
    one writer would, so the segment count does not grow with the splits (which was this
    choice's reason to fall back to `range` above 16 splits before the relayout).
    """
    if config.write_mode == "range":
        return "range", "output.write_mode is range"
    if config.write_mode == "direct":
        if tasks is not None:
            raise ConfigError(
                f"--tasks {tasks} applies to output.write_mode=range; the direct mode writes "
                "with one task per input split"
            )
        return "direct", "output.write_mode is direct"
    if config.ordering:
        return "range", "auto: the ordering needs the range mode's sort"
    if tasks is not None:
        return "range", f"auto: --tasks {tasks} asks for the range mode"
    partitions = _reachable_partitions(config)
    if partitions is None:
        return "range", "auto: topic_defaults reaches any number of partitions"
    if partitions > DIRECT_MAX_PARTITIONS:
        return "range", (
            f"auto: {partitions} partitions, more than the direct mode's {DIRECT_MAX_PARTITIONS} "
            "(a direct task keeps a log open per partition)"
        )
    counted = "" if splits is None else f"{splits} input splits and "
    return "direct", (
        f"auto: source order, {counted}{partitions} partitions (no shuffle; "
        "the splits' shares laid out as one writer afterwards, so any split count)"
    )


def direct_tasks_choice(
    config: IngestConfig, slots: int, splits: int, encoded: bool
) -> tuple[tuple[frozenset[TopicPartition], ...] | None, str]:
    """(The partition-owning tasks' partitions, or None for a task per split; why) for the
    arrow reader's direct mode (see `IngestConfig.direct_tasks`); the summary prints the why.

    auto takes partition-owning tasks (each byte written once, no relayout) when the session
    has at most `PARTITION_TASKS_MAX_SLOTS` task slots, there are several splits, the key and
    value are plain columns (every owner task maps every row: a structured encoding would run
    once per task) and the topics' partitions are known.
    """
    wanted = config.direct_tasks
    if wanted == "splits":
        return None, "output.direct_tasks is splits"
    pairs = _reachable_pairs(config)
    if pairs is None:
        why = "topic_defaults reaches any number of partitions"
        if wanted == "partitions":
            raise ConfigError(f"output.direct_tasks=partitions needs known partitions: {why}")
        return None, f"auto: splits, as {why}"
    if wanted == "auto":
        if slots > PARTITION_TASKS_MAX_SLOTS:
            return None, (
                f"auto: splits, as the session has {slots} task slots, more than "
                f"{PARTITION_TASKS_MAX_SLOTS} (a partition-owning task reads the whole source)"
            )
        if splits <= 1:
            return None, "auto: splits, as there is one input split (nothing to lay out)"
        if encoded:
            return None, (
                "auto: splits, as the key or value is encoded from columns (each "
                "partition-owning task would encode every row)"
            )
    owners = partition_owners(pairs, slots)
    most = max(len(o) for o in owners)
    return owners, (
        f"{'auto' if wanted == 'auto' else 'output.direct_tasks is'}: partitions, "
        f"{len(owners)} tasks each read the {splits} input splits and write up to {most} of the "
        f"{len(pairs)} partitions whole (each byte written once, no relayout)"
    )


def _reachable_pairs(config: IngestConfig) -> list[TopicPartition] | None:
    """Every (topic, partition) the mapping can write to (None: unbounded, via topic_defaults)."""
    topic = config.mapping.topic
    if topic.is_constant:
        spec = config.topic(str(topic.name))
        if spec is None:
            return None
        specs = [spec]
    elif config.topic_defaults is not None:
        return None
    else:
        specs = list(config.topics.values())
    return [(s.name, p) for s in specs for p in range(s.partitions)]


def _arrow_read_plan(
    spark: SparkSession, config: IngestConfig, source: SourceRead, tasks: int | None
) -> tuple[ArrowReadPlan | ArrowRangePlan | None, str]:
    """(The arrow reader's plan when the run can use it (`source.task_reader`), else None; why).

    In the direct mode it needs what that mode needs (source order, no task count; with
    write_mode auto also few enough partitions): an `ArrowReadPlan`. In the range
    mode it also needs every ordering entry to be a plain column pyarrow sorts as Spark does:
    an `ArrowRangePlan` (`arrow_range`: sorted runs exchanged through the run's staging
    instead of Spark's shuffle). auto uses it whenever it qualifies; `arrow` insists and says
    why it cannot.
    """
    wanted = config.source.task_reader
    if wanted == "spark":
        return None, "source.task_reader is spark"
    plan: ArrowReadPlan | ArrowRangePlan | None = None
    found = source_files(spark, config, source)
    why = found.why
    if found.files is not None:  # the ordering is the range plan's to check
        files = found.files
        plan, why = plan_arrow_read(
            replace(config, ordering=()),
            files,
            partition_columns=found.partition_columns,
            partitions=found.partitions,
            partitions_why=found.partitions_why,
            splits=lambda: split_settings(spark),
            buckets=found.buckets,
            encodings=structured_values(source.df, config) if source is not None else None,
        )
    if plan is not None and choose_write_mode(config, tasks, len(plan.tasks)) == "range":
        assert found.files is not None and isinstance(plan, ArrowReadPlan)
        plan, why = plan_arrow_range(plan, config, found.files, found.partition_columns)
    if plan is None and wanted == "arrow":
        raise ConfigError(f"source.task_reader=arrow cannot read this run: {why}")
    if isinstance(plan, ArrowRangePlan):
        return plan, (
            f"{wanted}: {plan.read.where}, plain-column mappings and ordering, range mode: "
            f"sorted runs exchanged through the run's staging (no Spark shuffle)"
        )
    if plan is not None:
        return plan, f"{wanted}: {plan.where}, plain-column mappings, direct mode"
    return None, f"{wanted}: not the arrow reader, as {why}"


def _reachable_partitions(config: IngestConfig) -> int | None:
    """How many partitions the mapping can write to (None: unbounded, via topic_defaults)."""
    pairs = _reachable_pairs(config)
    return None if pairs is None else len(pairs)


def _spark_rows(
    spark: SparkSession, config: IngestConfig, source: SourceRead, tasks: int | None
) -> tuple[DataFrame, DataFrame | None, tuple[str, str], frozenset[int]]:
    """(the rows the write tasks get, the rejected rows or None, (the write mode, why), the range
    mode's tasks that start every partition they hold (`OnePassPlan.partition_starts`)), read by
    Spark.

    Only the columns the writer reads travel on (no empty headers arrays when none are mapped).
    Nothing is cached: the range mode maps only a sample for its bounds (`range_bounds`), then
    every row once before the shuffle, and reads its sorted rows once. The direct mode without
    rejects gets stage 1 of the mapping only (`prepare_records`): its write
    tasks partition and check the rows they receive (`checked_records`), so Python sees each
    row once instead of twice (the murmur2 UDF, then the write).
    """
    splits = input_splits(source.df)
    choice = mode, _ = write_mode_choice(config, tasks, splits)
    if mode == "direct" and config.reject_path is None:
        return prepare_records(source.df, config), None, choice, frozenset()
    if config.reject_path is not None:
        mapped = map_records_with_rejects(source.df, config)
        records, rejects = mapped.records, mapped.rejects
    else:
        records, rejects = map_records(source.df, config), None
    columns = [c for c in RECORD_COLUMNS if c != "headers" or config.mapping.headers]
    if mode == "direct":
        # No shuffle: the one write pass runs over the input splits in source order.
        return records.select(*columns), rejects, choice, frozenset()
    tasks = tasks or max(default_parallelism(spark), splits or 0)
    ordered = records.select(*columns, ORDER_COLUMN)
    ranged, starts = _range_sorted(ordered, tasks, source.df, config)
    return ranged, rejects, choice, starts


def _write(
    records: DataFrame, plan: OnePassPlan, settings: WriterSettings, mode: str, config: IngestConfig
) -> list[TaskManifest]:
    """The write pass over Spark's rows; rows of stage 1 alone (`prepare_records`) are
    partitioned and checked in the task first."""
    task_fn = write_task_direct if mode == "direct" else write_task
    prepared = PARTITION_IN_COLUMN in records.columns
    rules: MappingRules | None = mapping_rules(config) if prepared else None
    headers = "headers" in records.columns

    def write_fn(batches):
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if rules is not None:
            batches = checked_records(batches, rules, headers=headers)
        for manifest in task_fn(
            batches, ctx.partitionId(), str(ctx.taskAttemptId()), plan, settings
        ):
            yield pa.RecordBatch.from_pylist([{"manifest": manifest.to_json()}])

    columns = records.columns if prepared else [c for c in RECORD_COLUMNS if c in records.columns]
    rows = records.select(*columns).mapInArrow(write_fn, _MANIFEST_SCHEMA).collect()
    return [TaskManifest.from_json(r["manifest"]) for r in rows]


def _topic_settings(config: IngestConfig, topics: set[str], now_ms: int, batch_bytes: int):
    """(LogConfig, BatchOptions) per topic: `topics` now, any other when a task meets it (the
    range mode learns its topics only from the rows)."""

    def log_config(topic: str):
        spec = config.topic(topic)
        if spec is None:  # mapping validated topics per row; this is a defensive double check
            raise ConfigError(f"topic {topic!r} is not configured (topics / topic_defaults)")
        return spec.log_config

    configs = PerTopic(log_config)
    options = PerTopic(
        lambda topic: batch_options_for(
            configs[topic], leader_epoch=LEADER_EPOCH, now_ms=now_ms, max_batch_bytes=batch_bytes
        )
    )
    for topic in sorted(topics):
        options[topic]  # resolved on the driver: a bad setting fails before any task runs
    return configs, options


def run(
    spark: SparkSession,
    config: IngestConfig,
    *,
    run_id: str | None = None,
    tasks: int | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    fail_after_batches: int | None = None,
    now_ms: int | None = None,
    out=print,
    details: bool = True,
) -> IngestResult:
    """Run one ingest: idempotent per run id and per Delta source version, safe to kill.

    `details=False` prints only what the run wrote (records, partitions, offsets), not how
    (write mode, task reader, relayout); the result's `summary` has both.

    `now_ms` fixes the run's start time (what `timestamp: now` and LogAppendTime topics stamp);
    by default it is the first attempt's clock, recorded so a rerun of the run id reuses it.
    """
    run_id = run_id or config.run_id or default_run_id()
    forget_resolved_encodings()  # the registry is asked afresh by each run, once
    root = Path(config.output_root).absolute()
    timings: dict[str, int] = {}
    clock = time.monotonic()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        timings[name] = int((now - clock) * 1000)
        clock = now

    require_shared_root(spark, root)  # a Connect client: the server's tasks see it too
    with open_run(root, run_id) as opened:
        if opened.recovered:
            out(f"kafkalog: an interrupted publish was {opened.recovered}")
        history = opened.history
        if opened.committed:
            return _no_op(run_id, f"run {run_id} is already committed", history, out)

        identity = source_identity(config.source)
        spec = change_feed_start(config.source, identity, history)
        scratch = staging_root(root, run_id) / CHANGE_FEED_DIR
        source = read_source(spark, spec, scratch=scratch)
        if source.version is not None and history.find_source_version(
            identity, str(source.version)
        ):
            return _no_op(run_id, f"{source.description} is already ingested", history, out, source)
        started = run_start_ms(root, run_id, now_ms)
        config_hash = _config_hash(config)
        config = config.at_run_start(started)
        lap("read")

        rejected = 0
        rejects = rows = None
        starts: frozenset[int] = frozenset()  # OnePassPlan.partition_starts (Spark's range mode)
        # The arrow task reader, when it qualifies, needs no Spark plan of the rows at all.
        arrow, reader_why = _arrow_read_plan(spark, config, source, tasks)
        owners: tuple[frozenset[TopicPartition], ...] | None = None
        layout_why = ""  # the arrow reader's direct layout (direct_tasks_choice)
        if config.direct_tasks == "partitions" and not isinstance(arrow, ArrowReadPlan):
            raise ConfigError(
                "output.direct_tasks=partitions needs the arrow task reader's direct mode; "
                f"task reader: {reader_why}"
            )
        if isinstance(arrow, ArrowRangePlan):
            reader = "arrow"
            mode, mode_why = write_mode_choice(config, tasks, len(arrow.read.tasks))
        elif arrow is not None:
            mode, reader = "direct", "arrow"
            mode_why = "the arrow task reader writes in the direct mode"
            owners, layout_why = direct_tasks_choice(
                config,
                default_parallelism(spark),
                len(arrow.tasks),
                encoded=arrow.columns.key_encoding is not None
                or arrow.columns.value_encoding is not None,
            )
        else:
            reader = "spark"
            rows, rejects, (mode, mode_why), starts = _spark_rows(spark, config, source, tasks)
        try:
            with task_failure_log(spark):
                state = scan_existing_state(root)
                check_topic_ids(config, state)
                leo = {tp: s.log_end_offset for tp, s in state.items()}
                # One pass, no counts: tasks stage what they cannot place (OnePassPlan).
                plan = OnePassPlan(leo, starts if mode == "range" else frozenset())
                configs, options = _topic_settings(config, set(config.topics), started, batch_bytes)
                settings = WriterSettings(
                    output_root=str(root),
                    run_id=run_id,
                    configs=configs,
                    batch_options=options,
                    continue_segments=_continue_segments(config, state),
                    leader_epoch=LEADER_EPOCH,
                    fail_after_batches=fail_after_batches,
                )
                if isinstance(arrow, ArrowRangePlan):
                    manifests = write_range_with_arrow(spark, arrow, tasks, plan, settings)
                elif arrow is not None:
                    manifests = write_with_arrow(spark, arrow, plan, settings, owners)
                else:
                    assert rows is not None
                    manifests = _write(rows, plan, settings, mode, config)
                lap("write")
                manifests = place_staged(manifests, leo, settings)
                topics = {m.topic for m in manifests}
                lap("place")
                manifests, relaid = relayout(manifests, settings, spark_runner(spark, settings))
                lap("relayout")
                if rejects is not None:
                    rejected = _write_rejects(rejects, config.reject_path, run_id)
        except KafkaLogError:
            raise
        except Exception as error:  # a Spark failure: surface our own error line if any
            raise _spark_error(error) from None

        info = RunInfo(
            source=identity,
            source_version="" if source.version is None else str(source.version),
            started_at_ms=started,
            config_hash=config_hash,
            description=source.description,
            timings_ms=dict(timings),
            topic_configs={t: configs[t].to_dict(non_default=True) for t in sorted(topics)},
        )
        publish_plan = plan_publish(
            manifests,
            state,
            output_root=root,
            run_id=run_id,
            run_info=info,
            topic_ids=resolve_topic_ids(config, topics, state),
            partition_counts={t: s.partitions for t in topics if (s := config.topic(t))},
        )
        record_writer_schemas(WriterSchemaStore.of_output(root), resolved_encodings())
        result: PublishResult = publish(publish_plan)
        lap("publish")

    record = history.find_run(run_id)
    brief = format_summary(record) if record else f"run {run_id}: committed"
    summary = (
        brief + f"\n  written in the {mode} write mode, rows read by {reader}{_c_loops(manifests)}"
    )
    summary += f"\n  {relaid.describe()}"
    summary += f"\n  write mode: {mode_why}\n  task reader: {reader_why}"
    if layout_why:
        summary += f"\n  direct tasks: {layout_why}"
    out(summary if details else brief)
    if rejected:
        out(f"kafkalog: {rejected} invalid rows written to {config.reject_path}")
    return IngestResult(
        run_id=run_id,
        status="committed",
        records=result.record_count,
        partitions=result.partitions,
        rejected=rejected,
        source=source.description,
        source_version=source.version,
        timings_ms=timings,
        summary=summary,
        brief=brief,
        write_mode=mode,
        direct_tasks="" if not layout_why else "splits" if owners is None else "partitions",
        task_reader=reader,
    )


def _c_loops(manifests: Sequence[TaskManifest]) -> str:
    """Whether the write tasks encoded with the C loops: executors on a cluster may lack the
    driver's build (shipped with --py-files only), and then run the slower numpy path."""
    tasks = {(m.task_key, m.attempt_id): m.native for m in manifests}
    used = sum(tasks.values())
    if not tasks:
        return ""
    if used == len(tasks):
        return ", C loops in every write task"
    if not used:
        return ", no C loops in the write tasks (numpy path)"
    return f", C loops in {used} of {len(tasks)} write tasks"


def source_identity(spec: SourceSpec) -> str:
    """What "the same source" means for the already-ingested check.

    The format, the normalized location (absolute path, or the table name) and everything that
    selects rows (since-version, filter, data interval) — but not how it was read (Spark's Delta
    source or delta-rs) nor how the path was spelled, so neither can sneak in a duplicate. A
    change data feed is one source whatever its start (`change_feed_start`): its runs continue
    one another.
    """
    if spec.path is not None:
        location = str(spec.path)
        if location.startswith("file:"):
            location = location[len("file:") :].lstrip("/")
            location = "/" + location
        if "://" not in location:
            location = str(Path(location).resolve())
    else:
        location = str(spec.table).lower()
    parts = [spec.format, location]
    if spec.changes is not None:
        parts.append(f"changes {spec.changes}")
    elif spec.since_version is not None:
        parts.append(f"since {spec.since_version}")
    if spec.filter:
        parts.append(f"where {spec.filter}")
    if spec.interval is not None:
        iv = spec.interval
        parts.append(f"{iv.column} in [{iv.start}, {iv.end})")
    return " ".join(parts)


def change_feed_start(spec: SourceSpec, identity: str, history: IngestHistory) -> SourceSpec:
    """A change data feed's run starts after the last version ingested (`since_version`).

    An explicit since_version may start later (the versions up to it loaded otherwise), never
    earlier: those changes are in the topics already, and exactly once means once.
    """
    if spec.changes is None:
        return spec
    last = history.last_source_version(identity)
    if last is None:
        return spec
    done = int(last["source_version"])
    if spec.since_version is None:
        return replace(spec, since_version=done)
    if spec.since_version < done:
        raise ConfigError(
            f"source.since_version={spec.since_version}: the changes up to version {done} of "
            f"{spec.location!r} are ingested already (run {last['run_id']}); leave "
            f"--since-version out to continue after version {done}"
        )
    return spec


def _no_op(run_id: str, why: str, history: IngestHistory, out, source=None) -> IngestResult:
    out(f"kafkalog: nothing to do: {why}")
    return IngestResult(
        run_id=run_id,
        status="no-op",
        source=getattr(source, "description", ""),
        source_version=getattr(source, "version", None),
        summary=why,
    )


def _write_rejects(rejects: DataFrame, path: str, run_id: str) -> int:
    """Invalid rows go to `<reject_path>/run_id=<id>/` as Parquet, with the reason per row."""
    target = f"{path.rstrip('/')}/run_id={run_id}"
    rejects.write.mode("overwrite").parquet(target)
    return rejects.sparkSession.read.parquet(target).count()


def _continue_segments(config: IngestConfig, state) -> dict[tuple[str, int], int]:
    """The published last segment each existing partition of a configured topic continues."""

    def segment_bytes(topic: str) -> int | None:
        spec = config.topic(topic)
        return None if spec is None else int(spec.log_config.segment_bytes)

    return segments_to_continue(state, segment_bytes)


def _spark_error(error: Exception) -> KafkaLogError:
    """The one-line KafkaLogError inside a Spark task failure (or a generic one)."""
    return invalid_record_error(error) or task_error(error)


def main(argv: Sequence[str] | None = None) -> int:
    """`spark-submit` entry: exit 0 on success, 1 with one clear line on failure."""
    parser = build_arg_parser("ingest")
    parser.add_argument("--tasks", type=int, help="Spark tasks for the write (default: auto)")
    parser.add_argument(
        "--batch-bytes",
        type=int,
        default=DEFAULT_BATCH_BYTES,
        help="target record batch size (capped by max.message.bytes)",
    )
    parser.add_argument(
        "--now",
        help="the run's start time (epoch ms or ISO): what `timestamp: now` and LogAppendTime "
        "stamp (default: the first attempt's clock, recorded per run id)",
    )
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
        now_ms = None if args.now is None else parse_now(args.now)
        from jobs.spark.session import get_or_create_session

        spark = get_or_create_session("kafkalog-ingest")
        run(spark, config, tasks=args.tasks, batch_bytes=args.batch_bytes, now_ms=now_ms)
    except KafkaLogError as error:
        print(f"kafkalog: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from jobs.spark.session import exit_driver

    exit_driver(main())
