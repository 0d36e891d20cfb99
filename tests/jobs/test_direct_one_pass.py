"""The direct mode in one pass through Spark: task 0 writes in place, every later task stages
its rows as records (encoded by the relayout).

Both readers, several splits, three partitions, small segments, a new log dir then one
continued; the first split lacks a partition, so that partition's first share is a later
task's, encoded by the relayout from there (continuing the published segment in the second
run). The records and offsets are checked with kafka-python's reader against the rows in each
reader's order; the Spark reader over many splits gives the bytes of one split. The bytes equal
one task's: tests/jobs/test_ingest_one_pass.py (no Spark, every case forced) and the relayout's
one-writer oracle: tests/jobs/test_relayout.py.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import jobs.ingest as ingest
from jobs.ingestion.config.ingest_config import IngestConfig
from kafkalog_core.record.batch import iter_batch_headers
from tests.jobs.ingest_helpers import (
    BASE_MS,
    SOURCE_SCHEMA,
    config_doc,
    expected_records,
    kp_partition,
    read_root,
    snapshot,
    source_rows,
    spark_read_order,
    write_parquet,
)

pytestmark = pytest.mark.spark

NOW = 1_714_521_600_123
PARTITIONS = 3
TOPICS = {
    "events": {
        "partitions": PARTITIONS,
        "config": {"segment.bytes": 6000, "index.interval.bytes": 500},  # rolls inside shares
    }
}
ROW_GROUP = 40  # rows per Parquet row group: a task of its own under 2000-byte splits
SKIPPED = 2  # the partition the first row group lacks: its first share is a later task's


def _partition(row: dict) -> int:
    return kp_partition(row["user"].encode(), PARTITIONS)


def _source(path: Path, rows: list[dict], sizes: list[int]) -> list[dict]:
    """Files of `sizes` rows, the first file's first row group without partition SKIPPED; the
    rows in path order (the arrow reader's order)."""
    path.mkdir(parents=True)
    ordered, at = [], 0
    for f, size in enumerate(sizes):
        chunk = rows[at : at + size]
        at += size
        if f == 0:
            head = [r for r in chunk if _partition(r) != SKIPPED][:ROW_GROUP]
            ids = {r["id"] for r in head}
            chunk = head + [r for r in chunk if r["id"] not in ids]
        table = pa.Table.from_pylist(chunk, schema=SOURCE_SCHEMA)
        pq.write_table(table, path / f"part-{f:03d}.parquet", row_group_size=ROW_GROUP)
        ordered += chunk
    return ordered


def _doc(src: Path, root: Path, reader: str) -> dict:
    doc = config_doc(src, root, topics=TOPICS, ordering="source")
    del doc["mapping"]["headers"]  # the arrow reader's mappings
    doc["source"]["task_reader"] = reader
    doc["output"]["write_mode"] = "direct"
    doc["output"]["direct_tasks"] = "splits"  # a task per split: later shares staged as records
    return doc


def _spy(monkeypatch) -> list[tuple[list, list]]:
    """(staged, placed) manifests of each run's `place_staged`."""
    seen: list[tuple[list, list]] = []
    real = ingest.place_staged

    def spy(manifests, leo, settings):
        placed = real(manifests, leo, settings)
        seen.append((list(manifests), placed))
        return placed

    monkeypatch.setattr(ingest, "place_staged", spy)
    return seen


def test_direct_mode_writes_in_one_pass_with_either_reader(
    spark, tmp_path, small_splits, monkeypatch
):
    first = source_rows(600, seed=31)
    second = source_rows(450, start_id=600, seed=32, start_ms=BASE_MS + 3_600_000)
    runs = [
        ("r1", tmp_path / "a", _source(tmp_path / "a", first, [300, 200, 100])),
        ("r2", tmp_path / "b", _source(tmp_path / "b", second, [250, 130, 70])),
    ]
    seen = _spy(monkeypatch)
    for way in ("arrow", "spark"):
        root = tmp_path / way / "logs"
        expected: list[tuple] = []
        leo: dict = {}
        for run_id, src, rows in runs:
            result = ingest.run(
                spark,
                IngestConfig.from_dict(_doc(src, root, way)),
                run_id=run_id,
                batch_bytes=400,
                now_ms=NOW,
                out=lambda _: None,
            )
            assert (result.write_mode, result.task_reader) == ("direct", way)
            assert "count" not in result.timings_ms and "place" in result.timings_ms
            shares, placed = seen[-1]
            assert len({m.task_key for m in shares}) > 2
            assert all((m.records is not None) == (m.task_key != "task-0") for m in shares)
            rows, _ = spark_read_order(spark, src, rows)  # both read Spark's splits
            first_skipped = min(
                (m for m in placed if m.partition == SKIPPED), key=lambda m: m.first_offset
            )
            # a record share (not task 0's: Spark's split 0 holds no row group's midpoint here)
            # turned out to start partition SKIPPED: the relayout encodes it from there
            assert first_skipped.records is not None
            expected += expected_records(rows, {"events": PARTITIONS}, leo, in_order=True)
            for t, p, o, *_ in expected:
                leo[(t, p)] = max(leo.get((t, p), 0), o + 1)
        assert read_root(root) == [
            (t, p, o, k, v, [], ts) for t, p, o, k, v, _, ts in sorted(expected)
        ]
        assert sum(1 for _ in root.glob("*/*.log")) >= 2 * PARTITIONS  # rolls
    # the arrow reader's tasks are Spark's: the same tasks wrote the same shares
    keys = [sorted((m.task_key, m.topic, m.partition) for m in staged) for staged, _ in seen]
    assert keys[:2] == keys[2:]


# Stage 2 of the mapping in the Spark reader's write tasks (`checked_records`) against Spark's
# own (the reject path keeps the rows in Spark's mapping): null-key rules, an explicit partition
# column, headers.
NULL_KEY = {"key": {"expr": "CASE WHEN id % 7 = 0 THEN NULL ELSE user END"}}
MAPPINGS = {
    "round-robin-null-keys": NULL_KEY,
    "value-hash-null-keys": {**NULL_KEY, "partition": {"null_keys": "value_hash"}},
    "partition-column": {"partition": "part"},
}


@pytest.mark.parametrize("mapping", sorted(MAPPINGS))
def test_write_tasks_partition_and_check_as_the_spark_mapping_does(
    spark, tmp_path, small_splits, monkeypatch, mapping
):
    rows = source_rows(500, seed=41)
    src = write_parquet(tmp_path / "src", rows, files=3)
    snapshots = {}
    for way in ("in-task", "spark"):
        root = tmp_path / way / "logs"
        rejects = str(tmp_path / way / "rejects") if way == "spark" else None
        doc = config_doc(
            src,
            root,
            topics=TOPICS,
            ordering="source",
            mapping=MAPPINGS[mapping],
            reject_path=rejects,
        )
        doc["source"]["task_reader"] = "spark"
        doc["output"]["write_mode"] = "direct"
        with monkeypatch.context() as patch:
            if way == "in-task":  # no Spark stage 2 at all
                patch.setattr(ingest, "map_records", None)
                patch.setattr(ingest, "map_records_with_rejects", None)
            result = ingest.run(
                spark,
                IngestConfig.from_dict(doc),
                run_id="r1",
                batch_bytes=400,
                now_ms=NOW,
                out=lambda _: None,
            )
        assert (result.write_mode, result.records, result.rejected) == ("direct", len(rows), 0)
        snapshots[way] = snapshot(root)
    assert snapshots["in-task"] == snapshots["spark"]
    assert len({k.split("/")[0] for k in snapshots["spark"] if k.endswith(".log")}) == PARTITIONS


def test_spark_reader_over_many_splits_gives_one_splits_bytes(spark, tmp_path, small_splits):
    """The Spark reader: a source read in many splits (row groups of 40 rows, every split a
    share of every partition) gives the bytes of the same rows, in Spark's read order, read in
    one split (one file, one row group), with multi-record batches and segment rolls."""
    rows = source_rows(600, seed=33)
    many = tmp_path / "many"
    _source(many, rows, [300, 200, 100])
    ordered, starts = spark_read_order(spark, many, rows)
    assert all(starts.get(f"events-{p}") for p in range(PARTITIONS))  # shares in many splits
    one = tmp_path / "one"
    one.mkdir()
    pq.write_table(pa.Table.from_pylist(ordered, schema=SOURCE_SCHEMA), one / "part-0.parquet")
    roots = {}
    for way, src in (("many", many), ("one", one)):
        roots[way] = root = tmp_path / way / "logs"
        result = ingest.run(
            spark,
            IngestConfig.from_dict(_doc(src, root, "spark")),
            run_id="r1",
            batch_bytes=400,
            now_ms=NOW,
            out=lambda _: None,
        )
        assert (result.write_mode, result.task_reader) == ("direct", "spark")
    assert snapshot(roots["many"]) == snapshot(roots["one"])
    headers = [h for p in roots["one"].glob("*/*.log") for h in iter_batch_headers(p.read_bytes())]
    assert max(h.records_count for h in headers) > 2
    assert sum(1 for _ in roots["one"].glob("*/*.log")) >= 2 * PARTITIONS  # rolls
