"""The arrow task reader reads Spark's own file splits in Spark's order (`arrow_splits`): files
of different sizes, one split into byte ranges, give the same records, order, `pos` and bytes
on either reader, in the direct mode and in a range mode with ties."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.ingest import run
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.mapping.rules import ORDER_COLUMN
from jobs.ingestion.source.arrow_reader import ordered_inputs, plan_arrow_read
from jobs.ingestion.source.pieces import FilePiece, file_metadata
from jobs.ingestion.source.splits import midpoint_row_groups, spark_splits, spark_tasks
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
        assert "not Spark's splits" not in result.summary
    return roots


def test_arrow_tasks_are_sparks_partitions_row_for_row(spark, source, split_bytes, tmp_path):
    from pyspark.sql import functions as F

    df = spark.read.parquet(str(source))
    splits, why = spark_splits(df)
    assert splits is not None, why
    assert len(splits) == df.rdd.getNumPartitions() > len(SIZES)
    big = str(source / "part-001.parquet")
    assert len([s for task in splits for s in task if s.path.endswith(big)]) > 1
    files = [f.removeprefix("file://") for f in df.inputFiles()]
    tasks, why = spark_tasks(df, [f"file://{f}" for f in files])
    assert tasks is not None, why
    config = IngestConfig.from_dict(_doc(source, tmp_path / "logs", "arrow", "source"))
    read, why = plan_arrow_read(config, [f"file://{f}" for f in files], splits=lambda: (tasks, ""))
    assert read is not None, why
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


def test_without_sparks_splits_the_files_are_packed_in_path_order(spark, tmp_path, source):
    files = sorted(str(p) for p in source.iterdir())
    config = IngestConfig.from_dict(_doc(source, tmp_path / "logs", "arrow", "source"))
    read, why = plan_arrow_read(config, files, max_split_bytes=1 << 30)
    assert read is not None, why
    assert read.tasks == (tuple(FilePiece(f) for f in files),) and read.packed == ""
    read, _ = plan_arrow_read(config, files, max_split_bytes=1 << 30, splits=lambda: (None, "no"))
    assert read is not None and read.tasks == (tuple(FilePiece(f) for f in files),)
    assert read.packed == "no"
    tasks, why = spark_tasks(spark.read.parquet(str(source)), files[:1])
    assert (
        tasks is None and why == "Spark's file splits name other files than the source's file list"
    )
    tasks, why = spark_tasks(spark.range(3).toDF("id"), files)
    assert tasks is None and why == "Spark's plan of the source has 0 file scans, not one"


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
    them); every split and every file's partition values equal what asking each file gives."""
    from jobs.ingestion.source import splits as arrow_splits
    from jobs.ingestion.source.table_files import input_files

    df = spark.read.parquet(str(odd_partitions))
    files = input_files(df)
    assert len(files) == len(df.inputFiles()) >= 12
    partitions, _ = arrow_splits._scan_files(df)
    assert partitions and all(f.values_text is not None for p in partitions for f in p)
    splits, why = spark_splits(df)
    values = arrow_splits.spark_partition_values(df, files)
    assert splits is not None and values is not None, why
    # Spark's rows carry exactly these values (the comma and the string "null" cannot be told
    # from the rendering: those files' rows were asked for)
    assert set(values.values()) == {tuple(r) for r in df.select("s", "n").distinct().collect()}
    assert len(set(values.values())) == 12
    monkeypatch.setattr(arrow_splits, "joined_strings", lambda jvm, array: "")
    partitions, _ = arrow_splits._scan_files(df)
    assert partitions and all(f.values_text is None for p in partitions for f in p)
    per_file, _ = spark_splits(df)
    assert per_file is not None and all(s.file_size for t in per_file for s in t)
    assert [[(s.path, s.start, s.length) for s in t] for t in per_file] == [
        [(s.path, s.start, s.length) for s in t] for t in splits
    ]
    assert arrow_splits.spark_partition_values(df, files) == values
    assert input_files(df) == files
