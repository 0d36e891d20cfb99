"""A stream reports data loss as Spark's KafkaMicroBatchStream does: an error, or with
failOnDataLoss=false a warning, for a partition that is gone, a topic deleted and created again
with lower offsets, and a new partition whose log start is above 0. The reader is driven here as
Spark's micro-batch engine drives it: latestOffset from the last end, then partitions."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from jobs.datasource.options import parse_read_options
from jobs.datasource.stream import PENDING_START, KafkaLogStreamReader
from kafkalog_core.errors import KafkaLogError
from tests.datasource.helpers import write_topic


def reader(root: Path, fail: bool = True, **options: str) -> KafkaLogStreamReader:
    given = {"path": str(root), "subscribe": "s", "failOnDataLoss": str(fail).lower(), **options}
    return KafkaLogStreamReader(parse_read_options(given, streaming=True))


def next_batch(stream: KafkaLogStreamReader, start: dict) -> tuple[dict, list]:
    end = stream.latestOffset(start, ReadAllAvailable())
    return end, list(stream.partitions(start, end))


def offsets(packs: list) -> dict[int, tuple[int, int]]:
    return {s.partition: (s.start_offset, s.end_offset) for p in packs for s in p.slices}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_topic(tmp_path / "logs", "s", 2, 40)
    return tmp_path / "logs"


def test_a_partition_that_is_gone(root: Path) -> None:
    start = {"s": {"0": 10, "1": 10}}
    shutil.rmtree(root / "s-1")
    with pytest.raises(KafkaLogError, match=r"Set\(s-1\) are gone\. Some data may have been"):
        next_batch(reader(root), start)
    with pytest.warns(UserWarning, match=r"Set\(s-1\) are gone"):
        end, packs = next_batch(reader(root, fail=False), start)
    assert end == {"s": {"0": 40}} and offsets(packs) == {0: (10, 40)}


def test_a_topic_created_again_with_lower_offsets(root: Path) -> None:
    start = {"s": {"0": 40, "1": 40}}
    shutil.rmtree(root / "s-0")
    write_topic(root, "s", 1, 10)  # s-0 again: offsets 0..9
    with pytest.raises(KafkaLogError, match="Partition s-0's offset was changed from 40 to 10"):
        next_batch(reader(root), start)
    with pytest.warns(UserWarning, match="deleted and re-created"):
        end, packs = next_batch(reader(root, fail=False), start)
    assert end == {"s": {"0": 10, "1": 40}} and packs == []  # as Spark: on from 10
    write_topic(root, "s", 1, 5, first=10)
    assert offsets(next_batch(reader(root), end)[1]) == {0: (10, 15)}


def test_a_new_partition_whose_log_start_is_above_zero(root: Path) -> None:
    write_topic(root, "s", 2, 200, first=40)  # a few segments
    start = {"s": {"0": 240}}  # s-1 is new to the stream
    first = sorted((root / "s-1").glob("*.log"))[0]
    for f in (root / "s-1").glob(first.stem + ".*"):
        f.unlink()  # retention took the first segment: the log starts above 0
    log_start = int(sorted((root / "s-1").glob("*.log"))[0].stem)
    assert log_start > 0
    message = f"Added partition s-1 starts from {log_start} instead of 0"
    with pytest.raises(KafkaLogError, match=message):
        next_batch(reader(root), start)
    with pytest.warns(UserWarning, match=message):
        _, packs = next_batch(reader(root, fail=False), start)
    assert offsets(packs) == {1: (log_start, 240)}


def test_a_new_partition_gone_before_its_first_batch(root: Path) -> None:
    start, end = {"s": {"0": 40}}, {"s": {"0": 40, "1": 40}}
    shutil.rmtree(root / "s-1")
    with pytest.raises(KafkaLogError, match=r"Cannot find earliest offsets of Set\(s-1\)"):
        reader(root).partitions(start, end)


def test_latest_is_fixed_by_batch_zero_not_by_initial_offset(root: Path) -> None:
    """Spark's offset log holds batch 0's end before the batch runs; a restart asks
    initialOffset again, so `latest` must not be resolved there."""
    stream = reader(root)  # startingOffsets: latest
    initial = stream.initialOffset()
    assert PENDING_START in initial
    write_topic(root, "s", 2, 5, first=40)
    end, packs = next_batch(stream, initial)
    assert end == {"s": {"0": 45, "1": 45}} and packs == []
    again = reader(root)  # a restart: batch 0 replayed from the offset log
    assert again.partitions(again.initialOffset(), end) == []
    assert reader(root, startingOffsets="earliest").initialOffset() == {"s": {"0": 0, "1": 0}}
