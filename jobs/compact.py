"""Compaction: Kafka's log cleaner run offline, one Spark task per partition (§8).

    ./spark-submit.sh compact --log-dir /data/kafka-logs                    # dry run
    ./spark-submit.sh compact --log-dir /data/kafka-logs --apply --report /data/reports/compact
    ./spark-submit.sh compact --log-dir DIR --topics orders --apply --now 2024-05-01T00:00:00Z

From a notebook: `jobs.compact.run(spark, "/data/kafka-logs", apply=True)`.

Per partition of every compacted topic (cleanup.policy with `compact`), a task does what a
broker's cleaner thread does when it picks the partition (kafkalog_core/maintenance/cleaner.py):
the cleaner manager's verdict (the compaction audit's: cleanable range, min.compaction.lag.ms,
dirty ratio, max.compaction.lag.ms), and for a partition the broker would clean, one cleaning
round: latest offset per key, tombstones and transaction markers past their delete horizon,
aborted transactions, everything below the round's end rewritten and swapped in. `--now` is
the cleaner's clock (delete horizons, lags, producer expiry).

A dry run (the default) reports per partition what a round would do, to the byte, and changes
nothing. `--apply` rewrites, then the driver writes `cleaner-offset-checkpoint` (the end of
each round) in one atomic replace. A run killed anywhere leaves a state the next run (or a
broker) settles: a round's swap is either rolled back or completed, and the next `--apply`
writes the checkpoint of a completed one, so the files end as an uninterrupted run leaves them.

Skipped, each with one line: a partition whose round would read a corrupt batch header, a
record that does not parse or a partial batch at a segment's end (a broker's cleaner fails there
and marks it uncleanable; run rebuild-index), and the run exits 1; CRCs are not checked and the
active segment is not read, as a broker's cleaner neither checks nor reads them. Records
without a key in a round are dropped as Kafka drops them and counted in the report. A topic named in
`--topics` that is not compacted is refused before anything runs. The run holds the log dir's
run lock, so it never overlaps an ingest or another maintenance run that writes. A task Spark
retries settles its partition's journal first; speculative attempts (spark.speculation, off by
default) must stay off, since two attempts of one round would race on the same files.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.ingestion.run.reach import require_shared_root
from jobs.maintenance.common import (
    MaintenanceError,
    MaintenanceResult,
    PartitionRef,
    add_cleaner_settings,
    cleaner_settings,
    human_bytes,
    maintenance_arg_parser,
    maintenance_lock,
    prepare_run,
    run_cli,
    run_units,
)
from jobs.maintenance.report import write_report
from kafkalog_core.config import LogConfig
from kafkalog_core.log.checkpoints import (
    OffsetCheckpointFile,
    read_cleaner_checkpoint,
    read_high_watermarks,
    read_log_start_checkpoint,
    read_recovery_points,
)
from kafkalog_core.log.names import CLEANER_OFFSET_CHECKPOINT_FILE
from kafkalog_core.log.swap import Hook
from kafkalog_core.maintenance.cleaner import (
    CLEANED,
    FINISHED,
    PENDING,
    UNCLEANABLE,
    CleanerSettings,
    RoundResult,
    clean_partition,
)
from kafkalog_core.root.meta_area import compact_journal_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOB = "compact"
SETTINGS = (
    "cleanup.policy",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "delete.retention.ms",
    "segment.bytes",
    "segment.index.bytes",
)

REPORT_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("status", pa.string()),  # cleaned / would clean / not cleaned / uncleanable ...
        pa.field("reason", pa.string()),  # the cleaner manager's verdict, or why it was skipped
        pa.field("applied", pa.bool_()),
        pa.field("first_dirty_offset", pa.int64()),
        pa.field("first_uncleanable_offset", pa.int64()),
        pa.field("uncleanable_bound", pa.string()),
        pa.field("dirty_ratio", pa.float64()),
        pa.field("cleaner_checkpoint", pa.int64()),  # as found
        pa.field("round_end_offset", pa.int64()),  # the new checkpoint (null: none is written)
        pa.field("keys_mapped", pa.int64()),
        pa.field("map_full", pa.bool_()),
        pa.field("segments_before", pa.int64()),  # of the segments the round rewrites
        pa.field("segments_after", pa.int64()),
        pa.field("bytes_before", pa.int64()),
        pa.field("bytes_after", pa.int64()),
        pa.field("records_read", pa.int64()),
        pa.field("records_kept", pa.int64()),
        pa.field("superseded_removed", pa.int64()),
        pa.field("tombstones_removed", pa.int64()),
        pa.field("null_key_removed", pa.int64()),
        pa.field("aborted_removed", pa.int64()),
        pa.field("markers_removed", pa.int64()),
        pa.field("tombstones_given_horizon", pa.int64()),
        pa.field("markers_given_horizon", pa.int64()),
        pa.field("batches_read", pa.int64()),
        pa.field("batches_copied", pa.int64()),
        pa.field("batches_rebuilt", pa.int64()),
        pa.field("batches_emptied", pa.int64()),
        pa.field("batches_removed", pa.int64()),
        pa.field("settings", pa.string()),
    ]
)


@dataclass(frozen=True)
class CompactOptions:
    """What every task needs besides its unit."""

    log_dir: str
    now_ms: int
    apply: bool
    settings: dict[str, Any]  # CleanerSettings as a dict (tasks get JSON-able units)


def compact_task(
    options: CompactOptions, hook: Hook | None = None
) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """Per partition: one cleaning round (or its dry run); the report row."""
    settings = CleanerSettings(**options.settings)

    def task(unit: dict[str, Any]) -> list[dict[str, Any]]:
        extra = {} if hook is None else {"hook": hook}
        result = clean_partition(
            Path(options.log_dir) / unit["dir"],
            LogConfig.from_dict(unit["config"]),
            options.now_ms,
            cleaner_checkpoint=unit["cleaner_checkpoint"],
            log_start_checkpoint=unit["log_start_checkpoint"],
            high_watermark=unit["high_watermark"],
            recovery_from=unit.get("recovery_from"),
            apply=options.apply,
            settings=settings,
            journal=compact_journal_path(options.log_dir, unit["dir"]),
            **extra,
        )
        return [_row(unit, result, options.apply)]

    return task


def _row(unit: dict[str, Any], result: RoundResult, apply: bool) -> dict[str, Any]:
    state, stats = result.state, result.stats
    row: dict[str, Any] = {
        "topic": unit["topic"],
        "partition": unit["partition"],
        "status": result.status,
        "reason": result.reason,
        "applied": apply and result.status in (CLEANED, FINISHED),
        "cleaner_checkpoint": unit["cleaner_checkpoint"],
        "round_end_offset": result.end_offset,
        "keys_mapped": result.keys_mapped,
        "map_full": result.map_full,
        "segments_before": sum(len(g) for g in result.groups),
        "segments_after": len(result.groups),
        "bytes_before": result.bytes_before,
        "bytes_after": result.bytes_after,
        "settings": unit["settings"],
        **{k: v for k, v in asdict(stats).items() if k in REPORT_SCHEMA.names},
    }
    if state is not None:
        row.update(
            first_dirty_offset=state.first_dirty_offset,
            first_uncleanable_offset=state.first_uncleanable_offset,
            uncleanable_bound=state.uncleanable_bound,
            dirty_ratio=state.dirty_ratio,
        )
    return row


def commit_checkpoints(root: Path, rows: pa.Table, hook: Hook | None = None) -> dict:
    """Write the rounds' end offsets to `cleaner-offset-checkpoint` (one atomic replace, the
    other partitions' entries kept), then drop their journals: the round is over."""
    done = {
        (r["topic"], r["partition"]): r["round_end_offset"]
        for r in rows.to_pylist()
        if r["round_end_offset"] is not None
    }
    if not done:
        return {}
    checkpoint = OffsetCheckpointFile(root / CLEANER_OFFSET_CHECKPOINT_FILE)
    before = read_cleaner_checkpoint(root)
    after = {**before, **done}
    if after != before or not checkpoint.exists():
        if hook is not None:
            hook("checkpoint", checkpoint.path)
        checkpoint.write(after)
    for topic, partition in done:
        journal = compact_journal_path(root, f"{topic}-{partition}")
        if journal.exists():
            if hook is not None:
                hook("unlink", journal)
            journal.unlink()
    return done


def run(
    spark: SparkSession,
    log_dir: str,
    *,
    apply: bool = False,
    topic_config: str | None = None,
    report: str | None = None,
    run_id: str | None = None,
    topics: Sequence[str] = (),
    now: str | int | None = None,
    tasks: int | None = None,
    out: Callable[[str], None] = print,
    settings: CleanerSettings = CleanerSettings(),
) -> MaintenanceResult:
    """Clean (with `apply`) or report every compacted partition; the report and the summary.
    `settings` are the broker's cleaner settings (dedupe buffer, I/O buffers, producer expiry)."""
    settings.check()
    require_shared_root(spark, log_dir)  # a Connect client: the server's tasks see it too
    setup = prepare_run(
        JOB, log_dir, run_id=run_id, now=now, topics=topics, topic_config=topic_config
    )
    root, run_id, now_ms, configs = setup.root, setup.run_id, setup.now_ms, setup.configs
    refs = [r for r in setup.refs if configs[r.topic].config.compact]
    skipped = sorted({r.topic for r in setup.refs} - {r.topic for r in refs})
    if topics and skipped:
        policy = ",".join(configs[skipped[0]].config.cleanup_policy)
        raise MaintenanceError(
            f"topic {skipped[0]} is not compacted (cleanup.policy={policy}): compact cleans "
            "only topics whose cleanup.policy includes compact; leave it out of --topics"
        )
    options = CompactOptions(str(root), now_ms, apply, asdict(settings))
    with maintenance_lock(root, run_id, read_only=not apply, out=out):
        units = _units(root, refs, configs)
        rows = run_units(
            spark, units, compact_task(options), REPORT_SCHEMA, tasks=tasks or len(units) or 1
        )
        if apply:
            commit_checkpoints(root, rows)
    rows = rows.sort_by([("topic", "ascending"), ("partition", "ascending")])
    if report:
        write_report(spark, rows, report, run_id=run_id, job=JOB)
    summary, warnings, problems = summarize(rows, root, apply, run_id, skipped)
    out(summary)
    for warning in warnings:
        out(f"kafkalog: warning: {warning}")
    return MaintenanceResult(JOB, run_id, rows, summary, problems, warnings, spark)


def _units(root: Path, refs: list[PartitionRef], configs: dict) -> list[dict[str, Any]]:
    cleaned = read_cleaner_checkpoint(root)
    starts = read_log_start_checkpoint(root)
    marks = read_high_watermarks(root)
    recovery_points = read_recovery_points(root)  # None: a clean shutdown, nothing rebuilt
    units = []
    for r in refs:
        tp = (r.topic, r.partition)
        resolved = configs[r.topic]
        units.append(
            r.unit(
                config=resolved.config.to_dict(non_default=True),
                settings=resolved.describe(SETTINGS),
                cleaner_checkpoint=cleaned.get(tp),
                log_start_checkpoint=starts.get(tp),
                high_watermark=marks.get(tp),
                recovery_from=None if recovery_points is None else recovery_points.get(tp, 0),
            )
        )
    return units


def summarize(
    rows: pa.Table, root: Path, apply: bool, run_id: str, skipped: Sequence[str] = ()
) -> tuple[str, list[str], int]:
    """The printed summary, warnings (null keys dropped) and the number of uncleanable
    partitions (the exit code's problems)."""
    records = rows.to_pylist()
    mode = "applied" if apply else "dry run, nothing changed"
    rounds = [r for r in records if r["round_end_offset"] is not None and r["segments_before"]]
    lines = [f"compact {run_id} ({mode}) on {root}: {len(records)} partitions of compacted topics"]
    if rounds:
        before = sum(r["bytes_before"] for r in rounds)
        after = sum(r["bytes_after"] for r in rounds)
        verb = "cleaned" if apply else "would clean"
        lines.append(
            f"  {verb} {len(rounds)} partitions: {human_bytes(before)} -> {human_bytes(after)}, "
            f"{sum(r['records_read'] - r['records_kept'] for r in rounds)} records removed "
            f"({sum(r['superseded_removed'] for r in rounds)} superseded, "
            f"{sum(r['tombstones_removed'] for r in rounds)} tombstones, "
            f"{sum(r['aborted_removed'] for r in rounds)} aborted)"
        )
        lines.append(
            "  the active segments are not read by a round, as on a broker: compaction-audit "
            "counts the superseded records left in them"
        )
    others: dict[str, int] = {}
    for r in records:
        if r in rounds:
            continue
        if r["status"] == UNCLEANABLE or r["status"] in (FINISHED, PENDING):
            lines.append(f"  {r['topic']}-{r['partition']}: {r['reason']}")
        else:
            words = r["reason"].split(" (")[0].split(":")[0]
            others[words] = others.get(words, 0) + 1
    for words, n in sorted(others.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {n} partitions: {words}")
    if skipped:
        lines.append(f"  not compacted, left alone: {', '.join(skipped)}")
    warnings = [
        f"{r['topic']}-{r['partition']}: {r['null_key_removed']} records without a key "
        f"{'dropped' if apply else 'would be dropped'} (a compacted topic cannot hold them)"
        for r in records
        if r["null_key_removed"]
    ]
    problems = sum(1 for r in records if r["status"] == UNCLEANABLE)
    return "\n".join(lines), warnings, problems


def _parser() -> argparse.ArgumentParser:
    parser = maintenance_arg_parser(
        JOB, "Kafka's log cleaner, offline: a dry run by default, --apply to rewrite."
    )
    parser.add_argument(
        "--apply", action="store_true", help="rewrite the partitions (default: report only)"
    )
    add_cleaner_settings(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`spark-submit` entry: exit 0 on success, 1 with one clear line on failure (or when a
    partition was uncleanable)."""
    return run_cli(
        JOB,
        argv,
        _parser(),
        run,
        lambda args: {"apply": args.apply, "settings": cleaner_settings(args)},
    )


if __name__ == "__main__":
    from jobs.spark.session import exit_driver

    exit_driver(main())
