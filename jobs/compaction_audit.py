"""Compaction audit: what Kafka's log cleaner would do with each compacted partition (§8).

    ./spark-submit.sh compaction-audit --log-dir /data/kafka-logs --html audit.html
    ./spark-submit.sh compaction-audit --log-dir DIR --all-topics --report /data/reports/audit

From a notebook: `jobs.compaction_audit.run(spark, "/data/kafka-logs")`.

Read-only. Per partition: records, distinct keys, records a later record with the same key
supersedes, tombstones (and how many are past delete.retention.ms), null keys, transaction
markers and aborted data, what a cleaning round would remove and free now, the dirty ratio from
`cleaner-offset-checkpoint` against min.cleanable.dirty.ratio, the oldest dirty record against
max.compaction.lag.ms, and a verdict in plain words.

How the work is spread: a header-only pass per partition gives the cleaning state (cheap);
tasks decode the records into per-record facts (a DataFrame, never collected); keys are
counted with a shuffle by (topic, partition, key), so no machine holds every key; a second
shuffle by batch scores what a round would keep, per batch, with the core's own rules.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.maintenance.common import (
    MaintenanceError,
    MaintenanceResult,
    PartitionRef,
    maintenance_arg_parser,
    maintenance_lock,
    plan_slices,
    prepare_run,
    run_cli,
    run_units,
    units_frame,
)
from jobs.maintenance.report import write_report
from jobs.spark.errors import task_error
from jobs.spark.task_log import task_failure_log
from kafkalog_core.config import LogConfig
from kafkalog_core.errors import KafkaLogError
from kafkalog_core.log.cleaner_audit import (
    bytes_freed,
    partition_cleaning_state,
    read_cleaner_checkpoint,
    read_high_watermarks,
    read_log_start_checkpoint,
    verdict,
)
from kafkalog_core.log.cleaner_facts import (
    FACTS_SCHEMA,
    RecordCounts,
    iter_record_facts,
    record_counts,
    retained_mask,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

JOB = "compaction-audit"
SETTINGS = (
    "cleanup.policy",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "delete.retention.ms",
)
# records per key, for the duplicate-key distribution: [lower, upper] bounds of each bucket
KEY_BUCKETS = ((1, 1), (2, 2), (3, 5), (6, 10), (11, 100), (101, 1 << 62))
# tombstone ages (ms): the upper edge of each bucket
AGE_EDGES = (3_600_000, 86_400_000, 7 * 86_400_000, 30 * 86_400_000, 365 * 86_400_000)
AGE_LABELS = ("< 1 h", "1 h - 1 d", "1 - 7 d", "7 - 30 d", "30 - 365 d", "> 1 y")

STATE_SCHEMA = pa.schema(
    [("topic", pa.string()), ("partition", pa.int32()), ("state", pa.binary())]
)
TP_FACTS_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), *FACTS_SCHEMA])
SCORE_SCHEMA = pa.schema(
    [("topic", pa.string()), ("partition", pa.int32()), ("partial", pa.string())]
)

REPORT_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("compacted", pa.bool_()),
        ("verdict", pa.string()),
        ("records", pa.int64()),
        ("record_bytes", pa.int64()),
        ("distinct_keys", pa.int64()),
        ("duplicated_keys", pa.int64()),
        ("superseded_records", pa.int64()),
        ("superseded_bytes", pa.int64()),
        ("max_records_per_key", pa.int64()),
        ("null_key_records", pa.int64()),
        ("tombstones", pa.int64()),
        ("tombstones_past_delete_retention", pa.int64()),
        ("tombstones_removable_now", pa.int64()),
        ("oldest_tombstone_timestamp", pa.int64()),
        ("transaction_markers", pa.int64()),
        ("aborted_records", pa.int64()),
        ("removable_records_now", pa.int64()),
        ("bytes_freed_now", pa.int64()),
        ("log_bytes", pa.int64()),
        ("segments", pa.int64()),
        ("log_start_offset", pa.int64()),
        ("log_end_offset", pa.int64()),
        ("cleaner_checkpoint", pa.int64()),
        ("first_dirty_offset", pa.int64()),
        ("first_uncleanable_offset", pa.int64()),
        ("uncleanable_bound", pa.string()),
        ("clean_bytes", pa.int64()),
        ("cleanable_bytes", pa.int64()),
        ("dirty_ratio", pa.float64()),
        ("min_cleanable_dirty_ratio", pa.float64()),
        ("oldest_dirty_timestamp", pa.int64()),
        ("oldest_dirty_age_ms", pa.int64()),
        ("max_compaction_lag_ms", pa.int64()),
        ("compaction_overdue_ms", pa.int64()),
        ("would_clean_now", pa.bool_()),
        ("key_distribution", pa.string()),  # JSON {bucket label: keys}
        ("tombstone_ages", pa.string()),  # JSON {bucket label: tombstones}
        ("settings", pa.string()),
    ]
)


@dataclass(frozen=True)
class AuditOptions:
    log_dir: str
    now_ms: int
    checkpoints: dict[str, Any]  # "topic partition" -> cleaner / log start / high watermark


def _state(options: AuditOptions, unit: dict[str, Any]):
    """The partition's CleaningState (one header walk), from the unit's settings."""
    marks = options.checkpoints.get(f"{unit['topic']} {unit['partition']}", {})
    return partition_cleaning_state(
        Path(options.log_dir) / unit["dir"],
        LogConfig.from_dict(unit["config"]),
        marks.get("cleaner"),
        options.now_ms,
        log_start_checkpoint=marks.get("log_start"),
        high_watermark=marks.get("high_watermark"),
    )


def state_task(options: AuditOptions) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    def task(unit: dict[str, Any]) -> list[dict[str, Any]]:
        state = _state(options, unit)
        return [
            {"topic": unit["topic"], "partition": unit["partition"], "state": pickle.dumps(state)}
        ]

    return task


def facts_batches(options: AuditOptions):
    """mapInArrow body: the record facts of every unit in the incoming rows, batch by batch."""

    def run_groups(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for text in batch.column(0).to_pylist():
                for unit in json.loads(text):
                    state = _state(options, unit)
                    pdir = Path(options.log_dir) / unit["dir"]
                    only = unit.get("only_segments")
                    for table in iter_record_facts(pdir, state, only_segments=only):
                        n = table.num_rows
                        topic = pa.array([unit["topic"]] * n, pa.string())
                        partition = pa.array(np.full(n, unit["partition"], np.int32))
                        full = pa.Table.from_arrays(
                            [topic, partition, *table.columns], schema=TP_FACTS_SCHEMA
                        )
                        yield from full.to_batches()

    return run_groups


def score_batches(configs: dict[str, dict[str, Any]], now_ms: int):
    """mapInArrow body after the shuffle by batch: additive per-partition partials, computed
    with the core's retained_mask / bytes_freed / record_counts (one implementation)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = pa.Table.from_batches(list(batches))
        if table.num_rows == 0:
            return
        pairs = table.group_by(["topic", "partition"]).aggregate([]).to_pylist()
        out = []
        for pair in pairs:
            topic, partition = pair["topic"], pair["partition"]
            sub = table.filter(
                pc.and_(
                    pc.equal(table.column("topic"), topic),
                    pc.equal(table.column("partition"), partition),
                )
            )
            config = LogConfig.from_dict(configs[topic])
            retained = retained_mask(sub, sub.column("latest_offset"))
            freed = bytes_freed(sub, retained)
            counts = record_counts(sub, config, now_ms)
            latest_all = pc.fill_null(sub.column("latest_all"), -1).to_numpy()
            superseded = sub.column("offset").to_numpy() < latest_all  # -1: no keyed record
            sizes = sub.column("record_size").to_numpy().astype(np.int64)
            tomb = sub.column("value_is_null").to_numpy() & ~sub.column("is_control").to_numpy()
            ages = now_ms - sub.column("timestamp").to_numpy()[tomb]
            age_hist = np.bincount(
                np.searchsorted(AGE_EDGES, ages, side="right"), minlength=len(AGE_LABELS)
            )
            tombs_removable = int((tomb & ~retained).sum())
            partial = {
                "counts": asdict(counts),
                "removable": int((~retained).sum()),
                "freed": freed.total,
                "superseded": int(superseded.sum()),
                "superseded_bytes": int(sizes[superseded].sum()),
                "tombstone_ages": age_hist.tolist(),
                "tombstones_removable": tombs_removable,
            }
            out.append(
                {"topic": topic, "partition": int(partition), "partial": json.dumps(partial)}
            )
        yield from pa.Table.from_pylist(out, schema=SCORE_SCHEMA).to_batches()

    return run


def _merge_partials(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        part = json.loads(row["partial"])
        tp = (row["topic"], row["partition"])
        have = merged.get(tp)
        if have is None:
            part["counts"] = RecordCounts(**part["counts"])
            merged[tp] = part
            continue
        have["counts"] = have["counts"] + RecordCounts(**part["counts"])
        for name in (
            "removable",
            "freed",
            "superseded",
            "superseded_bytes",
            "tombstones_removable",
        ):
            have[name] += part[name]
        have["tombstone_ages"] = [
            a + b for a, b in zip(have["tombstone_ages"], part["tombstone_ages"], strict=True)
        ]
    return merged


def _key_stats(spark: SparkSession, facts: DataFrame) -> tuple[DataFrame, dict, dict]:
    """Per key: records, latest offset overall and in the dirty range (a shuffle by key); per
    partition: distinct keys, duplicated keys and the records-per-key distribution."""
    from pyspark.sql import functions as F

    keyed = facts.where(~F.col("is_control") & F.col("key").isNotNull() & ~F.col("is_aborted"))
    per_key = keyed.groupBy("topic", "partition", "key").agg(
        F.count(F.lit(1)).alias("n"),
        F.max("offset").alias("latest_all"),
        F.max(F.when(F.col("in_dirty_range"), F.col("offset"))).alias("latest_offset"),
    )
    per_key = per_key.persist()
    bucket = F.lit(len(KEY_BUCKETS) - 1)
    for index, (_lo, hi) in reversed(list(enumerate(KEY_BUCKETS))):
        bucket = F.when(F.col("n") <= hi, F.lit(index)).otherwise(bucket)
    stats = {
        (r["topic"], r["partition"]): r.asDict()
        for r in per_key.groupBy("topic", "partition")
        .agg(
            F.count(F.lit(1)).alias("distinct_keys"),
            F.sum(F.when(F.col("n") > 1, 1).otherwise(0)).alias("duplicated_keys"),
            F.max("n").alias("max_records_per_key"),
        )
        .collect()
    }
    histogram: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0] * len(KEY_BUCKETS))
    for r in per_key.groupBy("topic", "partition", bucket.alias("bucket")).count().collect():
        histogram[(r["topic"], r["partition"])][r["bucket"]] = r["count"]
    return per_key, stats, dict(histogram)


def run(
    spark: SparkSession,
    log_dir: str,
    *,
    all_topics: bool = False,
    topic_config: str | None = None,
    report: str | None = None,
    html: str | None = None,
    run_id: str | None = None,
    topics: Sequence[str] = (),
    now: str | int | None = None,
    tasks: int | None = None,
    out: Callable[[str], None] = print,
) -> MaintenanceResult:
    """Audit every compacted partition (every partition with `all_topics`); read-only."""
    from pyspark.sql.pandas.types import from_arrow_schema

    setup = prepare_run(
        JOB, log_dir, run_id=run_id, now=now, topics=topics, topic_config=topic_config
    )
    root, run_id, now_ms, refs, configs = (
        setup.root,
        setup.run_id,
        setup.now_ms,
        setup.refs,
        setup.configs,
    )
    if not all_topics:
        refs = [r for r in refs if configs[r.topic].config.compact]
    with maintenance_lock(root, run_id):
        options = AuditOptions(str(root), now_ms, _checkpoints(root, refs))
        units = [_unit(r, configs[r.topic]) for r in refs]
        states = {
            (r["topic"], r["partition"]): pickle.loads(r["state"])
            for r in run_units(
                spark, units, state_task(options), STATE_SCHEMA, tasks=tasks
            ).to_pylist()
        }
        slots = tasks or max(1, spark.sparkContext.defaultParallelism * 2)
        units = plan_slices(
            units,
            lambda u: [
                (g.base_offset, g.size) for g in states[(u["topic"], u["partition"])].segments
            ],
            slots,
        )
        merged: dict[tuple[str, int], dict[str, Any]] = {}
        stats: dict = {}
        histogram: dict = {}
        if units:
            facts = units_frame(spark, units, tasks=tasks).mapInArrow(
                facts_batches(options), from_arrow_schema(TP_FACTS_SCHEMA)
            )
            facts = facts.persist()
            try:
                with task_failure_log(spark):
                    per_key, stats, histogram = _key_stats(spark, facts)
                    joined = facts.join(
                        per_key.select("topic", "partition", "key", "latest_all", "latest_offset"),
                        ["topic", "partition", "key"],
                        "left",
                    )
                    shuffle = max(1, spark.sparkContext.defaultParallelism)
                    score_schema = from_arrow_schema(SCORE_SCHEMA)
                    config_dicts = {
                        t: c.config.to_dict(non_default=True) for t, c in configs.items()
                    }
                    scored = joined.repartition(
                        shuffle, "topic", "partition", "batch_base_offset"
                    ).mapInArrow(score_batches(config_dicts, now_ms), score_schema)
                    merged = _merge_partials([r.asDict() for r in scored.collect()])
                    per_key.unpersist()
            except KafkaLogError:
                raise
            except Exception as error:  # a Spark failure: our own one-line error if any
                raise MaintenanceError(str(task_error(error))) from None
            finally:
                facts.unpersist()
    rows = [
        _report_row(
            ref, configs[ref.topic], states[(ref.topic, ref.partition)], merged, stats, histogram
        )
        for ref in refs
    ]
    table = pa.Table.from_pylist(rows, schema=REPORT_SCHEMA)
    if report:
        write_report(spark, table, report, run_id=run_id, job=JOB)
    summary = summarize(table, root, run_id)
    if html:
        from jobs.maintenance.audit_html import write_audit_html

        write_audit_html(table, html, title=f"Compaction audit of {root}", summary=summary)
        summary += f"\n  charts: {html}"
    out(summary)
    return MaintenanceResult(JOB, run_id, table, summary, 0, [], spark)


def _checkpoints(root: Path, refs: list[PartitionRef]) -> dict[str, Any]:
    cleaner = read_cleaner_checkpoint(root)
    starts = read_log_start_checkpoint(root)
    marks = read_high_watermarks(root)
    out = {}
    for r in refs:
        tp = (r.topic, r.partition)
        out[f"{r.topic} {r.partition}"] = {
            "cleaner": cleaner.get(tp),
            "log_start": starts.get(tp),
            "high_watermark": marks.get(tp),
        }
    return out


def _unit(ref: PartitionRef, resolved) -> dict[str, Any]:
    return ref.unit(
        config=resolved.config.to_dict(non_default=True),
        settings=resolved.describe(SETTINGS),
        bytes=0,
    )


def _report_row(ref, resolved, state, merged, stats, histogram) -> dict[str, Any]:
    tp = (ref.topic, ref.partition)
    part = merged.get(tp) or {
        "counts": RecordCounts(),
        "removable": 0,
        "freed": 0,
        "superseded": 0,
        "superseded_bytes": 0,
        "tombstone_ages": [0] * len(AGE_LABELS),
        "tombstones_removable": 0,
    }
    counts: RecordCounts = part["counts"]
    key_stats = stats.get(tp, {})
    keys = histogram.get(tp, [0] * len(KEY_BUCKETS))
    return {
        "topic": ref.topic,
        "partition": ref.partition,
        "compacted": state.compacted,
        "verdict": verdict(state, counts, resolved.config),
        "records": counts.records,
        "record_bytes": counts.record_bytes,
        "distinct_keys": key_stats.get("distinct_keys", 0),
        "duplicated_keys": key_stats.get("duplicated_keys", 0),
        "superseded_records": part["superseded"],
        "superseded_bytes": part["superseded_bytes"],
        "max_records_per_key": key_stats.get("max_records_per_key", 0),
        "null_key_records": counts.null_key_records,
        "tombstones": counts.tombstones,
        "tombstones_past_delete_retention": counts.tombstones_past_retention,
        "tombstones_removable_now": part["tombstones_removable"],
        "oldest_tombstone_timestamp": counts.oldest_tombstone_timestamp,
        "transaction_markers": counts.transaction_markers,
        "aborted_records": counts.aborted_records,
        "removable_records_now": part["removable"],
        "bytes_freed_now": part["freed"],
        "log_bytes": sum(s.size for s in state.segments),
        "segments": len(state.segments),
        "log_start_offset": state.log_start_offset,
        "log_end_offset": state.log_end_offset,
        "cleaner_checkpoint": state.cleaner_checkpoint,
        "first_dirty_offset": state.first_dirty_offset,
        "first_uncleanable_offset": state.first_uncleanable_offset,
        "uncleanable_bound": state.uncleanable_bound,
        "clean_bytes": state.clean_bytes,
        "cleanable_bytes": state.cleanable_bytes,
        "dirty_ratio": state.dirty_ratio,
        "min_cleanable_dirty_ratio": state.min_cleanable_dirty_ratio,
        "oldest_dirty_timestamp": state.oldest_dirty_timestamp,
        "oldest_dirty_age_ms": state.oldest_dirty_age_ms,
        "max_compaction_lag_ms": state.max_compaction_lag_ms,
        "compaction_overdue_ms": state.compaction_delay_ms,
        "would_clean_now": state.eligible,
        "key_distribution": json.dumps(dict(zip(_bucket_labels(), keys, strict=True))),
        "tombstone_ages": json.dumps(dict(zip(AGE_LABELS, part["tombstone_ages"], strict=True))),
        "settings": resolved.describe(SETTINGS),
    }


def _bucket_labels() -> list[str]:
    return [
        str(lo) if lo == hi else (f"{lo}-{hi}" if hi < 1 << 40 else f"> {lo - 1}")
        for lo, hi in KEY_BUCKETS
    ]


def summarize(table: pa.Table, root: Path, run_id: str) -> str:
    """A few lines: totals, then each partition the cleaner would act on or that has a problem."""
    rows = table.to_pylist()
    lines = [
        f"compaction audit {run_id} on {root}: {len(rows)} partitions, "
        f"{sum(r['records'] for r in rows)} records, {sum(r['distinct_keys'] for r in rows)} distinct keys, "
        f"{sum(r['superseded_records'] for r in rows)} superseded, {sum(r['tombstones'] for r in rows)} tombstones"
    ]
    by_verdict: dict[str, int] = defaultdict(int)
    for r in rows:
        by_verdict[r["verdict"].split(" (")[0].split(";")[0]] += 1
    for words, n in sorted(by_verdict.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {n} partitions: {words}")
    for r in rows:
        if r["would_clean_now"] or r["null_key_records"]:
            lines.append(f"  {r['topic']}-{r['partition']}: {r['verdict']}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = maintenance_arg_parser(JOB, "Report what Kafka's log cleaner would do (read-only).")
    parser.add_argument("--all-topics", action="store_true", help="also audit non-compacted topics")
    parser.add_argument("--html", help="write the charts as one offline HTML file here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`spark-submit` entry: exit 0 on success, 1 with one clear line on failure."""

    return run_cli(
        JOB, argv, _parser(), run, lambda args: {"all_topics": args.all_topics, "html": args.html}
    )


if __name__ == "__main__":
    sys.exit(main())
