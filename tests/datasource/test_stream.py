"""spark.readStream.format("kafkalog"): checkpointed restarts read every record exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.datasource.stream import rate_limit
from tests.datasource.helpers import oracle, write_topic

pytestmark = pytest.mark.spark


def run_available_now(spark, root: Path, checkpoint: Path, sink: list, **options: str) -> list:
    reader = spark.readStream.format("kafkalog").option("subscribe", "s")
    reader = reader.option("startingOffsets", "earliest")
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (
        reader.load(str(root))
        .selectExpr("partition", "offset", "value")
        .writeStream.foreachBatch(lambda df, _: sink.extend(df.collect()))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    return [p for p in query.recentProgress if p["numInputRows"]]


def test_restart_neither_skips_nor_repeats(spark, tmp_path: Path) -> None:
    root, checkpoint, sink = tmp_path / "logs", tmp_path / "ckpt", []
    write_topic(root, "s", 2, 40)
    first = run_available_now(spark, root, checkpoint, sink, maxOffsetsPerTrigger="50")
    assert [p["numInputRows"] for p in first] == [50, 30]  # 80 records, at most 50 a batch
    segments_before = len(list((root / "s-0").glob("*.log")))
    write_topic(root, "s", 3, 60, first=40)  # a later ingest run: new segments, partition 2
    assert len(list((root / "s-0").glob("*.log"))) > segments_before
    run_available_now(spark, root, checkpoint, sink)
    got = sorted((r.partition, r.offset, r.value) for r in sink)
    expected = sorted(
        (p, offset, value) for p in range(3) for offset, _, _, value in oracle(root / f"s-{p}")
    )
    assert got == expected  # every record once: nothing skipped, nothing repeated
    assert len(got) == 260


def test_rate_limit_shares_the_budget() -> None:
    start = {("a", 0): 0, ("a", 1): 10}
    latest = {("a", 0): 100, ("a", 1): 20}
    assert rate_limit(start, latest, 1000) == latest
    limited = rate_limit(start, latest, 55)
    assert limited == {("a", 0): 50, ("a", 1): 15}
    assert rate_limit(start, {("a", 0): 1, ("a", 1): 10}, 0) == {("a", 0): 1, ("a", 1): 10}
