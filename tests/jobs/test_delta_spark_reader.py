"""Spark's Delta reader (`delta_reader: spark`, the change feed through `readChangeFeed`) run for
real, beside delta-rs: the same table ingested through each gives byte-identical log dirs, for a
plain load and for a change-feed increment after an update and a delete.

The Spark side runs in a driver of its own (tests/jobs/delta_spark_driver.py) with delta-spark's
jars, fetched by tests/jvm_deps.py at the coordinates the installed delta-spark names."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from jobs.ingest import run
from jobs.ingestion.config.ingest_config import IngestConfig
from tests.jobs import delta_spark_driver
from tests.jobs.ingest_helpers import read_root, snapshot

pytestmark = pytest.mark.spark

T0 = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
TOPIC = "customers"
CDF_RUNS = (0, 2)  # the first run reads version 0's inserts, the second the update and delete


def _doc(table: str, root: Path, reader: str, source: dict, headers: dict) -> dict:
    """The records' timestamps are a column of the table, not `_commit_timestamp`: the readers
    give a commit different times (docs/ingest.md, Delta Lake)."""
    return {
        "source": {"format": "delta", "path": table, "delta_reader": reader, **source},
        "output": {"root": str(root)},
        "topics": {
            TOPIC: {
                "partitions": 2,
                "config": {"cleanup.policy": "compact", "segment.bytes": 1024},
            }
        },
        "mapping": {
            "topic": TOPIC,
            "key": {"column": "id", "format": "string"},
            "value": {"columns": ["id", "name", "updated_at"], "format": "json"},
            "timestamp": {"column": "updated_at"},
            **({"headers": {"values": headers}} if headers else {}),
        },
        "ordering": ["id"],
    }


def _runs(table: str, out: Path, reader: str) -> list[dict]:
    """OUT/plain: the table's latest snapshot; OUT/cdf: its change feed in CDF_RUNS."""
    headers = {"version": "cast(_commit_version as string)", "change": "_change_type"}
    return [
        {"doc": _doc(table, out / "plain", reader, {}, {}), "run_id": "plain", "tasks": 1},
        *(
            {
                "doc": _doc(table, out / "cdf", reader, {"changes": "cdf", "version": v}, headers),
                "run_id": f"cdf-{v}",
                "tasks": 1,
            }
            for v in CDF_RUNS
        ),
    ]


def _rows(items: list[tuple[int, str]]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([i for i, _ in items], pa.int64()),
            "name": [n for _, n in items],
            "updated_at": pa.array(
                [T0 + dt.timedelta(minutes=i) for i, _ in items], pa.timestamp("us", tz="UTC")
            ),
        }
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:
    """Version 0: six rows, the change data feed on; 1: an update; 2: a delete."""
    path = str(tmp_path_factory.mktemp("delta") / "customers")
    rows = _rows([(i, f"v0-{i}") for i in range(1, 7)])
    write_deltalake(path, rows, configuration={"delta.enableChangeDataFeed": "true"})
    DeltaTable(path).update(new_values={"name": "'v1'"}, predicate="id = 2 OR id = 4")
    DeltaTable(path).delete("id = 1 OR id = 3")
    assert DeltaTable(path).version() == 2
    return path


def _partitions(root) -> dict[str, str]:
    """Every file of the topic's partition dirs (the ingest history beside them names its runs'
    times and hosts)."""
    return {k: v for k, v in snapshot(root).items() if k.startswith(f"{TOPIC}-")}


def test_spark_and_delta_rs_readers_give_byte_identical_log_dirs(spark, table, tmp_path):
    results = delta_spark_driver.run_all(_runs(table, tmp_path / "spark", "spark"), tmp_path)
    assert [r.get("status") for r in results] == ["committed"] * 3, results
    for item in _runs(table, tmp_path / "delta-rs", "delta-rs"):
        config = IngestConfig.from_dict(item["doc"])
        result = run(spark, config, run_id=item["run_id"], tasks=1, out=lambda *_: None)
        assert result.status == "committed", result
    for kind in ("plain", "cdf"):
        ours, theirs = tmp_path / "delta-rs" / kind, tmp_path / "spark" / kind
        assert read_root(ours), kind
        assert _partitions(ours) == _partitions(theirs), kind
    cdf = read_root(tmp_path / "delta-rs" / "cdf")
    assert sum(1 for r in cdf if r[4] is None) == 2  # the deletes' tombstones
