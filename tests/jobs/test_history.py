"""Ingest history: Delta rows per run, lookups that make re-runs a no-op, the summary."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from deltalake import DeltaTable

from jobs.ingestion.commit.plan import RunInfo, plan_publish
from jobs.ingestion.commit.publish import publish
from jobs.ingestion.commit.state import scan_existing_state
from jobs.ingestion.run.history import SCHEMA, IngestHistory, format_summary
from jobs.ingestion.run.meta import IngestError
from kafkalog_core.root.meta_area import meta_root
from tests.jobs.commit_helpers import stage_range


def test_two_runs_recorded_and_found(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    history = IngestHistory(root)
    assert history.path.parent == meta_root(root)
    assert not history.exists() and history.find_run("r1") is None and history.last_runs() == []

    for run, version, first, counts in (("r1", "7", 0, [3]), ("r2", "8", 3, [2, 2])):
        manifest = stage_range(root, run, "orders", 0, 0, first, counts)
        info = RunInfo(
            source="delta:/data/orders",
            source_version=version,
            started_at_ms=1_700_000_000_000,
            config_hash="abc123",
            timings_ms={"write": 12},
        )
        plan = plan_publish(
            [manifest],
            scan_existing_state(root),
            output_root=root,
            run_id=run,
            run_info=info,
        )
        publish(plan)

    r1 = history.find_run("r1")
    assert r1["rows"] == 3 and r1["partitions"] == {"orders-0": [0, 3]}
    assert r1["status"] == "committed" and r1["config_hash"] == "abc123"
    assert r1["timings"]["write"] == 12 and "publish" in r1["timings"]
    assert r1["started_at"] == datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)
    assert history.find_source_version("delta:/data/orders", "8")["run_id"] == "r2"
    assert history.find_source_version("delta:/data/orders", "9") is None
    assert history.find_source_version("delta:/other", "8") is None
    assert [r["run_id"] for r in history.last_runs(1)] == ["r2"]

    # Readable by any Delta reader, with our schema.
    table = DeltaTable(str(history.path))
    assert table.version() == 1
    data = table.to_pyarrow_table()
    assert data.num_rows == 2 and data.schema.names == SCHEMA.names
    assert sorted(table.to_pandas()["run_id"]) == ["r1", "r2"]

    r2 = history.find_run("r2")
    summary = format_summary(r2)
    # the run's own time (its laps), not since its start time (here years back, as a --now)
    took = sum(r2["timings"].values()) / 1000
    assert summary.splitlines()[0] == (
        f"run r2: committed, 4 records from delta:/data/orders@8 into 1 partitions in {took:.1f}s"
    )
    assert "  orders-0: offsets [3, 7) (4 offsets)" in summary


def test_status_filter_and_unknown_fields(tmp_path: Path) -> None:
    history = IngestHistory(tmp_path / "logs")
    history.append({"run_id": "r9", "status": "failed", "source": "s", "source_version": "1"})
    assert history.find_run("r9") is None
    assert history.find_run("r9", status=None)["status"] == "failed"
    assert history.find_source_version("s", "1") is None
    with pytest.raises(IngestError, match="unknown fields"):
        history.append({"run_id": "x", "status": "committed", "oops": 1})
