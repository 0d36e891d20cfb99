"""The arrow task reader on Hive-format tables (`arrow_sources`): a Parquet table partitioned by a
string and an int column is read by the tasks into the same bytes as Spark's reader writes; the
same table read through the Hive SerDe (`spark.sql.hive.convertMetastoreParquet=false`) and a
text table keep the Spark reader, and the summary says why.

The test session's SparkSession has no Hive support (a static setting), so one Spark process
with Hive support runs every case once for the module (`hive_runs`); the tests assert on what
its runs returned and on their output dirs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.jobs import hive_runs
from tests.jobs.ingest_helpers import expected_records, read_root, snapshot, source_rows

pytestmark = pytest.mark.spark

PARTITIONS = {"events": 3}
TABLE = f"{hive_runs.DB}.events"


@pytest.fixture(scope="module")
def hive(tmp_path_factory) -> dict:
    """What `hive_runs` returned (one Spark process with Hive support for the module)."""
    work = tmp_path_factory.mktemp("hive")
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {
        **os.environ,
        "PYTHONPATH": path,  # the Python workers import jobs.* too
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tests.jobs.hive_runs", str(work)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    results = work / "results.json"
    if not results.is_file():
        pytest.fail(f"hive_runs exited {proc.returncode} without results:\n{proc.stderr[-4000:]}")
    found = json.loads(results.read_text())
    if "failed" in found:
        pytest.fail(f"hive_runs failed:\n{found['failed']}")
    return found


def _seq(record: tuple) -> int:
    """A record's source row id: its first header, seq (`source_rows`)."""
    return int(record[5][0]["value"])


def _content(root: Path) -> list[tuple]:
    """The records of a log dir without their offsets, in a fixed order."""
    return sorted(((r[1], *r[3:]) for r in read_root(root)), key=repr)


def test_the_table_is_hive_format_parquet_in_partition_directories(hive):
    described = hive["describe"]
    assert (described["Provider"], described["Type"]) == ("hive", "MANAGED")
    assert described["InputFormat"].endswith("MapredParquetInputFormat")
    files = hive["table"]["files"]
    dirs = {f.rsplit("/", 3)[-3] + "/" + f.rsplit("/", 3)[-2] for f in files}
    # 3 days x 3 ns; a/b=c as Spark escapes it in a path (and URL-encodes it in inputFiles)
    days = ("2024-05-01", "a%252Fb%253Dc", "__HIVE_DEFAULT_PARTITION__")
    assert dirs == {f"day={d}/n={n}" for d in days for n in range(3)}
    assert len(files) > len(dirs)  # a few files per partition


def test_a_hive_parquet_table_is_read_by_the_tasks_into_the_same_bytes(hive):
    arrow, plain = hive["parquet"]["arrow"], hive["parquet"]["spark"]
    assert (arrow["task_reader"], plain["task_reader"]) == ("arrow", "spark")
    assert (
        "task reader: arrow: local files, plain-column mappings, direct mode\n" in arrow["summary"]
    )
    assert arrow["records"] == plain["records"] == hive_runs.ROWS
    assert snapshot(Path(arrow["root"])) == snapshot(Path(plain["root"]))
    # in Spark's read order (its splits), headers and times as the oracle says
    by_id = {r["id"]: r for r in source_rows(hive_runs.ROWS, seed=hive_runs.SEED)}
    in_order = [by_id[i] for i in hive["table"]["order"]]
    assert read_root(Path(arrow["root"])) == expected_records(in_order, PARTITIONS, in_order=True)


def test_a_hive_tables_partition_values_come_from_its_paths(hive):
    """Key: the string partition column day (escaped, null), partition: the int one n."""
    arrow, plain = hive["by_n"]["arrow"], hive["by_n"]["spark"]
    assert (arrow["task_reader"], plain["task_reader"]) == ("arrow", "spark")
    assert snapshot(Path(arrow["root"])) == snapshot(Path(plain["root"]))
    got = read_root(Path(arrow["root"]))
    assert len(got) == hive_runs.ROWS
    assert all(r[1] == _seq(r) % 3 for r in got)  # partition = n = id % 3
    days = [hive_runs.DAYS[_seq(r) % 5] for r in got]
    assert [r[3] for r in got] == [None if d is None else d.encode() for d in days]
    order = hive["table"]["order"]
    for p in range(3):
        assert [_seq(r) for r in got if r[1] == p] == [i for i in order if i % 3 == p]


def _falls_back(run: dict, refused: dict, why: str) -> None:
    """`run` (task_reader auto) kept the Spark reader and said why; `refused` (arrow) raised."""
    assert (run["task_reader"], run["records"]) == ("spark", hive_runs.ROWS)
    assert run["summary"].endswith(f"task reader: auto: not the arrow reader, as {why}")
    assert refused["error"] == f"ConfigError: source.task_reader=arrow cannot read this run: {why}"


def test_a_hive_serde_read_keeps_the_spark_reader_and_says_why(hive):
    why = (
        f"Spark reads table {TABLE} through the Hive SerDe, not its Parquet reader "
        "(spark.sql.hive.convertMetastoreParquet=false)"
    )
    _falls_back(hive["serde"]["auto"], hive["serde"]["arrow"], why)
    # the same records as Spark's Parquet reader gives, in the SerDe's order
    serde_root = Path(hive["serde"]["auto"]["root"])
    assert _content(serde_root) == _content(Path(hive["parquet"]["spark"]["root"]))


def test_a_hive_text_table_keeps_the_spark_reader_and_says_why(hive):
    why = (
        f"table {hive_runs.DB}.as_text is not stored as Parquet "
        "(provider hive, input format org.apache.hadoop.mapred.TextInputFormat)"
    )
    _falls_back(hive["text"]["auto"], hive["text"]["arrow"], why)
