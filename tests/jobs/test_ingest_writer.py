"""The ingest writer without Spark: staged bytes depend on the records only, never on how the
input was sliced into Arrow batches, and a range equals the engine's append, in one chunk or many."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jobs.ingestion.tasks.planner import OnePassPlan, RangeAssignment
from jobs.ingestion.tasks.writer import (
    InjectedFailure,
    WriterSettings,
    partition_groups,
    partition_runs,
    write_task,
    write_task_direct,
)
from kafkalog_core.config import LogConfig
from kafkalog_core.errors import KafkaLogError
from kafkalog_core.log.partition.append import batch_options_for
from kafkalog_core.log.partition.partition_log import PartitionLog
from tests.jobs.counted_plan import count_task, counted_plan

CONFIG = LogConfig.from_dict({"segment.bytes": 20000, "index.interval.bytes": 512})
OPTIONS = batch_options_for(CONFIG, leader_epoch=0, now_ms=None, max_batch_bytes=1500)
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
FILES = (".log", ".index", ".timeindex")


def _records(n: int, *, monotone: bool, seed: int = 3, partition: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    if monotone:
        ts = 1_700_000_000_000 + np.cumsum(rng.integers(0, 3000, n))
    else:
        ts = 1_700_000_000_000 + rng.integers(0, 10**7, n)
    values = [
        bytes(rng.integers(0, 255, int(rng.integers(0, 120))).astype(np.uint8)) for _ in range(n)
    ]
    return pa.table(
        {
            "topic": pa.array(["t"] * n),
            "partition": pa.array([partition] * n, pa.int32()),
            "key": pa.array([b"k%d" % (i % 37) for i in range(n)], pa.binary()),
            "value": pa.array(
                [None if i % 50 == 3 else v for i, v in enumerate(values)], pa.binary()
            ),
            "headers": pa.array([[{"key": "h", "value": b"%d" % i}] for i in range(n)], HEADERS),
            "timestamp": pa.array(ts, pa.int64()),
        }
    )


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.suffix in FILES}


def _write(table: pa.Table, rows_per_batch: int, chunk_bytes: int, root: Path, **kw):
    settings = WriterSettings(
        output_root=str(root / "logs"),
        run_id="r",
        configs={"t": CONFIG},
        batch_options={"t": OPTIONS},
        chunk_bytes=chunk_bytes,
        **kw,
    )
    plan = counted_plan([(0, "t", 0, table.num_rows)], {})
    batches = table.to_batches(max_chunksize=rows_per_batch)
    manifests = list(write_task(iter(batches), 0, str(rows_per_batch), plan, settings))
    assert len(manifests) == 1 and manifests[0].record_count == table.num_rows
    return _files(Path(manifests[0].staging_dir))


def _engine(table: pa.Table, directory: Path) -> dict[str, bytes]:
    log = PartitionLog.create(directory, CONFIG, leader_epoch=0)
    log.append_records(table.select(["key", "value", "timestamp", "headers"]), options=OPTIONS)
    log.close()
    return _files(directory)


@pytest.mark.parametrize("monotone", [True, False])
@pytest.mark.parametrize("chunk_bytes", [50, 8000])
def test_chunked_output_does_not_depend_on_arrow_slicing(tmp_path, monotone, chunk_bytes):
    table = _records(3000, monotone=monotone)
    outputs = [_write(table, rows, chunk_bytes, tmp_path) for rows in (7, 50, 333, 5000)]
    assert len(outputs[0]) >= 9  # several segments with their indexes
    assert all(out == outputs[0] for out in outputs[1:])


@pytest.mark.parametrize("monotone", [True, False])
def test_range_within_one_chunk_equals_the_engine(tmp_path, monotone):
    table = _records(3000, monotone=monotone)
    expected = _engine(table, tmp_path / "engine")
    for rows in (7, 1000):
        assert _write(table, rows, 32 << 20, tmp_path) == expected


@pytest.mark.parametrize("monotone", [True, False])
@pytest.mark.parametrize("chunk_bytes", [50, 8000])
def test_range_over_several_chunks_equals_the_engine(tmp_path, monotone, chunk_bytes):
    """Each chunk continues the single encode (carried batch + context timestamps)."""
    table = _records(3000, monotone=monotone)
    expected = _engine(table, tmp_path / "engine")
    for rows in (7, 333):
        assert _write(table, rows, chunk_bytes, tmp_path) == expected


def test_two_partitions_in_one_task_and_counts(tmp_path):
    table = pa.concat_tables(
        [_records(300, monotone=True, partition=0), _records(200, monotone=False, partition=1)]
    )
    batches = table.to_batches(max_chunksize=64)
    assert count_task(batches) == {("t", 0): 300, ("t", 1): 200}
    plan = counted_plan([(3, "t", 0, 300), (3, "t", 1, 200)], {("t", 1): 1000})
    assert plan[(3, "t", 1)] == RangeAssignment("t", 1, 3, 0, 1000, 200)
    settings = WriterSettings(
        output_root=str(tmp_path / "logs"),
        run_id="r",
        configs={"t": CONFIG},
        batch_options={"t": OPTIONS},
    )
    manifests = list(write_task(iter(batches), 3, "9", plan, settings))
    assert [(m.partition, m.first_offset, m.next_offset) for m in manifests] == [
        (0, 0, 300),
        (1, 1000, 1200),
    ]
    assert manifests[1].segment_bases == [1000]


def test_injected_failure_after_n_batches(tmp_path):
    table = _records(300, monotone=True)
    with pytest.raises(InjectedFailure, match="after 2 batches"):
        _write(table, 50, 1 << 20, tmp_path, fail_after_batches=2)


def _direct_settings(root: Path, chunk_bytes: int = 32 << 20) -> WriterSettings:
    return WriterSettings(
        output_root=str(root / "logs"),
        run_id="r",
        configs={"t": CONFIG, "u": CONFIG},
        batch_options={"t": OPTIONS, "u": OPTIONS},
        chunk_bytes=chunk_bytes,
    )


def _interleaved() -> pa.Table:
    """Three partitions of two topics, rows interleaved as a source would hold them."""
    parts = [
        _records(700, monotone=True, partition=0),
        _records(500, monotone=False, partition=1, seed=4),
        _records(400, monotone=True, partition=0, seed=5),
    ]
    parts[2] = parts[2].set_column(0, "topic", pa.array(["u"] * 400))
    table = pa.concat_tables(parts)
    order = np.random.default_rng(9).permutation(table.num_rows)
    # a random interleaving that keeps every partition's own order
    group = np.repeat([0, 1, 2], [700, 500, 400])[order]
    ranks = np.zeros(table.num_rows, dtype=np.int64)
    for g in range(3):
        ranks[group == g] = np.flatnonzero(np.repeat([0, 1, 2], [700, 500, 400]) == g)
    return table.take(pa.array(ranks))


def _staged(manifests) -> dict[tuple[str, int], dict[str, bytes]]:
    return {(m.topic, m.partition): _files(Path(m.staging_dir)) for m in manifests}


@pytest.mark.parametrize("chunk_bytes", [50, 8000])
def test_direct_task_writes_what_the_sorted_task_writes(tmp_path, chunk_bytes):
    """Interleaved partitions, any Arrow slicing: each partition's staged files equal the range
    writer's for the same rows in the same order (and so the engine's)."""
    table = _interleaved()
    counts = count_task(table.to_batches())
    plan = counted_plan([(0, t, p, n) for (t, p), n in counts.items()], {})
    keys = np.array([0 if t == "t" else 1 for t in table.column("topic").to_pylist()]) * 10
    keys += np.array(table.column("partition").to_pylist())
    sorted_table = table.take(pa.array(np.argsort(keys, kind="stable")))
    expected = _staged(
        write_task(
            iter(sorted_table.to_batches(100)), 0, "sorted", plan, _direct_settings(tmp_path)
        )
    )
    assert set(expected) == {("t", 0), ("t", 1), ("u", 0)}
    for rows in (13, 400, 5000):
        settings = _direct_settings(tmp_path, chunk_bytes)
        manifests = list(
            write_task_direct(iter(table.to_batches(rows)), 0, f"d{rows}", plan, settings)
        )
        assert [(m.topic, m.partition) for m in manifests] == sorted(expected)
        assert [m.record_count for m in manifests] == [counts[k] for k in sorted(expected)]
        assert _staged(manifests) == expected


def _grouped(batch: pa.RecordBatch) -> pa.RecordBatch:
    order, _ = partition_groups(batch)
    return batch if order is None else batch.take(pa.array(order))


def test_partition_groups_is_stable_and_orders_topics_by_name():
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": ["z", "a", "z", "a", "a"],
            "partition": pa.array([0, 1, 0, 0, 1], pa.int32()),
            "value": [b"0", b"1", b"2", b"3", b"4"],
        }
    )
    grouped = _grouped(batch)
    assert grouped.column("value").to_pylist() == [b"3", b"1", b"4", b"0", b"2"]
    assert list(partition_runs(grouped)) == [("a", 0, 0, 1), ("a", 1, 1, 3), ("z", 0, 3, 5)]
    assert partition_groups(batch)[1] == [("a", 0, 0, 1), ("a", 1, 1, 3), ("z", 0, 3, 5)]


@pytest.mark.parametrize("seed", range(12))
def test_partition_groups_equals_a_stable_sort_then_runs(seed):
    """The direct writer's grouping (order + runs, no copy) is a stable sort by (topic name,
    partition) followed by partition_runs - small codes (radix sort) and large ones."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    topics = ["orders", "a", "zeta", "m"][: int(rng.integers(1, 5))]
    top = [3, 40, 70_000][seed % 3]  # 70,000 partitions: codes beyond 16 bits
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": [topics[int(i)] for i in rng.integers(0, len(topics), n)],
            "partition": pa.array(rng.integers(0, top, n), pa.int32()),
            "value": [b"%d" % i for i in range(n)],
        }
    )
    if seed % 4 == 0:
        batch = _grouped(batch)  # already grouped: no order needed
    order, groups = partition_groups(batch)
    names, parts = batch.column("topic").to_pylist(), batch.column("partition").to_pylist()
    expected = sorted(range(n), key=lambda i: (names[i], parts[i]))  # Python's sort is stable
    grouped = batch.take(pa.array(expected))
    taken = batch if order is None else batch.take(pa.array(order))
    assert taken.column("value").to_pylist() == grouped.column("value").to_pylist()
    assert groups == list(partition_runs(grouped))
    assert (order is None) == (seed % 4 == 0 or grouped.equals(batch))


def test_direct_task_refuses_rows_the_plan_does_not_know(tmp_path):
    table = _interleaved()
    plan = counted_plan([(0, "t", 0, 700)], {})
    with pytest.raises(KafkaLogError, match=r"task 0: the plan has no range for t-1"):
        list(write_task_direct(iter(table.to_batches()), 0, "a", plan, _direct_settings(tmp_path)))


def test_direct_task_memory_follows_its_budget_not_its_input(tmp_path, monkeypatch):
    """A task's pending rows stay within DIRECT_TASK_BUFFER_BYTES however much it reads: a
    partition that receives one row per batch must not keep every batch alive (it did while
    partitions held slices of one shared copy of each batch), nor a carried chunk tail the
    chunk it was cut from."""
    from jobs.ingestion.tasks import writer

    monkeypatch.setattr(writer, "DIRECT_TASK_BUFFER_BYTES", 2 << 20)
    monkeypatch.setattr(writer, "MIN_CHUNK_BYTES", 256 << 10)
    rows, batches = 20_000, 24  # 24 batches of ~2.4 MB: ~58 MB read
    value = pa.array([b"v" * 100] * rows, pa.binary())
    partition = np.zeros(rows, dtype=np.int32)
    partition[1::2] = 1
    partition[7] = 2  # the rare partition: one row per batch, never a full chunk

    def batch(i: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(
            {
                "topic": pa.array(["t"] * rows),
                "partition": pa.array(partition),
                "key": pa.array([b"%06d" % (i * rows + j) for j in range(rows)], pa.binary()),
                "value": value,
                "timestamp": pa.array(np.full(rows, 1_700_000_000_000 + i), pa.int64()),
            }
        )

    peaks = []

    def feed():
        for i in range(batches):
            b = batch(i)
            yield b
            del b
            peaks.append(pa.total_allocated_bytes())

    plan = OnePassPlan({})  # the job's plan: task 0 writes every partition in place
    big = LogConfig.from_dict({})  # 1 GiB segments: one per partition
    settings = WriterSettings(
        output_root=str(tmp_path / "logs"),
        run_id="r",
        configs={"t": big},
        batch_options={"t": batch_options_for(big, leader_epoch=0, now_ms=None)},
    )
    manifests = list(writer.write_task_direct(feed(), 0, "m", plan, settings))
    assert sum(m.record_count for m in manifests) == batches * rows
    base = peaks[0]
    # the budget (2 MiB) + one chunk being cut + the batch in hand; the input is ~58 MB
    assert max(peaks) - base < 12 << 20, [p >> 20 for p in peaks]
