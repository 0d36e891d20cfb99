"""Source readers: files, catalog tables, Delta reader choice, filters, fail-fast existence checks."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import write_deltalake

import jobs.spark.sources as sources
from jobs.spark.session import has_delta_extension
from jobs.spark.sources import SourceSpec, check_source_exists, delta_reader_for, read_source
from kafkalog_core.errors import ConfigError

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def files(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("src")
    df = spark.createDataFrame(
        [(1, "a", dt.datetime(2024, 1, 1, 10)), (2, "b", dt.datetime(2024, 1, 2, 10))],
        "id int, name string, ts timestamp",
    )
    df.write.parquet(str(base / "pq"))
    df.write.json(str(base / "js"))
    df.write.option("header", "true").csv(str(base / "csv"))
    return base


def test_parquet_json_csv(spark, files):
    for fmt, extra in (
        ("parquet", {}),
        ("json", {"schema": "id int, name string, ts timestamp"}),
        ("csv", {"schema": "id int, name string, ts timestamp"}),
    ):
        spec = SourceSpec.from_dict(
            {
                "format": fmt,
                "path": str(files / {"parquet": "pq", "json": "js", "csv": "csv"}[fmt]),
                **extra,
            }
        )
        read = read_source(spark, spec, required_columns=["id", "name"])
        assert sorted(r.id for r in read.df.collect()) == [1, 2], fmt
        assert read.version is None and read.description.startswith(fmt)


def test_filter_and_data_interval(spark, files):
    spec = SourceSpec.from_dict(
        {
            "format": "parquet",
            "path": str(files / "pq"),
            "filter": "name <> 'zzz'",
            "interval": {
                "column": "ts",
                "start": "2024-01-02T00:00:00Z",
                "end": "2024-01-03T00:00:00Z",
            },
        }
    )
    read = read_source(spark, spec)
    assert [r.id for r in read.df.collect()] == [2]
    assert "ts in [2024-01-02" in read.description


def test_catalog_table(spark, files):
    spark.read.parquet(str(files / "pq")).createOrReplaceTempView("kl_src_people")
    spec = SourceSpec.from_dict({"format": "table", "table": "kl_src_people"})
    read = read_source(spark, spec)
    assert_df_equality(read.df, spark.table("kl_src_people"), ignore_row_order=True)


def test_missing_things_fail_before_any_job(spark, files, tmp_path):
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("kl-missing", "checks")
    try:
        cases = [
            ({"format": "parquet", "path": str(tmp_path / "none")}, (), "path does not exist"),
            ({"format": "table", "table": "kl_no_such_table"}, (), "no such table"),
            ({"format": "delta", "path": str(tmp_path / "nodelta")}, (), "no Delta table there"),
        ]
        for raw, cols, message in cases:
            with pytest.raises(ConfigError, match=message) as e:
                check_source_exists(spark, SourceSpec.from_dict(raw), cols)
            assert "\n" not in str(e.value)
        assert tracker.getJobIdsForGroup("kl-missing") == []
    finally:
        spark.sparkContext.setJobGroup("", "")
    # A missing column needs the schema: Spark reads one Parquet footer (a tiny job), no data.
    with pytest.raises(ConfigError, match=r"column 'nope' not found .*available: id, name, ts"):
        check_source_exists(
            spark, SourceSpec.from_dict({"format": "parquet", "path": str(files / "pq")}), ["nope"]
        )


def test_bad_filter_names_setting(spark, files):
    spec = SourceSpec.from_dict(
        {"format": "parquet", "path": str(files / "pq"), "filter": "nope > 1"}
    )
    with pytest.raises(ConfigError, match=r"source.filter='nope > 1'"):
        read_source(spark, spec)


def test_spec_validation_names_setting():
    bad = [
        ({"format": "orc", "path": "x"}, "source.format"),
        ({"format": "parquet"}, "needs 'path'"),
        (
            {"format": "parquet", "path": "x", "version": 1},
            "source.version: time travel applies only to format delta",
        ),
        ({"format": "delta", "path": "x", "version": -1}, "source.version=-1"),
        (
            {"format": "delta", "path": "x", "version": 1, "timestamp": "2024-01-01"},
            "at most one of version and timestamp",
        ),
        (
            {"format": "delta", "path": "x", "timestamp": "yesterday"},
            "source.timestamp='yesterday'",
        ),
        ({"format": "delta", "path": "x", "colour": 1}, "unknown setting"),
        ({"format": "delta", "path": "x", "delta_reader": "jvm"}, "source.delta_reader"),
        (
            {"format": "csv", "path": "x", "interval": {"start": "a"}},
            "source.interval.column is required",
        ),
    ]
    for raw, message in bad:
        with pytest.raises(ConfigError, match=message):
            SourceSpec.from_dict(raw)


def test_delta_reader_selection(spark, monkeypatch, tmp_path):
    assert has_delta_extension(spark) is False  # no Delta jars in this environment
    spec = SourceSpec.from_dict({"format": "delta", "path": "x"})
    assert delta_reader_for(spark, spec) == "delta-rs"
    with pytest.raises(ConfigError, match="needs the Delta extension"):
        delta_reader_for(
            spark, SourceSpec.from_dict({"format": "delta", "path": "x", "delta_reader": "spark"})
        )
    with pytest.raises(ConfigError, match="Delta tables by name need the Delta Spark extension"):
        check_source_exists(spark, SourceSpec.from_dict({"format": "delta", "table": "db.t"}))

    monkeypatch.setattr(sources, "has_delta_extension", lambda s: True)
    assert delta_reader_for(spark, spec) == "spark"
    called = {}

    def fake_spark_reader(session, s):
        called["spec"] = s
        return session.range(2).toDF("id"), 7

    monkeypatch.setattr(sources, "_read_delta_spark", fake_spark_reader)
    monkeypatch.setattr(sources, "check_source_exists", lambda *a, **k: None)
    read = read_source(spark, spec)
    assert called["spec"] is spec and read.version == 7 and "via spark" in read.description
    assert (
        sources._spark_delta_ident(SourceSpec.from_dict({"format": "delta", "path": "/a`b"}))
        == "delta.`/a``b`"
    )


def test_has_delta_extension_requires_loadable_class(spark):
    class Conf:
        def get(self, key, default=None):
            return "x.Other, io.delta.sql.DeltaSparkSessionExtension"

    class Configured:
        conf = Conf()
        sparkContext = spark.sparkContext

    # Configured, but the class is not on the classpath here: Spark would ignore it.
    assert has_delta_extension(Configured()) is False
    Configured.sparkContext = None  # Spark Connect: trust the setting
    assert has_delta_extension(Configured()) is True


def test_delta_source_via_deltars(spark, tmp_path):
    path = str(tmp_path / "d")
    write_deltalake(
        path, pa.table({"id": pa.array([1, 2], pa.int64()), "p": ["x", "y"]}), partition_by=["p"]
    )
    write_deltalake(
        path,
        pa.table({"id": pa.array([3], pa.int64()), "p": ["y"]}),
        partition_by=["p"],
        mode="append",
    )
    read = read_source(
        spark,
        SourceSpec.from_dict({"format": "delta", "path": path, "since_version": 0}),
        ["id", "p"],
    )
    assert read.version == 1 and [(r.id, r.p) for r in read.df.collect()] == [(3, "y")]
    assert "rows added after version 0" in read.description
    read = read_source(spark, SourceSpec.from_dict({"format": "delta", "path": path, "version": 0}))
    assert sorted((r.id, r.p) for r in read.df.collect()) == [(1, "x"), (2, "y")]
