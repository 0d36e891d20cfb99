"""Spark's Delta reader (`delta_reader: spark`, the change feed through `readChangeFeed`) run for
real, beside delta-rs: the same table ingested through each gives byte-identical log dirs, for a
plain load and for a change-feed increment after an update and a delete.

The Spark side runs in its own process (tests/jobs/delta_spark.py) with delta-spark's jars,
fetched by tests/jvm_deps.py at the coordinates the installed delta-spark names."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tests import jvm_deps
from tests.conftest import REPO_ROOT
from tests.jobs.delta_spark import TOPIC, ingest_both
from tests.jobs.ingest_helpers import read_root, snapshot

pytestmark = pytest.mark.spark

T0 = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)


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
    try:
        jvm_deps.spark_jars("delta")  # fetched here: the child would fail with less to say
    except jvm_deps.JvmDepsUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    child = subprocess.run(
        [sys.executable, "-m", "tests.jobs.delta_spark", table, str(tmp_path / "spark")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    ingest_both(spark, table, tmp_path / "delta-rs", "delta-rs")
    for kind in ("plain", "cdf"):
        ours, theirs = tmp_path / "delta-rs" / kind, tmp_path / "spark" / kind
        assert read_root(ours), kind
        assert _partitions(ours) == _partitions(theirs), kind
    cdf = read_root(tmp_path / "delta-rs" / "cdf")
    assert sum(1 for r in cdf if r[4] is None) == 2  # the deletes' tombstones
