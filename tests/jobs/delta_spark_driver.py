"""Ingest runs through Spark's own Delta reader (`delta_reader: spark`), in a driver of its own:
the tests' session has no Delta extension (their Delta sources go through delta-rs, and Spark
fixes a session's extensions when it starts), so these runs need a JVM started with
delta-spark's jars.

    python -m tests.jobs.delta_spark_driver RUNS.json RESULTS.json

RUNS.json: a list of {"doc": an ingest config document, "run_id": ..., "tasks": ...}, run one
after another in one local session; RESULTS.json: per run its status, records and source
version, or the error's one line.

`delta_spark_jars` fetches the jars once with `mvn` into Maven's local repository; without them
the test fails with one line naming what to fetch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Delta Lake for Spark 4.2 (Scala 2.13): the newest release on Maven Central for this pyspark
DELTA_ARTIFACTS = ("io.delta:delta-spark_4.2_2.13:4.4.0", "io.delta:delta-storage:4.4.0")
REPO = Path(__file__).resolve().parents[2]


def _local_jar(artifact: str) -> Path:
    group, name, version = artifact.split(":")
    base = Path(os.environ.get("MAVEN_LOCAL_REPO", Path.home() / ".m2" / "repository"))
    return base.joinpath(*group.split("."), name, version, f"{name}-{version}.jar")


def delta_spark_jars() -> list[Path]:
    """delta-spark's jars from Maven's local repository, fetched with `mvn` when missing; a
    one-line test failure naming them when they cannot be."""
    jars = [_local_jar(a) for a in DELTA_ARTIFACTS]
    for artifact, jar in zip(DELTA_ARTIFACTS, jars, strict=True):
        if jar.is_file():
            continue
        fetch = ["mvn", "-q", "dependency:get", f"-Dartifact={artifact}", "-Dtransitive=false"]
        try:
            done = subprocess.run(fetch, capture_output=True, text=True, timeout=600)
            failed = done.returncode != 0 or not jar.is_file()
        except (OSError, subprocess.TimeoutExpired):
            failed = True
        if failed:
            pytest.fail(
                f"Spark's Delta reader needs delta-spark's jars: fetch them with "
                f"`mvn dependency:get -Dartifact=ARTIFACT -Dtransitive=false` for "
                f"{' and '.join(DELTA_ARTIFACTS)} (into {jar.parents[3]})",
                pytrace=False,
            )
    return jars


def run_all(runs: list[dict], work: Path) -> list[dict]:
    """`runs` in a Delta-enabled driver of their own (see the module doc): their results."""
    jars = delta_spark_jars()
    (work / "runs.json").write_text(json.dumps(runs))
    command = [sys.executable, "-m", "tests.jobs.delta_spark_driver"]
    env = {**os.environ, "KAFKALOG_DELTA_JARS": ",".join(map(str, jars))}
    done = subprocess.run(
        [*command, str(work / "runs.json"), str(work / "results.json")],
        cwd=REPO,
        env=env,
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
        session_builder("kafkalog-delta-reader")
        .config("spark.jars", os.environ["KAFKALOG_DELTA_JARS"])
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
