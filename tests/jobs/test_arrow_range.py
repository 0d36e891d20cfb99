"""The range mode on the arrow task reader (`jobs.ingestion.tasks.arrow_range`): the bytes of the Spark
range mode, the records the oracle expects, Spark's order for nulls/NaN, bounded runs, the
fall-back with its why, and a killed run."""

from __future__ import annotations

import datetime as dt
import math
import os
import random
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.ingest import run
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.source.arrow_reader import plan_arrow_read
from jobs.ingestion.tasks import arrow_range as ar
from jobs.ingestion.tasks import arrow_range_keys as rk
from kafkalog_core import native
from kafkalog_core.errors import KafkaLogError
from tests.jobs.ingest_helpers import (
    SOURCE_SCHEMA,
    config_doc,
    expected_records,
    kp_partition,
    read_root,
    snapshot,
    source_rows,
    staging_leftovers,
)

TOPICS = {
    "events": {"partitions": 3, "config": {"segment.bytes": 6000, "index.interval.bytes": 500}},
    "other": {"partitions": 2, "config": {"segment.bytes": 6000, "index.interval.bytes": 500}},
}
PARTITIONS = {"events": 3, "other": 2}
NOW_MS = 1_714_521_600_123


def _rows() -> list[dict]:
    """A hot key (most rows in one partition), two topics, ties in event_time; with a float
    `score` (nulls, NaN, -0.0, 0.0, ties) and a string `name` (nulls, non-ASCII)."""
    rows = source_rows(300, hot_user="hot", seed=3)
    rows += source_rows(100, start_id=300, topic="other", seed=4)
    rng = random.Random(11)
    for i, row in enumerate(rows):
        row["score"] = None if i % 9 == 0 else rng.choice([math.nan, -0.0, 0.0, 1.5, -2.0])
        row["name"] = None if i % 7 == 0 else rng.choice(["", "a", "b", "é", "zz"])
        row["day"] = None if i % 6 == 0 else dt.date(2024, 5, 1 + rng.randrange(3))
        row["amount"] = None if i % 10 == 0 else Decimal(rng.randrange(-300, 300)) / 100
        row["flag"] = None if i % 12 == 0 else rng.random() < 0.5
        row["raw"] = None if i % 13 == 0 else bytes([rng.choice((0, 1, 200))] * rng.randrange(3))
        row["small"] = None if i % 8 == 0 else rng.randrange(-3, 3)
    return rows


EXTRA = {
    "score": pa.float64(),
    "name": pa.string(),
    "day": pa.date32(),
    "amount": pa.decimal128(10, 2),
    "flag": pa.bool_(),
    "raw": pa.binary(),
    "small": pa.int8(),
}
SCHEMA = pa.schema([*SOURCE_SCHEMA, *(pa.field(n, t) for n, t in EXTRA.items())])


def _write(path: Path, rows: list[dict], files: int = 1) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    per = -(-len(rows) // files)
    for f in range(files):
        table = pa.Table.from_pylist(rows[f * per : (f + 1) * per], schema=SCHEMA)
        pq.write_table(table, path / f"part-{f:03d}.parquet")
    return path


def _doc(src: Path, root: Path, reader: str, ordering=("event_time", "id")) -> dict:
    doc = config_doc(src, root, topics=TOPICS, ordering=ordering)
    del doc["mapping"]["headers"]
    doc["mapping"]["topic"] = {"column": "topic"}
    doc["source"]["task_reader"] = reader
    doc["output"]["write_mode"] = "range"
    return doc


def _run(spark, doc: dict, **kw):
    kw.setdefault("run_id", "r1")
    return run(spark, IngestConfig.from_dict(doc), now_ms=NOW_MS, out=lambda _: None, **kw)


def _no_headers(records: list[tuple]) -> list[tuple]:
    return [(t, p, o, k, v, [], ts) for t, p, o, k, v, _, ts in records]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> dict:
    rows = _rows()
    return {"rows": rows, "path": _write(tmp_path_factory.mktemp("src"), rows)}


# ---------------------------------------------------------------------------------------------
# Through Spark: the Spark range mode's bytes


@pytest.mark.spark
@pytest.mark.parametrize("tasks, batch_bytes", [(1, 1 << 20), (3, 1)])
def test_same_bytes_as_the_spark_range_mode(spark, source, tmp_path, tasks, batch_bytes):
    """A unique ordering and a hot partition split over tasks: the arrow range path writes the
    Spark range mode's bytes and the oracle's records, with 1 MiB batches and with 1-record
    batches (the two modes' task edges differ; batches do not follow them)."""
    roots = {}
    for reader in ("spark", "arrow"):
        roots[reader] = tmp_path / reader / "logs"
        result = _run(
            spark,
            _doc(source["path"], roots[reader], reader),
            tasks=tasks,
            batch_bytes=batch_bytes,
        )
        assert (result.write_mode, result.task_reader) == ("range", reader)
        assert result.records == len(source["rows"])
    reference = snapshot(roots["spark"])
    assert sum(k.endswith(".log") for k in reference) >= 4  # rolls in the hot partition
    assert snapshot(roots["arrow"]) == reference
    expected = _no_headers(expected_records(source["rows"], PARTITIONS))
    assert read_root(roots["arrow"]) == expected
    assert "sorted runs exchanged through the run's staging" in result.summary
    assert staging_leftovers(roots["arrow"]) == []


@pytest.mark.spark
@pytest.mark.parametrize(
    "ordering",
    [("score",), ("name", "score", "id"), ("day", "amount", "flag", "raw", "small")],
    ids=["float", "str", "other-types"],
)
def test_nulls_and_nan_order_as_in_spark(spark, source, tmp_path, ordering):
    """Nulls first, NaN greatest, -0.0 tied with 0.0, bytes unsigned (then the source row id:
    one split, so the same `pos` as Spark's) — the Spark range mode's offsets."""
    roots = {}
    for reader in ("spark", "arrow"):
        roots[reader] = tmp_path / reader / "logs"
        doc = _doc(source["path"], roots[reader], reader, ordering=ordering)
        assert _run(spark, doc, tasks=3, batch_bytes=1).task_reader == reader
    assert snapshot(roots["arrow"]) == snapshot(roots["spark"])


@pytest.mark.spark
@pytest.mark.parametrize("count", [0, 1])
def test_no_rows_or_one(spark, source, tmp_path, count):
    src = _write(tmp_path / "src", source["rows"][:count])
    result = _run(spark, _doc(src, tmp_path / "logs", "arrow"), tasks=3)
    assert (result.task_reader, result.records) == ("arrow", count)
    expected = _no_headers(expected_records(source["rows"][:count], PARTITIONS))
    assert read_root(tmp_path / "logs") == expected


@pytest.mark.spark
def test_an_expression_ordering_falls_back_to_spark_and_says_why(spark, source, tmp_path):
    doc = _doc(source["path"], tmp_path / "logs", "auto", ordering=("lower(name)", "id"))
    result = _run(spark, doc, tasks=2)
    assert (result.write_mode, result.task_reader) == ("range", "spark")
    assert result.summary.endswith(
        "task reader: auto: not the arrow reader, as ordering[0]='lower(name)' is not a plain "
        "column"
    )
    auto = _run(spark, _doc(source["path"], tmp_path / "auto" / "logs", "auto"), tasks=2)
    assert auto.task_reader == "arrow"  # auto takes it when it qualifies


@pytest.mark.spark
def test_a_killed_run_reruns_to_the_same_bytes(spark, source, tmp_path):
    reference = tmp_path / "ref" / "logs"
    _run(spark, _doc(source["path"], reference, "arrow"), tasks=3)
    root = tmp_path / "logs"
    with pytest.raises(KafkaLogError, match="injected failure"):
        _run(spark, _doc(source["path"], root, "arrow"), tasks=3, fail_after_batches=1)
    assert snapshot(root) == {}
    left = staging_leftovers(root)
    assert any(p.endswith(".arrow") for p in left)  # the killed run's sorted runs
    assert _run(spark, _doc(source["path"], root, "arrow"), tasks=3).records == len(source["rows"])
    assert snapshot(root) == snapshot(reference)
    assert staging_leftovers(root) == []


@pytest.mark.spark
@pytest.mark.parametrize("reader", ["arrow", "spark"])
def test_tasks_bounded_at_partition_ends_leave_the_relayout_nothing(spark, tmp_path, reader):
    """Three equal partitions: with three tasks every bound moves to a partition's end, each task
    writes its partitions in place and the relayout has no share to encode; with two the middle
    partition is split and its later share relaid. The bytes are a one-task run's either way."""
    rows = [dict(r, part=i % 3) for i, r in enumerate(_rows()[:300])]
    src = _write(tmp_path / "src", rows)
    results, roots = {}, {}
    for tasks in (1, 3, 2):
        roots[tasks] = tmp_path / str(tasks) / "logs"
        doc = _doc(src, roots[tasks], reader)
        doc["mapping"]["partition"] = {"column": "part"}
        results[tasks] = _run(spark, doc, tasks=tasks)
        assert results[tasks].task_reader == reader
    assert "segments: no partition had shares to lay out" in results[3].summary
    assert "the relayout encoded 1 staged record shares" in results[2].summary
    reference = snapshot(roots[1])
    assert sum(k.endswith(".log") for k in reference) >= 6  # rolls in every partition
    assert snapshot(roots[3]) == reference
    assert snapshot(roots[2]) == reference
    logged = read_root(roots[3])
    assert [sum(r[1] == p for r in logged) for p in range(3)] == [100, 100, 100]


@pytest.mark.spark
def test_default_tasks_hold_whole_partitions_when_they_are_enough(spark, tmp_path):
    """No task count asked for and at least as many partitions as cores (3 >= local[2]'s 2):
    the write tasks hold whole partitions, however the quantiles fall, so no share is staged
    for the relayout; the bytes are those of one task."""
    rows = [dict(r, part=i % 3) for i, r in enumerate(_rows()[:300])]
    src = _write(tmp_path / "src", rows, files=6)
    roots = {tasks: tmp_path / str(tasks) / "logs" for tasks in (1, None)}
    results = {}
    for tasks, root in roots.items():
        doc = _doc(src, root, "arrow")
        doc["mapping"]["partition"] = {"column": "part"}
        results[tasks] = _run(spark, doc, tasks=tasks)
        assert results[tasks].task_reader == "arrow"
    assert "segments: no partition had shares to lay out" in results[None].summary
    assert snapshot(roots[None]) == snapshot(roots[1])


# ---------------------------------------------------------------------------------------------
# Task side, without Spark


def _plan(tmp_path: Path, src: Path, ordering=("score", "name", "id"), chunk_rows=ar.CHUNK_ROWS):
    config = IngestConfig.from_dict(_doc(src, tmp_path / "logs", "arrow", ordering=ordering))
    files = sorted(str(p) for p in src.glob("*.parquet"))
    read, why = plan_arrow_read(replace(config, ordering=()), files)
    assert read is not None, why
    plan, why = ar.plan_arrow_range(read, config, files)
    assert plan is not None, why
    return ar.ArrowRangePlan(plan.read, plan.ordering, plan.floating, chunk_rows)


@pytest.mark.parametrize("dtype", [pa.decimal32(5, 2), pa.decimal64(12, 2)])
def test_an_ordering_on_a_decimal_pyarrow_cannot_sort_keeps_the_spark_range_mode(tmp_path, dtype):
    """pyarrow writes small decimals to Parquet as decimal32/64 and reads them back so, but has
    no sort for them: the plan says why (the Spark range mode then runs) instead of stage 1
    failing with an Arrow error."""
    rows = _rows()[:20]
    schema = pa.schema([f if f.name != "amount" else pa.field("amount", dtype) for f in SCHEMA])
    (tmp_path / "src").mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "src" / "a.parquet")
    files = [str(tmp_path / "src" / "a.parquet")]
    assert pq.read_schema(files[0]).field("amount").type == dtype
    config = IngestConfig.from_dict(
        _doc(tmp_path / "src", tmp_path / "logs", "arrow", ordering=("amount", "id"))
    )
    read, why = plan_arrow_read(replace(config, ordering=()), files)
    assert read is not None, why
    assert ar.plan_arrow_range(read, config, files) == (
        None,
        f"ordering column 'amount' is {dtype}, not sorted here as in Spark",
    )


def _sorted_runs(plan: ar.ArrowRangePlan, tmp_path: Path) -> tuple[list, list]:
    """Stage 1 of every read split, in-process: (all runs, all sampled keys)."""
    runs, samples = [], []
    for split in range(len(plan.read.tasks)):
        (tmp_path / f"x{split}").mkdir()
        out = ar.sort_runs(plan, split, tmp_path / f"x{split}")
        runs += out.runs
        samples += out.samples
    return runs, samples


def _python_key(row: dict, ordering) -> tuple:
    """The Spark order written independently: nulls first, NaN greatest, -0.0 == 0.0."""

    def rank(v):
        if v is None:
            return (0, 0)
        if isinstance(v, float) and math.isnan(v):
            return (2, 0)
        return (1, v)

    return tuple(rank(row[name]) for name in ordering)


def test_runs_are_bounded_sorted_and_ranges_cover_every_row_once(source, tmp_path):
    """Small chunks: the split is written as ceil(rows / chunk) runs (never held whole), each
    sorted; the ranges between picked bounds hold every record once, in the sorted order."""
    src = _write(tmp_path / "src", source["rows"], files=2)
    plan = _plan(tmp_path, src, chunk_rows=37)
    runs, samples = [], []
    for split in range(len(plan.read.tasks)):
        directory = tmp_path / f"x{split}"
        directory.mkdir()
        out = ar.sort_runs(plan, split, directory)
        rows = sum(r.rows for r in out.runs)
        assert len(out.runs) == -(-rows // 37) == len(list(directory.iterdir()))
        assert max(r.rows for r in out.runs) == 37
        assert all(r.first < r.last for r in out.runs)
        runs += out.runs
        samples += out.samples
    assert sum(r.rows for r in runs) == sum(w for _, w in samples) == len(source["rows"])
    bounds = ar.pick_bounds(samples, 4)
    assert len(bounds) == 3 and bounds == sorted(bounds)
    edges = [None, *bounds, None]
    got, hot = [], 0
    hot_partition = kp_partition(b"hot", PARTITIONS["events"])
    for lower, upper in zip(edges, edges[1:], strict=False):
        batches = list(ar.range_batches(runs, lower, upper, plan))
        assert batches and all(b.num_rows <= ar.BATCH_ROWS for b in batches)
        share = pa.Table.from_batches(batches).to_pylist()
        assert abs(len(share) - len(source["rows"]) / 4) < 37  # balanced within a sample step
        hot += any((r["topic"], r["partition"]) == ("events", hot_partition) for r in share)
        got += share
    assert hot >= 2  # the hot partition spans several ranges
    ordering = ("score", "name", "id")
    expected = sorted(
        (
            (r["topic"], kp_partition(r["user"].encode(), PARTITIONS[r["topic"]])),
            _python_key(r, ordering),
            r["payload"],
            int(r["event_time"].timestamp() * 1000),
        )
        for r in source["rows"]
    )
    assert [((g["topic"], g["partition"]), g["value"], g["timestamp"]) for g in got] == [
        (tp, value, ts) for tp, _, value, ts in expected
    ]


def test_pick_bounds_balances_rows_by_weight():
    def key(i: int) -> rk.Key:  # one partition: no partition end to snap to
        return ("t", 0, (1, i), i)

    samples = [(key(i), 10) for i in range(100)]
    random.Random(1).shuffle(samples)
    assert ar.pick_bounds(samples, 4) == [key(24), key(49), key(74)]
    # one heavy key takes a quantile of its own; no repeated bounds, no empty last task
    heavy = [(key(0), 1), (key(1), 1000), (key(2), 1)]
    assert ar.pick_bounds(heavy, 5) == [key(1)]
    assert ar.pick_bounds([], 3) == []


def test_the_sort_puts_nulls_first_and_nan_last():
    values = [1.5, math.nan, None, -0.0, 0.0, -2.0, None, math.nan]
    table = pa.table(
        {
            "topic": ["t"] * len(values),
            "partition": pa.array([0] * len(values), pa.int32()),
            "_kl_o0": pa.array(values, pa.float64()),
            rk.POS: pa.array(np.arange(len(values))[::-1].copy()),
        }
    )
    plan = ar.ArrowRangePlan(None, ("score",), (True,))  # type: ignore[arg-type]
    order = rk.sort_order(table, plan).to_pylist()
    ranked = [table.column(rk.POS)[i].as_py() for i in order]
    # nulls (pos 1, 5), -2.0 (2), the tied zeros by pos (3, 4), 1.5 (7), NaN (0, 6)
    assert ranked == [1, 5, 2, 3, 4, 7, 0, 6]
    keys = rk.keys_at(table, np.array(order), plan)
    assert keys == sorted(keys)  # Python's comparison of keys agrees (binary search, bounds)
    assert rk.count_at_most(table.take(pa.array(order)), keys[4], plan) == 5


def test_pyarrows_sort_and_the_python_keys_agree_for_every_type(source):
    """The binary search and the bounds compare keys in Python; the runs are sorted by pyarrow:
    both orders must be the same for every type the plan accepts."""
    rows = source["rows"]
    for name, dtype in EXTRA.items():
        table = pa.table(
            {
                "topic": [r["topic"] for r in rows],
                "partition": pa.array([r["part"] for r in rows], pa.int32()),
                "_kl_o0": pa.array([r[name] for r in rows], dtype),
                rk.POS: pa.array(np.arange(len(rows))[::-1].copy()),
            }
        )
        assert ar._sortable(dtype)
        plan = ar.ArrowRangePlan(None, (name,), (pa.types.is_floating(dtype),))  # type: ignore[arg-type]
        order = rk.sort_order(table, plan).to_pylist()
        keys = rk.keys_at(table, np.array(order), plan)
        assert keys == sorted(keys), name
        independent = sorted(
            (r["topic"], r["part"], _python_key(r, (name,))[0], len(rows) - 1 - i)
            for i, r in enumerate(rows)
        )
        assert [k[3] for k in independent] == [k[-1] for k in keys], name


def test_a_range_opens_only_the_runs_that_overlap_it(tmp_path, monkeypatch):
    """A source already in order (one partition, ordering by id): the runs are disjoint, so a
    write task opens only its own few, not every run."""
    rows = [dict(r, part=0) for r in source_rows(370)]
    src = _write(tmp_path / "src", [dict(r, **dict.fromkeys(EXTRA)) for r in rows], files=2)
    doc = _doc(src, tmp_path / "logs", "arrow", ordering=("id",))
    doc["mapping"]["partition"] = {"column": "part"}
    config = IngestConfig.from_dict(doc)
    files = sorted(str(p) for p in src.glob("*.parquet"))
    read, _ = plan_arrow_read(replace(config, ordering=()), files)
    plan, why = ar.plan_arrow_range(read, config, files)
    assert plan is not None, why
    plan = replace(plan, chunk_rows=37)
    runs, samples = _sorted_runs(plan, tmp_path)
    assert len(runs) == 10
    opened = set()
    real = ar.RunFiles._reader
    monkeypatch.setattr(
        ar.RunFiles, "_reader", lambda self, path: opened.add(path) or real(self, path)
    )
    bounds = ar.pick_bounds(samples, 5)
    edges = [None, *bounds, None]
    ids = []
    for lower, upper in zip(edges, edges[1:], strict=False):
        opened.clear()
        for batch in ar.range_batches(runs, lower, upper, plan):
            ids += [r["value"] for r in batch.to_pylist()]
        assert 1 <= len(opened) <= 3
    assert ids == [r["payload"] for r in rows]


def test_a_write_task_holds_one_sub_range_at_a_time(source, tmp_path, monkeypatch):
    """Data 20x `chunk_rows`: each write task's range is split into sub-ranges of about
    `chunk_rows` rows, merged one at a time; the rows and their order are the whole range's."""
    src = _write(tmp_path / "src", source["rows"], files=2)
    plan = _plan(tmp_path, src, chunk_rows=20)
    runs, samples = _sorted_runs(plan, tmp_path)
    ranges = ar.pick_ranges(samples, 2, plan.chunk_rows)
    assert [r.upper for r in ranges[:-1]] == ar.pick_bounds(samples, 2)  # the tasks' edges
    assert [r.lower for r in ranges[1:]] == [r.upper for r in ranges[:-1]]
    sorted_rows: list[int] = []
    real = rk.merge_order
    monkeypatch.setattr(
        ar, "merge_order", lambda t, n, p: sorted_rows.append(t.num_rows) or real(t, n, p)
    )

    def rows(split: bool) -> list[list[dict]]:
        return [
            pa.Table.from_batches(
                ar.range_batches(runs, r.lower, r.upper, plan, r.inner if split else ())
            ).to_pylist()
            for r in ranges
        ]

    whole = rows(split=False)
    assert max(sorted_rows) == max(len(w) for w in whole) >= 10 * plan.chunk_rows
    sorted_rows.clear()
    assert rows(split=True) == whole
    assert all(len(r.inner) >= 8 for r in ranges)
    assert max(sorted_rows) <= plan.chunk_rows  # every key sampled: exact quantiles
    assert sum(len(w) for w in whole) == len(source["rows"])


def test_a_write_task_opens_each_run_once_across_its_sub_ranges(source, tmp_path, monkeypatch):
    """Every run holds keys of every sub-range: the task opens each run file once (its footer
    read once), not once per sub-range; with fewer open files allowed than runs the least
    recently used are closed and reopened, and the rows stay the same."""
    src = _write(tmp_path / "src", source["rows"], files=2)
    plan = _plan(tmp_path, src, chunk_rows=20)
    runs, samples = _sorted_runs(plan, tmp_path)
    (whole,) = ar.pick_ranges(samples, 1, plan.chunk_rows)
    assert len(whole.inner) >= 15 and len(runs) >= 15
    opened: list[str] = []
    limit = {"n": 256}

    class Counted(ar.RunFiles):
        def __init__(self) -> None:
            super().__init__(limit["n"])

        def _reader(self, path):
            if path not in self._open:
                opened.append(path)
            return super()._reader(path)

    monkeypatch.setattr(ar, "RunFiles", Counted)

    def rows() -> list[dict]:
        batches = ar.range_batches(runs, whole.lower, whole.upper, plan, whole.inner)
        return pa.Table.from_batches(batches).to_pylist()

    once = rows()
    assert len(once) == len(source["rows"])
    assert sorted(opened) == sorted({r.path for r in runs})  # each run once
    opened.clear()
    limit["n"] = 2
    assert rows() == once
    assert len(opened) > len(runs)  # evicted and reopened


_POOLS = {
    pa.float64(): [None, math.nan, -0.0, 0.0, 1.5, -2.0, math.inf, -math.inf],
    pa.float32(): [None, math.nan, 0.0, -0.0, 2.5, -1.0, 7.0],
    pa.string(): [None, "", "a", "b", "é", "zz", "ab", "\U0001f600"],
    pa.large_string(): [None, "x", "", "é", "xy"],
    pa.binary(): [None, b"", b"\x00", b"\x01", b"\xc8", b"\x00\x00", b"\xff"],
    pa.date32(): [None, *(dt.date(2024, 5, d) for d in range(1, 5))],
    pa.decimal128(10, 2): [None, Decimal("-3.00"), Decimal("0.01"), Decimal("2.50"), Decimal(0)],
    pa.bool_(): [None, True, False],
    pa.int8(): [None, -128, -1, 0, 1, 127],
    pa.int64(): [None, -(2**63), -1, 0, 5, 2**63 - 1],
    pa.uint64(): [None, 0, 1, 2**63, 2**64 - 1],
    pa.timestamp("us", "UTC"): [None, dt.datetime(1, 1, 1), dt.datetime(2024, 5, 1, 0, 0, 0, 1)],
}


def _random_run(rng: random.Random, n: int, dtypes: list, extra: int) -> pa.Table:
    """`n` rows of random keys (duplicates, nulls, NaN) over topics/partitions/values; the last
    `extra` values of each pool (and topic "c") are left out unless `extra` is 0."""
    topics = ["a", "b", "é", "c"][: 4 - min(extra, 1)]
    columns = {
        "topic": pa.array([rng.choice(topics) for _ in range(n)], pa.string()),
        "partition": pa.array([rng.randrange(3) for _ in range(n)], pa.int32()),
    }
    for i, dtype in enumerate(dtypes):
        pool = _POOLS[dtype][: len(_POOLS[dtype]) - extra]
        columns[f"_kl_o{i}"] = pa.array([rng.choice(pool) for _ in range(n)], dtype)
    columns[rk.POS] = pa.array(rng.sample(range(10 * n), n), pa.int64())
    return pa.table(columns)


@pytest.mark.parametrize(
    "dtypes",
    [[t] for t in _POOLS] + [[], [pa.float64(), pa.string()], [pa.bool_(), pa.binary(), pa.int8()]],
    ids=[str(t) for t in _POOLS] + ["none", "float-string", "bool-binary-int8"],
)
def test_the_vectorized_search_agrees_with_the_binary_search(dtypes):
    """Every bound, in or between a run's keys (values and topics the run lacks included), is
    found where the row-by-row binary search finds it."""
    rng = random.Random(str(dtypes))
    plan = ar.ArrowRangePlan(
        None,  # type: ignore[arg-type]
        tuple(f"c{i}" for i in range(len(dtypes))),
        tuple(pa.types.is_floating(t) for t in dtypes),
    )
    run = _random_run(rng, 300, dtypes, extra=1)
    run = run.take(rk.sort_order(run, plan))
    others = _random_run(rng, 60, dtypes, extra=0)
    bounds = rk.keys_at(others, np.arange(others.num_rows), plan)
    bounds += rk.keys_at(run, np.array(rng.sample(range(run.num_rows), 40)), plan)
    expected = [rk.count_at_most(run, b, plan) for b in bounds]
    assert len(set(expected)) > 20  # bounds spread over the run
    assert rk.counts_at_most(run, bounds, plan).tolist() == expected
    chunked = pa.Table.from_batches(run.to_batches(max_chunksize=7))  # several batches
    assert rk.counts_at_most(chunked, bounds, plan).tolist() == expected
    for rows in (1, 2, 3, 4, 5, 9):  # strides 1 and 2, a last block cut short
        part = run.slice(rng.randrange(run.num_rows - rows), rows)
        expected = [rk.count_at_most(part, b, plan) for b in bounds]
        assert rk.counts_at_most(part, bounds, plan).tolist() == expected, rows


_DTYPE_SETS = [[t] for t in _POOLS] + [
    [],
    [pa.float64(), pa.string()],
    [pa.bool_(), pa.binary(), pa.int8()],
    [pa.decimal128(10, 2), pa.float32(), pa.large_string()],
]


@pytest.mark.parametrize("dtypes", _DTYPE_SETS, ids=[str(t) for t in _DTYPE_SETS])
def test_the_merge_of_sorted_runs_is_the_sort_order(dtypes):
    """Runs each sorted by `sort_order` (random keys with nulls, NaN, -0.0 and 0.0; empty runs;
    a run repeated, so whole keys tie across runs): their merge is the order `sort_order`
    gives their concatenation, ties in run order; with few runs and with many."""
    rng = random.Random(f"merge {dtypes}")
    plan = ar.ArrowRangePlan(
        None,  # type: ignore[arg-type]
        tuple(f"c{i}" for i in range(len(dtypes))),
        tuple(pa.types.is_floating(t) for t in dtypes),
    )
    if os.environ.get("KAFKALOG_REQUIRE_NATIVE") == "1":
        assert native.module is not None  # the merge in C is what runs here
    for count, most in ((1, 50), (7, 40), (300, 4)):
        runs = [_random_run(rng, rng.choice([0, 1, most]), dtypes, extra=0) for _ in range(count)]
        runs.insert(count // 2, runs[0])
        runs = [r.take(rk.sort_order(r, plan)) for r in runs]
        table = pa.concat_tables(runs)
        merged = rk.merge_order(table, [r.num_rows for r in runs], plan).to_pylist()
        assert merged == rk.sort_order(table, plan).to_pylist(), count


def test_the_merge_refuses_runs_that_do_not_cover_the_rows():
    if native.module is None:
        pytest.skip("no C loops built")
    order = np.empty(3, np.int64)
    with pytest.raises(ValueError, match="starts"):
        native.module.merge_runs(order, np.array([0, 2], np.int64), b"q", (np.arange(3),))
    with pytest.raises(ValueError, match="expected 3 values"):
        native.module.merge_runs(order, np.array([0, 3], np.int64), b"q", (np.arange(2),))
