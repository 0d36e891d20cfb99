"""Retention cleanup: delete the segments Kafka's retention would delete (§7).

    ./spark-submit.sh retention --log-dir /data/kafka-logs [--now 2024-05-01T00:00:00Z]
    ./spark-submit.sh retention --log-dir /data/kafka-logs --apply --report /data/reports/retention

From a notebook: `jobs.retention.run(spark, "/data/kafka-logs", apply=False)`.

A dry run (the default) changes no byte: it reports every segment with keep/delete and why,
judged as a broker judges the dir it loads: a segment's largest timestamp is its time index's
last entry, or its .log's mtime when that index is empty or missing (a broker creates a missing
one empty); where the broker's load rebuilds the indexes first (no `.kafka_cleanshutdown` in the
log dir: from each partition's recovery point on; a segment without .index), its records'
timestamps, and the reason says so. Sizes are what a loaded log holds (whole batches).
A non-empty active segment that breaches retention goes too, as on a broker: a new empty active
segment at the log end offset is rolled first.
`--apply` deletes the way a broker does, in steps that each leave a state both a broker and the
next run understand:
1. tasks roll a new empty segment where every segment goes (its .log last), rename each victim's
   files to `.deleted`, oldest first, and drop leader-epoch entries below the new log start
   offset;
2. the driver writes `log-start-offset-checkpoint` atomically, then raises every recovery point
   in `recovery-point-offset-checkpoint` that is below its log start offset up to it (Kafka
   never leaves a recovery point below the log start);
3. tasks remove the `.deleted` files (a killed run's leftovers are removed by the next run, or
   by a broker at startup).
Quarantine files (`<segment>.log.quarantine`: corrupt tails rebuild-index moved aside for
forensics) are listed in the report (`kind` = quarantine) and, with `--apply`, deleted once
older than their topic's retention.ms (any cleanup.policy; -1 keeps them); the unfinished
copies a killed rebuild left (`<segment>.log.quarantine.tmp`) are listed and deleted at once.
`quarantine_suffix` must be the one rebuild used (both default to names.QUARANTINE_FILE_SUFFIX).
The run holds the log dir's run lock, so it never overlaps an ingest run.

No deletion on guessed settings: `--apply` refuses, before it changes anything, when a topic's
deletion settings (cleanup.policy, retention.ms, retention.bytes) are all Kafka's defaults by
assumption only: no `--topic-config` names the topic, the dir holds no broker metadata for it
and no ingest run wrote it (a copied ZooKeeper-era broker dir, a copy without its history).
The refusal names the topics; `--topic-config` supplies their settings, `--assume-defaults`
accepts Kafka's defaults knowingly. A dry run reports them and warns that their settings are
assumed.

Tiered storage (`remote.storage.enable=true`): a broker applies `local.retention.ms` /
`local.retention.bytes` (-2: the plain setting) and deletes only segments already uploaded,
which an offline run cannot know. The dry run reports what the local settings would delete as
if every closed segment were uploaded, and says the upload state is unknown. `--apply` refuses
such topics unless `--uploaded-offsets FILE` (lines `<topic> <partition> <offset>`: the highest
offset in remote storage) names each of their partitions, or `--accept-unknown-uploads` takes
the risk of deleting local segments never uploaded.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.ingestion.run.reach import require_shared_root
from jobs.maintenance.common import (
    MaintenanceError,
    MaintenanceResult,
    PartitionRef,
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
    read_high_watermarks,
    read_recovery_points,
)
from kafkalog_core.log.names import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    QUARANTINE_FILE_SUFFIX,
    RECOVERY_POINT_CHECKPOINT_FILE,
    check_quarantine_suffix,
    log_file_name,
    segment_log_files,
)
from kafkalog_core.maintenance.retention import (
    LOAD_CUT,
    RetentionDecision,
    RetentionLimits,
    backfill_risk,
    delete_quarantine_files,
    mark_segments_deleted,
    purge_deleted_files,
    quarantine_decision,
    raised_recovery_points,
    read_quarantine_files,
    retention_decisions,
    roll_empty_segment,
    truncate_leader_epochs_from_start,
    unjudged_after_load_cut,
)
from kafkalog_core.maintenance.segment_facts import load_cut, read_as_loaded

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOB = "retention"
SETTINGS = ("cleanup.policy", "retention.ms", "retention.bytes", "message.timestamp.type")
DELETION_SETTINGS = ("cleanup.policy", "retention.ms", "retention.bytes")  # what decides a delete

REPORT_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("base_offset", pa.int64()),
        pa.field("next_offset", pa.int64()),
        pa.field("size_bytes", pa.int64()),
        pa.field("batches", pa.int64()),
        pa.field("max_timestamp", pa.int64()),
        pa.field("largest_timestamp", pa.int64()),
        pa.field("last_modified", pa.int64()),
        pa.field("action", pa.string()),  # delete / keep
        # log-start-offset / retention.bytes / retention.ms / unfinished-quarantine; load-cut:
        # kept, the partition left unjudged (a broker's load would cut it first)
        pa.field("rule", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("backfill_risk", pa.bool_()),
        pa.field("log_start_offset", pa.int64()),  # after this run's deletes
        pa.field("applied", pa.bool_()),
        pa.field("settings", pa.string()),
        pa.field("kind", pa.string()),  # KIND_SEGMENT or KIND_QUARANTINE
        pa.field("file", pa.string()),  # its name in the partition dir
    ]
)
KIND_SEGMENT = "segment"
KIND_QUARANTINE = "quarantine"  # a corrupt tail rebuild-index moved aside (kafkalog's own file)


@dataclass(frozen=True)
class RetentionOptions:
    """What every task needs besides its unit."""

    log_dir: str
    now_ms: int
    apply: bool
    quarantine_suffix: str = QUARANTINE_FILE_SUFFIX  # rebuild's `quarantine_suffix`


def retention_task(options: RetentionOptions) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """Per partition: read segment facts, decide, and with `apply` do phase one of the delete;
    the same for its quarantine files (deleted at once: nothing reads them)."""

    def task(unit: dict[str, Any]) -> list[dict[str, Any]]:
        pdir = Path(options.log_dir) / unit["dir"]
        if options.apply:
            purge_deleted_files(pdir)  # a killed apply's leftovers (a broker would drop them too)
        config = LogConfig.from_dict(unit["config"])
        rows, log_start = _segment_rows(pdir, unit, config, options)
        return rows + _quarantine_rows(pdir, unit, config, options, log_start)

    return task


def _row(
    unit: dict[str, Any], log_start: int, decision: RetentionDecision, apply: bool, **values: Any
) -> dict[str, Any]:
    """One report row: the partition's columns, the decision's, then the file's `values`."""
    return {
        "topic": unit["topic"],
        "partition": unit["partition"],
        "log_start_offset": log_start,
        "settings": unit["settings"],
        "base_offset": decision.base_offset,
        "action": "delete" if decision.delete else "keep",
        "rule": decision.rule,
        "reason": decision.reason,
        "applied": bool(apply and decision.delete),
        **values,
    }


def _segment_rows(
    pdir: Path, unit: dict[str, Any], config: LogConfig, options: RetentionOptions
) -> tuple[list[dict[str, Any]], int]:
    """The segments' rows and the log start offset after their deletes."""
    facts = read_as_loaded(segment_log_files(pdir), unit.get("recovery_from"))
    if not facts:
        return [], unit["log_start_offset"]
    cut = load_cut(facts)
    if cut is not None:
        decisions = unjudged_after_load_cut(facts, cut)
    else:
        decisions = retention_decisions(
            facts,
            config,
            now_ms=options.now_ms,
            log_start_offset=unit["log_start_offset"],
            high_watermark=unit["high_watermark"],
            uploaded_offset=unit.get("uploaded_offset"),
        )
    victims = [d.base_offset for d in decisions if d.delete]
    kept = [d.base_offset for d in decisions if not d.delete]
    log_end = facts[-1].next_offset
    new_lso = max(unit["log_start_offset"], facts[0].base_offset, kept[0] if kept else log_end)
    if options.apply and cut is None:
        if not kept:  # every segment goes: a broker rolls a new empty active segment first
            roll_empty_segment(pdir, log_end)
        if victims:
            mark_segments_deleted(pdir, victims)
        # Also with no victim left: a run killed after its renames deleted the segments but
        # kept their epochs (a broker's load truncates them from the log start, too).
        truncate_leader_epochs_from_start(pdir, new_lso, log_end_offset=log_end)
    rows = [
        _row(
            unit,
            new_lso,
            d,
            options.apply,
            kind=KIND_SEGMENT,
            file=log_file_name(f.base_offset),
            next_offset=f.next_offset,
            size_bytes=f.size,
            batches=f.batches,
            max_timestamp=f.max_timestamp,
            largest_timestamp=f.largest_timestamp,
            last_modified=f.last_modified_ms,
            backfill_risk=backfill_risk(f, config, options.now_ms),
        )
        for f, d in zip(facts, decisions, strict=True)
    ]
    return rows, new_lso


def _quarantine_rows(
    pdir: Path,
    unit: dict[str, Any],
    config: LogConfig,
    options: RetentionOptions,
    log_start: int,
) -> list[dict[str, Any]]:
    """rebuild-index's quarantined tails: listed, and with `apply` deleted past retention.ms."""
    items = read_quarantine_files(pdir, options.quarantine_suffix)
    decisions = [quarantine_decision(q, config, options.now_ms) for q in items]
    if options.apply:
        delete_quarantine_files([q.path for q, d in zip(items, decisions, strict=True) if d.delete])
    return [
        _row(
            unit,
            log_start,
            d,
            options.apply,
            kind=KIND_QUARANTINE,
            file=q.path.name,
            size_bytes=q.size,
            largest_timestamp=q.last_modified_ms,
            last_modified=q.last_modified_ms,
            backfill_risk=False,
        )
        for q, d in zip(items, decisions, strict=True)
    ]


def purge_task(options: RetentionOptions) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """Phase three: remove the `.deleted` files once the checkpoint is written."""

    def task(unit: dict[str, Any]) -> list[dict[str, Any]]:
        removed = purge_deleted_files(Path(options.log_dir) / unit["dir"])
        return [{"dir": unit["dir"], "removed": len(removed)}]

    return task


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
    quarantine_suffix: str = QUARANTINE_FILE_SUFFIX,
    assume_defaults: bool = False,
    uploaded_offsets: str | None = None,
    accept_unknown_uploads: bool = False,
) -> MaintenanceResult:
    """Decide (and with `apply`, delete) per segment; return the report and the summary.
    `quarantine_suffix`: the one the rebuild that wrote the quarantine files used.
    `assume_defaults`: let `apply` delete by Kafka's defaults where nothing knows a topic's
    deletion settings (else it refuses those topics before any change).
    `uploaded_offsets`: a file of `<topic> <partition> <offset>` lines, the highest offset in
    remote storage of tiered partitions; `accept_unknown_uploads`: let `apply` delete tiered
    topics' segments by their local settings without it (else it refuses them)."""
    check_quarantine_suffix(quarantine_suffix)  # before the Spark work, not in every task
    require_shared_root(spark, log_dir)  # a Connect client: the server's tasks see it too
    setup = prepare_run(
        JOB, log_dir, run_id=run_id, now=now, topics=topics, topic_config=topic_config
    )
    root, run_id, now_ms, refs = setup.root, setup.run_id, setup.now_ms, setup.refs
    assumed = sorted(
        t
        for t in {r.topic for r in refs}
        if setup.configs[t].assumed(DELETION_SETTINGS) == DELETION_SETTINGS
    )
    if apply and assumed and not assume_defaults:
        raise MaintenanceError(
            f"retention --apply refuses {_some(assumed)}: "
            f"{', '.join(DELETION_SETTINGS)} would be Kafka's defaults by assumption (no "
            "--topic-config, broker metadata or ingest run names them); give their settings "
            "with --topic-config FILE, or pass --assume-defaults to delete by Kafka's defaults"
        )
    uploaded = _read_uploaded_offsets(uploaded_offsets) if uploaded_offsets else {}
    tiered = sorted(
        {r.topic for r in refs if RetentionLimits.of(setup.configs[r.topic].config).tiered}
    )
    unknown = sorted(
        f"{r.topic}-{r.partition}"
        for r in refs
        if r.topic in tiered and (r.topic, r.partition) not in uploaded
    )
    if apply and unknown and not accept_unknown_uploads:
        raise MaintenanceError(
            f"retention --apply refuses {_some(tiered)} (remote.storage.enable=true): a broker "
            "deletes only segments already uploaded to remote storage, which this run cannot "
            f"know for {_some(unknown, kind='partition')}; name the highest uploaded offset per "
            "partition with --uploaded-offsets FILE, or pass --accept-unknown-uploads to delete "
            "by the local settings anyway"
        )
    options = RetentionOptions(str(root), now_ms, apply, quarantine_suffix)
    with maintenance_lock(root, run_id, read_only=not apply, out=out):
        lso_file = OffsetCheckpointFile(root / LOG_START_OFFSET_CHECKPOINT_FILE)
        start_offsets = lso_file.read()
        high_watermarks = read_high_watermarks(root)
        recovery_points = read_recovery_points(root)  # None: a clean shutdown, nothing rebuilt
        units = [
            _unit(
                r, setup.configs[r.topic], start_offsets, high_watermarks, recovery_points, uploaded
            )
            for r in refs
        ]
        rows = run_units(spark, units, retention_task(options), REPORT_SCHEMA, tasks=tasks)
        if apply:
            log_starts = _advance_log_start_offsets(lso_file, start_offsets, rows)
            _raise_recovery_points(root, log_starts)
            touched = {(t, p) for t, p, a in _triples(rows) if a}
            purge_units = [r.unit() for r in refs if (r.topic, r.partition) in touched]
            purge_schema = pa.schema([("dir", pa.string()), ("removed", pa.int64())])
            run_units(spark, purge_units, purge_task(options), purge_schema, tasks=tasks)
    rows = rows.sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("base_offset", "ascending")]
    )
    if report:
        write_report(spark, rows, report, run_id=run_id, job=JOB)
    summary, warnings = summarize(rows, root, now_ms, apply, run_id)
    if unknown:
        warnings.insert(0, _upload_warning(tiered, unknown, apply, accept_unknown_uploads))
    if assumed:
        warnings.insert(0, _assumed_warning(assumed, apply, assume_defaults))
    out(summary)
    for warning in warnings:
        out(f"kafkalog: warning: {warning}")
    problems = len(unjudged_partitions(rows))  # exit 1: a partition left as it was
    return MaintenanceResult(JOB, run_id, rows, summary, problems, warnings, spark)


def _some(names: Sequence[str], most: int = 10, kind: str = "topic") -> str:
    """`topic a, b` / `topics a, b, ... and 7 more`: a list that stays one line."""
    shown = ", ".join(names[:most]) + (
        f" and {len(names) - most} more" if len(names) > most else ""
    )
    return f"{kind}{'s' if len(names) > 1 else ''} {shown}"


def _assumed_warning(topics: Sequence[str], apply: bool, assume_defaults: bool) -> str:
    """The dry run's (or an accepted apply's) word on topics judged by assumed defaults."""
    head = (
        f"{_some(topics)}: {', '.join(DELETION_SETTINGS)} are Kafka's defaults by assumption "
        "(no --topic-config, broker metadata or ingest run names them)"
    )
    if assume_defaults:
        return f"{head}; {'deleted' if apply else 'judged'} by them as --assume-defaults asks"
    return (
        f"{head}; --apply refuses these topics unless --topic-config gives their settings "
        "or --assume-defaults accepts Kafka's defaults"
    )


def _upload_warning(
    topics: Sequence[str], unknown: Sequence[str], apply: bool, accepted: bool
) -> str:
    """The word on tiered topics whose upload state nothing gave."""
    head = (
        f"{_some(topics)}: remote.storage.enable=true, judged by local.retention.ms/bytes; the "
        f"upload state of {_some(unknown, kind='partition')} is unknown (judged as if every closed "
        "segment were uploaded, while a broker deletes only uploaded segments)"
    )
    if accepted:
        return f"{head}; {'deleted' if apply else 'judged'} so as --accept-unknown-uploads asks"
    return (
        f"{head}; --apply refuses these topics unless --uploaded-offsets FILE names the highest "
        "uploaded offset per partition or --accept-unknown-uploads takes the risk"
    )


def _read_uploaded_offsets(path: str) -> dict[tuple[str, int], int]:
    """`<topic> <partition> <offset>` per line (blank lines and `#` comments skipped)."""
    out: dict[tuple[str, int], int] = {}
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise MaintenanceError(f"--uploaded-offsets {path}: {e.strerror or e}") from None
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        try:
            topic, partition, offset = fields[0], int(fields[1]), int(fields[2])
            if len(fields) != 3:
                raise ValueError
        except (IndexError, ValueError):
            raise MaintenanceError(
                f"--uploaded-offsets {path} line {number}: expected '<topic> <partition> "
                f"<offset>', got {line.strip()!r}"
            ) from None
        out[(topic, partition)] = offset
    return out


def _unit(
    ref: PartitionRef, resolved, start_offsets, high_watermarks, recovery_points, uploaded
) -> dict[str, Any]:
    tp = (ref.topic, ref.partition)
    return ref.unit(
        config=resolved.config.to_dict(non_default=True),
        settings=resolved.describe(SETTINGS),
        log_start_offset=start_offsets.get(tp, 0),
        high_watermark=high_watermarks.get(tp),
        # where a broker's load starts rebuilding indexes (None: a clean shutdown, nowhere)
        recovery_from=None if recovery_points is None else recovery_points.get(tp, 0),
        uploaded_offset=uploaded.get(tp),
    )


def _triples(rows: pa.Table):
    """(topic, partition, applied) of every segment row (quarantine files leave no .deleted)."""
    return (
        (topic, partition, applied)
        for topic, partition, applied, kind in zip(
            rows.column("topic").to_pylist(),
            rows.column("partition").to_pylist(),
            rows.column("applied").to_pylist(),
            rows.column("kind").to_pylist(),
            strict=True,
        )
        if kind == KIND_SEGMENT
    )


def _advance_log_start_offsets(
    lso_file: OffsetCheckpointFile, before: dict[tuple[str, int], int], rows: pa.Table
) -> dict[tuple[str, int], int]:
    """Write the new log start offsets (never lower than recorded) in one atomic replace;
    return them, every partition of the run included."""
    after = dict(before)
    for topic, partition, lso in zip(
        rows.column("topic").to_pylist(),
        rows.column("partition").to_pylist(),
        rows.column("log_start_offset").to_pylist(),
        strict=True,
    ):
        tp = (topic, partition)
        after[tp] = max(after.get(tp, 0), lso)
    if after != before:
        lso_file.write(after)
    return after


def _raise_recovery_points(root: Path, log_starts: dict[tuple[str, int], int]) -> None:
    """Move every recovery point below its log start offset up to it, as a broker does when
    retention raises the log start (written after the log starts: a kill in between leaves a
    broker only more to recover, and the next --apply finishes it)."""
    checkpoint = OffsetCheckpointFile(root / RECOVERY_POINT_CHECKPOINT_FILE)
    before = checkpoint.read()
    after = raised_recovery_points(before, log_starts)
    if after != before:
        checkpoint.write(after)


def unjudged_partitions(rows: pa.Table) -> dict[str, str]:
    """The partitions left unjudged (`LOAD_CUT`), by `topic-partition`, with the reason."""
    return {
        f"{r['topic']}-{r['partition']}": r["reason"]
        for r in rows.to_pylist()
        if r["kind"] == KIND_SEGMENT and r["rule"] == LOAD_CUT
    }


def summarize(
    rows: pa.Table, root: Path, now_ms: int, apply: bool, run_id: str
) -> tuple[str, list[str]]:
    """The printed summary and the backfill warnings, one per topic."""
    when = datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")
    mode = "applied" if apply else "dry run, nothing changed"
    records = [r for r in rows.to_pylist() if r["kind"] == KIND_SEGMENT]
    quarantined = [r for r in rows.to_pylist() if r["kind"] == KIND_QUARANTINE]
    partitions = {(r["topic"], r["partition"]) for r in records}
    deleted = [r for r in records if r["action"] == "delete"]
    by_rule: dict[str, int] = defaultdict(int)
    for r in deleted:
        by_rule[r["rule"]] += 1
    rules = ", ".join(f"{n} by {rule}" for rule, n in sorted(by_rule.items()))
    lines = [
        f"retention {run_id} ({mode}) on {root} at {when}: {len(partitions)} partitions, "
        f"{len(records)} segments",
        f"  delete {len(deleted)} segments ({human_bytes(sum(r['size_bytes'] for r in deleted))})"
        + (f": {rules}" if rules else ""),
        f"  keep {len(records) - len(deleted)} segments",
    ]
    per_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in deleted:
        per_topic[r["topic"]].append(r)
    for topic in sorted(per_topic):
        hits = per_topic[topic]
        lines.append(
            f"  {topic}: delete {len(hits)} segments in {len({r['partition'] for r in hits})} "
            f"partitions, {human_bytes(sum(r['size_bytes'] for r in hits))}"
        )
    segments_of: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        segments_of[(r["topic"], r["partition"])].append(r)
    rolled = sorted(
        f"{topic}-{partition}"
        for (topic, partition), rows_ in segments_of.items()
        if all(r["action"] == "delete" for r in rows_)
    )
    if rolled:
        lines.append(
            f"  {len(rolled)} partitions lose every segment, the active one included: "
            f"{'rolled' if apply else 'a broker rolls'} a new empty segment at the log end "
            f"offset first ({', '.join(rolled[:5])}{' ...' if len(rolled) > 5 else ''})"
        )
    if quarantined:
        expired = [r for r in quarantined if r["action"] == "delete"]
        lines.append(
            f"  quarantine files (rebuild-index's corrupt tails): {len(quarantined)}, "
            f"{'deleted' if apply else 'to delete'} {len(expired)} older than retention.ms "
            "or unfinished "
            f"({human_bytes(sum(r['size_bytes'] for r in expired))})"
        )
        lines.extend(
            f"    {r['topic']}-{r['partition']}/{r['file']}: {r['reason']}" for r in expired
        )
    unjudged = unjudged_partitions(rows)
    if unjudged:
        lines.append(
            f"  {len(unjudged)} partitions not judged, nothing deleted in them: a broker's load "
            "would cut them first (no clean shutdown); run rebuild-index --mode rebuild"
        )
        lines.extend(f"    {name}: {reason}" for name, reason in sorted(unjudged.items()))
    if (deleted or any(r["action"] == "delete" for r in quarantined)) and not apply:
        lines.append("  run again with --apply to delete them")
    warnings = []
    risky: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r["backfill_risk"]:
            risky[r["topic"]].append(r)
    for topic in sorted(risky):
        hits = risky[topic]
        oldest = min(r["max_timestamp"] for r in hits)
        age = datetime.fromtimestamp(oldest / 1000, tz=timezone.utc).date().isoformat()
        warnings.append(
            f"topic {topic}: {len(hits)} segments were written within retention.ms but hold "
            f"CreateTime timestamps older than it (newest record of the oldest from {age}); a "
            f"broker deletes them at its next retention check, as this run does (backfilled "
            f"history?). Raise "
            f"retention.ms, or use message.timestamp.type=LogAppendTime ({hits[0]['settings']})"
        )
    return "\n".join(lines), warnings


def _parser() -> argparse.ArgumentParser:
    parser = maintenance_arg_parser(
        JOB, "Delete the segments Kafka's retention would delete (dry run unless --apply)."
    )
    parser.add_argument(
        "--apply", action="store_true", help="delete (default: a dry run that changes nothing)"
    )
    parser.add_argument(
        "--uploaded-offsets",
        metavar="FILE",
        help="tiered topics (remote.storage.enable=true): '<topic> <partition> <offset>' lines, "
        "the highest offset in remote storage; with --apply, only segments at or below it go",
    )
    parser.add_argument(
        "--accept-unknown-uploads",
        action="store_true",
        help="with --apply, delete tiered topics' segments by local.retention.* without knowing "
        "what was uploaded (default: refuse those topics)",
    )
    parser.add_argument(
        "--assume-defaults",
        action="store_true",
        help="with --apply, delete by Kafka's default settings where nothing (no --topic-config, "
        "broker metadata or ingest run) names a topic's (default: refuse those topics)",
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
            "apply": args.apply,
            "assume_defaults": args.assume_defaults,
            "uploaded_offsets": args.uploaded_offsets,
            "accept_unknown_uploads": args.accept_unknown_uploads,
        },
    )


if __name__ == "__main__":
    from jobs.spark.session import exit_driver

    exit_driver(main())
