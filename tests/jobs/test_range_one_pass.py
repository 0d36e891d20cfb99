"""The range mode through Spark: its one pass gives the bytes of the direct mode's one pass.

The reference is the direct writer over the same range-sorted rows (which writes what the
sorted-task writer writes: tests/jobs/test_ingest_writer.py), placed by the direct mode's rule:
task 0 in place, every share of a later task staged provisionally. The range mode writes in
place every partition that starts inside a task and stages only a task's first one, so the two
place different shares; both must publish the same files. (The counted plan, exact offsets per
task, is the oracle of tests/jobs/test_ingest_one_pass.py.)
"""

from __future__ import annotations

import pytest

import jobs.ingest as ingest
from jobs.ingestion.config.ingest_config import IngestConfig
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


def _direct_rows(spark_rows):
    """`_spark_rows` whose range-sorted rows go to the direct mode's writer and placement."""

    def rows(spark, config, source, tasks):
        sorted_rows, rejects, (mode, why), _ = spark_rows(spark, config, source, tasks)
        assert mode == "range"
        return sorted_rows, rejects, ("direct", "the direct reference"), frozenset()

    return rows


def test_range_one_pass_equals_direct_one_pass_new_and_appended(spark, tmp_path, monkeypatch):
    first = source_rows(700, hot_user="hot", seed=11)
    second = source_rows(500, start_id=700, hot_user="hot", seed=12, start_ms=BASE_MS + 3_600_000)
    src_a = write_parquet(tmp_path / "a", first, files=2)
    src_b = write_parquet(tmp_path / "b", second, files=3)
    roots = {}
    for way in ("one-pass", "direct"):
        if way == "direct":
            monkeypatch.setattr(ingest, "_spark_rows", _direct_rows(ingest._spark_rows))
        root = tmp_path / way / "logs"
        lines: list[str] = []
        for run_id, src, tasks in (("r1", src_a, 3), ("r2", src_b, 4)):
            doc = config_doc(src, root, topics=TOPICS)
            doc["output"]["write_mode"] = "range"
            doc["source"]["task_reader"] = "spark"  # the Spark rows `_direct_rows` reorders
            result = ingest.run(
                spark,
                IngestConfig.from_dict(doc),
                run_id=run_id,
                tasks=tasks,
                now_ms=NOW,
                out=lines.append,
            )
            assert result.write_mode == ("range" if way == "one-pass" else "direct")
            assert "count" not in result.timings_ms and "place" in result.timings_ms
        roots[way] = root
        if way == "one-pass":
            assert "\n  write mode: output.write_mode is range\n" in lines[-1]
    ours, direct = snapshot(roots["one-pass"]), snapshot(roots["direct"])
    assert ours == direct
    hot_logs = [k for k in ours if k.endswith(".log")]
    assert len(hot_logs) >= 6  # rolls and task-share starts
    leo = {}
    expected = expected_records(first, {"events": 3})
    for t, p, o, *_ in expected:
        leo[(t, p)] = max(leo.get((t, p), 0), o + 1)
    expected += expected_records(second, {"events": 3}, leo)
    assert read_root(roots["one-pass"]) == sorted(expected, key=lambda r: r[:3])
