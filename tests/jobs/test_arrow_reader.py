"""The arrow task reader: tasks read the source files with pyarrow. Same records as the Spark
reader (each in its own source order), the same checks and errors, timestamps converted as the
Spark mapping converts them, Delta through delta-rs, a killed task, and when it does not apply."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from jobs.ingest import run
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.source.arrow_reader import plan_arrow_read
from jobs.ingestion.source.splits import split_settings
from kafkalog_core import native
from kafkalog_core.errors import ConfigError, InvalidRecordError, KafkaLogError
from tests.jobs.ingest_helpers import (
    SOURCE_ORDER_PARTITIONS,
    SOURCE_SCHEMA,
    expected_records,
    read_root,
    snapshot,
    source_order_doc,
    source_rows,
    spark_read_order,
    staging_leftovers,
    write_parquet,
)

N = 600


def _doc(source, root: Path, reader: str = "auto", **kw) -> dict:
    return source_order_doc(source, root, reader, headers=False, **kw)


def _run(spark, doc: dict, run_id: str = "r1", **kw):
    return run(spark, IngestConfig.from_dict(doc), run_id=run_id, out=lambda _: None, **kw)


def _no_headers(records: list[tuple]) -> list[tuple]:
    return [(t, p, o, k, v, [], ts) for t, p, o, k, v, _, ts in records]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> dict:
    rows = source_rows(N)
    return {"rows": rows, "path": write_parquet(tmp_path_factory.mktemp("src"), rows, files=3)}


@pytest.mark.spark
def test_arrow_and_spark_readers_write_the_same_records(spark, source, tmp_path, small_splits):
    """Both read Spark's file splits in Spark's order (not the files' path order): the same
    records, partitions, checks, offsets and bytes; the arrow reader's tasks per split (the
    relayout after) and per group of partitions (each byte written once) alike."""
    arrow = _run(spark, _doc(source["path"], tmp_path / "a" / "logs", "arrow"))
    splits_doc = _doc(source["path"], tmp_path / "t" / "logs", "arrow")
    splits_doc["output"]["direct_tasks"] = "splits"
    by_split = _run(spark, splits_doc)
    spark_doc = _doc(source["path"], tmp_path / "s" / "logs", "spark")
    spark_doc["output"]["write_mode"] = "direct"
    plain = _run(spark, spark_doc)
    assert (arrow.task_reader, arrow.write_mode) == ("arrow", "direct")
    loops = "C loops in every write task" if native.module else "no C loops in the write tasks"
    assert f"\n  written in the direct write mode, rows read by arrow, {loops}\n" in arrow.summary
    assert (
        "\n  task reader: arrow: local files, plain-column mappings, direct mode\n"
        "  direct tasks: auto: partitions, 2 tasks each read the" in arrow.summary
    )
    assert arrow.direct_tasks == "partitions" and plain.direct_tasks == ""  # each byte once
    assert (plain.task_reader, plain.write_mode) == ("spark", "direct")
    assert arrow.records == plain.records == N
    in_spark_order, _ = spark_read_order(spark, source["path"], source["rows"])
    assert in_spark_order != source["rows"]  # the splits are not in path order
    expected = _no_headers(expected_records(in_spark_order, SOURCE_ORDER_PARTITIONS, in_order=True))
    assert read_root(tmp_path / "a" / "logs") == expected
    assert snapshot(tmp_path / "a" / "logs") == snapshot(tmp_path / "s" / "logs")
    assert snapshot(tmp_path / "t" / "logs") == snapshot(tmp_path / "s" / "logs")
    assert "segments: no partition had shares to lay out" in arrow.summary
    # many tasks (2000-byte splits) wrote shares of every partition; laid out as one writer,
    # each partition is one segment (far below segment.bytes)
    shares = re.search(r"the relayout encoded (\d+) staged record shares", by_split.summary)
    assert shares is not None and int(shares.group(1)) > 3
    assert ": 3 partitions, 3 segments" in by_split.summary
    assert "direct tasks: output.direct_tasks is splits" in by_split.summary
    for partition in range(3):
        pdir = tmp_path / "a" / "logs" / f"events-{partition}"
        names = sorted(p.name for p in pdir.glob("*.log"))
        assert names == [f"{0:020d}.log"]


@pytest.mark.spark
def test_auto_reader_picks_arrow_and_writes_in_one_pass(spark, source, tmp_path, small_splits):
    config = IngestConfig.from_dict(_doc(source["path"], tmp_path / "logs"))
    files = sorted(str(p) for p in Path(source["path"]).glob("*.parquet"))
    read, why = plan_arrow_read(config, files, splits=lambda: split_settings(spark))
    assert read is not None, why
    assert len(read.tasks) == spark.read.parquet(str(source["path"])).rdd.getNumPartitions() >= 3
    result = _run(spark, _doc(source["path"], tmp_path / "logs"))
    assert result.task_reader == "arrow" and result.records == N
    assert "count" not in result.timings_ms and "place" in result.timings_ms


TIMESTAMP_KINDS = {
    "ts_s": (pa.timestamp("s", tz="UTC"), {}),
    "ts_ms": (pa.timestamp("ms", tz="UTC"), {}),
    "epoch_s": (pa.int64(), {"unit": "s"}),
    "epoch_us": (pa.int64(), {"unit": "us"}),
    "day": (pa.date32(), {}),
}


@pytest.mark.spark
@pytest.mark.parametrize("column", sorted(TIMESTAMP_KINDS))
def test_timestamps_convert_as_the_spark_mapping_does(spark, tmp_path, column):
    rng = np.random.default_rng(5)
    n = 50
    base_us = 1_714_521_600_123_456
    us = base_us + np.cumsum(rng.integers(0, 10**11, n))  # up to ~1 day apart
    dtype, extra = TIMESTAMP_KINDS[column]
    if column in ("ts_s", "ts_ms"):
        values = pa.array(us, pa.timestamp("us", tz="UTC")).cast(dtype, safe=False)
    elif column == "epoch_s":
        values = pa.array(us // 10**6)
    elif column == "epoch_us":
        values = pa.array(us)
    else:
        values = pa.array(us // 86_400_000_000, pa.int32()).cast(pa.date32())
    table = pa.table(
        {"user": [f"u{i % 7}" for i in range(n)], "payload": [b"v%d" % i for i in range(n)]}
    ).append_column(column, values)
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(table, src / "part-0.parquet")
    roots = {}
    for reader in ("arrow", "spark"):
        roots[reader] = tmp_path / reader / "logs"
        doc = _doc(src, roots[reader], reader, mapping={"timestamp": {"column": column, **extra}})
        assert _run(spark, doc).task_reader == reader
    got = read_root(roots["arrow"])
    assert got == read_root(roots["spark"])
    assert len(got) == n and len({r[6] for r in got}) > 1


@pytest.mark.spark
def test_delta_table_through_deltars_is_read_by_the_tasks(spark, tmp_path):
    rows = source_rows(300)
    table = str(tmp_path / "delta")
    for part in range(2):
        chunk = rows[part * 150 : (part + 1) * 150]
        write_deltalake(table, pa.Table.from_pylist(chunk, schema=SOURCE_SCHEMA), mode="append")
    doc = _doc({"format": "delta", "path": table, "delta_reader": "delta-rs"}, tmp_path / "logs")
    result = _run(spark, doc)
    assert (result.task_reader, result.source_version, result.records) == ("arrow", 1, 300)
    # Spark's reader scans the snapshot's files too: the arrow tasks are its splits, so the
    # same records in the same order
    plain = _doc(doc["source"], tmp_path / "s" / "logs", "spark")
    plain["output"]["write_mode"] = "direct"
    assert _run(spark, plain).task_reader == "spark"
    assert snapshot(tmp_path / "logs") == snapshot(tmp_path / "s" / "logs")
    assert len(read_root(tmp_path / "logs")) == 300


@pytest.mark.spark
def test_partitioned_delta_table_qualifies_unless_the_mapping_reads_a_partition_column(
    spark, tmp_path
):
    rows = source_rows(200)
    for r in rows:
        r["part"] = r["id"] % 2
    table = str(tmp_path / "delta")
    arrow_table = pa.Table.from_pylist(rows, schema=SOURCE_SCHEMA)
    write_deltalake(table, arrow_table, partition_by=["part"])
    source = {"format": "delta", "path": table, "delta_reader": "delta-rs"}
    result = _run(spark, _doc(source, tmp_path / "a" / "logs"))
    assert (result.task_reader, result.records) == ("arrow", 200)
    # Spark's splits of the files (its reader adds the partition values by a join that keeps
    # the scan's order): the same bytes as Spark's reader
    plain = _doc(source, tmp_path / "s" / "logs", "spark")
    plain["output"]["write_mode"] = "direct"
    assert _run(spark, plain).task_reader == "spark"
    assert snapshot(tmp_path / "a" / "logs") == snapshot(tmp_path / "s" / "logs")
    by_part = _doc(source, tmp_path / "b" / "logs", mapping={"partition": {"column": "part"}})
    result = _run(spark, by_part)
    assert result.task_reader == "spark" and result.records == 200
    got = read_root(tmp_path / "b" / "logs")
    assert sorted({r[1] for r in got}) == [0, 1]


@pytest.mark.spark
@pytest.mark.parametrize(
    "partition",
    [{"null_keys": "value_hash"}, {"column": "part"}],
    ids=["null-keys-by-value-hash", "explicit-column"],
)
def test_partitioning_rules_place_records_as_the_spark_reader_does(spark, tmp_path, partition):
    rows = source_rows(300)
    for i, r in enumerate(rows):
        r["part"] = i % 3
        if i % 4 == 0:
            r["user"] = None
    src = write_parquet(tmp_path / "src", rows, files=1)  # one file: both readers' order
    roots = {}
    for reader in ("arrow", "spark"):
        roots[reader] = tmp_path / reader / "logs"
        result = _run(spark, _doc(src, roots[reader], reader, mapping={"partition": partition}))
        assert (result.task_reader, result.records) == (reader, 300)
    got = read_root(roots["arrow"])
    assert got == read_root(roots["spark"])
    assert len({r[1] for r in got}) == 3 and any(r[3] is None for r in got)


@pytest.mark.spark
def test_an_out_of_range_partition_is_the_spark_readers_error(spark, tmp_path):
    rows = source_rows(50)
    for i, r in enumerate(rows):
        r["part"] = 7 if i == 30 else 1
    src = write_parquet(tmp_path / "src", rows, files=1)
    messages = {}
    for reader in ("arrow", "spark"):
        doc = _doc(src, tmp_path / reader / "logs", reader, mapping={"partition": "part"})
        with pytest.raises(InvalidRecordError) as info:
            _run(spark, doc)
        messages[reader] = str(info.value)
    want = "partition 7 is out of range for topic 'events' with 3 partitions; record: topic="
    assert messages["arrow"].startswith(want) and messages["spark"].startswith(want)
    # the same record, up to its source row id (each reader numbers rows its own way)
    assert (
        messages["arrow"].rsplit("source row id=", 1)[0]
        == messages["spark"].rsplit("source row id=", 1)[0]
    )


@pytest.mark.spark
def test_a_bad_row_is_one_clear_error_and_nothing_is_published(spark, tmp_path):
    rows = source_rows(200)
    rows[120]["user"] = None
    src = write_parquet(tmp_path / "src", rows, files=2)
    topics = {"events": {"partitions": 3, "config": {"cleanup.policy": "compact"}}}
    root = tmp_path / "logs"
    with pytest.raises(InvalidRecordError) as info:
        _run(spark, _doc(src, root, "arrow", topics=topics))
    message = str(info.value)
    assert message.startswith("null key on compacted topic 'events' (cleanup.policy=compact)")
    assert "\n" not in message
    assert [p for p in root.iterdir()] == []


@pytest.mark.spark
def test_killed_task_leaves_nothing_and_the_rerun_publishes(spark, source, tmp_path, small_splits):
    root = tmp_path / "logs"
    with pytest.raises(KafkaLogError, match="injected failure"):
        _run(spark, _doc(source["path"], root, "arrow"), fail_after_batches=1)
    assert snapshot(root) == {}
    # a share's staging (segments, or a later task's records) is left for the rerun to drop
    assert any(s.rsplit("/", 1)[-1].startswith("events-") for s in staging_leftovers(root))
    assert _run(spark, _doc(source["path"], root, "arrow")).records == N
    assert staging_leftovers(root) == []
    in_spark_order, _ = spark_read_order(spark, source["path"], source["rows"])
    assert read_root(root) == _no_headers(
        expected_records(in_spark_order, SOURCE_ORDER_PARTITIONS, in_order=True)
    )


@pytest.mark.spark
def test_task_reader_arrow_says_why_it_cannot(spark, source, tmp_path):
    doc = _doc(source["path"], tmp_path / "logs", "arrow")
    doc["ordering"] = ["lower(user)"]  # a plain column would take the arrow range path
    with pytest.raises(
        ConfigError, match=r"cannot read this run: ordering\[0\]='lower\(user\)' is not"
    ):
        _run(spark, doc)
    doc = source_order_doc(source["path"], tmp_path / "logs", "arrow")
    doc["mapping"]["headers"]["values"] = {"src": "upper(user)"}
    with pytest.raises(
        ConfigError, match="cannot read this run: mapping.headers.values.src is an expression"
    ):
        _run(spark, doc)


# ---------------------------------------------------------------------------------------------
# planning without Spark


def _config(tmp_path: Path, **mapping) -> IngestConfig:
    doc = _doc(tmp_path / "src", tmp_path / "logs")
    doc["mapping"].update(mapping)
    return IngestConfig.from_dict(doc)


def _write(path: Path, columns: dict) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return str(path)


def test_plan_says_why_a_run_does_not_qualify(tmp_path):
    good = _write(
        tmp_path / "a.parquet",
        {
            "user": ["a", "b"],
            "payload": [b"1", b"2"],
            "event_time": pa.array([1, 2], pa.timestamp("us", tz="UTC")),
        },
    )
    plan, why = plan_arrow_read(_config(tmp_path), [good])
    assert plan is not None and why == ""
    cases = {
        "mapping.key is an expression": (_config(tmp_path, key={"expr": "upper(user)"}), [good]),
        "mapping.value is format json": (
            _config(tmp_path, value={"column": "user", "format": "json"}),
            [good],
        ),
        "pyarrow cannot open foo://bucket": (_config(tmp_path), ["foo://bucket/a.parquet"]),
    }
    ntz = _write(
        tmp_path / "ntz" / "a.parquet",
        {"user": ["a"], "payload": [b"1"], "event_time": pa.array([1], pa.timestamp("us"))},
    )
    cases["timestamp column 'event_time' is timestamp[us]"] = (_config(tmp_path), [ntz])
    other = _write(
        tmp_path / "b.parquet",
        {"user": [1], "payload": [b"1"], "event_time": pa.array([1], pa.timestamp("us", "UTC"))},
    )
    cases["column 'user' is string in one file and int64"] = (_config(tmp_path), [good, other])
    missing = _write(tmp_path / "c.parquet", {"user": ["a"], "payload": [b"1"]})
    cases["column 'event_time' is not a plain column of data file"] = (
        _config(tmp_path),
        [missing],
    )
    cases["the source has no data files"] = (_config(tmp_path), [])
    for reason, (config, files) in cases.items():
        plan, why = plan_arrow_read(config, files)
        assert plan is None and why.startswith(reason), (reason, why)
    plan, why = plan_arrow_read(_config(tmp_path), [good], partition_columns=("user",))
    assert plan is None and "reads table partition column(s) ['user']" in why


@pytest.mark.spark
def test_a_partition_beyond_int_is_one_clear_error(spark, tmp_path):
    src = tmp_path / "src"
    _write(
        src / "a.parquet",
        {
            "user": ["a", "b"],
            "payload": [b"1", b"2"],
            "event_time": pa.array([1, 2], pa.timestamp("us", tz="UTC")),
            "part": pa.array([1, 2**32], pa.int64()),
        },
    )
    doc = _doc(src, tmp_path / "logs", "arrow", mapping={"partition": "part"})
    with pytest.raises(InvalidRecordError, match=r"^partition 4294967296 does not fit an int$"):
        _run(spark, doc)


# Run in a fresh interpreter, as a Spark task's Python worker would: the peak RSS of a pytest
# worker depends on what the tests before it left in its allocator.
_READ_ONE_FILE = """
import sys
from jobs.ingestion.source import arrow_reader
from jobs.ingestion.source.pieces import FilePiece

def rss_kib(field):
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith(field))

piece = FilePiece(sys.argv[1], None)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset this process's peak RSS (VmHWM) to its current RSS
before = rss_kib("VmRSS")
rows = sum(b.num_rows for b in arrow_reader._batches([piece], ["value"]))
print(rows, (rss_kib("VmHWM") - before) / 1024)
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_a_task_streams_a_large_row_group(tmp_path):
    # One 183 MiB row group of incompressible values. Read whole (pyarrow's default), a fresh
    # process's peak memory grows by ~570 MiB; streamed, by ~85 MiB whatever the row group's
    # size. The bound sits between the two with room on either side.
    n = 1_600_000
    values = np.random.default_rng(3).integers(0, 256, 120 * n, dtype=np.uint8)
    offsets = pa.py_buffer(np.arange(n + 1, dtype=np.int32) * 120)
    table = pa.table(
        {"value": pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(values)])}
    )
    path = tmp_path / "big.parquet"
    pq.write_table(table, path, row_group_size=n, compression="none")
    del table, values, offsets
    done = subprocess.run(
        [sys.executable, "-c", _READ_ONE_FILE, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    rows, growth = done.stdout.split()
    growth_mib = float(growth)
    assert int(rows) == n
    assert growth_mib < 160, f"reading one row group grew the peak RSS by {growth_mib:.0f} MiB"
