"""A read stopped early by a limit ends quietly: `show(n)` and `limit(n)` print the rows and no
worker traceback (jobs/spark/quiet_daemon.py), in a fresh process as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.datasource.helpers import write_topic

REPO = Path(__file__).resolve().parents[2]

# 3,000 records in small segments: the worker still has batches to send when Spark has its rows
# and closes the socket.
_SESSION = """
import sys
from jobs.spark.session import get_or_create_session
spark = get_or_create_session("quiet-limit")
df = spark.read.format("kafkalog").option("subscribe", "t").load(sys.argv[1])
df.select("offset", "value").show(3)
print("limit:", [r.offset for r in df.limit(5).collect()])
spark.stop()
"""


def test_show_and_limit_print_no_traceback(tmp_path: Path) -> None:
    write_topic(tmp_path / "logs", "t", 1, 3000)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("KAFKALOG_SPARK_DEFAULTS", None)  # the shipped conf/spark-defaults.conf
    done = subprocess.run(
        [sys.executable, "-c", _SESSION, str(tmp_path / "logs")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert "only showing top 3 rows" in done.stdout
    assert "limit: [0, 1, 2, 3, 4]" in done.stdout
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
