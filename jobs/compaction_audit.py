"""Compaction audit: what Kafka's log cleaner would do with each compacted partition (§8).

    ./spark-submit.sh compaction-audit --log-dir /data/kafka-logs --html
    ./spark-submit.sh compaction-audit --log-dir DIR --all-topics --report /data/reports/audit

From a notebook: `jobs.compaction_audit.run(spark, "/data/kafka-logs")`.

Read-only. Per partition: records, distinct keys, records a later record with the same key
supersedes, tombstones (and how many are past delete.retention.ms), null keys, transaction
markers and aborted data, the dirty ratio from `cleaner-offset-checkpoint` against
min.cleanable.dirty.ratio, the oldest dirty record against max.compaction.lag.ms, and a verdict
in plain words.

"Now" is the cleaning round the cleaner would run now, and nothing else: its end, the records
it removes and the bytes it frees are compact's dry run of the same log with the same broker
settings (`--dedupe-buffer-size` ..., as compact takes them), to the byte. A round ends where
the offset map fills; it never reads the active segment. What it leaves has its own columns
and lines: superseded records in the active segment, and those superseded only by records the
round does not map.

How the work is spread: a pass per partition gives the cleaning state and runs the round dry
(one task per partition, its memory bounded by the offset map as a broker's cleaner is); then
one Spark job (jobs/maintenance/audit_stages.py) decodes the records in the tasks that read
them and shuffles narrow keyed rows by (partition, key), so no machine holds every key, for the
key statistics.
"""

from __future__ import annotations

import argparse
import json
import pickle
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.ingestion.run.reach import require_shared_root
from jobs.maintenance.audit_stages import (
    AGE_LABELS,
    KEY_BUCKETS,
    decode_task,
    empty_partial,
    key_task,
    merge_partials,
    pack_state,
)
from jobs.maintenance.common import (
    MaintenanceError,
    MaintenanceResult,
    PartitionRef,
    add_cleaner_settings,
    cleaner_settings,
    deal_units,
    human_bytes,
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
    read_recovery_points,
)
from kafkalog_core.maintenance.cleaner import (
    PENDING,
    UNCLEANABLE,
    WOULD_CLEAN,
    CleanerSettings,
    clean_partition,
)
from kafkalog_core.maintenance.cleaner_audit import (
    CleaningState,
    partition_cleaning_state,
    verdict,
)
from kafkalog_core.maintenance.cleaner_facts import RecordCounts
from kafkalog_core.maintenance.cleaner_txn import read_aborted_txns
from kafkalog_core.root.meta_area import compact_journal_path

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
        ("removable_records_now", pa.int64()),  # what the cleaning round removes (compact's)
        ("bytes_freed_now", pa.int64()),  # round_bytes_before - round_bytes_after
        ("round_end_offset", pa.int64()),  # null: the cleaner would not clean it now
        ("round_bytes_before", pa.int64()),  # of the segments the round rewrites
        ("round_bytes_after", pa.int64()),
        ("offset_map_full", pa.bool_()),  # the round ends early; the rest waits for the next
        ("superseded_in_active_segment", pa.int64()),  # the cleaner never reads it
        ("superseded_left_by_round", pa.int64()),  # superseded by what the round does not map
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
    settings: dict[str, Any]  # CleanerSettings as a dict: the round's offset map and buffers


@dataclass(frozen=True)
class RoundFigures:
    """What the cleaning round the cleaner would run now does: compact's dry run, as is."""

    status: str
    reason: str
    end_offset: int | None = None
    keys_mapped: int = 0
    map_full: bool = False
    bytes_before: int = 0
    bytes_after: int = 0
    records_removed: int = 0
    unindexed_aborted_txns: int = 0  # aborted per the markers, missing from the .txnindex


def _state(options: AuditOptions, unit: dict[str, Any]) -> tuple[CleaningState, RoundFigures]:
    """The partition's CleaningState and its cleaning round, run dry by the cleaner itself
    (compact's code, settings and journal), so the audit's "now" is compact's round."""
    marks = options.checkpoints.get(f"{unit['topic']} {unit['partition']}", {})
    pdir = Path(options.log_dir) / unit["dir"]
    config = LogConfig.from_dict(unit["config"])
    checkpoints = {
        "log_start_checkpoint": marks.get("log_start"),
        "high_watermark": marks.get("high_watermark"),
        "recovery_from": marks.get("recovery_from"),
    }
    result = clean_partition(
        pdir,
        config,
        options.now_ms,
        cleaner_checkpoint=marks.get("cleaner"),
        settings=CleanerSettings(**options.settings),
        journal=compact_journal_path(options.log_dir, unit["dir"]),
        **checkpoints,
    )
    state = result.state
    if state is None:  # an interrupted round's files: the cleaner waits for them to settle
        state = partition_cleaning_state(
            pdir, config, marks.get("cleaner"), options.now_ms, **checkpoints
        )
    ran = result.status == WOULD_CLEAN
    figures = RoundFigures(
        result.status,
        result.reason,
        result.end_offset if ran else None,
        result.keys_mapped,
        result.map_full,
        result.bytes_before,
        result.bytes_after,
        result.stats.records_removed,
    )
    # the records the round rewrites; none when the cleaner would not clean the log now
    end = result.end_offset if ran else state.log_start_offset
    # the cleaner knows aborted transactions from the .txnindex files, as a broker's does
    indexed = tuple(
        read_aborted_txns(pdir, [g.base_offset for g in state.segments], state.log_start_offset)
    )
    unindexed = len(_txn_ids(state.aborted_txns) - _txn_ids(indexed))
    if unindexed:
        figures = replace(figures, unindexed_aborted_txns=unindexed)
    return replace(state, round_end_offset=end, aborted_txns=indexed), figures


def _txn_ids(txns) -> set[tuple[int, int, int]]:
    return {(t.producer_id, t.first_offset, t.last_offset) for t in txns}


def state_task(options: AuditOptions) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    def task(unit: dict[str, Any]) -> list[dict[str, Any]]:
        state, figures = _state(options, unit)
        # the figures as a dict: under spark-submit this module is __main__, which a pickled
        # class of its own cannot be found by
        blob = pickle.dumps((state, asdict(figures)))
        return [{"topic": unit["topic"], "partition": unit["partition"], "state": blob}]

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
    settings: CleanerSettings = CleanerSettings(),
) -> MaintenanceResult:
    """Audit every compacted partition (every partition with `all_topics`); read-only.
    `compact_report`: the compact job's report table; the HTML page then shows its newest
    run's before and after. `settings`: the broker's cleaner settings, as compact takes them
    (the round's offset map size decides where a round ends)."""
    settings.check()
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
        options = AuditOptions(str(root), now_ms, _checkpoints(root, refs), asdict(settings))
        units = [_unit(r, configs[r.topic]) for r in refs]
        rounds: dict[tuple[str, int], RoundFigures] = {}
        states: dict[tuple[str, int], CleaningState] = {}
        for r in run_units(
            spark, units, state_task(options), STATE_SCHEMA, tasks=tasks
        ).to_pylist():
            tp = (r["topic"], r["partition"])
            states[tp], figures = pickle.loads(r["state"])
            rounds[tp] = RoundFigures(**figures)
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
            rounds[(ref.topic, ref.partition)],
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
        pairs = ((tp, ("", text.encode())) for tp, text in key_task(from_pairs(batches)))
        yield from to_pairs(pairs)

    try:
        with task_failure_log(spark):
            keyed = spark.range(0, len(groups), 1, len(groups)).mapInArrow(decode_stage, PAIRS)
            found = shuffled(keyed, shuffle).mapInArrow(key_stage, PAIRS).toArrow()
        partials = list(
            zip(
                found.column("key").to_pylist(),
                [p.decode() for p in found.column("payload").to_pylist()],
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
    recovery_points = read_recovery_points(root)  # None: a clean shutdown, nothing rebuilt
    out = {}
    for r in refs:
        tp = (r.topic, r.partition)
        out[f"{r.topic} {r.partition}"] = {
            "cleaner": cleaner.get(tp),
            "log_start": starts.get(tp),
            "high_watermark": marks.get(tp),
            "recovery_from": None if recovery_points is None else recovery_points.get(tp, 0),
        }
    return out


def _unit(ref: PartitionRef, resolved) -> dict[str, Any]:
    return ref.unit(
        config=resolved.config.to_dict(non_default=True),
        settings=resolved.describe(SETTINGS),
        bytes=0,
    )


def _verdict(state: CleaningState, figures: RoundFigures, counts: RecordCounts, config) -> str:
    """The cleaner manager's verdict, with what the round itself found."""
    if figures.status == UNCLEANABLE:
        return figures.reason
    words = verdict(state, counts, config)
    if figures.status == PENDING:
        words += f"; {figures.reason}"
    if figures.unindexed_aborted_txns:
        words += (
            f"; {figures.unindexed_aborted_txns} aborted transactions are missing from the "
            ".txnindex files: the cleaner keeps their records, as a broker's does "
            "(rebuild-index --mode rebuild writes them)"
        )
    if figures.map_full:
        words += (
            f"; the offset map fills at {figures.keys_mapped} keys: this round ends at offset "
            f"{figures.end_offset}, the rest waits for the next round"
        )
    return words


def _report_row(
    ref, resolved, state: CleaningState, figures: RoundFigures, part: dict[str, Any]
) -> dict[str, Any]:
    counts: RecordCounts = part["counts"]
    return {
        "topic": ref.topic,
        "partition": ref.partition,
        "compacted": state.compacted,
        "verdict": _verdict(state, figures, counts, resolved.config),
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
        "removable_records_now": figures.records_removed,
        "bytes_freed_now": figures.bytes_before - figures.bytes_after,
        "round_end_offset": figures.end_offset,
        "round_bytes_before": figures.bytes_before,
        "round_bytes_after": figures.bytes_after,
        "offset_map_full": figures.map_full,
        "superseded_in_active_segment": part["superseded_in_active_segment"],
        "superseded_left_by_round": part["superseded_left_by_round"],
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
    rounds = [r for r in rows if r["round_end_offset"] is not None and r["round_bytes_before"]]
    if rounds:
        lines.append(
            f"  freed now by a cleaning round (compact's figures): {len(rounds)} partitions, "
            f"{human_bytes(sum(r['round_bytes_before'] for r in rounds))} -> "
            f"{human_bytes(sum(r['round_bytes_after'] for r in rounds))}, "
            f"{sum(r['removable_records_now'] for r in rounds)} records removed"
        )
    active = sum(r["superseded_in_active_segment"] for r in rows)
    if active:
        lines.append(
            f"  left in the active segments, which the cleaner never reads: {active} superseded "
            "records (cleaned once their segment rolls)"
        )
    left = sum(r["superseded_left_by_round"] for r in rows)
    if left:
        lines.append(
            f"  left by this round: {left} superseded records, whose newer record is in the "
            "active segment or beyond the round's end (or the cleaner would not clean now)"
        )
    for r in rows:
        if r["would_clean_now"] or r["null_key_records"] or r["offset_map_full"]:
            lines.append(f"  {r['topic']}-{r['partition']}: {r['verdict']}")
    return "\n".join(lines)


def default_html_path(root: Path) -> Path:
    """Where `--html` with no file writes: the output's meta area (beside the log dir, never
    inside it, and git-ignored as `.*.kafkalog/`), not the current directory."""
    from kafkalog_core.root.meta_area import meta_root

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
    add_cleaner_settings(parser)
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
            "settings": cleaner_settings(args),
        },
    )


if __name__ == "__main__":
    from jobs.spark.session import exit_driver

    exit_driver(main())
