"""A driver JVM started from plain Python logs as spark-submit.sh's does and keeps stderr clean."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.spark import driver_jvm

ROOT = Path(__file__).resolve().parents[2]


def test_the_jvm_notice_is_dropped_and_every_other_byte_passes(capfd) -> None:
    read, write = os.pipe()
    os.write(write, b"WARNING: Using incubator modules: jdk.incubator.vector\n")
    os.write(write, b"26/01/01 00:00:00 ERROR Executor: lost\nno newline at the end")
    os.close(write)
    driver_jvm._forward(os.fdopen(read, "rb"))
    assert capfd.readouterr().err == "26/01/01 00:00:00 ERROR Executor: lost\nno newline at the end"


def test_log4j_file_only_for_the_launch_and_only_when_the_user_chose_none(monkeypatch) -> None:
    for name in ("LOG4J_CONFIGURATION_FILE", "SPARK_CONF_DIR"):
        monkeypatch.delenv(name, raising=False)
    with driver_jvm._log4j_config():
        assert os.environ["LOG4J_CONFIGURATION_FILE"] == str(ROOT / "conf" / "log4j2.properties")
    assert "LOG4J_CONFIGURATION_FILE" not in os.environ
    monkeypatch.setenv("SPARK_CONF_DIR", "/etc/spark")  # its log4j2.properties wins
    with driver_jvm._log4j_config():
        assert "LOG4J_CONFIGURATION_FILE" not in os.environ
    monkeypatch.setenv("LOG4J_CONFIGURATION_FILE", "/mine.properties")
    with driver_jvm._log4j_config():
        assert os.environ["LOG4J_CONFIGURATION_FILE"] == "/mine.properties"


@pytest.mark.spark
def test_a_script_is_quiet_and_its_jvm_last_lines_are_not_lost(tmp_path: Path) -> None:
    """A plain `python job.py`: no Spark WARN lines, no JVM notice, no writer line on stderr;
    an error the JVM logs just before exit_driver still reaches stderr."""
    script = tmp_path / "job.py"
    script.write_text(
        "from jobs.spark.session import exit_driver, get_or_create_session\n"
        "spark = get_or_create_session('quiet', {'spark.master': 'local[1]'})\n"
        "df = spark.range(5).selectExpr('cast(id as string) as value')\n"
        f"df.write.format('kafkalog').mode('append').option('topic', 't').save({str(tmp_path / 'logs')!r})\n"
        f"print(spark.read.format('kafkalog').option('subscribe', 't').load({str(tmp_path / 'logs')!r}).count())\n"
        "logger = spark._jvm.org.apache.logging.log4j.LogManager.getLogger('kafkalog.test')\n"
        "logger.error('last words')\n"
        "exit_driver(0)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "LOG4J_"))}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "5\n"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].endswith("ERROR test: last words"), lines
