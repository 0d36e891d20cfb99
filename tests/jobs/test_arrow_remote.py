"""The arrow task reader over pyarrow's file systems: file: URIs and a stand-in object store
(`remote_fs`) give the bytes the plain-path run gives, tasks build their own file system, and a
scheme pyarrow cannot open falls back to Spark's reader with pyarrow's reason."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

import jobs.ingest as ingest
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.source import fs as source_fs
from jobs.ingestion.source.arrow_reader import mapped_batches, plan_arrow_read
from jobs.ingestion.source.splits import SplitSettings
from jobs.ingestion.source.table_files import SourceFiles
from kafkalog_core.errors import ConfigError
from tests.jobs.ingest_helpers import (
    SOURCE_SCHEMA,
    expected_records,
    read_root,
    snapshot,
    source_order_doc,
    source_rows,
    spark_read_order,
    write_parquet,
)
from tests.jobs.remote_fs import SCHEME, StoreResolver

N = 300
NOW = 1_714_521_600_123


def _doc(source, root: Path) -> dict:
    return source_order_doc(source, root, headers=False)  # the arrow reader takes plain columns


def _run(spark, doc: dict):
    config = IngestConfig.from_dict(doc)
    return ingest.run(spark, config, run_id="r1", now_ms=NOW, out=lambda _: None)


@pytest.fixture
def planned(monkeypatch) -> list:
    """The arrow read plans the job makes, in order."""
    plans = []
    real = ingest.plan_arrow_read

    def spy(*args, **kwargs):
        plan, why = real(*args, **kwargs)
        plans.append(plan)
        return plan, why

    monkeypatch.setattr(ingest, "plan_arrow_read", spy)
    return plans


def _paths(plan) -> list[str]:
    return [piece.path for task in plan.tasks for piece in task]


def _with_files(monkeypatch, rewrite) -> None:
    """The job's source files, each rewritten (a plain path, or a URI of a stand-in store)."""
    real = ingest.source_files

    def rewritten(*args):
        found = real(*args)
        return replace(found, files=[rewrite(f) for f in found.files])

    monkeypatch.setattr(ingest, "source_files", rewritten)


def _plain(location: str) -> str:
    parts = source_fs.split_uri(location)
    return location if parts is None else parts[2]


# ---------------------------------------------------------------------------------------------
# file: URIs


@pytest.mark.spark
def test_file_uris_read_through_pyarrow_give_the_plain_path_bytes(
    spark, tmp_path, small_splits, planned, monkeypatch
):
    rows = source_rows(N)
    src = write_parquet(tmp_path / "src 100%", rows, files=3)  # Spark's URIs escape both
    uris = _run(spark, _doc(src, tmp_path / "u" / "logs"))
    _with_files(monkeypatch, _plain)
    plain = _run(spark, _doc(src, tmp_path / "p" / "logs"))
    assert uris.task_reader == plain.task_reader == "arrow"
    assert "task reader: auto: local files, plain-column mappings, direct mode\n" in uris.summary
    by_uri, by_path = (_paths(p) for p in planned)
    assert len(by_uri) == 3 and all(p.startswith("file:/") for p in by_uri)
    assert [_plain(p) for p in by_uri] == by_path  # Spark's splits, either way named
    assert sorted(by_path) == sorted(str(p) for p in src.iterdir())
    assert snapshot(tmp_path / "u" / "logs") == snapshot(tmp_path / "p" / "logs")
    in_spark_order, _ = spark_read_order(spark, src, rows)
    expected = expected_records(in_spark_order, {"events": 3}, in_order=True)
    assert read_root(tmp_path / "u" / "logs") == [(*r[:5], [], r[6]) for r in expected]


@pytest.mark.spark
def test_a_delta_table_named_by_a_file_uri_reads_through_pyarrow(spark, tmp_path, planned):
    rows = source_rows(200)
    table = tmp_path / "delta"
    for part in range(2):
        chunk = pa.Table.from_pylist(rows[part * 100 : (part + 1) * 100], schema=SOURCE_SCHEMA)
        write_deltalake(str(table), chunk, mode="append")
    roots = {}
    for name, location in (("uri", "file://" + str(table)), ("path", str(table))):
        roots[name] = tmp_path / name / "logs"
        source = {"format": "delta", "path": location, "delta_reader": "delta-rs"}
        result = _run(spark, _doc(source, roots[name]))
        assert (result.task_reader, result.records) == ("arrow", 200)
    by_uri, by_path = (_paths(p) for p in planned)
    assert all(p.startswith("file:///") for p in by_uri) and len(by_uri) == 2
    assert [_plain(p) for p in by_uri] == by_path and not by_path[0].startswith("file:")
    assert snapshot(roots["uri"]) == snapshot(roots["path"])
    assert len(read_root(roots["uri"])) == 200


# ---------------------------------------------------------------------------------------------
# a stand-in object store


def _store(tmp_path: Path, rows: list[dict], files: int) -> tuple[StoreResolver, Path, list[str]]:
    """Rows as Parquet files in bucket `bucket` of a `kltest://` store: (resolver, the local
    directory behind it, the files' URIs)."""
    base = tmp_path / "store"
    local = write_parquet(base / "bucket" / "events", rows, files=files)
    uris = [f"{SCHEME}://bucket/events/{p.name}" for p in sorted(local.glob("*.parquet"))]
    return StoreResolver(str(base)), local, uris


@pytest.mark.spark
def test_tasks_read_through_the_file_system_the_scheme_resolves_to(
    spark, tmp_path, small_splits, monkeypatch
):
    rows = source_rows(N)
    resolver, local, uris = _store(tmp_path, rows, files=3)
    plain = _run(spark, _doc(local, tmp_path / "p" / "logs"))
    assert resolver.opens() == []
    monkeypatch.setitem(source_fs.RESOLVERS, SCHEME, resolver)
    by_name = {Path(u).name: u for u in uris}
    _with_files(monkeypatch, lambda f: by_name[Path(_plain(f)).name])
    stored = _run(spark, _doc(local, tmp_path / "s" / "logs"))
    assert stored.task_reader == plain.task_reader == "arrow"
    assert (
        f"task reader: auto: files on py::{SCHEME} through pyarrow, plain-column mappings, "
        "direct mode\n" in stored.summary
    )
    assert snapshot(tmp_path / "s" / "logs") == snapshot(tmp_path / "p" / "logs")
    # the driver read the footers, and Spark's Python workers (other processes, which got the
    # resolver with the plan) opened every file once per write task: the one write pass, whose
    # two tasks (direct_tasks auto on local[2]) each own partitions and read every file
    opens = resolver.opens()
    keys = sorted(f"bucket/events/{name}" for name in by_name)
    assert sorted({path for pid, path in opens if pid == os.getpid()}) == keys
    in_tasks = sorted(path for pid, path in opens if pid != os.getpid())
    assert stored.direct_tasks == "partitions" and in_tasks == sorted(keys * 2)


def test_planning_and_the_task_functions_read_through_a_stand_in_store(tmp_path, monkeypatch):
    rows = source_rows(400)
    resolver, local, uris = _store(tmp_path, rows, files=2)
    big = local / "part-000.parquet"  # rewritten with 4 row groups, split into 2 pieces
    pq.write_table(pq.read_table(big), big, row_group_size=50)
    monkeypatch.setitem(source_fs.RESOLVERS, SCHEME, resolver)
    config = IngestConfig.from_dict(_doc(local, tmp_path / "logs"))
    paths = sorted(str(p) for p in local.glob("*.parquet"))
    split = big.stat().st_size * 2 // 3
    splits = lambda: SplitSettings(max_partition_bytes=split)  # noqa: E731
    by_store, why = plan_arrow_read(config, uris, splits=splits)
    assert by_store is not None, why
    by_path, why = plan_arrow_read(config, paths, splits=splits)
    assert by_path is not None, why
    assert by_store.file_systems == (f"py::{SCHEME}",) and by_path.file_systems == ("local",)
    assert by_store.resolvers == ((SCHEME, resolver),) and by_path.resolvers == ()
    assert [[(p.path, p.row_groups) for p in t] for t in by_store.tasks] == [
        [(uris[p.path == paths[1]], p.row_groups) for p in t] for t in by_path.tasks
    ]
    assert any(p.row_groups for t in by_store.tasks for p in t)
    for i, (task, plain_task) in enumerate(zip(by_store.tasks, by_path.tasks, strict=True)):
        got = list(mapped_batches(task, i, by_store.columns, by_store.rules))
        want = list(mapped_batches(plain_task, i, by_path.columns, by_path.rules))
        assert len(got) == len(want) and all(g.equals(w) for g, w in zip(got, want, strict=True))
    assert {path for _, path in resolver.opens()} == {u.split("://")[1] for u in uris}


# ---------------------------------------------------------------------------------------------
# schemes pyarrow cannot open


def _without_s3(root: str):
    raise pa.ArrowNotImplementedError("Got S3 URI but Arrow compiled without S3 support")


def test_a_scheme_pyarrow_cannot_open_falls_back_to_sparks_reader_with_the_reason(
    tmp_path, monkeypatch
):
    doc = _doc(tmp_path / "src", tmp_path / "logs")
    files = ["foo://bucket/x.parquet"]
    monkeypatch.setattr(ingest, "source_files", lambda *_: SourceFiles(files))
    plan, why = ingest._arrow_read_plan(None, IngestConfig.from_dict(doc), None, None)
    assert plan is None
    assert why == (
        "auto: not the arrow reader, as pyarrow cannot open foo://bucket "
        "(Unrecognized filesystem type in URI: foo://bucket/)"
    )
    # a pyarrow build without S3: Hadoop's s3a:// is pyarrow's s3://, which this one lacks
    monkeypatch.setitem(source_fs.RESOLVERS, "s3", _without_s3)
    files[:] = ["s3a://bucket/t/a.parquet"]
    doc["source"]["task_reader"] = "arrow"
    with pytest.raises(ConfigError) as info:
        ingest._arrow_read_plan(None, IngestConfig.from_dict(doc), None, None)
    assert str(info.value) == (
        "source.task_reader=arrow cannot read this run: pyarrow cannot open s3://bucket "
        "(Got S3 URI but Arrow compiled without S3 support)"
    )


def test_locations_split_and_file_systems_are_built_once_per_root(tmp_path):
    assert source_fs.split_uri("/data/a b%.parquet") is None
    assert source_fs.split_uri("rel/a.parquet") is None
    assert source_fs.split_uri("S3A://bucket/k/a.parquet") == ("s3", "bucket", "/k/a.parquet")
    assert source_fs.split_uri("file:/data/a.parquet") == ("file", "", "/data/a.parquet")
    assert source_fs.split_uri("hdfs://nn:8020/a") == ("hdfs", "nn:8020", "/a")
    path = tmp_path / "a b%41.parquet"
    pq.write_table(pa.table({"x": [1]}), path)
    for uri in (f"file://{path}", f"file:{path}"):
        fs, inside = source_fs.open_file_system(uri)
        assert isinstance(fs, pafs.LocalFileSystem) and inside == str(path)
        assert fs.get_file_info(inside).size == path.stat().st_size
    assert source_fs.open_file_system(f"file://{path}")[0] is fs  # kept per process
    assert source_fs.why_not_open([str(path), f"file://{path}"]) == ""
