"""Range bounds from a sample (`jobs.ingestion.ranges.bounds`): the quantile arithmetic, the
routing expression against Spark's own sort, and the range mode's output not depending on the
split the sample gives."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import jobs.ingestion.ranges.bounds as rb
from jobs.ingest import run
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.mapping.rules import ORDER_COLUMN
from jobs.ingestion.mapping.spark_mapping import map_records, sample_keys
from jobs.ingestion.ranges.cuts import partition_ends, task_cuts
from kafkalog_core.record.batch import iter_batch_headers
from tests.jobs.ingest_helpers import (
    SOURCE_SCHEMA,
    config_doc,
    expected_records,
    read_root,
    snapshot,
    source_rows,
    write_parquet,
)

KEYS = ["topic", "partition", ORDER_COLUMN]


# ---------------------------------------------------------------------------------------------
# The arithmetic (no Spark)


def test_sample_fraction_targets_rows_per_task_and_caps_the_sample():
    assert rb.sample_fraction(0, 4) == 1.0
    assert rb.sample_fraction(100, 4) == 1.0  # small input: every row is sampled
    wanted = rb.SAMPLE_ROWS_PER_TASK * 4
    assert rb.sample_fraction(10 * wanted, 4) == pytest.approx(0.1)
    huge = 10**12
    assert rb.sample_fraction(huge, 10**6) * huge == pytest.approx(rb.MAX_SAMPLE_ROWS)


# ---------------------------------------------------------------------------------------------
# The routing, through Spark


def _typed_source(spark, n: int = 240):
    """Two topics, explicit partitions (one hot), ordering values of three types with nulls and
    ties."""
    rng = random.Random(5)
    base = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
    rows = []
    for i in range(n):
        rows.append(
            {
                "id": i,
                "topic": "events" if i % 4 else "audit",
                "part": 0 if rng.random() < 0.7 else rng.randrange(1, 3),
                "user": f"u{rng.randrange(9)}",
                "payload": bytes([i % 256]),
                "ts": base + dt.timedelta(seconds=i),
                "event_time": None
                if i % 11 == 0
                else base + dt.timedelta(seconds=rng.randrange(30)),
                "seq": None if i % 7 == 0 else rng.randrange(5) * 10**12,
                "name": None if i % 5 == 0 else rng.choice(["", "a", "b", "é", "zz"]),
                "day": None if i % 6 == 0 else dt.date(2024, 5, 1 + rng.randrange(3)),
                "local": None
                if i % 8 == 0
                else dt.datetime(2024, 3, 31, 2, 30, rng.randrange(3), rng.randrange(2)),
                "score": None if i % 9 == 0 else rng.choice([float("nan"), -0.0, 0.0, 1.5]),
                "amount": None if i % 10 == 0 else Decimal(rng.randrange(-300, 300)) / 100,
                "flag": None if i % 12 == 0 else rng.random() < 0.5,
                "raw": None if i % 13 == 0 else bytes([rng.randrange(3)] * rng.randrange(3)),
            }
        )
    schema = (
        "id long, topic string, part int, user string, payload binary, ts timestamp, "
        "event_time timestamp, seq long, name string, day date, local timestamp_ntz, "
        "score double, amount decimal(10, 2), flag boolean, raw binary"
    )
    return spark.createDataFrame(rows, schema).repartition(3, "id")


def _typed_config(tmp_path, ordering=("event_time", "seq", "name")) -> IngestConfig:
    topics = {"events": {"partitions": 3}, "audit": {"partitions": 3}}
    doc = config_doc(
        "unused",
        tmp_path / "logs",
        topics=topics,
        ordering=ordering,
        mapping={
            "topic": {"column": "topic"},
            "partition": {"column": "part"},
            "value": {"column": "payload"},
            "headers": None,
            "timestamp": {"column": "ts"},
        },
    )
    return IngestConfig.from_dict(doc)


ORDERINGS = [
    ("event_time", "seq", "name"),
    ("day", "local", "score", "amount", "flag", "raw"),
]


def _tasks_in_sorted_order(
    spark, tasks: int, tmp_path, ordering=ORDERINGS[0]
) -> list[tuple[int, str, int]]:
    source = _typed_source(spark).cache()
    config = _typed_config(tmp_path, ordering)
    mapped = map_records(source, config)
    routing = rb.task_routing(source, config, tasks, mapped.schema)
    assert routing is not None
    column = routing.task
    rows = mapped.select(*KEYS, column.alias("task")).orderBy(*KEYS).collect()
    return [(r["task"], r["topic"], r["partition"]) for r in rows]


@pytest.mark.spark
def test_sampled_rows_keep_their_full_run_keys(spark, tmp_path):
    """The sample is taken after the source row ids: a sampled row maps to the key the full run
    gives it (`pos` included), so bounds over `pos` (source order) fall where the rows are."""
    source = _typed_source(spark).cache()
    config = _typed_config(tmp_path)
    full = {r[ORDER_COLUMN]["pos"]: r for r in map_records(source, config).select(*KEYS).collect()}
    sampled = sample_keys(source, config, 0.3, 1).collect()
    assert 30 <= len(sampled) <= 120
    assert all(full[r[ORDER_COLUMN]["pos"]] == r for r in sampled)
    positions = sorted(full)
    assert max(r[ORDER_COLUMN]["pos"] for r in sampled) >= positions[len(positions) * 3 // 4]


@pytest.mark.spark
@pytest.mark.parametrize("ordering", ORDERINGS, ids=["time-long-string", "other-types"])
def test_every_row_sampled_splits_the_sorted_keys_exactly(spark, tmp_path, ordering):
    """Small input: the sample is every row, so task i holds exactly the sorted rows between
    bounds i-1 and i: each bound's literal equals its row's key (nulls, NaN, -0.0, wall-clock
    times included) and a key equal to a bound goes to the lower task."""
    tasks = 5
    routed = _tasks_in_sorted_order(spark, tasks, tmp_path, ordering)
    ids = [t for t, _, _ in routed]
    assert ids == sorted(ids)  # contiguous runs in key order
    ends = partition_ends([r[1] for r in routed], [r[2] for r in routed])
    cuts = task_cuts(np.ones(len(ids), np.int64), ends, tasks)
    assert any(at_end for _, at_end in cuts)  # a partition-end literal routes rows too
    edges = [-1, *(i for i, _ in cuts), len(ids) - 1]
    shares = [b - a for a, b in zip(edges, edges[1:], strict=False)]
    assert [ids.count(t) for t in range(tasks)] == shares
    hot = {t for t, topic, p in routed if (topic, p) == ("events", 0)}
    assert len(hot) >= 2  # the hot partition is split over tasks


@pytest.mark.spark
def test_a_write_tasks_partition_id_is_its_routed_task(spark, tmp_path):
    """`OnePassPlan.partition_starts` names tasks by the write task's partition id: adaptive
    execution must not coalesce the routed partitions (tiny data, where it would most)."""
    from pyspark.sql import functions as F

    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"
    source = _typed_source(spark).cache()
    config = _typed_config(tmp_path)
    mapped = map_records(source, config)
    routing = rb.task_routing(source, config, 5, mapped.schema)
    assert routing is not None and routing.partition_starts
    routed = mapped.withColumn("task", routing.task).repartitionById(5, F.col("task"))
    rows = routed.select("task", F.spark_partition_id().alias("id")).collect()
    assert {r["task"] for r in rows} == set(range(5))
    assert all(r["task"] == r["id"] for r in rows)


@pytest.mark.spark
def test_a_real_sample_still_gives_contiguous_runs(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(rb, "SAMPLE_ROWS_PER_TASK", 6)  # a fraction of 0.1: bounds from ~24 rows
    tasks = 4
    ids = [t for t, _, _ in _tasks_in_sorted_order(spark, tasks, tmp_path)]
    assert ids == sorted(ids)
    assert len(set(ids)) >= 3 and min(ids) >= 0 and max(ids) < tasks


@pytest.mark.spark
def test_ordering_without_exact_literals_keeps_sparks_range_partitioner(spark, tmp_path):
    source = _typed_source(spark, 20)
    config = _typed_config(tmp_path, ordering=("array(seq, id)",))
    mapped = map_records(source, config)
    assert rb.task_routing(source, config, 3, mapped.schema) is None


# ---------------------------------------------------------------------------------------------
# The range mode end to end: the split does not show in the log


TOPICS = {
    "events": {"partitions": 3, "config": {"segment.bytes": 6000, "index.interval.bytes": 500}},
    "other": {"partitions": 2, "config": {"segment.bytes": 6000, "index.interval.bytes": 500}},
}
PARTITIONS = {"events": 3, "other": 2}
BATCH_BYTES = 1500  # several records a batch: a hot partition's later shares are encoded after
# the earlier share's last batch by the relayout, so batches ignore task edges


def _ingest(spark, src, root, *, mode: str, tasks: int | None, ordering=("event_time", "id")):
    doc = config_doc(src, root, topics=TOPICS, ordering=ordering)
    doc["mapping"]["topic"] = {"column": "topic"}
    doc["output"]["write_mode"] = mode
    result = run(
        spark,
        IngestConfig.from_dict(doc),
        run_id="r1",
        tasks=tasks,
        batch_bytes=BATCH_BYTES,
        now_ms=1_714_521_600_123,
        out=lambda _: None,
    )
    assert result.write_mode == mode
    return result


@pytest.mark.spark
def test_range_output_does_not_depend_on_task_count_or_sample(spark, tmp_path, monkeypatch):
    """Task counts 1/3/5 and another sample (seed, size) give the bytes of the direct mode over
    the same rows already in order, and the records the oracle expects."""
    rows = source_rows(360, hot_user="hot", seed=3)
    rows += source_rows(120, start_id=360, topic="other", seed=4)
    src = write_parquet(tmp_path / "src", rows, files=1)  # one split: read order = row order
    direct = tmp_path / "direct" / "logs"
    _ingest(spark, src, direct, mode="direct", tasks=None, ordering="source")
    reference = snapshot(direct)
    assert sum(k.endswith(".log") for k in reference) >= 8  # rolls in the hot partition
    expected = expected_records(rows, PARTITIONS)
    assert read_root(direct) == sorted(expected, key=lambda r: r[:3])
    for way, tasks, seed, per_task in (
        ("t1", 1, rb.SAMPLE_SEED, rb.SAMPLE_ROWS_PER_TASK),
        ("t3", 3, rb.SAMPLE_SEED, rb.SAMPLE_ROWS_PER_TASK),
        ("t5-sampled", 5, 99, 20),
    ):
        monkeypatch.setattr(rb, "SAMPLE_SEED", seed)
        monkeypatch.setattr(rb, "SAMPLE_ROWS_PER_TASK", per_task)
        root = tmp_path / way / "logs"
        result = _ingest(spark, src, root, mode="range", tasks=tasks)
        assert result.records == len(rows)
        assert snapshot(root) == reference, way
    logs = [p.read_bytes() for p in direct.glob("*/*.log")]
    assert max(h.records_count for data in logs for h in iter_batch_headers(data)) > 3


@pytest.mark.spark
@pytest.mark.parametrize("count", [0, 1])
def test_range_mode_with_no_rows_or_one(spark, tmp_path, count):
    rows = source_rows(count)
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=SOURCE_SCHEMA), src / "part-000.parquet")
    root = tmp_path / "logs"
    result = _ingest(spark, src, root, mode="range", tasks=3)
    assert result.records == count
    assert read_root(root) == expected_records(rows, PARTITIONS)
