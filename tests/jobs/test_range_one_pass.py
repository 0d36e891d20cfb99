"""The range mode through Spark: one pass gives the bytes of the counted plan.

The counted reference is the range mode as it was: a counting pass over the range-sorted rows,
exact offsets per task, then the write (here by the direct writer over the same sorted rows,
which writes what the sorted-task writer writes: tests/jobs/test_ingest_writer.py).
"""

from __future__ import annotations

import pytest

import jobs.ingest as ingest
from jobs.ingestion.config import IngestConfig
from tests.jobs.ingest_helpers import (
    BASE_MS,
    config_doc,
    expected_records,
    read_root,
    snapshot,
    source_rows,
    write_parquet,
)

pytestmark = pytest.mark.spark

NOW = 1_714_521_600_123
# small segments: rolls inside task shares; three partitions, one of them hot
TOPICS = {
    "events": {
        "partitions": 3,
        "config": {"segment.bytes": 12000, "index.interval.bytes": 700},
    }
}


def _counted_rows(spark_rows):
    """`_spark_rows` whose range-sorted rows go through the counting pass (the old range mode)."""

    def rows(spark, config, source, tasks):
        sorted_rows, rejects, (mode, why) = spark_rows(spark, config, source, tasks)
        assert mode == "range"
        return sorted_rows, rejects, ("direct", "the counted reference")

    return rows


def test_range_one_pass_equals_counted_new_and_appended(spark, tmp_path, monkeypatch):
    first = source_rows(700, hot_user="hot", seed=11)
    second = source_rows(500, start_id=700, hot_user="hot", seed=12, start_ms=BASE_MS + 3_600_000)
    src_a = write_parquet(tmp_path / "a", first, files=2)
    src_b = write_parquet(tmp_path / "b", second, files=3)
    roots = {}
    for way in ("one-pass", "counted"):
        if way == "counted":
            monkeypatch.setattr(ingest, "_spark_rows", _counted_rows(ingest._spark_rows))
        root = tmp_path / way / "logs"
        lines: list[str] = []
        for run_id, src, tasks in (("r1", src_a, 3), ("r2", src_b, 4)):
            doc = config_doc(src, root, topics=TOPICS)
            doc["output"]["write_mode"] = "range"
            result = ingest.run(
                spark,
                IngestConfig.from_dict(doc),
                run_id=run_id,
                tasks=tasks,
                now_ms=NOW,
                out=lines.append,
            )
            assert result.write_mode == ("range" if way == "one-pass" else "direct")
            assert ("count" in result.timings_ms) == (way == "counted")
        roots[way] = root
        if way == "one-pass":
            assert "\n  write mode: output.write_mode is range\n" in lines[-1]
    ours, counted = snapshot(roots["one-pass"]), snapshot(roots["counted"])
    assert ours == counted
    hot_logs = [k for k in ours if k.endswith(".log")]
    assert len(hot_logs) >= 6  # rolls and task-share starts
    leo = {}
    expected = expected_records(first, {"events": 3})
    for t, p, o, *_ in expected:
        leo[(t, p)] = max(leo.get((t, p), 0), o + 1)
    expected += expected_records(second, {"events": 3}, leo)
    assert read_root(roots["one-pass"]) == sorted(expected, key=lambda r: r[:3])
