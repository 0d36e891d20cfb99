"""Index verification and rebuild: check every segment the way a broker's recovery would (§3, §6).

    ./spark-submit.sh rebuild-index --log-dir /data/kafka-logs                 # verify (read-only)
    ./spark-submit.sh rebuild-index --log-dir /data/kafka-logs --mode rebuild  # fix what needs it
    ./spark-submit.sh rebuild-index --log-dir DIR --mode rebuild --all         # rebuild every index

From a notebook: `jobs.rebuild_index.run(spark, "/data/kafka-logs", mode="verify")`.

`verify` changes no byte. Per segment it checks the batches (CRC, sizes, increasing offsets,
magic, offsets that fit the segment) and judges .index/.timeindex the way a broker does, by
their lookups: an index whose every lookup lands right is ok at whatever spacing it was written
(a broker's topic with another index.interval.bytes, a copy without its history, a 2.x broker's
record-level time index); the `note` column says when recovery would space it differently.
The .txnindex has one right content. Statuses: ok, missing, zero-padded, wrong entries,
corrupt tail, offset overflow. It exits 1 when it finds anything to fix.

`rebuild` rewrites what needs it (every index with `--all`), each index atomically. A segment
whose offsets overflow it is split as a broker's load splits it (`.cleaned` -> `.swap`). A
corrupt tail is moved into a `.quarantine` file next to its segment (segments after it are
quarantined whole, as Kafka's recovery would delete them), never simply deleted; producer
snapshots and leader-epoch entries above the new log end offset go, as a broker's recovery
leaves them. Every step is safe to kill and a re-run finishes the job.

Work is dealt to tasks by partition, weighted by bytes (`segment_sizes`: listed by the driver
for a few hundred partitions, by a first pass in the tasks above that);
in verify mode a partition bigger than a fair share is split into runs of segments (a rebuild,
which writes, keeps each partition in one task).
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.ingestion.commit.publish import recover_interrupted_publish
from jobs.ingestion.run.reach import require_shared_root
from jobs.maintenance.common import (
    MaintenanceError,
    MaintenanceResult,
    maintenance_arg_parser,
    maintenance_lock,
    plan_slices,
    prepare_run,
    run_cli,
    run_units,
    segment_sizes,
)
from jobs.maintenance.report import write_report
from jobs.spark.tasks import default_parallelism
from kafkalog_core.log.names import QUARANTINE_FILE_SUFFIX, check_quarantine_suffix
from kafkalog_core.maintenance.rebuild import rebuild_partition
from kafkalog_core.maintenance.verify import verify_partition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOB = "rebuild-index"
MODES = ("verify", "rebuild")

REPORT_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("topic_partition", pa.string()),
        ("base_offset", pa.int64()),
        ("log_file", pa.string()),
        ("size_bytes", pa.int64()),
        ("log_status", pa.string()),
        ("index_status", pa.string()),
        ("time_index_status", pa.string()),
        ("txn_index_status", pa.string()),
        ("bad_batch_reason", pa.string()),
        ("first_bad_offset", pa.int64()),
        ("first_bad_position", pa.int64()),
        ("bytes_after_bad", pa.int64()),
        ("after_corrupt_segment", pa.bool_()),
        ("problem", pa.string()),
        ("note", pa.string()),
        ("bytes_quarantined", pa.int64()),
        ("quarantine_file", pa.string()),
        ("action", pa.string()),
        ("partition_problems", pa.string()),
        ("partition_actions", pa.string()),
        ("ok", pa.bool_()),
    ]
)


@dataclass(frozen=True)
class IndexJobOptions:
    log_dir: str
    mode: str
    rebuild_all: bool
    quarantine_suffix: str = QUARANTINE_FILE_SUFFIX  # retention's must match


def index_task(options: IndexJobOptions) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """Verify (or rebuild) one partition; one report row per segment."""

    def task(unit: dict[str, Any]) -> list[dict[str, Any]]:
        pdir = Path(options.log_dir) / unit["dir"]
        interval = int(unit["index_interval_bytes"])
        if options.mode == "rebuild":  # writes: always the whole partition in one task
            result = rebuild_partition(
                pdir,
                interval,
                rebuild_all=options.rebuild_all,
                quarantine_suffix=options.quarantine_suffix,
            )
        else:
            result = verify_partition(pdir, interval, only_segments=unit.get("only_segments"))
        problems = "; ".join(result.problems) or None
        actions = "; ".join(result.actions) or None
        rows = []
        for segment in result.segments:
            row = segment.to_dict()
            row.update(
                topic=unit["topic"],
                partition=unit["partition"],
                partition_problems=problems,
                partition_actions=actions,
                ok=segment.is_ok and not result.problems,
            )
            rows.append(row)
        return rows

    return task


def join_slices(rows: pa.Table) -> pa.Table:
    """Across the slices of a split partition, what `verify_partition` does within one: segments
    after one with a corrupt tail are what recovery drops, and the partition-file problems (found
    by the slice holding the last segment) belong to every row of the partition."""
    records = rows.to_pylist()
    corrupt_at: dict[tuple[str, int], int] = {}
    problems: dict[tuple[str, int], str] = {}
    for r in records:
        tp = (r["topic"], r["partition"])
        if r["log_status"] == "corrupt-tail":
            corrupt_at[tp] = min(corrupt_at.get(tp, r["base_offset"]), r["base_offset"])
        if r["partition_problems"]:
            problems[tp] = r["partition_problems"]
    for r in records:
        tp = (r["topic"], r["partition"])
        first = corrupt_at.get(tp)
        if first is not None and r["base_offset"] > first and not r["after_corrupt_segment"]:
            r["after_corrupt_segment"], r["ok"] = True, False
            reason = "follows a segment with a corrupt tail: recovery drops it"
            r["problem"] = f"{r['problem']}; {reason}" if r["problem"] else reason
        if tp in problems:
            r["partition_problems"], r["ok"] = problems[tp], False
    return pa.Table.from_pylist(records, schema=rows.schema)


def run(
    spark: SparkSession,
    log_dir: str,
    *,
    mode: str = "verify",
    rebuild_all: bool = False,
    topic_config: str | None = None,
    report: str | None = None,
    run_id: str | None = None,
    topics: Sequence[str] = (),
    now: str | int | None = None,
    tasks: int | None = None,
    out: Callable[[str], None] = print,
    quarantine_suffix: str = QUARANTINE_FILE_SUFFIX,
) -> MaintenanceResult:
    """Verify (read-only) or rebuild the indexes of every partition under `log_dir`.
    `quarantine_suffix` names the quarantine files (pass the same to the retention job)."""
    check_quarantine_suffix(quarantine_suffix)
    if mode not in MODES:
        raise MaintenanceError(f"--mode {mode!r}: expected one of {', '.join(MODES)}")
    if rebuild_all and mode != "rebuild":
        raise MaintenanceError("--all rebuilds every index: it needs --mode rebuild")
    require_shared_root(spark, log_dir)  # a Connect client: the server's tasks see it too
    setup = prepare_run(
        JOB, log_dir, run_id=run_id, now=now, topics=topics, topic_config=topic_config
    )
    options = IndexJobOptions(str(setup.root), mode, rebuild_all, quarantine_suffix)
    with maintenance_lock(setup.root, setup.run_id, read_only=mode == "verify", out=out):
        if mode == "rebuild":
            # an ingest publish a kill interrupted leaves `.cleaned`/`.swap` files that only its
            # journal can finish: a rebuild must not take them for a split of its own
            recovered = recover_interrupted_publish(setup.root)
            if recovered:
                out(f"kafkalog: an interrupted ingest publish was {recovered} first")
        units = [
            r.unit(index_interval_bytes=setup.configs[r.topic].config.index_interval_bytes)
            for r in setup.refs
        ]
        segments = segment_sizes(spark, setup.root, units, tasks=tasks)
        slots = tasks or max(1, default_parallelism(spark) * 2)
        units = plan_slices(
            units, lambda u: segments.get(u["dir"], []), slots, split=mode == "verify"
        )
        rows = run_units(spark, units, index_task(options), REPORT_SCHEMA, tasks=tasks)
        rows = join_slices(rows)
    rows = rows.sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("base_offset", "ascending")]
    )
    if report:
        write_report(spark, rows, report, run_id=setup.run_id, job=JOB)
    summary, problems = summarize(rows, setup.root, mode, setup.run_id)
    out(summary)
    return MaintenanceResult(JOB, setup.run_id, rows, summary, problems, [], spark)


def summarize(rows: pa.Table, root: Path, mode: str, run_id: str) -> tuple[str, int]:
    """The printed summary, and how many segments still need a rebuild (verify mode)."""
    records = rows.to_pylist()
    partitions = {(r["topic"], r["partition"]) for r in records}
    statuses: Counter[str] = Counter()
    for r in records:
        for column in ("log_status", "index_status", "time_index_status", "txn_index_status"):
            if r[column] != "ok":
                statuses[f"{column.removesuffix('_status').replace('_', ' ')}: {r[column]}"] += 1
    bad = [r for r in records if not r["ok"]]
    head = "read-only" if mode == "verify" else "rebuild"
    lines = [
        f"rebuild-index {run_id} ({head}) on {root}: {len(partitions)} partitions, "
        f"{len(records)} segments, {sum(r['size_bytes'] for r in records)} bytes",
        f"  {len(records) - len(bad)} segments ok, {len(bad)} not ok"
        if mode == "verify"
        else _rebuilt_sentence(records, len(bad)),
    ]
    for text, n in sorted(statuses.items()):
        lines.append(f"  {n} x {text}")
    noted = sorted(
        {f"{r['topic_partition']}/{r['log_file']}: {r['note']}" for r in records if r["note"]}
    )
    if noted:
        lines.append(
            f"  {len(noted)} segments with indexes spaced otherwise than index.interval.bytes "
            "(every lookup is right, so they count as ok):"
        )
        lines.extend(f"    {line}" for line in noted[:10])
        if len(noted) > 10:
            lines.append(f"    ... and {len(noted) - 10} more (--report keeps every note)")
    quarantined = [r for r in records if r["bytes_quarantined"]]
    for r in quarantined:
        lines.append(
            f"  {r['topic_partition']}/{r['log_file']}: {r['bytes_quarantined']} bytes from offset "
            f"{r['first_bad_offset']} moved to {r['quarantine_file']}"
        )
    if mode == "rebuild":
        return "\n".join(lines), 0
    shown = sorted(
        {f"{r['topic_partition']}: {r['problem'] or r['partition_problems']}" for r in bad}
    )
    lines.extend(f"  {line}" for line in shown[:20])
    if len(shown) > 20:
        lines.append(f"  ... and {len(shown) - 20} more (see the report)")
    if bad:
        lines.append("  run with --mode rebuild to fix them")
    return "\n".join(lines), len(bad)


def _rebuilt_sentence(records: list[dict[str, Any]], needed: int) -> str:
    """What a rebuild did, in one sentence: how many segments needed work, how many it rewrote
    (with --all, every one, needed or not) and how many tails it quarantined."""
    acted = [r for r in records if r["action"] not in (None, "none")]
    quarantined = sum(1 for r in acted if r["bytes_quarantined"])
    rewritten = len(acted) - quarantined
    done = []
    if rewritten:
        done.append(f"rewrote the indexes of {rewritten}")
    if quarantined:
        done.append(f"quarantined the corrupt tail of {quarantined}")
    did = " and ".join(done) if done else "changed nothing"
    why = " (--all rewrites every segment's indexes, ok or not)" if len(acted) > needed else ""
    return f"  {needed} of {len(records)} segments needed work; the rebuild {did}{why}"


def _parser() -> argparse.ArgumentParser:
    parser = maintenance_arg_parser(
        JOB, "Verify segments and their indexes (read-only), or rebuild what needs it."
    )
    parser.add_argument(
        "--mode", choices=MODES, default="verify", help="verify (default) or rebuild"
    )
    parser.add_argument("--all", action="store_true", help="with --mode rebuild: every index")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`spark-submit` entry: exit 0 when all is well (or fixed), 1 when verify found problems
    or the run failed (one `kafkalog: error:` line)."""
    return run_cli(
        JOB, argv, _parser(), run, lambda args: {"mode": args.mode, "rebuild_all": args.all}
    )


if __name__ == "__main__":
    from jobs.spark.session import exit_driver

    exit_driver(main())
