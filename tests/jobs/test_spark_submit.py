"""spark-submit.sh: help, job resolution, the Java check, and one tiny real job."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "spark-submit.sh"


def _run(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def test_help_lists_usage():
    result = _run("--help")
    assert result.returncode == 0
    assert "usage: ./spark-submit.sh" in result.stdout and "jobs:" in result.stdout


def test_unknown_job_and_missing_job_are_one_clear_line():
    result = _run("--master", "local[1]", "no_such_job", "--config", "x")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"kafkalog: unknown job 'no_such_job' (not a file, and no jobs/no_such_job.py); "
        f"available: {result.stderr.split('available: ')[1].strip()}"
    ]
    assert _run().returncode == 2


def test_old_java_is_refused_clearly(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    java = fake / "java"
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.20\" 2023-07-18' >&2\n")
    java.chmod(0o755)
    job = tmp_path / "job.py"
    job.write_text("raise SystemExit('must not run')\n")
    result = _run(str(job), env={"PATH": f"{fake}:{os.environ['PATH']}"})
    assert result.returncode != 0
    assert "Java 17+ is required for Spark 4, found '11.0.20'" in result.stderr


@pytest.mark.spark
def test_runs_a_job_file_with_args_and_repo_settings(tmp_path):
    job = tmp_path / "tiny.py"
    job.write_text(
        "import sys\n"
        "from jobs.spark.session import get_or_create_session\n"
        "spark = get_or_create_session('tiny')\n"
        "n = spark.range(3).count()\n"
        "print('RESULT', n, spark.conf.get('spark.sql.session.timeZone'), sys.argv[1:])\n"
        "spark.stop()\n"
    )
    result = _run(
        "--master",
        "local[1]",
        "--conf",
        "spark.ui.enabled=false",
        str(job),
        "--x",
        "1",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "RESULT 3 UTC ['--x', '1']" in result.stdout
    assert " INFO " not in result.stderr  # log4j2.properties from conf/ keeps Spark at WARN


def test_session_conf_precedence(tmp_path):
    from jobs.spark.session import read_spark_defaults, resolve_session_conf

    defaults = read_spark_defaults(ROOT / "conf" / "spark-defaults.conf")
    assert defaults["spark.sql.session.timeZone"] == "UTC"
    assert "spark.sql.extensions" not in defaults  # commented out: no Delta jars by default
    conf = resolve_session_conf({"a": "1", "b": "2"}, {"b": "submitted"}, {"c": 3})
    quiet = {"spark.python.daemon.module": "jobs.spark.quiet_daemon"}  # local masters only
    assert conf == {"a": "1", "c": "3", "spark.master": "local[*]", **quiet}
    assert resolve_session_conf({}, {"spark.master": "yarn"}) == {}
    assert resolve_session_conf({}, {"spark.master": "local[2]"}) == quiet
    own = {"spark.python.daemon.module": "mine"}
    assert resolve_session_conf({}, {"spark.master": "local[2]", **own}) == {}
    text = "# comment\nspark.x  1 \t\nspark.y=\\u0020two\\n\\\n  \x01\nlonely\n! spark.z 3\n"
    own = tmp_path / "own.conf"
    own.write_text(text)
    # Properties text as spark-submit reads it: values trimmed, but not of an escaped line break
    assert read_spark_defaults(own) == {"spark.x": "1", "spark.y": "two\n", "lonely": ""}
    bad = tmp_path / "bad.conf"
    bad.write_text("# comment\nspark.x 1\nspark.y \\u12\n")
    from kafkalog_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"bad.conf: line 3: Malformed \\uxxxx encoding"):
        read_spark_defaults(bad)


def test_get_or_create_session_returns_the_active_one(spark):
    from jobs.spark.session import get_or_create_session

    assert get_or_create_session("x", {"spark.sql.shuffle.partitions": "3"}) is spark
    assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
    spark.conf.set("spark.sql.shuffle.partitions", "2")


def test_maintenance_jobs_by_hyphenated_name(tmp_path):
    from tests.log.test_recovery import write_log

    listing = _run("--help").stdout
    assert all(name in listing for name in ("retention", "rebuild-index", "compaction-audit"))
    write_log(tmp_path / "logs" / "orders-0")
    conf = tmp_path / "topics.properties"
    conf.write_text("index.interval.bytes=200\n")
    ok = _run(
        "--master", "local[2]", "rebuild-index", "--log-dir", str(tmp_path / "logs"),
        "--topic-config", str(conf), timeout=300,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "rebuild-index" in ok.stdout and "segments ok, 0 not ok" in ok.stdout
    # a maintenance job's one error line: tests/jobs/maintenance/test_common.py; through
    # spark-submit.sh, the ingest's below


def _null_key_ingest(tmp_path: Path, reader: str) -> Path:
    """A config whose source has one null key on a compacted topic: a data error in a task."""
    import yaml

    from tests.jobs.ingest_helpers import source_rows, write_parquet

    rows = source_rows(40)
    rows[7]["user"] = None
    write_parquet(tmp_path / "src", rows)
    doc = {
        "source": {"format": "parquet", "path": str(tmp_path / "src"), "task_reader": reader},
        "output": {"root": str(tmp_path / "out")},
        "topics": {"events": {"partitions": 2, "config": {"cleanup.policy": "compact"}}},
        "mapping": {"topic": "events", "key": "user", "value": "payload", "timestamp": "now"},
    }
    config = tmp_path / "ingest.yaml"
    config.write_text(yaml.safe_dump(doc))
    return config


@pytest.mark.spark
def test_a_data_error_in_a_task_is_our_one_line_without_spark_task_errors(tmp_path):
    # the arrow task reader, as `ingest` picks it for local Parquet; which reader failed is
    # task_log's business, held in-process by tests/jobs/test_task_log.py
    config = _null_key_ingest(tmp_path, "arrow")
    result = _run("--master", "local[2]", "ingest", "--config", str(config), timeout=300)
    assert result.returncode == 1
    output = (result.stdout + result.stderr).splitlines()
    errors = [line for line in output if line.startswith("kafkalog: error:")]
    assert len(errors) == 1 and "null key on compacted topic 'events'" in errors[0], output[-20:]
    assert not [line for line in output if "TaskSetManager" in line or "Executor:" in line]
    assert not [line for line in output if "Traceback" in line], output[-20:]


@pytest.mark.spark
def test_a_real_spark_failure_keeps_sparks_task_lines_before_ours(tmp_path):
    """Executors whose Python cannot start: Spark's own lines are what the user needs."""
    config = _null_key_ingest(tmp_path, "arrow")
    python = ROOT / ".venv" / "bin" / "python"
    result = _run(
        "--master", "local[1]",
        "--conf", f"spark.pyspark.driver.python={python}", "--conf", "spark.pyspark.python=/bin/false",
        "ingest", "--config", str(config), timeout=300,
    )  # fmt: skip
    assert result.returncode == 1
    output = (result.stdout + result.stderr).splitlines()
    aborting = [i for i, line in enumerate(output) if "ERROR TaskSetManager" in line]
    errors = [i for i, line in enumerate(output) if line.startswith("kafkalog: error:")]
    assert len(errors) == 1 and aborting and aborting[-1] < errors[0], output[-20:]


def test_a_local_session_from_plain_python_runs_workers_with_this_python(monkeypatch):
    """A notebook kernel of the venv, with a `python3` on PATH that lacks pyarrow: the local
    workers must run this interpreter; a user's own choice wins; a cluster is left alone."""
    import sys

    from jobs.spark.session import _local_workers_use_this_python

    for name in ("PYSPARK_PYTHON", "PYSPARK_GATEWAY_PORT"):
        monkeypatch.delenv(name, raising=False)
    _local_workers_use_this_python({"spark.master": "local[*]"})
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/mine/python")
    _local_workers_use_this_python({"spark.master": "local[2]"})
    assert os.environ["PYSPARK_PYTHON"] == "/opt/mine/python"
    monkeypatch.delenv("PYSPARK_PYTHON")
    _local_workers_use_this_python({"spark.master": "spark://h:7077"})
    _local_workers_use_this_python({"spark.master": "local", "spark.pyspark.python": "/p"})
    assert "PYSPARK_PYTHON" not in os.environ
