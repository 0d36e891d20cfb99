"""Every job and the data source from a Spark Connect client: the same files and the same
reports as from a classic session, on the same input.

`connect` is a client of the test run's own local Connect server (the `spark` session's JVM,
tests/conftest.py): no SparkContext, RDDs or JVM handles on its side.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs import compact, compaction_audit, rebuild_index, retention
from jobs.ingest import run as ingest
from jobs.ingestion.config.ingest_config import IngestConfig
from kafkalog_core.root.meta_area import meta_root
from tests.jobs.ingest_helpers import (
    BASE_MS,
    SOURCE_SCHEMA,
    config_doc,
    snapshot,
    source_order_doc,
    source_rows,
    write_parquet,
)
from tests.spark_mode import MODE, spark_mode

N = 300
FILE_ROWS = (90, 700, 40, 260)  # rows per file of `files_source`: path order is not size order
DAY_MS = 86_400_000
TOPICS = {
    "events": {
        "partitions": 2,
        "config": {
            "segment.bytes": 8192,
            "index.interval.bytes": 1024,
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": 0.01,
        },
    }
}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return write_parquet(tmp_path_factory.mktemp("connect-src"), source_rows(N), files=1)


def _sessions(spark, connect) -> Iterator[tuple[str, object]]:
    for kind, session in (("classic", spark), ("connect", connect)):
        with spark_mode(kind):
            yield kind, session


@pytest.mark.spark
@pytest.mark.parametrize(
    ("reader", "mode"),
    [("spark", "direct"), ("spark", "range"), ("arrow", "direct"), ("arrow", "range")],
)
def test_ingest_gives_the_same_files_from_either_session(
    spark, connect, source, tmp_path, reader, mode
):
    results, files = {}, {}
    for kind, session in _sessions(spark, connect):
        root = tmp_path / kind / "logs"
        doc = source_order_doc(source, root, reader, headers=reader == "spark", topics=TOPICS)
        doc["output"]["write_mode"] = mode
        result = ingest(session, IngestConfig.from_dict(doc), run_id="r1", out=lambda _: None)
        assert result.status == "committed" and result.records == N, kind
        assert (result.task_reader, result.write_mode) == (reader, mode), result.summary
        results[kind], files[kind] = result, snapshot(root)
    assert files["connect"] == files["classic"]
    assert any(name.endswith(".log") for name in files["classic"])
    assert results["connect"].partitions == results["classic"].partitions


@pytest.fixture(scope="module")
def files_source(tmp_path_factory) -> Path:
    """Files whose path order is not their size order; part-001 has several row groups, so
    24 KB splits cut it into byte ranges."""
    path = tmp_path_factory.mktemp("connect-files")
    rows, at = source_rows(sum(FILE_ROWS), seed=5), 0
    for f, count in enumerate(FILE_ROWS):
        table = pa.Table.from_pylist(rows[at : at + count], schema=SOURCE_SCHEMA)
        pq.write_table(table, path / f"part-{f:03d}.parquet", row_group_size=60)
        at += count
    return path


@contextlib.contextmanager
def _split_bytes(session, value: str) -> Iterator[None]:
    key = "spark.sql.files.maxPartitionBytes"
    before = session.conf.get(key)
    session.conf.set(key, value)
    try:
        yield
    finally:
        session.conf.set(key, before)


@pytest.mark.spark
@pytest.mark.parametrize("split", ["24000", "128m"])
def test_arrow_reader_plans_the_same_splits_of_several_files_from_either_session(
    spark, connect, files_source, tmp_path, split
):
    """`ordering: source` over files of different sizes: both sessions plan Spark's splits in
    Python (largest first, the big file cut into ranges), so the records come in the same
    order, with the same bytes as Spark's own reader gives."""
    files = {}
    runs = [(kind, session, "arrow") for kind, session in _sessions(spark, connect)]
    for kind, session, reader in [*runs, ("spark", spark, "spark")]:
        root = tmp_path / kind / "logs"
        doc = source_order_doc(files_source, root, reader, headers=False, topics=TOPICS)
        doc["output"]["write_mode"] = "direct"
        with (
            spark_mode("connect" if kind == "connect" else "classic"),
            _split_bytes(session, split),
        ):
            result = ingest(session, IngestConfig.from_dict(doc), run_id="r1", out=lambda _: None)
        assert result.task_reader == reader and result.records == sum(FILE_ROWS), result.summary
        files[kind] = snapshot(root)
    assert files["connect"] == files["classic"] == files["spark"]


@pytest.fixture(scope="module")
def log_root(spark, source, tmp_path_factory) -> Path:
    """An ingested log of several segments per partition (written once, copied per run)."""
    root = tmp_path_factory.mktemp("connect-log") / "logs"
    doc = config_doc(source, root, topics=TOPICS)
    ingest(spark, IngestConfig.from_dict(doc), run_id="base", out=lambda _: None)
    return root


def _comparable(rows: pa.Table, root: Path) -> list[dict]:
    """Report rows with the run's own root taken out of any text."""
    out = []
    for row in rows.to_pylist():
        out.append(
            {k: v.replace(str(root), "ROOT") if isinstance(v, str) else v for k, v in row.items()}
        )
    return out


JOBS = {
    "retention": lambda s, d: retention.run(s, d, apply=True, now=BASE_MS + 30 * DAY_MS, **_q()),
    "rebuild-index": lambda s, d: rebuild_index.run(s, d, mode="rebuild", rebuild_all=True, **_q()),
    "verify": lambda s, d: rebuild_index.run(s, d, mode="verify", **_q()),
    "compaction-audit": lambda s, d: compaction_audit.run(s, d, now=BASE_MS + DAY_MS, **_q()),
    "compact": lambda s, d: compact.run(s, d, apply=True, now=BASE_MS + DAY_MS, **_q()),
}


def _q() -> dict:
    return {"run_id": "m1", "out": lambda _: None}


@pytest.mark.spark
@pytest.mark.parametrize("job", list(JOBS))
def test_maintenance_gives_the_same_files_and_report_from_either_session(
    spark, connect, log_root, tmp_path, job
):
    seen = {}
    for kind, session in _sessions(spark, connect):
        root = tmp_path / kind / "logs"
        shutil.copytree(log_root, root)
        shutil.copytree(meta_root(log_root), meta_root(root))  # the ingest's run history
        result = JOBS[job](session, str(root))
        seen[kind] = (
            snapshot(root),
            _comparable(result.rows, root),
            result.summary.replace(str(root), "ROOT"),
            result.problems,
        )
    assert seen["connect"] == seen["classic"]
    assert seen["classic"][1], "the job reported no rows: the test would prove nothing"
    if job in ("retention", "compact"):  # they changed the log, the same way
        assert seen["classic"][0] != snapshot(log_root)


T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
# a timestamp of their own: the sink stamps rows without one with the write's clock
ROWS = [(f"k{i % 7}".encode(), f"v{i}".encode(), T0 + timedelta(seconds=i)) for i in range(60)]
SINK_DDL = "key binary, value binary, timestamp timestamp"


def _read(session, root: Path) -> list[tuple]:
    frame = session.read.format("kafkalog").option("subscribe", "orders").load(str(root))
    rows = frame.select("partition", "offset", "key", "value", "timestamp").toArrow()
    return sorted(zip(*(rows.column(c).to_pylist() for c in rows.column_names), strict=True))


@pytest.mark.spark
def test_data_source_writes_and_reads_the_same_from_either_session(spark, connect, tmp_path):
    """format("kafkalog") auto-registered on the server (its Python imports kafkalog)."""
    files, back = {}, {}
    for kind, session in _sessions(spark, connect):
        root = tmp_path / kind / "logs"
        frame = session.createDataFrame(ROWS, SINK_DDL).coalesce(1)
        writer = frame.write.format("kafkalog").mode("append").option("topic", "orders")
        writer.option("topics.orders.partitions", "2").option("runId", "w1").save(str(root))
        files[kind], back[kind] = snapshot(root), _read(session, root)
    assert files["connect"] == files["classic"]
    assert back["connect"] == back["classic"] and len(back["classic"]) == len(ROWS)


@pytest.mark.spark
def test_data_source_registered_from_the_client(connect, tmp_path):
    import pyspark_kafkalog

    root = tmp_path / "logs"
    with spark_mode("connect"):
        pyspark_kafkalog.register(connect)
        frame = connect.createDataFrame(ROWS, SINK_DDL).coalesce(1)
        frame.write.format("kafkalog").mode("append").option("topic", "orders").save(str(root))
        assert sorted(r[3] for r in _read(connect, root)) == sorted(r[1] for r in ROWS)


@pytest.mark.spark
def test_workers_without_kafkalog_give_one_line(connect):
    """What register() and a Connect job's start ask the server's Python workers: a module
    they cannot import is named with what to install where."""
    from jobs.spark.tasks import missing_on_workers, require_kafkalog_on_workers
    from kafkalog_core.errors import ConfigError

    with spark_mode("connect"):
        assert missing_on_workers(connect) == ""
        absent = ("kafkalog_core", "kafkalog_core_not_installed_here")
        assert missing_on_workers(connect, absent) == absent[1]
        with pytest.raises(ConfigError) as caught:
            require_kafkalog_on_workers(connect, absent)
    line = str(caught.value)
    assert "\n" not in line and "install the kafkalog package" in line, line
    assert "no module named 'kafkalog_core_not_installed_here'" in line, line


@pytest.mark.spark
def test_spark_submit_remote_runs_a_job_as_a_connect_client(spark, log_root, tmp_path):
    """`./spark-submit.sh JOB --remote URL`: the job in plain Python (no JVM of its own) as a
    client of the server; its summary is the classic run's."""
    import subprocess

    root = tmp_path / "logs"
    shutil.copytree(log_root, root)
    shutil.copytree(meta_root(log_root), meta_root(root))
    script = Path(__file__).resolve().parents[2] / "spark-submit.sh"
    env = {k: v for k, v in os.environ.items() if k not in (MODE, "PYSPARK_GATEWAY_PORT")}
    done = subprocess.run(
        [
            str(script),
            "rebuild-index",
            "--log-dir",
            str(root),
            "--run-id",
            "v1",
            "--remote",
            spark.kafkalog_connect_url,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    classic = rebuild_index.run(spark, str(root), run_id="v1", out=lambda _: None)
    assert classic.summary.strip() in done.stdout, (done.stdout, classic.summary)


@pytest.mark.spark
def test_an_output_root_the_client_cannot_reach_is_one_line(connect, source, tmp_path):
    """Refused before the run lock or any staging: nothing is published."""
    from jobs.ingestion.run.meta import IngestError

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    root = blocker / "logs"
    doc = source_order_doc(source, root, "spark", topics=TOPICS)
    with spark_mode("connect"):
        with pytest.raises(IngestError) as ingest_error:
            ingest(connect, IngestConfig.from_dict(doc), run_id="r1", out=lambda _: None)
        with pytest.raises(IngestError) as job_error:
            retention.run(connect, str(root), apply=True, **_q())
    for caught in (ingest_error, job_error):
        line = str(caught.value)
        assert "\n" not in line and f"cannot write beside output root {root}" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.mark.spark
def test_a_root_the_servers_tasks_see_otherwise_is_one_line(spark, source, tmp_path):
    """The client sees its own output root: it runs (`./spark-submit.sh ingest --remote`) in a
    mount namespace of its own, where an empty file system is mounted over the root's parent,
    as on a machine that mounts another volume there. The server's tasks see the real parent.
    One line; nothing reaches the directory the tasks see."""
    import subprocess

    import yaml

    parent = tmp_path / "volume"
    parent.mkdir()
    root = parent / "logs"
    config = tmp_path / "ingest.yaml"
    config.write_text(yaml.safe_dump(source_order_doc(source, root, "spark", topics=TOPICS)))
    script = Path(__file__).resolve().parents[2] / "spark-submit.sh"
    client = [str(script), "ingest", "--config", str(config), "--run-id", "r1"]
    client += ["--remote", spark.kafkalog_connect_url]
    # unprivileged where user namespaces are allowed, root-mapped: the tmpfs is the client's only
    namespace = ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]
    mount = f'mount -t tmpfs kafkalog-client-view "{parent}" && exec "$@"'
    env = {k: v for k, v in os.environ.items() if k not in (MODE, "PYSPARK_GATEWAY_PORT")}
    done = subprocess.run(
        [*namespace, "sh", "-c", mount, "sh", *client],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode != 0, done.stdout[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    want = f"the Spark Connect server's tasks do not see output root {root} as this client does"
    assert len(lines) == 1 and want in lines[0], done.stderr[-2000:]
    assert list(parent.iterdir()) == []  # the tasks' view: nothing staged, nothing published


@pytest.mark.spark
def test_parallelism_and_split_size_come_from_the_session_settings(spark, connect):
    """What the jobs read through spark.conf equals what the classic JVM resolves."""
    from jobs.spark.tasks import byte_setting, default_parallelism

    key = "spark.sql.files.maxPartitionBytes"
    jvm_bytes = int(spark._jsparkSession.sessionState().conf().filesMaxPartitionBytes())
    for kind, session in _sessions(spark, connect):
        assert default_parallelism(session) == spark.sparkContext.defaultParallelism, kind
        assert byte_setting(session, key, 0) == jvm_bytes, kind


@pytest.mark.spark
def test_a_task_error_is_one_line_from_a_connect_client(spark, connect):
    """A data error in a task crosses Spark Connect's error channel as the same one line."""
    import pyarrow as pa

    from jobs.maintenance.common import MaintenanceError, run_units

    def task(unit):
        from kafkalog_core.errors import CorruptRecordError

        raise CorruptRecordError(f"bad batch at offset {unit['bytes']}")

    schema = pa.schema([("dir", pa.string())])
    lines = {}
    for kind, session in _sessions(spark, connect):
        with pytest.raises(MaintenanceError) as caught:
            run_units(session, [{"dir": "events-0", "bytes": 7}], task, schema)
        lines[kind] = str(caught.value)
    assert lines["connect"] == lines["classic"] == "events-0: bad batch at offset 7"
