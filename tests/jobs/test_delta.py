"""Delta through delta-rs: pinned snapshots, time travel, partition columns, since_version, refusals."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable, write_deltalake

from jobs.spark.delta import load_snapshot, read_delta_with_deltars, rows_since_version
from kafkalog_core.errors import ConfigError

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("day", pa.date32()),
        ("region", pa.string()),
    ]
)


def _rows(ids, day, region):
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"n{i}" for i in ids],
            "day": pa.array([day] * len(ids), pa.date32()),
            "region": pa.array([region] * len(ids), pa.string()),
        },
        schema=SCHEMA,
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> dict:
    """v0: 3 rows; v1: append 2 (new partition, odd chars); v2: append 1 (null region)."""
    path = str(tmp_path_factory.mktemp("delta") / "events")
    d1, d2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    write_deltalake(path, _rows([1, 2, 3], d1, "eu"), partition_by=["day", "region"])
    time.sleep(0.05)
    between = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.05)
    write_deltalake(
        path, _rows([4, 5], d2, "a b+c%/é"), partition_by=["day", "region"], mode="append"
    )
    write_deltalake(path, _rows([6], d2, None), partition_by=["day", "region"], mode="append")
    return {"path": path, "between": between}


def _expected(spark, rows):
    return spark.createDataFrame(rows, "id bigint, name string, day date, region string")


def test_latest_keeps_partition_columns_with_types(spark, table):
    df, version = read_delta_with_deltars(spark, table["path"])
    assert version == 2
    assert [f.dataType.simpleString() for f in df.schema.fields] == [
        "bigint",
        "string",
        "date",
        "string",
    ]
    d1, d2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    expected = _expected(
        spark,
        [
            (1, "n1", d1, "eu"),
            (2, "n2", d1, "eu"),
            (3, "n3", d1, "eu"),
            (4, "n4", d2, "a b+c%/é"),
            (5, "n5", d2, "a b+c%/é"),
            (6, "n6", d2, None),
        ],
    )
    assert_df_equality(df, expected, ignore_row_order=True, ignore_nullable=True)


def test_version_and_timestamp_time_travel(spark, table):
    df, version = read_delta_with_deltars(spark, table["path"], version=0)
    assert version == 0
    assert sorted(r.id for r in df.collect()) == [1, 2, 3]
    df, version = read_delta_with_deltars(spark, table["path"], timestamp=table["between"])
    assert version == 0
    assert df.count() == 3
    with pytest.raises(ConfigError, match="before the first available commit"):
        load_snapshot(table["path"], timestamp="2000-01-01T00:00:00Z")


def test_snapshot_is_pinned_and_sorted(table):
    snap = load_snapshot(table["path"], version=1)
    assert snap.version == 1
    assert snap.partition_columns == ("day", "region")
    assert [f.uri for f in snap.files] == sorted(f.uri for f in snap.files)
    assert all(Path(f.uri).is_file() for f in snap.files)  # real file names (decoded)
    assert {f.partition_values["region"] for f in snap.files} == {"eu", "a b+c%/é"}


def test_since_version_reads_rows_added_after(spark, table):
    df, version = rows_since_version(spark, table["path"], since_version=0)
    assert version == 2
    assert sorted((r.id, r.region) for r in df.collect()) == [
        (4, "a b+c%/é"),
        (5, "a b+c%/é"),
        (6, None),
    ]
    df, _ = rows_since_version(spark, table["path"], since_version=1, version=1)
    assert df.count() == 0
    with pytest.raises(ConfigError, match="since_version=3 is after"):
        rows_since_version(spark, table["path"], since_version=3)


def test_since_version_refused_after_overwrite_or_delete(spark, tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, _rows([1, 2], dt.date(2024, 1, 1), "eu"))
    write_deltalake(path, _rows([3], dt.date(2024, 1, 1), "eu"), mode="append")
    DeltaTable(path).delete("id = 1")
    with pytest.raises(
        ConfigError, match=r"since_version=0.*first at version 2, operation DELETE.*ill-defined"
    ):
        rows_since_version(spark, path, since_version=0)
    write_deltalake(path, _rows([9], dt.date(2024, 1, 1), "eu"), mode="overwrite")
    with pytest.raises(ConfigError, match="ill-defined"):
        rows_since_version(spark, path, since_version=2)


def test_unpartitioned_and_empty_snapshots(spark, tmp_path):
    path = str(tmp_path / "plain")
    write_deltalake(path, _rows([7, 8], dt.date(2024, 3, 1), "x"))
    df, version = read_delta_with_deltars(spark, path)
    assert version == 0
    assert sorted(r.id for r in df.collect()) == [7, 8]
    write_deltalake(path, _rows([], dt.date(2024, 3, 1), "x"), mode="overwrite")
    df, _ = read_delta_with_deltars(spark, path)
    assert df.count() == 0 and df.columns == ["id", "name", "day", "region"]


def test_column_mapping_refused(tmp_path):
    path = str(tmp_path / "cm")
    write_deltalake(
        path,
        _rows([1], dt.date(2024, 1, 1), "eu"),
        configuration={"delta.columnMapping.mode": "name"},
    )
    with pytest.raises(ConfigError, match="column mapping"):
        load_snapshot(path)


def test_deletion_vectors_refused(tmp_path):
    # delta-rs cannot write deletion vectors, but it can enable the reader feature; delta-rs's
    # API does not reliably report which files carry DVs, so the feature itself is refused.
    path = str(tmp_path / "dv")
    write_deltalake(
        path,
        _rows([1], dt.date(2024, 1, 1), "eu"),
        configuration={"delta.enableDeletionVectors": "true"},
    )
    with pytest.raises(ConfigError, match="deletionVectors"):
        load_snapshot(path)


def test_unknown_reader_feature_refused(tmp_path):
    # Hand-made log: protocol with a reader feature nobody knows (documents the generic refusal).
    path = tmp_path / "odd"
    write_deltalake(str(path), _rows([1], dt.date(2024, 1, 1), "eu"))
    commit = path / "_delta_log" / "00000000000000000001.json"
    commit.write_text(
        '{"commitInfo":{"timestamp":1,"operation":"SET TBLPROPERTIES"}}\n'
        '{"protocol":{"minReaderVersion":3,"minWriterVersion":7,'
        '"readerFeatures":["futureThing"],"writerFeatures":["futureThing"]}}\n'
    )
    with pytest.raises(ConfigError):
        load_snapshot(str(path))


def test_missing_table_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as e:
        read_delta_with_deltars(None, str(tmp_path / "nope"))  # type: ignore[arg-type]
    assert "no Delta table there" in str(e.value) and "\n" not in str(e.value)
    write_deltalake(str(tmp_path / "one"), _rows([1], dt.date(2024, 1, 1), "eu"))
    with pytest.raises(ConfigError, match="cannot load version 9"):
        load_snapshot(str(tmp_path / "one"), version=9)
