"""df.write.format("kafkalog") from many tasks lays each partition out as one writer: the same
bytes as the same rows written by one task, and segments that follow the bytes, not the tasks.

Batches hold several records (max.message.bytes about six), segments roll every ~25 records:
a later task's share is staged as records and encoded after the earlier share's last batch as
one writer, so one task and eight give the very same batches and the whole root must be
byte-identical; kafka-python decodes every record independently of our reader.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from kafkalog_core.config import LogConfig
from kafkalog_core.partitioner import murmur2, to_positive
from kafkalog_core.record.batch import iter_batch_headers
from kafkalog_core.root.meta_area import meta_root
from tests.datasource.helpers import oracle
from tests.jobs.test_relayout import _one_writer, _segment_files

pytestmark = pytest.mark.spark

PARTITIONS = 3
SEGMENT_BYTES = 3000
OPTIONS = {
    "topic": "t",
    "topics.t.partitions": str(PARTITIONS),
    "topics.t.config.segment.bytes": str(SEGMENT_BYTES),
    "topics.t.config.index.interval.bytes": "300",
    "topics.t.config.max.message.bytes": "700",  # ~6 records of ~110 bytes a batch
}
START = datetime(2024, 5, 1, tzinfo=timezone.utc)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
SCHEMA = "id long, key binary, value binary, timestamp timestamp"


def _rows(first: int, n: int) -> list[tuple]:
    return [
        (
            i,
            b"k%02d" % (i % 13),
            b"value-%06d-" % i + b"x" * 30,
            START + timedelta(seconds=i, microseconds=i % 1000),
        )
        for i in range(first, first + n)
    ]


def _frame(spark, rows: list[tuple], tasks: int):
    """The rows in id order over `tasks` write tasks (task i holds the i-th id range)."""
    frame = spark.createDataFrame(rows, SCHEMA)
    return frame.repartitionByRange(tasks, "id").sortWithinPartitions("id").drop("id")


def _save(frame, root: Path, run_id: str, mode: str = "append", **extra: str) -> None:
    writer = frame.write.format("kafkalog").mode(mode).option("runId", run_id)
    for name, value in {**OPTIONS, **extra}.items():
        writer = writer.option(name, value)
    writer.save(str(root))


def _tree(root: Path) -> dict[str, bytes]:
    """Every file of the log dir (partition dirs and checkpoints), by relative path."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _expected(rows: Iterable[tuple]) -> dict[int, list[tuple[int, bytes, bytes]]]:
    """Per partition, in id order: (timestamp ms, key, value), murmur2 as the Java producer."""
    out: dict[int, list[tuple[int, bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for _, key, value, ts in rows:
        partition = to_positive(murmur2(key)) % PARTITIONS
        millis = (ts - EPOCH) // timedelta(milliseconds=1)  # Spark's sink floors
        out[partition].append((millis, key, value))
    return out


def _check_records(root: Path, rows: list[tuple]) -> None:
    for partition, expected in _expected(rows).items():
        decoded = oracle(root / f"t-{partition}")
        assert [o for o, *_ in decoded] == list(range(len(decoded)))
        assert [(ts, k, v) for _, ts, k, v in decoded] == expected


def _segments_within_bound(root: Path) -> list[int]:
    """Per partition: its .log count, checked against ceil(bytes / (segment.bytes - largest
    batch)) + 1."""
    counts = []
    for partition in range(PARTITIONS):
        logs = sorted((root / f"t-{partition}").glob("*.log"))
        data = b"".join(p.read_bytes() for p in logs)
        largest = max(h.size for h in iter_batch_headers(data))
        assert len(logs) <= math.ceil(len(data) / (SEGMENT_BYTES - largest)) + 1, partition
        counts.append(len(logs))
    return counts


def test_many_tasks_give_one_tasks_bytes_within_the_segment_bound(spark, tmp_path: Path) -> None:
    rows = _rows(0, 240)
    _save(_frame(spark, rows, 8), tmp_path / "many" / "logs", "w")
    _save(_frame(spark, rows, 1), tmp_path / "one" / "logs", "w")
    many, one = tmp_path / "many" / "logs", tmp_path / "one" / "logs"
    _check_records(many, rows)
    counts = _segments_within_bound(many)
    assert max(counts) < 8  # without the relayout every task's share starts a segment
    batches = [
        h.records_count for p in many.glob("*/*.log") for h in iter_batch_headers(p.read_bytes())
    ]
    assert max(batches) >= 5  # batches of several records
    assert _tree(many) == _tree(one)
    assert not any((meta_root(many) / "staging").iterdir())


def test_append_continues_the_log_as_one_task_does(spark, tmp_path: Path) -> None:
    """The second run continues each partition's last segment, as one `PartitionLog` reopened
    on the first run's output and appending the second run's batches lays it out."""
    first, second = _rows(0, 150), _rows(150, 180)
    for tasks in (8, 1):
        root = tmp_path / f"tasks{tasks}" / "logs"
        _save(_frame(spark, first, tasks), root, "a1")
        if tasks == 8:
            shutil.copytree(root, tmp_path / "published")
        _save(_frame(spark, second, tasks), root, "a2")
    many, one = tmp_path / "tasks8" / "logs", tmp_path / "tasks1" / "logs"
    _check_records(many, first + second)
    _segments_within_bound(many)
    assert _tree(many) == _tree(one)
    config = LogConfig.from_dict(
        {
            k[len("topics.t.config.") :]: v
            for k, v in OPTIONS.items()
            if k.startswith("topics.t.config.")
        }
    )
    for partition, records in _expected(second).items():
        name = f"t-{partition}"
        ts, keys, values = zip(*records, strict=True)
        rows = pa.table({"key": keys, "value": values, "timestamp": pa.array(ts, pa.int64())})
        published = tmp_path / "published" / name
        expected = _one_writer(tmp_path / "oracle" / name, config, rows, published, 1 << 20)
        assert _segment_files(many / name) == expected, name


def test_overwrite_gives_a_fresh_writes_bytes(spark, tmp_path: Path) -> None:
    old, new = _rows(0, 120), _rows(1000, 200)
    root = tmp_path / "over" / "logs"
    _save(_frame(spark, old, 4), root, "o1")
    _save(_frame(spark, new, 8), root, "o2", mode="overwrite")
    fresh = tmp_path / "fresh" / "logs"
    _save(_frame(spark, new, 1), fresh, "f1")
    _check_records(root, new)
    assert _tree(root) == _tree(fresh)


def test_an_aborted_write_and_a_rerun_run_id_leave_the_root_as_it_was(
    spark, tmp_path: Path
) -> None:
    root = tmp_path / "logs"
    rows = _rows(0, 150)
    _save(_frame(spark, rows, 4), root, "r1")
    before = _tree(root)
    bad = _rows(150, 100)
    bad[60] = (bad[60][0], None, *bad[60][2:])  # a null key on a compacted topic: a task fails
    with pytest.raises(Exception, match="null key on compacted topic"):
        _save(_frame(spark, bad, 4), root, "r2", **{"topics.t.config.cleanup.policy": "compact"})
    assert _tree(root) == before
    # The job's abort removes r2's staging, but Spark cancels the failed job's other tasks
    # asynchronously: one still running may stage more after the abort. The next run on the
    # root drops any run's leftover staging under the run lock.
    _save(_frame(spark, _rows(500, 90), 4), root, "r1")  # committed already: nothing changes
    assert _tree(root) == before
    assert not (meta_root(root) / "staging" / "r1").exists()
    assert not (meta_root(root) / "staging" / "r2").exists()
    _check_records(root, rows)
