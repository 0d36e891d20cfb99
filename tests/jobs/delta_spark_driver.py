"""Ingest runs through Spark's own Delta reader (`delta_reader: spark`), in a driver of its own:
the tests' session has no Delta extension (their Delta sources go through delta-rs, and Spark
fixes a session's extensions when it starts), so these runs need a JVM started with
delta-spark's jars.

    python -m tests.jobs.delta_spark_driver RUNS.json RESULTS.json

RUNS.json: a list of {"doc": an ingest config document, "run_id": ..., "tasks": ...}, run one
after another in one local session; RESULTS.json: per run its status, records and source
version, or the error's one line.

Its jars are tests/java/pom.xml's `delta` group (tests/jvm_deps.py: fetched with Maven on first
use); when they cannot be fetched, the test fails with one line saying what to fetch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_all(runs: list[dict], work: Path) -> list[dict]:
    """`runs` in a Delta-enabled driver of their own (see the module doc): their results."""
    from tests import jvm_deps

    try:
        jvm_deps.jar_dir("delta")  # fetched here, so that a failure is the test's one line
    except jvm_deps.JvmDepsUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    (work / "runs.json").write_text(json.dumps(runs))
    command = [sys.executable, "-m", "tests.jobs.delta_spark_driver"]
    done = subprocess.run(
        [*command, str(work / "runs.json"), str(work / "results.json")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((work / "results.json").read_text())


def main(runs_file: str, results_file: str) -> None:
    from jobs.ingest import run
    from jobs.ingestion.config.ingest_config import IngestConfig
    from jobs.spark.session import DELTA_EXTENSION, has_delta_extension
    from kafkalog_core.errors import KafkaLogError
    from tests.conftest import session_builder

    builder = (
        session_builder("kafkalog-delta-reader", jar_groups=("delta",))
        .config("spark.sql.extensions", DELTA_EXTENSION)
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    assert has_delta_extension(spark)
    results = []
    for item in json.loads(Path(runs_file).read_text()):
        try:
            result = run(
                spark,
                IngestConfig.from_dict(item["doc"]),
                run_id=item["run_id"],
                tasks=item.get("tasks"),
                out=lambda *_: None,
            )
            results.append(
                {
                    "status": result.status,
                    "records": result.records,
                    "source_version": result.source_version,
                }
            )
        except KafkaLogError as error:
            results.append({"error": str(error)})
    Path(results_file).write_text(json.dumps(results))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
