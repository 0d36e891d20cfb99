"""Ingests of one Delta table through a chosen Delta reader, shared by the delta-rs side (the
run's `spark` session) and the Spark Delta side, which runs as its own process:

    python -m tests.jobs.delta_spark TABLE OUT

A process has one Spark driver and the run's session has no Delta extension (with it, every
Delta test would read through Spark), so the Spark side starts a session of its own with the
`delta` jars of tests/java/pom.xml and the extension, and writes OUT/plain and OUT/cdf.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jobs.ingest import run
from jobs.ingestion.config.ingest_config import IngestConfig

TOPIC = "customers"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
CDF_RUNS = (0, 2)  # the first run reads version 0's inserts, the second the update and delete


def _doc(table: str, root: Path, reader: str, source: dict, timestamp: str, headers: dict) -> dict:
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
            "timestamp": {"column": timestamp},
            **({"headers": {"values": headers}} if headers else {}),
        },
        "ordering": ["id"],
    }


def _ingest(spark, doc: dict, run_id: str) -> None:
    result = run(spark, IngestConfig.from_dict(doc), run_id=run_id, out=lambda *_: None, tasks=1)
    assert result.status == "committed", result


def ingest_both(spark, table: str, out: Path, reader: str) -> None:
    """OUT/plain: the table's latest snapshot; OUT/cdf: its change feed in CDF_RUNS.

    The records' timestamps are a column of the table, not `_commit_timestamp`: the readers
    give a commit different times (docs/ingest.md, Delta Lake)."""
    _ingest(spark, _doc(table, out / "plain", reader, {}, "updated_at", {}), "plain")
    for version in CDF_RUNS:
        source = {"changes": "cdf", "version": version}
        headers = {"version": "cast(_commit_version as string)", "change": "_change_type"}
        _ingest(
            spark,
            _doc(table, out / "cdf", reader, source, "updated_at", headers),
            f"cdf-{version}",
        )


def delta_session():
    """A local session like the run's, with Delta's jars, extension and catalog."""
    from jobs.spark.session import DELTA_EXTENSION
    from tests.conftest import session_builder

    builder = session_builder("kafkalog-delta", jar_groups=("delta",))
    builder = builder.config("spark.sql.extensions", DELTA_EXTENSION)
    return builder.config("spark.sql.catalog.spark_catalog", DELTA_CATALOG).getOrCreate()


def main(argv: list[str]) -> int:
    table, out = argv
    spark = delta_session()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        ingest_both(spark, table, Path(out), "spark")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
