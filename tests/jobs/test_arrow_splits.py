"""The arrow task reader reads Spark's file splits in Spark's order, planned in Python
(`splits.plan_splits`): the plan equals Spark's own across settings, and files of different
sizes, one split into byte ranges, give the same records, order, `pos` and bytes on either
reader, in the direct mode and in a range mode with ties."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.ingest import run
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.mapping.rules import ORDER_COLUMN
from jobs.ingestion.source.arrow_reader import ordered_inputs, plan_arrow_read
from jobs.ingestion.source.pieces import file_metadata
from jobs.ingestion.source.splits import (
    SplitSettings,
    listing_order,
    midpoint_row_groups,
    plan_splits,
    planned_tasks,
    spark_splits,
    split_settings,
)
from jobs.ingestion.source.table_files import input_files
from tests.jobs.ingest_helpers import SOURCE_SCHEMA, config_doc, snapshot, source_rows

pytestmark = pytest.mark.spark

TOPICS = {"events": {"partitions": 3, "config": {"segment.bytes": 8192}}}
SIZES = (90, 700, 40, 260)  # rows per file: path order is not size order
ROW_GROUP = 60


@pytest.fixture
def source(tmp_path) -> Path:
    """Files of different sizes; part-001 has several row groups and spans several splits."""
    path = tmp_path / "src"
    path.mkdir()
    rows, at = source_rows(sum(SIZES), seed=5), 0
    for f, size in enumerate(SIZES):
        table = pa.Table.from_pylist(rows[at : at + size], schema=SOURCE_SCHEMA)
        pq.write_table(table, path / f"part-{f:03d}.parquet", row_group_size=ROW_GROUP)
        at += size
    return path


@pytest.fixture
def split_bytes(spark):
    """maxPartitionBytes of 24 KB: the largest file is cut into byte ranges, the rest is packed
    largest first (not in path order)."""
    key = "spark.sql.files.maxPartitionBytes"
    old = spark.conf.get(key)
    spark.conf.set(key, "24000")
    yield
    spark.conf.set(key, old)


def _doc(src: Path, root: Path, reader: str, ordering) -> dict:
    doc = config_doc(src, root, topics=TOPICS, ordering=ordering)
    del doc["mapping"]["headers"]
    doc["source"]["task_reader"] = reader
    return doc


def _both(spark, src: Path, tmp_path: Path, ordering, **output) -> dict[str, Path]:
    roots = {}
    for reader in ("arrow", "spark"):
        roots[reader] = tmp_path / reader / "logs"
        doc = _doc(src, roots[reader], reader, ordering)
        doc["output"].update(output)
        result = run(spark, IngestConfig.from_dict(doc), run_id="r1", out=lambda _: None)
        assert result.task_reader == reader
    return roots


@contextlib.contextmanager
def _settings(spark, conf: dict[str, str]) -> Iterator[None]:
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _ranges(splits) -> list[list[tuple[str, int, int]]]:
    return [[(Path(s.path).name, s.start, s.length) for s in task] for task in splits]


@pytest.mark.parametrize(
    "conf",
    [
        {},  # 128 MB, open cost 4 MB: the total over 2 cores packs the files in 2 partitions
        {"spark.sql.files.maxPartitionBytes": "24000"},
        {"spark.sql.files.maxPartitionBytes": "7000", "spark.sql.files.openCostInBytes": "3000"},
        {"spark.sql.files.openCostInBytes": "1000"},  # bytes per core below maxPartitionBytes
        {"spark.sql.files.openCostInBytes": "500", "spark.sql.files.minPartitionNum": "7"},
        {"spark.sql.files.openCostInBytes": "500", "spark.sql.leafNodeDefaultParallelism": "5"},
        {"spark.sql.files.maxPartitionBytes": "5000", "spark.sql.files.maxPartitionNum": "3"},
    ],
)
def test_the_python_plan_is_sparks_own(spark, source, conf):
    with _settings(spark, conf):
        df = spark.read.parquet(str(source))
        theirs, why = spark_splits(df)
        assert theirs is not None, why
        files = listing_order(input_files(df))
        sizes = [Path(f.removeprefix("file:")).stat().st_size for f in files]
        ours = plan_splits(files, sizes, split_settings(spark))
    assert _ranges(ours) == _ranges(theirs)
    assert len(ours) == df.rdd.getNumPartitions()


def test_plan_splits_packs_largest_first_and_keeps_listing_order_among_equals():
    """Spark's packing on given sizes: cut at maxSplitBytes, sorted by length (stable), next
    fit decreasing with the open cost, and rescaled past maxPartitionNum."""
    settings = SplitSettings(max_partition_bytes=100, open_cost_bytes=10, min_partitions=1)
    plan = plan_splits(["a", "b", "c", "d", "e"], [30, 250, 0, 30, 60], settings)
    # c is empty (Spark lists no empty file); a and d tie: listing order
    assert _ranges(plan) == [
        [("b", 0, 100)],
        [("b", 100, 100)],
        [("e", 0, 60)],
        [("b", 200, 50), ("a", 0, 30)],
        [("d", 0, 30)],
    ]
    # bytes per core (250 + 10) // 5 = 52 < maxPartitionBytes: the ranges are cut at 52
    cut = plan_splits(["b"], [250], SplitSettings(100, 10, min_partitions=5))
    assert [[s.length for s in t] for t in cut] == [[52], [52], [52], [52], [42]]
    # 3 partitions over maxPartitionNum 2: packed once more at ceil(320 / 2) bytes (only once)
    few = plan_splits(["a", "b"], [30, 250], replace(settings, max_partitions=2))
    assert _ranges(few) == [[("b", 0, 100)], [("b", 100, 100), ("b", 200, 50)], [("a", 0, 30)]]


def test_arrow_tasks_are_sparks_partitions_row_for_row(spark, source, split_bytes, tmp_path):
    from pyspark.sql import functions as F

    df = spark.read.parquet(str(source))
    files = listing_order([f"file://{f.removeprefix('file:')}" for f in input_files(df)])
    tasks = planned_tasks(files, split_settings(spark))
    assert len(tasks) == df.rdd.getNumPartitions() > len(SIZES)
    big = str(source / "part-001.parquet")
    assert len([p for task in tasks for p in task if p.path.endswith(big)]) > 1
    config = IngestConfig.from_dict(_doc(source, tmp_path / "logs", "arrow", "source"))
    read, why = plan_arrow_read(config, files, splits=lambda: split_settings(spark))
    assert read is not None, why
    assert read.tasks == tasks
    # every row's (id, pos) as Spark's reader gives it, against the arrow tasks'
    spark_rows = df.select("id", F.monotonically_increasing_id().alias("pos")).collect()
    arrow_rows = []
    for k, task in enumerate(read.tasks):
        for batch in ordered_inputs(task, k, read.columns, ["id"]):
            order = batch.column(ORDER_COLUMN)
            ids, pos = order.field("o0").to_pylist(), order.field("pos").to_pylist()
            arrow_rows += list(zip(ids, pos, strict=True))
    assert arrow_rows == [tuple(r) for r in spark_rows]


def test_midpoints_give_every_row_group_to_one_split(source):
    meta = file_metadata(str(source / "part-001.parquet"))
    size = (source / "part-001.parquet").stat().st_size
    for step in (1000, 7000, 24000):
        chosen = [midpoint_row_groups(meta, s, step) for s in range(0, size, step)]
        flat = [g for groups in chosen for g in groups]
        assert flat == list(range(meta.num_row_groups))
    assert midpoint_row_groups(meta, 0, size) == tuple(range(meta.num_row_groups))


def test_direct_mode_gives_the_same_bytes_on_either_reader(spark, source, split_bytes, tmp_path):
    roots = _both(spark, source, tmp_path, "source", write_mode="direct")
    assert snapshot(roots["arrow"]) == snapshot(roots["spark"])


def test_range_mode_with_ties_gives_the_same_bytes_on_either_reader(
    spark, source, split_bytes, tmp_path
):
    # event_time alone: neighbours share it, so `pos` (Spark's split and row) breaks the ties
    roots = _both(spark, source, tmp_path, ["event_time"], write_mode="range")
    assert snapshot(roots["arrow"]) == snapshot(roots["spark"])


@pytest.fixture
def odd_partitions(spark, tmp_path) -> Path:
    """A table partitioned by a string and an int whose values Spark escapes in the paths or
    renders ambiguously: a comma, a space, a '%', non-ASCII, the string "null", nulls."""
    path = tmp_path / "odd"
    values = ["a,b", "x y", "p%q", "ünï", "null", None]
    rows = [(i, s, n) for i, (s, n) in enumerate((s, n) for s in values for n in (1, None))]
    df = spark.createDataFrame(rows, "id long, s string, n int")
    df.repartition(3).write.partitionBy("s", "n").parquet(str(path))
    return path


def test_files_read_in_one_round_trip_per_partition_match_the_per_file_reading(
    spark, odd_partitions, monkeypatch
):
    """Each partition's files come from Spark's rendering of them (one py4j call for all of
    them); every split equals what asking each file gives."""
    from jobs.ingestion.source import splits as arrow_splits
    from jobs.ingestion.source.table_files import input_files

    df = spark.read.parquet(str(odd_partitions))
    files = input_files(df)
    assert len(files) == len(df.inputFiles()) >= 12
    partitions, _ = arrow_splits._scan_files(df)
    assert partitions and all(f.values_text is not None for p in partitions for f in p)
    splits, why = spark_splits(df)
    assert splits is not None, why
    monkeypatch.setattr(arrow_splits, "joined_strings", lambda jvm, array: "")
    partitions, _ = arrow_splits._scan_files(df)
    assert partitions and all(f.values_text is None for p in partitions for f in p)
    per_file, _ = spark_splits(df)
    assert per_file is not None and all(s.file_size for t in per_file for s in t)
    assert [[(s.path, s.start, s.length) for s in t] for t in per_file] == [
        [(s.path, s.start, s.length) for s in t] for t in splits
    ]


def test_partition_values_come_from_spark_for_every_file(spark, odd_partitions):
    """Values Spark escapes in the paths or renders ambiguously (a comma, the string "null",
    nulls, non-ASCII): each file's values are those of its rows, keyed as its listed path."""
    from jobs.ingestion.source.splits import file_key
    from jobs.ingestion.source.table_files import input_files, spark_partition_values

    df = spark.read.parquet(str(odd_partitions))
    values = spark_partition_values(df, ["s", "n"])
    assert values is not None
    assert sorted(values) == sorted(file_key(f) for f in input_files(df))
    assert all(len(v) == 1 for v in values.values())
    assert set().union(*values.values()) == {
        tuple(r) for r in df.select("s", "n").distinct().collect()
    }
    assert len(set().union(*values.values())) == 12
