"""The arrow task reader beyond Parquet paths: catalog tables stored as Parquet (written by Spark,
so with INT96 timestamps; partitioned), mapped headers, and the sources that keep the Spark
reader with the why in the summary. Each case runs both readers with the same run id and
compares every byte under the output roots, and the records with kafka-python's reading."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.ingest import run
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.source.table_files import HIVE_NULL, CatalogTable, _path_partitions
from tests.jobs.ingest_helpers import (
    SOURCE_SCHEMA,
    config_doc,
    expected_records,
    read_root,
    snapshot,
    source_rows,
    write_parquet,
)

pytestmark = pytest.mark.spark

PARTITIONS = {"events": 3}
TOPICS = {"events": {"partitions": 3, "config": {"segment.bytes": 8192}}}


def _doc(source, root: Path, reader: str = "auto", **mapping) -> dict:
    source = {"format": "table", "table": source} if isinstance(source, str) else source
    doc = config_doc(source, root, topics=TOPICS, ordering="source", mapping=mapping)
    doc["source"]["task_reader"] = reader
    return doc


def _run(spark, doc: dict):
    return run(spark, IngestConfig.from_dict(doc), run_id="r1", out=lambda _: None)


def _both(spark, tmp_path: Path, source, **mapping) -> dict:
    """Each reader's run of the same config and run id: {reader: (result, output root)}."""
    out = {}
    for reader in ("arrow", "spark"):
        root = tmp_path / reader / "logs"
        out[reader] = (_run(spark, _doc(source, root, reader, **mapping)), root)
    return out


@pytest.fixture
def database(spark, tmp_path):
    """A database of its own (its tables under tmp_path), dropped with its tables."""
    name = f"arrow_src_{uuid.uuid4().hex[:12]}"
    spark.sql(f"CREATE DATABASE {name} LOCATION '{tmp_path / 'warehouse'}'")
    yield name
    spark.sql(f"DROP DATABASE IF EXISTS {name} CASCADE")


def _save_table(spark, tmp_path: Path, rows: list[dict], name: str, **write) -> None:
    """`rows` saved by Spark as catalog table `name` (one file per partition directory)."""
    src = write_parquet(tmp_path / f"input-{uuid.uuid4().hex[:8]}", rows)
    df = spark.read.parquet(str(src)).coalesce(1)
    partition_by = write.pop("partitionBy", None)
    writer = df.write.mode("error")
    if partition_by:
        writer = writer.partitionBy(partition_by)
    writer.saveAsTable(name, **write)


def test_a_parquet_table_is_read_by_the_tasks_into_the_same_bytes(spark, tmp_path, database):
    rows = source_rows(300)
    name = f"{database}.events"
    _save_table(spark, tmp_path, rows, name, format="parquet")
    files = spark.table(name).inputFiles()
    assert len(files) == 1
    int96 = pq.read_metadata(files[0].removeprefix("file://")).schema.column(4)
    assert (int96.name, int96.physical_type) == ("event_time", "INT96")  # Spark's default
    runs = _both(spark, tmp_path, name)
    (arrow, arrow_root), (plain, plain_root) = runs["arrow"], runs["spark"]
    assert (arrow.task_reader, plain.task_reader) == ("arrow", "spark")
    assert "task reader: arrow: local files, plain-column mappings, direct mode\n" in arrow.summary
    assert arrow.records == plain.records == 300
    assert snapshot(arrow_root) == snapshot(plain_root)
    # headers (attrs entries, some null values, then src='web') and times as the oracle says
    assert read_root(arrow_root) == expected_records(rows, PARTITIONS, in_order=True)


def test_a_partitioned_table_is_read_by_the_tasks_with_its_partition_values(
    spark, tmp_path, database
):
    rows = source_rows(300)
    for i, r in enumerate(rows):
        r["part"] = 0 if i < 50 else 1 if i < 210 else 2
    name = f"{database}.by_part"
    _save_table(spark, tmp_path / "a", rows, name, format="parquet", partitionBy="part")
    assert [c.name for c in spark.catalog.listColumns(name) if c.isPartition] == ["part"]
    # Spark packs the files largest first (part=1, 2 | part=0: two tasks, as the open cost of
    # each file counts): the arrow reader reads Spark's own splits, so it writes them in that
    # order too, with the same positions
    assert spark.table(name).rdd.getNumPartitions() == 2
    runs = _both(spark, tmp_path / "a", name)
    (arrow, arrow_root), (plain, plain_root) = runs["arrow"], runs["spark"]
    assert (arrow.task_reader, plain.task_reader) == ("arrow", "spark")
    assert snapshot(arrow_root) == snapshot(plain_root)
    by_size = [r for p in (1, 2, 0) for r in rows if r["part"] == p]
    assert read_root(arrow_root) == expected_records(by_size, PARTITIONS, in_order=True)

    # the partition column from the paths (part=0, ...), as Spark adds it to the rows
    runs = _both(spark, tmp_path / "b", name, partition={"column": "part"})
    (arrow, arrow_root), (plain, plain_root) = runs["arrow"], runs["spark"]
    assert (arrow.task_reader, plain.task_reader) == ("arrow", "spark")
    assert snapshot(arrow_root) == snapshot(plain_root)
    got = read_root(arrow_root)
    assert [len([r for r in got if r[1] == p]) for p in range(3)] == [50, 160, 90]


def test_partition_values_the_catalog_gives_otherwise_than_the_path_keep_the_spark_reader(
    spark, tmp_path, database
):
    """A partition added at a custom location whose directory names another value: Spark
    gives its rows the catalog's value, so the paths' values are not supplied."""
    rows = source_rows(60)
    for i, r in enumerate(rows):
        r["topic"] = "ab"[i % 2]  # the table's partition column, read back as the key
    name = f"{database}.relocated"
    _save_table(spark, tmp_path, rows, name, format="parquet", partitionBy="topic")
    elsewhere = tmp_path / "elsewhere" / "topic=d"
    write_parquet(elsewhere, [{**r, "topic": None} for r in rows[:10]])
    spark.sql(f"ALTER TABLE {name} ADD PARTITION (topic='c') LOCATION '{elsewhere}'")
    mapping = {"topic": "events", "key": {"column": "topic", "format": "string"}}
    result = _run(spark, _doc(name, tmp_path / "logs", **mapping))
    why = (
        "the mapping reads table partition column(s) ['topic']: a partition's directory names "
        "other values than the catalog gives its rows (a partition added at a custom location)"
    )
    assert result.summary.endswith(f"task reader: auto: not the arrow reader, as {why}")
    keys = sorted(r[3] for r in read_root(tmp_path / "logs"))
    assert keys == sorted([b"a", b"b"] * 30 + [b"c"] * 10)


def test_partition_values_are_parsed_from_the_paths_as_spark_reads_them():
    table = CatalogTable("MANAGED", "parquet", "", ("day", "n"), ("string", "int"))
    files = [
        "/w/t/day=2024-05-01/n=7/a.parquet",
        "file:///w/t/day=a%2Fb%3D/n=-3/b.parquet",  # as Spark escapes a/b= in a path
        f"/w/t/day={HIVE_NULL}/n={HIVE_NULL}/c.parquet",
    ]
    found = _path_partitions(table, files)
    assert found is not None and found.types == {"day": pa.string(), "n": pa.int32()}
    assert {f: [(c, v.as_py()) for c, v in vs] for f, vs in found.values.items()} == {
        files[0]: [("day", "2024-05-01"), ("n", 7)],
        files[1]: [("day", "a/b="), ("n", -3)],
        files[2]: [("day", None), ("n", None)],
    }
    for other in (
        "/w/custom/place/a.parquet",  # a partition at a custom location: no values
        "/w/t/day=x/n=1_000/a.parquet",  # not an int to Spark
        "/w/t/day=x/n=4294967296/a.parquet",  # beyond int
        "/w/t/n=1/day=x/a.parquet",
    ):
        assert _path_partitions(table, [files[0], other]) is None, other
    dated = CatalogTable("MANAGED", "parquet", "", ("day",), ("date",))
    assert _path_partitions(dated, ["/w/t/day=2024-05-01/a.parquet"]) is None


def test_other_tables_keep_the_spark_reader_and_say_why(spark, tmp_path, database):
    rows = source_rows(40)
    _save_table(spark, tmp_path, rows, f"{database}.as_json", format="json")
    spark.sql(f"CREATE VIEW {database}.a_view AS SELECT * FROM {database}.as_json")
    spark.table(f"{database}.as_json").createOrReplaceTempView("arrow_src_temp_view")
    try:
        whys = {
            f"{database}.as_json": f"table {database}.as_json is not stored as Parquet "
            "(provider json)",
            f"{database}.a_view": f"table {database}.a_view is a view",
            "arrow_src_temp_view": "table arrow_src_temp_view is a temporary view",
        }
        for name, why in whys.items():
            root = tmp_path / name / "logs"
            result = _run(spark, _doc(name, root))
            assert (result.task_reader, result.records) == ("spark", 40)
            assert result.summary.endswith(f"task reader: auto: not the arrow reader, as {why}")
    finally:
        spark.catalog.dropTempView("arrow_src_temp_view")


HEADER_ENTRY = pa.struct([("key", pa.string()), ("value", pa.binary())])


def _header_source(path: Path) -> list[dict]:
    """Rows with headers of every shape: a map with null and empty values, a null map, an
    empty map; a list of entries with string values (null list, null value, empty string)."""
    rows = source_rows(120)
    maps, lists, tags = [], [], []
    for i, r in enumerate(rows):
        cases = [
            [("trace", b"t%d" % i), ("empty", b""), ("none", None)],
            None,
            [],
            [("only", bytes([i % 256]))],
        ]
        maps.append(cases[i % 4])
        lists.append(None if i % 7 == 0 else r["attrs"] if i % 3 else [])
        tags.append(None if i % 5 == 0 else "" if i % 5 == 1 else f"tag{i}")
    table = pa.Table.from_pylist(rows, schema=SOURCE_SCHEMA)
    table = table.append_column("meta", pa.array(maps, pa.map_(pa.string(), pa.binary())))
    table = table.set_column(
        table.schema.get_field_index("attrs"), "attrs", pa.array(lists, SOURCE_SCHEMA[5].type)
    )
    table = table.append_column("tag", pa.array(tags, pa.string()))
    path.mkdir(parents=True)
    pq.write_table(table, path / "part-000.parquet")
    return rows


@pytest.mark.parametrize(
    "headers",
    [
        {"column": "meta"},
        {"column": "attrs", "values": {"tag": "tag", "src": "'web'"}},
        {"values": {"tag": "tag", "id": "payload"}},
    ],
    ids=["map-column", "entries-column-then-values", "values-only"],
)
def test_mapped_headers_are_the_spark_mappings_bytes(spark, tmp_path, headers):
    _header_source(tmp_path / "src")
    runs = _both(
        spark, tmp_path, {"format": "parquet", "path": str(tmp_path / "src")}, headers=headers
    )
    (arrow, arrow_root), (plain, plain_root) = runs["arrow"], runs["spark"]
    assert (arrow.task_reader, plain.task_reader) == ("arrow", "spark")
    assert snapshot(arrow_root) == snapshot(plain_root)
    got = [h for r in read_root(arrow_root) for h in r[5]]
    values = [h["value"] for h in got]
    assert None in values and b"" in values and len(set(map(str, values))) > 3
    assert any(r[5] == [] for r in read_root(arrow_root)) == ("values" not in headers)


@pytest.mark.parametrize("bucketed_scan", [False, True])
def test_a_bucketed_table_is_read_by_the_tasks_into_the_same_bytes(
    spark, tmp_path, database, small_splits, bucketed_scan
):
    """Spark reads a bucketed table as a plain one (its files cut into byte ranges) unless the
    query needs the buckets; with the bucketed scan forced, one partition per bucket, its files
    whole. Either way the arrow reader's tasks are Spark's partitions."""
    rows = source_rows(300)
    name = f"{database}.bucketed"
    src = write_parquet(tmp_path / "input", rows, files=2)
    # one write task per input file (small_splits): two files in each of the 4 buckets
    spark.read.parquet(str(src)).write.bucketBy(4, "user").saveAsTable(name, format="parquet")
    assert len(spark.table(name).inputFiles()) == 8
    key = "spark.sql.sources.bucketing.autoBucketedScan.enabled"
    old = spark.conf.get(key)
    spark.conf.set(key, str(not bucketed_scan).lower())
    try:
        read = spark.table(name)
        assert (read.rdd.getNumPartitions() == 4) == bucketed_scan
        order = [r.id for r in read.select("id", "user").collect()]  # bucketed: needs user
        runs = _both(spark, tmp_path, name)
    finally:
        spark.conf.set(key, old)
    (arrow, arrow_root), (plain, plain_root) = runs["arrow"], runs["spark"]
    assert (arrow.task_reader, plain.task_reader) == ("arrow", "spark")
    assert "task reader: arrow: local files, plain-column mappings, direct mode\n" in arrow.summary
    assert snapshot(arrow_root) == snapshot(plain_root)
    by_id = {r["id"]: r for r in rows}
    in_order = [by_id[i] for i in order]
    assert read_root(arrow_root) == expected_records(in_order, PARTITIONS, in_order=True)
