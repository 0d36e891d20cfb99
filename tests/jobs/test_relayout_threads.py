"""`thread_runner`: the relayout on a thread pool in the committing process (the data source's
commit has no SparkSession) lays every partition out exactly as the in-process runner does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from jobs.ingestion.commit.place import place_ranges
from jobs.ingestion.relayout.shares import local_runner, relayout, thread_runner
from jobs.ingestion.staging.task_staging import SEGMENT_FILE
from jobs.ingestion.tasks.planner import ProvisionalPlan
from jobs.ingestion.tasks.writer import WriterSettings, write_task_direct
from kafkalog_core.config import LogConfig
from kafkalog_core.log.partition.append import batch_options_for

PARTITIONS = 4


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if SEGMENT_FILE.match(p.name)}


def test_thread_runner_lays_out_as_the_local_runner(tmp_path: Path) -> None:
    config = LogConfig.from_dict({"segment.bytes": 3000, "index.interval.bytes": 300})
    options = batch_options_for(config, leader_epoch=0, now_ms=0, max_batch_bytes=400)
    settings = WriterSettings(
        output_root=str(tmp_path / "logs"),
        run_id="r",
        configs={"t": config},
        batch_options={"t": options},
    )
    rng = np.random.default_rng(3)
    staged = []
    for task in range(5):  # every task holds a share of every partition
        n = 120
        batch = pa.record_batch(
            {
                "topic": pa.array(["t"] * n),
                "partition": pa.array(rng.integers(0, PARTITIONS, n), pa.int32()),
                "key": pa.array([b"k%d" % i for i in range(n)]),
                "value": pa.array([bytes(rng.integers(0, 255, 60).astype(np.uint8))] * n),
                "timestamp": pa.array(1_700_000_000_000 + np.arange(n, dtype=np.int64)),
            }
        )
        staged += write_task_direct(iter([batch]), task, "0", ProvisionalPlan(), settings)
    placed = place_ranges(staged, {})
    by_thread, report = relayout(placed, settings, thread_runner(settings, workers=3))
    by_local, _ = relayout(placed, settings, local_runner(settings))
    assert report.partitions == PARTITIONS and report.shares == 4 * PARTITIONS
    threads = {(m.topic, m.partition): m for m in by_thread}
    for m in by_local:
        other = threads[(m.topic, m.partition)]
        assert other.staging_dir != m.staging_dir  # each its own task key and attempt
        assert (other.first_offset, other.next_offset) == (m.first_offset, m.next_offset)
        assert _files(Path(other.staging_dir)) == _files(Path(m.staging_dir))
