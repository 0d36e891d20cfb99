"""The relayout of staged shares: a partition's output is what one writer appending the same
batches in order writes, whatever the number of splits or tasks.

The oracle is the core's `PartitionLog` appending the staged batches one by one (read with
`iter_batch_headers`), built here, independently of the relayout's own moves and cuts.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import jobs.ingest as ingest
from jobs.ingestion.commit import SEGMENT_FILE, TaskManifest
from jobs.ingestion.config import IngestConfig
from jobs.ingestion.relayout import local_runner, plan_relayout, relayout
from jobs.ingestion.writer import WriterSettings, write_task_direct
from kafkalog_core.config import LogConfig
from kafkalog_core.log.partition_log import PartitionLog, batch_options_for
from kafkalog_core.record.batch import iter_batch_headers
from kafkalog_core.record.encoder import EncodedBatches
from tests.jobs.counted_plan import counted_plan
from tests.jobs.ingest_helpers import (
    BASE_MS,
    config_doc,
    expected_records,
    read_root,
    source_rows,
    spark_read_order,
    write_parquet,
)

SEGMENT_BYTES = 4096
BATCH_BYTES = 400
TOPICS = {
    "events": {
        "partitions": 3,
        "config": {"segment.bytes": SEGMENT_BYTES, "index.interval.bytes": 300},
    }
}
NOW = 1_714_521_600_123


# --- the oracle -------------------------------------------------------------------------------
def _segment_files(directory: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(directory.iterdir())
        if SEGMENT_FILE.match(p.name) and not p.name.endswith(".snapshot")
    }


def _staged_logs(manifests: list[TaskManifest]) -> dict[tuple[str, int], list[bytes]]:
    """Each partition's staged .log bytes, shares in offset order (read before the relayout)."""
    out: dict[tuple[str, int], list[bytes]] = {}
    for m in sorted(manifests, key=lambda m: (m.topic, m.partition, m.first_offset)):
        for base in m.segment_bases:
            data = (Path(m.staging_dir) / f"{base:020d}.log").read_bytes()
            out.setdefault((m.topic, m.partition), []).append(data)
    return out


def _one_writer(directory: Path, config: LogConfig, logs: list[bytes], published=None) -> dict:
    """One PartitionLog appending every staged batch in order (skipping what the published
    log it continues holds already); its segment files."""
    if published is not None:
        shutil.copytree(published, directory)
        log = PartitionLog.open(directory, config, had_clean_shutdown=True, leader_epoch=0)
    else:
        log = PartitionLog.create(directory, config, leader_epoch=0)
    for data in logs:
        for h in iter_batch_headers(data):
            if h.base_offset < log.log_end_offset:
                continue
            one = np.array([h.base_offset], dtype=np.int64)
            log.append_batches(
                EncodedBatches(
                    buffer=memoryview(data)[h.position : h.position + h.size],
                    positions=np.zeros(1, dtype=np.int64),
                    sizes=np.array([h.size], dtype=np.int64),
                    base_offsets=one,
                    last_offsets=one + h.last_offset_delta,
                    max_timestamps=np.array([h.max_timestamp], dtype=np.int64),
                    record_counts=np.array([h.records_count], dtype=np.int64),
                    start_offset=h.base_offset,
                )
            )
    log.close(fsync=False)
    return _segment_files(directory)


def _spy(monkeypatch) -> list[dict]:
    """Record what the job hands to the relayout: staged .log bytes and the run's settings."""
    seen: list[dict] = []
    real = ingest.relayout

    def spy(manifests, settings, run):
        seen.append({"logs": _staged_logs(manifests), "staged": len(manifests)})
        return real(manifests, settings, run)

    monkeypatch.setattr(ingest, "relayout", spy)
    return seen


def _check_against_oracle(root: Path, logs, config: LogConfig, tmp: Path, published=None):
    for (topic, partition), staged in logs.items():
        name = f"{topic}-{partition}"
        before = None if published is None else published / name
        expected = _one_writer(tmp / name, config, staged, before)
        assert _segment_files(root / name) == expected, name


# --- without Spark ----------------------------------------------------------------------------
def _table(n: int, *, fixed: bool = False, seed: int = 5) -> pa.Table:
    """Rows of one partition; `fixed`: equal-size records (with one record per batch, every
    batch has the same size)."""
    rng = np.random.default_rng(seed)
    sizes = [150] * n if fixed else [int(s) for s in rng.integers(0, 200, n)]
    values = [bytes(rng.integers(0, 255, s).astype(np.uint8)) for s in sizes]
    return pa.table(
        {
            "topic": pa.array(["t"] * n),
            "partition": pa.array([0] * n, pa.int32()),
            "key": pa.array([b"k" if fixed else b"k%d" % (i % 11) for i in range(n)], pa.binary()),
            "value": pa.array(values, pa.binary()),
            "timestamp": pa.array(1_700_000_000_000 + np.cumsum(rng.integers(0, 900, n))),
        }
    )


def _staged_shares(
    tmp: Path, config: LogConfig, sizes: list[int], *, fixed: bool = False, batch_bytes=BATCH_BYTES
):
    """One partition written by len(sizes) direct tasks (shares of `sizes` rows, in order)."""
    options = batch_options_for(config, leader_epoch=0, now_ms=NOW, max_batch_bytes=batch_bytes)
    settings = WriterSettings(
        output_root=str(tmp / "logs"),
        run_id="r",
        configs={"t": config},
        batch_options={"t": options},
    )
    table = _table(sum(sizes), fixed=fixed)
    plan = counted_plan([(i, "t", 0, n) for i, n in enumerate(sizes)], {})
    manifests, at = [], 0
    for task, n in enumerate(sizes):
        rows = table.slice(at, n).to_batches()
        manifests += list(write_task_direct(iter(rows), task, "0", plan, settings))
        at += n
    return manifests, settings


@pytest.mark.parametrize("sizes", [[3, 40, 1, 1, 90, 7], [200, 150, 300]])
def test_shares_laid_out_as_one_writer(tmp_path, sizes):
    config = LogConfig.from_dict({"segment.bytes": SEGMENT_BYTES, "index.interval.bytes": 300})
    manifests, settings = _staged_shares(tmp_path, config, sizes)
    logs = _staged_logs(manifests)
    kept, jobs = plan_relayout(manifests, settings)
    assert not kept and len(jobs) == 1
    placed, report = relayout(manifests, settings, local_runner(settings))
    assert len(placed) == 1 and report.partitions == 1
    merged = placed[0]
    assert (merged.first_offset, merged.next_offset) == (0, sum(sizes))
    assert merged.record_count == sum(sizes)
    assert report.segments_after == len(merged.segment_bases) < report.segments_before
    expected = _one_writer(tmp_path / "oracle", config, logs[("t", 0)])
    assert _segment_files(Path(merged.staging_dir)) == expected


def _one_record_batch_size(tmp: Path) -> int:
    manifests, _ = _staged_shares(tmp, LogConfig.from_dict({}), [1], fixed=True, batch_bytes=1)
    return manifests[0].size_bytes - sum(f.size for f in manifests[0].files if f.ext != "log")


def test_only_boundaries_one_writer_continues_are_laid_out(tmp_path):
    """Equal one-record batches, three to a segment: shares of three stay as they are (each
    fills its segment, so one writer rolls at the next share too); a run of small shares is
    merged, and whole segments around it are hard links, not copies."""
    batch = _one_record_batch_size(tmp_path / "probe")
    config = LogConfig.from_dict({"segment.bytes": 3 * batch + batch // 2})
    full, settings = _staged_shares(tmp_path / "full", config, [3, 3, 3], fixed=True, batch_bytes=1)
    kept, jobs = plan_relayout(full, settings)
    assert jobs == [] and len(kept) == 3
    placed, report = relayout(full, settings, local_runner(settings))
    assert placed == kept and report.partitions == 0 and "no partition" in report.describe()

    mixed, settings = _staged_shares(
        tmp_path / "mixed", config, [3, 1, 1, 1, 3, 2], fixed=True, batch_bytes=1
    )
    logs = _staged_logs(mixed)
    placed, report = relayout(mixed, settings, local_runner(settings))
    merged = Path(placed[0].staging_dir)
    assert _segment_files(merged) == _one_writer(tmp_path / "oracle", config, logs[("t", 0)])
    assert placed[0].segment_bases == [0, 3, 6, 9]  # 11 records, three to a segment
    assert (report.segments_before, report.segments_after) == (6, 4)
    links = {int(p.name[:20]) for p in merged.glob("*.log") if p.stat().st_nlink > 1}
    assert links == {0, 6, 9}  # the first share; the fifth and sixth after a roll at their start


# --- through the ingest job --------------------------------------------------------------------
def _config(src: Path, root: Path, mode: str) -> IngestConfig:
    doc = config_doc(
        src, root, topics=TOPICS, ordering="source" if mode == "direct" else ("event_time", "id")
    )
    doc["output"]["write_mode"] = mode
    return IngestConfig.from_dict(doc)


def _bound(root: Path, partition_dir: str) -> tuple[int, int]:
    """(new segments, the bound ceil(bytes / (segment.bytes - largest batch)) + 1)."""
    logs = sorted((root / partition_dir).glob("*.log"))
    data = b"".join(p.read_bytes() for p in logs)
    largest = max(h.size for h in iter_batch_headers(data))
    return len(logs), math.ceil(len(data) / (SEGMENT_BYTES - largest)) + 1


@pytest.mark.spark
def test_direct_one_split_and_many_give_one_writers_layout(spark, tmp_path, monkeypatch):
    rows = source_rows(1200, seed=21)
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(128 << 20))
    roots = {}
    for files in (1, 8):
        seen = _spy(monkeypatch)
        src = write_parquet(tmp_path / f"src{files}", rows, files=files)
        roots[files] = root = tmp_path / f"out{files}" / "logs"
        config = _config(src, root, "direct")
        result = ingest.run(
            spark, config, run_id="r", batch_bytes=BATCH_BYTES, now_ms=NOW, out=lambda _: None
        )
        assert result.write_mode == "direct" and result.records == len(rows)
        assert len(seen) == 1
        log_config = config.topic("events").log_config
        _check_against_oracle(root, seen[0]["logs"], log_config, tmp_path / f"oracle{files}")
        for pdir in (p.name for p in root.iterdir() if p.is_dir()):
            count, bound = _bound(root, pdir)
            assert count <= bound, pdir
        if files == 8:
            staged = sum(len(logs) for logs in seen[0]["logs"].values())
            assert seen[0]["staged"] > 3  # several splits held each partition's rows
            assert "segments: the relayout of 3 partitions saved" in result.summary
            published = sum(1 for _ in root.glob("*/*.log"))
            assert published < staged
    for files, root in roots.items():  # Spark reads the files in its own order
        ordered, _ = spark_read_order(spark, tmp_path / f"src{files}", rows)
        assert read_root(root) == expected_records(ordered, {"events": 3}, in_order=True)


@pytest.mark.spark
def test_range_hot_partition_over_tasks_new_and_continued(spark, tmp_path, monkeypatch):
    first = source_rows(700, hot_user="hot", seed=11)
    second = source_rows(500, start_id=700, hot_user="hot", seed=12, start_ms=BASE_MS + 3_600_000)
    root = tmp_path / "logs"
    published = None
    for run_id, rows, tasks in (("r1", first, 4), ("r2", second, 5)):
        seen = _spy(monkeypatch)
        src = write_parquet(tmp_path / run_id, rows, files=2)
        config = _config(src, root, "range")
        result = ingest.run(
            spark,
            config,
            run_id=run_id,
            tasks=tasks,
            batch_bytes=BATCH_BYTES,
            now_ms=NOW,
            out=lambda _: None,
        )
        assert result.write_mode == "range" and result.records == len(rows)
        hot = max(seen[0]["logs"], key=lambda tp: len(seen[0]["logs"][tp]))
        log_config = config.topic("events").log_config
        _check_against_oracle(
            root, seen[0]["logs"], log_config, tmp_path / f"o-{run_id}", published
        )
        assert "segments: the relayout of" in result.summary
        count, bound = _bound(root, f"{hot[0]}-{hot[1]}")
        assert count <= bound
        published = tmp_path / f"published-{run_id}"
        shutil.copytree(root, published)
