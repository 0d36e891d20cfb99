"""The already-ingested check keys on a normalized source identity, not on display text."""

import os

from jobs.ingest import source_identity
from jobs.spark.sources import DataInterval, SourceSpec


def test_one_table_spelled_three_ways_is_one_source(tmp_path, monkeypatch):
    table = tmp_path / "tables" / "events"
    table.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    spellings = [str(table), "tables/events", f"file://{table}"]
    identities = {source_identity(SourceSpec(format="delta", path=p)) for p in spellings}
    assert identities == {f"delta {os.path.realpath(table)}"}


def test_reader_choice_does_not_change_the_identity(tmp_path):
    spark_reader = SourceSpec(format="delta", path=str(tmp_path), delta_reader="spark")
    delta_rs = SourceSpec(format="delta", path=str(tmp_path), delta_reader="delta-rs")
    assert source_identity(spark_reader) == source_identity(delta_rs)


def test_row_selection_is_part_of_the_identity(tmp_path):
    base = SourceSpec(format="delta", path=str(tmp_path))
    variants = [
        SourceSpec(format="delta", path=str(tmp_path), since_version=3),
        SourceSpec(format="delta", path=str(tmp_path), filter="country = 'NL'"),
        SourceSpec(
            format="delta",
            path=str(tmp_path),
            interval=DataInterval("day", "2024-05-01", "2024-05-02"),
        ),
        SourceSpec(format="parquet", path=str(tmp_path)),
    ]
    identities = {source_identity(v) for v in variants}
    assert source_identity(base) not in identities
    assert len(identities) == len(variants)


def test_catalog_tables_compare_case_insensitively():
    assert source_identity(SourceSpec(format="table", table="Sales.Orders")) == source_identity(
        SourceSpec(format="table", table="sales.orders")
    )


def test_a_change_feed_is_one_source_whatever_its_start(tmp_path):
    """Its runs continue one another (`change_feed_start`), so the start is not the identity;
    its rows (changes, not a version's rows) are."""
    feeds = {
        source_identity(SourceSpec(format="delta", path=str(tmp_path), changes="cdf", **start))
        for start in ({}, {"since_version": 3}, {"since_version": 7})
    }
    assert len(feeds) == 1
    assert feeds.isdisjoint({source_identity(SourceSpec(format="delta", path=str(tmp_path)))})
