"""Each topic judged by the settings of the run that wrote it, whatever ran after it.

The demo's case, with real writes: one run writes `customers` (compacted, small segments and
index interval) and `archive` (retention.ms=-1), both with 2020 timestamps; a later run writes
only `orders-events`. Judged by Kafka's defaults (what the newest run alone would say), retention
would delete most of both topics and the audit would call `customers` not compacted.
"""

from __future__ import annotations

import hashlib
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

import jobs.compaction_audit as audit_job
import jobs.rebuild_index as index_job
import jobs.retention as retention_job

pytestmark = pytest.mark.spark

NOW = int(time.time() * 1000)
OLD = datetime(2020, 3, 1, tzinfo=timezone.utc)


def _write(
    spark, root: Path, run_id: str, topic: str, rows: int, when: datetime = OLD, **settings: str
) -> None:
    frame = spark.createDataFrame(
        [(f"k{i % 30}".encode(), (f"{topic}-{i}-" + "x" * 90).encode(), when) for i in range(rows)],
        "key binary, value binary, timestamp timestamp",
    ).coalesce(1)
    writer = frame.write.format("kafkalog").mode("append").option("runId", run_id)
    writer = writer.option("topic", topic).option(f"topics.{topic}.partitions", "1")
    for name, value in settings.items():
        writer = writer.option(f"topics.{topic}.config.{name}", value)
    writer.save(str(root))


def _digest(pdir: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(pdir.iterdir())}


@pytest.fixture(scope="module")
def root(spark, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("per-topic") / "logs"
    _write(
        spark,
        root,
        "demo-customers",
        "customers",
        400,
        **{"cleanup.policy": "compact", "segment.bytes": "8192", "index.interval.bytes": "1024"},
    )
    _write(
        spark,
        root,
        "archive-run",
        "archive",
        200,
        **{"retention.ms": "-1", "segment.bytes": "4096"},
    )
    # later, another topic only
    _write(spark, root, "demo-orders", "orders-events", 50, datetime.now(tz=timezone.utc))
    return root


def test_retention_keeps_the_topics_their_own_runs_protect(spark, root: Path) -> None:
    before = {t: _digest(root / f"{t}-0") for t in ("customers", "archive")}
    assert len([n for n in before["customers"] if n.endswith(".log")]) > 2
    assert len([n for n in before["archive"] if n.endswith(".log")]) > 1
    lines: list[str] = []
    dry = retention_job.run(spark, str(root), now=NOW, out=lines.append)
    rows = dry.rows.to_pylist()
    for topic, run in (("customers", "demo-customers"), ("archive", "archive-run")):
        mine = [r for r in rows if r["topic"] == topic]
        assert mine and {r["action"] for r in mine} == {"keep"}, topic
        assert f"(ingest run {run})" in mine[0]["settings"]
    customers = next(r for r in rows if r["topic"] == "customers")
    assert "cleanup.policy=compact (ingest run demo-customers)" in customers["settings"]
    archive = next(r for r in rows if r["topic"] == "archive")
    assert "retention.ms=-1 (ingest run archive-run)" in archive["settings"]
    assert not dry.warnings  # every topic's settings are known: no assumed defaults
    applied = retention_job.run(spark, str(root), now=NOW, apply=True, out=lines.append)
    assert not any(r["applied"] for r in applied.rows.to_pylist())
    assert {t: _digest(root / f"{t}-0") for t in before} == before


def test_the_audit_and_verify_judge_customers_by_its_own_run(spark, root: Path) -> None:
    audit = audit_job.run(spark, str(root), all_topics=True, now=NOW, out=lambda _line: None)
    verdicts = {r["topic"]: r["verdict"] for r in audit.rows.to_pylist()}
    assert not verdicts["customers"].startswith("not compacted"), verdicts["customers"]
    assert verdicts["orders-events"] == "not compacted (cleanup.policy=delete)"
    # its indexes were written every 1024 bytes: verify expects them so
    verify = index_job.run(spark, str(root), now=NOW, out=lambda _line: None)
    assert verify.problems == 0
