"""Compaction audit: what Kafka's log cleaner would do with each compacted partition (§8).

    ./spark-submit.sh compaction-audit --log-dir /data/kafka-logs --html
    ./spark-submit.sh compaction-audit --log-dir DIR --all-topics --report /data/reports/audit

From a notebook: `jobs.compaction_audit.run(spark, "/data/kafka-logs")`.

Read-only. Per partition: records, distinct keys, records a later record with the same key
supersedes, tombstones (and how many are past delete.retention.ms), null keys, transaction
markers and aborted data, what a cleaning round would remove and free now, the dirty ratio from
`cleaner-offset-checkpoint` against min.cleanable.dirty.ratio, the oldest dirty record against
max.compaction.lag.ms, and a verdict in plain words.

How the work is spread: a header-only pass per partition gives the cleaning state (cheap);
then one Spark job (jobs/maintenance/audit_stages.py) decodes the records in the tasks that
read them, shuffles narrow keyed rows by (partition, key), so no machine holds every key, and
sums per batch what a round would remove, with the core's own rules.
"""

from __future__ import annotations

import argparse
import json
import pickle
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.ingestion.run.reach import require_shared_root
from jobs.maintenance.audit_stages import (
    AGE_LABELS,
    KEY_BUCKETS,
    decode_task,
    empty_partial,
    freed_task,
    key_task,
    merge_partials,
    pack_state,
)
from jobs.maintenance.common import (
    MaintenanceError,
    MaintenanceResult,
    PartitionRef,
    deal_units,
    maintenance_arg_parser,
    maintenance_lock,
    plan_slices,
    prepare_run,
    run_cli,
    run_units,
)
from jobs.maintenance.report import newest_run, write_report
from jobs.spark.errors import task_error
from jobs.spark.task_log import task_failure_log
from jobs.spark.tasks import PAIRS, default_parallelism, from_pairs, shuffled, to_pairs
from kafkalog_core.config import LogConfig
from kafkalog_core.errors import KafkaLogError
from kafkalog_core.log.checkpoints import (
    read_cleaner_checkpoint,
    read_high_watermarks,
    read_log_start_checkpoint,
)
from kafkalog_core.maintenance.cleaner_audit import partition_cleaning_state, verdict
from kafkalog_core.maintenance.cleaner_facts import RecordCounts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOB = "compaction-audit"
KEY_TASK_BYTES = 256 << 20  # log bytes per task of the key stage (it holds its rows at once)
SETTINGS = (
    "cleanup.policy",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "delete.retention.ms",
)
STATE_SCHEMA = pa.schema(
    [("topic", pa.string()), ("partition", pa.int32()), ("state", pa.binary())]
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
    compact_report: str | None = None,
) -> MaintenanceResult:
    """Audit every compacted partition (every partition with `all_topics`); read-only.
    `compact_report`: the compact job's report table; the HTML page then shows its newest
    run's before and after."""
    require_shared_root(spark, log_dir)  # a Connect client: the server's tasks see it too
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
    with maintenance_lock(root, run_id, read_only=True, out=out):
        options = AuditOptions(str(root), now_ms, _checkpoints(root, refs))
        units = [_unit(r, configs[r.topic]) for r in refs]
        states = {
            (r["topic"], r["partition"]): pickle.loads(r["state"])
            for r in run_units(
                spark, units, state_task(options), STATE_SCHEMA, tasks=tasks
            ).to_pylist()
        }
        slots = tasks or max(1, default_parallelism(spark) * 2)
        units = plan_slices(
            units,
            lambda u: [
                (g.base_offset, g.size) for g in states[(u["topic"], u["partition"])].segments
            ],
            slots,
        )
        merged = _audit_records(spark, root, refs, units, states, now_ms, tasks)
    rows = [
        _report_row(
            ref,
            configs[ref.topic],
            states[(ref.topic, ref.partition)],
            merged.get(i) or empty_partial(),
        )
        for i, ref in enumerate(refs)
    ]
    table = pa.Table.from_pylist(rows, schema=REPORT_SCHEMA)
    if report:
        write_report(spark, table, report, run_id=run_id, job=JOB)
    summary = summarize(table, root, run_id)
    if html is not None:
        from jobs.maintenance.audit_html import write_audit_html

        html = html or str(default_html_path(root))
        compacted = newest_run(compact_report) if compact_report else None
        write_audit_html(
            table, html, title=f"Compaction audit of {root}", summary=summary, compacted=compacted
        )
        summary += f"\n  charts: {html}"
    out(summary)
    return MaintenanceResult(JOB, run_id, table, summary, 0, [], spark)


def _audit_records(
    spark: SparkSession,
    root: Path,
    refs: list[PartitionRef],
    units: list[dict[str, Any]],
    states: dict[tuple[str, int], Any],
    now_ms: int,
    tasks: int | None,
) -> dict[int, dict[str, Any]]:
    """The one Spark job over the records (audit_stages); merged partials by partition index."""

    if not units:
        return {}
    index = {(r.topic, r.partition): i for i, r in enumerate(refs)}
    units = [
        {
            **u,
            "tp": index[(u["topic"], u["partition"])],
            "state": pack_state(states[(u["topic"], u["partition"])]),
        }
        for u in units
    ]
    total = sum(int(u.get("bytes") or 0) for u in units)
    cores = default_parallelism(spark)
    shuffle = max(cores, -(-total // KEY_TASK_BYTES))
    groups = [json.dumps(g) for g in deal_units(units, tasks or max(1, cores * 2))]
    decode = decode_task(str(root), now_ms, shuffle)

    def decode_stage(batches):
        for batch in batches:
            yield from to_pairs(decode(groups[i] for i in batch.column(0).to_pylist()))

    def key_stage(batches):
        yield from to_pairs(key_task(from_pairs(batches)))

    def freed_stage(batches):
        pairs = ((tp, ("", text.encode())) for tp, text in freed_task(from_pairs(batches)))
        yield from to_pairs(pairs)

    try:
        with task_failure_log(spark):
            keyed = spark.range(0, len(groups), 1, len(groups)).mapInArrow(decode_stage, PAIRS)
            sums = shuffled(keyed, shuffle).mapInArrow(key_stage, PAIRS)
            freed = shuffled(sums, shuffle).mapInArrow(freed_stage, PAIRS).toArrow()
        partials = list(
            zip(
                freed.column("key").to_pylist(),
                [p.decode() for p in freed.column("payload").to_pylist()],
                strict=True,
            )
        )
        return merge_partials(partials)
    except KafkaLogError:
        raise
    except Exception as error:  # a Spark failure: our own one-line error if any
        raise MaintenanceError(str(task_error(error))) from None


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


def _report_row(ref, resolved, state, part: dict[str, Any]) -> dict[str, Any]:
    counts: RecordCounts = part["counts"]
    freed = part["freed"]
    return {
        "topic": ref.topic,
        "partition": ref.partition,
        "compacted": state.compacted,
        "verdict": verdict(state, counts, resolved.config),
        "records": counts.records,
        "record_bytes": counts.record_bytes,
        "distinct_keys": part["distinct_keys"],
        "duplicated_keys": part["duplicated_keys"],
        "superseded_records": part["superseded"],
        "superseded_bytes": part["superseded_bytes"],
        "max_records_per_key": part["max_records_per_key"],
        "null_key_records": counts.null_key_records,
        "tombstones": counts.tombstones,
        "tombstones_past_delete_retention": counts.tombstones_past_retention,
        "tombstones_removable_now": part["tombstones_removable"],
        "oldest_tombstone_timestamp": counts.oldest_tombstone_timestamp,
        "transaction_markers": counts.transaction_markers,
        "aborted_records": counts.aborted_records,
        "removable_records_now": freed.removed_records,
        "bytes_freed_now": freed.total,
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
        "key_distribution": json.dumps(
            dict(zip(_bucket_labels(), part["key_histogram"], strict=True))
        ),
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


def default_html_path(root: Path) -> Path:
    """Where `--html` with no file writes: the output's meta area (beside the log dir, never
    inside it, and git-ignored as `.*.kafkalog/`), not the current directory."""
    from jobs.ingestion.run.meta import meta_root

    return meta_root(root) / "compaction-audit.html"


def _parser() -> argparse.ArgumentParser:
    parser = maintenance_arg_parser(JOB, "Report what Kafka's log cleaner would do (read-only).")
    parser.add_argument("--all-topics", action="store_true", help="also audit non-compacted topics")
    parser.add_argument(
        "--html",
        nargs="?",
        const="",
        metavar="FILE",
        help="write the report as one offline HTML file: FILE, or with no FILE "
        ".<log dir>.kafkalog/compaction-audit.html beside the log dir",
    )
    parser.add_argument(
        "--compact-report",
        help="the compact job's report table: the HTML shows its newest run's before and after",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`spark-submit` entry: exit 0 on success, 1 with one clear line on failure."""

    return run_cli(
        JOB,
        argv,
        _parser(),
        run,
        lambda args: {
            "all_topics": args.all_topics,
            "html": args.html,
            "compact_report": args.compact_report,
        },
    )


if __name__ == "__main__":
    from jobs.spark.session import exit_driver

    exit_driver(main())
