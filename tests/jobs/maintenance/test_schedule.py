"""The scheduler's job arguments: every job parses them, retries reuse run ids, rules use --now."""

from __future__ import annotations

import dataclasses

import jobs.compact as compact_job
import jobs.compaction_audit as audit_job
import jobs.rebuild_index as index_job
import jobs.retention as retention_job
from jobs.ingestion.config.ingest_config import build_arg_parser
from jobs.maintenance.schedule import (
    PipelineSettings,
    job_run_id,
    pipeline,
)

SETTINGS = PipelineSettings("conf/x.yaml", "/data/logs", "/data/reports/", "/data/topics.yaml")
RUN = "scheduled__2024-05-01T00_00_00_00_00"
NOW = "2024-05-02T00:00:00+00:00"

PARSERS = {
    "ingest.py": build_arg_parser("ingest"),
    "compact.py": compact_job._parser(),
    "retention.py": retention_job._parser(),
    "rebuild_index.py": index_job._parser(),
    "compaction_audit.py": audit_job._parser(),
}


def test_pipeline_order_and_every_job_parses_its_arguments() -> None:
    tasks = pipeline(SETTINGS, RUN, NOW)
    assert list(tasks) == [
        "ingest",
        "compact",
        "retention_dry_run",
        "retention_apply",
        "verify_indexes",
        "compaction_audit",
    ]
    for task_id, (job_file, args) in tasks.items():
        parsed = PARSERS[job_file].parse_args(list(args))
        assert parsed.run_id.startswith(RUN), task_id
        if job_file != "ingest.py":
            assert parsed.log_dir == "/data/logs" and parsed.now == NOW, task_id
            assert parsed.topic_config == "/data/topics.yaml"
            assert parsed.report.startswith("/data/reports/") and "//" not in parsed.report


def test_run_ids_are_stable_per_step_and_distinct_between_steps() -> None:
    first, retry = pipeline(SETTINGS, RUN, NOW), pipeline(SETTINGS, RUN, NOW)
    assert first == retry  # a retried task passes exactly the same arguments
    ids = [PARSERS[f].parse_args(list(a)).run_id for f, a in first.values()]
    assert len(set(ids)) == len(ids)
    assert ids[0] == RUN and job_run_id(RUN, "verify") in ids


def test_dry_run_then_apply() -> None:
    tasks = pipeline(SETTINGS, RUN, NOW)
    assert compact_job._parser().parse_args(list(tasks["compact"][1])).apply
    assert not retention_job._parser().parse_args(list(tasks["retention_dry_run"][1])).apply
    applied = retention_job._parser().parse_args(list(tasks["retention_apply"][1]))
    assert applied.apply and not applied.assume_defaults
    accepting = dataclasses.replace(SETTINGS, assume_defaults=True)
    for task, wanted in (("retention_apply", True), ("retention_dry_run", False)):
        args = list(pipeline(accepting, RUN, NOW)[task][1])
        assert retention_job._parser().parse_args(args).assume_defaults is wanted
    verify = index_job._parser().parse_args(list(tasks["verify_indexes"][1]))
    assert verify.mode == "verify" and not verify.all
    audit = audit_job._parser().parse_args(list(tasks["compaction_audit"][1]))
    assert audit.html.endswith(f"{RUN}-audit.html")
    compact = compact_job._parser().parse_args(list(tasks["compact"][1]))
    assert audit.compact_report == compact.report  # the page shows that run's before/after


def test_a_changelog_task_after_ingest_continues_from_the_history() -> None:
    settings = PipelineSettings(
        "conf/x.yaml", "/data/logs", "/data/reports", changelog_config="conf/changes.yaml"
    )
    tasks = pipeline(settings, RUN, NOW, interval=("2024-05-01", "2024-05-02"))
    assert list(tasks)[:3] == ["ingest", "ingest_changelog", "compact"]
    job_file, args = tasks["ingest_changelog"]
    parsed = build_arg_parser("ingest").parse_args(list(args))
    assert job_file == "ingest.py" and parsed.config == "conf/changes.yaml"
    assert parsed.run_id == job_run_id(RUN, "changelog") and parsed.output == "/data/logs"
    # The versions come from the ingest history, not from the scheduler's interval.
    assert parsed.since_version is None and parsed.data_interval_start is None
    assert "ingest_changelog" not in pipeline(SETTINGS, RUN, NOW)


def test_data_interval_goes_to_ingest() -> None:
    args = pipeline(SETTINGS, RUN, NOW, interval=("2024-05-01", "2024-05-02"))["ingest"][1]
    parsed = build_arg_parser("ingest").parse_args(list(args))
    assert (parsed.data_interval_start, parsed.data_interval_end) == ("2024-05-01", "2024-05-02")
