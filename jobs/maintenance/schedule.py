"""The arguments a scheduler (Airflow) passes to each kafkalog job, as plain functions.

Kept free of Airflow so they are unit-tested in kafkalog's own suite; `conf/airflow/` builds its
DAG from them. What makes a retried task harmless:
- every job gets a run id derived from the scheduler's run id and the task, so a retry reuses
  it: ingest then no-ops when that run is committed, reports replace that run's rows;
- rules are judged at the data interval's end (`--now`), not the wall clock, so a retry (or a
  backfill) decides exactly what the first try decided.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Airflow templates: its run id made file-name safe (it holds ':' and '+'), and the data
# interval's end as the "now" every rule is judged at.
AIRFLOW_RUN_ID = "{{ run_id | replace(':', '_') | replace('+', '_') }}"
AIRFLOW_NOW = "{{ data_interval_end.isoformat() }}"


def job_run_id(run_id: str, *steps: str) -> str:
    """The run id of one step of a scheduled run: stable across retries, distinct per step."""
    return "-".join([run_id, *steps])


@dataclass(frozen=True)
class PipelineSettings:
    """Where things are: the ingest config, the log dir root, the reports, topic configs;
    whether retention may delete by Kafka's defaults where nothing names a topic's settings; and
    a changelog's config (`source.changes: cdf`), whose task ingests a Delta table's changes."""

    ingest_config: str
    log_dir: str
    report_root: str
    topic_config: str | None = None
    assume_defaults: bool = False
    changelog_config: str | None = None


def _common(settings: PipelineSettings, job: str, run_id: str, now: str) -> list[str]:
    args = ["--log-dir", settings.log_dir, "--run-id", run_id, "--now", now]
    args += ["--report", f"{settings.report_root.rstrip('/')}/{job}"]
    if settings.topic_config:
        args += ["--topic-config", settings.topic_config]
    return args


def ingest_args(
    settings: PipelineSettings, run_id: str, interval: tuple[str, str] | None = None
) -> list[str]:
    """`ingest`: the config, the output root and the run id (a committed run id is a no-op)."""
    args = ["--config", settings.ingest_config, "--output", settings.log_dir, "--run-id", run_id]
    if interval is not None:
        args += ["--data-interval-start", interval[0], "--data-interval-end", interval[1]]
    return args


def changelog_args(settings: PipelineSettings, run_id: str) -> list[str]:
    """`ingest` of a change data feed: no interval and no version, as each run reads the
    versions after the last one ingested (a committed run id is a no-op here too)."""
    assert settings.changelog_config is not None
    rid = job_run_id(run_id, "changelog")
    return ["--config", settings.changelog_config, "--output", settings.log_dir, "--run-id", rid]


def compact_args(settings: PipelineSettings, run_id: str, now: str) -> list[str]:
    """`compact --apply`: Kafka's log cleaner on the compacted topics (the others it leaves
    alone), judged at `now`, so a retry decides what the first try decided."""
    return [*_common(settings, "compact", job_run_id(run_id, "compact"), now), "--apply"]


def retention_args(settings: PipelineSettings, run_id: str, now: str, *, apply: bool) -> list[str]:
    """`retention`: a dry run, or `--apply` (with `--assume-defaults` when the settings say so);
    each its own run id (its own report rows)."""
    step = "apply" if apply else "dry-run"
    args = _common(settings, "retention", job_run_id(run_id, "retention", step), now)
    if not apply:
        return args
    return [*args, "--apply", *(["--assume-defaults"] if settings.assume_defaults else [])]


def verify_args(settings: PipelineSettings, run_id: str, now: str) -> list[str]:
    """`rebuild-index --mode verify`: read-only; exits 1 when something needs a rebuild."""
    return [
        *_common(settings, "rebuild-index", job_run_id(run_id, "verify"), now),
        "--mode",
        "verify",
    ]


def audit_args(settings: PipelineSettings, run_id: str, now: str) -> list[str]:
    """`compaction-audit`, with its offline HTML page next to the reports, showing the compact
    task's before and after."""
    rid = job_run_id(run_id, "audit")
    root = settings.report_root.rstrip("/")
    html = f"{root}/compaction-audit-html/{rid}.html"
    args = [*_common(settings, "compaction-audit", rid, now), "--html", html]
    return [*args, "--compact-report", f"{root}/compact"]


def pipeline(
    settings: PipelineSettings, run_id: str, now: str, interval: tuple[str, str] | None = None
) -> dict[str, tuple[str, Sequence[str]]]:
    """task id -> (job file under jobs/, arguments), in the order the tasks run."""
    ingests = {"ingest": ("ingest.py", ingest_args(settings, run_id, interval))}
    if settings.changelog_config is not None:
        ingests["ingest_changelog"] = ("ingest.py", changelog_args(settings, run_id))
    return {
        **ingests,
        "compact": ("compact.py", compact_args(settings, run_id, now)),
        "retention_dry_run": ("retention.py", retention_args(settings, run_id, now, apply=False)),
        "retention_apply": ("retention.py", retention_args(settings, run_id, now, apply=True)),
        "verify_indexes": ("rebuild_index.py", verify_args(settings, run_id, now)),
        "compaction_audit": ("compaction_audit.py", audit_args(settings, run_id, now)),
    }
