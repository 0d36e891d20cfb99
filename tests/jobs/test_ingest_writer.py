"""The ingest writer without Spark: staged bytes depend on the records only, never on how the
input was sliced into Arrow batches, and a range equals the engine's append, in one chunk or many."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jobs.ingestion.planner import RangeAssignment, plan_offsets
from jobs.ingestion.writer import (
    InjectedFailure,
    WriterSettings,
    count_task,
    write_task,
)
from kafkalog_core.config import LogConfig
from kafkalog_core.log.partition_log import PartitionLog, batch_options_for

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
    plan = plan_offsets([(0, "t", 0, table.num_rows)], {}).as_lookup()
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
    plan = plan_offsets([(3, "t", 0, 300), (3, "t", 1, 200)], {("t", 1): 1000})
    assert plan.for_task(3, "t", 1) == RangeAssignment("t", 1, 3, 0, 1000, 200)
    settings = WriterSettings(
        output_root=str(tmp_path / "logs"),
        run_id="r",
        configs={"t": CONFIG},
        batch_options={"t": OPTIONS},
    )
    manifests = list(write_task(iter(batches), 3, "9", plan.as_lookup(), settings))
    assert [(m.partition, m.first_offset, m.next_offset) for m in manifests] == [
        (0, 0, 300),
        (1, 1000, 1200),
    ]
    assert manifests[1].segment_bases == [1000]


def test_injected_failure_after_n_batches(tmp_path):
    table = _records(300, monotone=True)
    with pytest.raises(InjectedFailure, match="after 2 batches"):
        _write(table, 50, 1 << 20, tmp_path, fail_after_batches=2)
