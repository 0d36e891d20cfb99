"""The relayout of staged shares: a partition's output is what one writer appending the same
batches in order writes, whatever the number of splits or tasks.

The oracle is the core's `PartitionLog` appending the staged batches one by one (read with
`iter_batch_headers`), built here, independently of the relayout's own moves and cuts.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import jobs.ingest as ingest
from jobs.ingestion.commit import (
    SEGMENT_FILE,
    PlanError,
    TaskManifest,
    plan_publish,
    verify_manifest,
)
from jobs.ingestion.config import IngestConfig
from jobs.ingestion.relayout import (
    RelayoutJob,
    job_groups,
    local_runner,
    plan_relayout,
    relayout,
)
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
    tmp: Path,
    config: LogConfig,
    sizes: list[int],
    *,
    fixed: bool = False,
    batch_bytes=BATCH_BYTES,
    published: tuple[int, int] | None = None,
):
    """One partition written by len(sizes) direct tasks (shares of `sizes` rows, in order);
    `published`: (log end offset, last segment base) of a published log the first continues."""
    options = batch_options_for(config, leader_epoch=0, now_ms=NOW, max_batch_bytes=batch_bytes)
    settings = WriterSettings(
        output_root=str(tmp / "logs"),
        run_id="r",
        configs={"t": config},
        batch_options={"t": options},
        continue_segments={} if published is None else {("t", 0): published[1]},
    )
    table = _table(sum(sizes), fixed=fixed)
    leo = {} if published is None else {("t", 0): published[0]}
    plan = counted_plan([(i, "t", 0, n) for i, n in enumerate(sizes)], leo)
    manifests, at = [], 0
    for task, n in enumerate(sizes):
        rows = table.slice(at, n).to_batches()
        manifests += list(write_task_direct(iter(rows), task, "0", plan, settings))
        at += n
    return manifests, settings


@pytest.mark.parametrize("sizes", [[3, 40, 1, 1, 90, 7], [200, 150, 300]])
@pytest.mark.parametrize("segment_ms", [None, 20_000], ids=["size-rolls", "time-rolls"])
def test_shares_laid_out_as_one_writer(tmp_path, sizes, segment_ms):
    """Tails continued (the first share's segment takes the second's batches), rolls inside
    a continued tail, by size and (segment.ms: ~45 records a segment) by time."""
    settings_doc = {"segment.bytes": SEGMENT_BYTES, "index.interval.bytes": 300}
    if segment_ms is not None:
        settings_doc["segment.ms"] = segment_ms
    config = LogConfig.from_dict(settings_doc)
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
    verify_manifest(merged)  # sizes and CRC-32Cs (a continued tail's: extended, not re-read)


def test_a_tail_that_continues_the_published_segment(tmp_path):
    """The first share continued the published last segment (its writer reopened a copy, as
    a broker does); the next shares continue that tail in turn."""
    config = LogConfig.from_dict({"segment.bytes": SEGMENT_BYTES, "index.interval.bytes": 300})
    log = PartitionLog.create(tmp_path / "logs" / "t-0", config, leader_epoch=0)
    log.append_records(
        _table(12, seed=9).select(["key", "value", "timestamp"]),
        now_ms=NOW,
        max_batch_bytes=BATCH_BYTES,
    )
    published = (log.log_end_offset, log.active_segment.base_offset)
    log.close(fsync=False)
    snapshot = tmp_path / "published"
    shutil.copytree(tmp_path / "logs" / "t-0", snapshot)
    manifests, settings = _staged_shares(tmp_path, config, [1, 3, 30, 1], published=published)
    assert manifests[0].replaces == published[1] == manifests[0].segment_bases[-1]
    logs = _staged_logs(manifests)
    placed, report = relayout(manifests, settings, local_runner(settings))
    assert report.partitions == 1 and placed[0].replaces == published[1]
    expected = _one_writer(tmp_path / "oracle", config, logs[("t", 0)], snapshot)
    kept = {n: b for n, b in expected.items() if int(n[:20]) >= published[1]}
    assert _segment_files(Path(placed[0].staging_dir)) == kept
    verify_manifest(placed[0])


def test_shares_staged_without_fsync_are_never_published_as_they_are(tmp_path):
    """The durability guard: only the relayout's (fsynced) output of such shares publishes."""
    config = LogConfig.from_dict({"segment.bytes": SEGMENT_BYTES})
    manifests, settings = _staged_shares(tmp_path, config, [5, 5])
    with pytest.raises(PlanError, match="without fsync"):
        plan_publish(manifests, {}, output_root=settings.output_root, run_id="r")
    placed, _ = relayout(manifests, settings, local_runner(settings))
    plan = plan_publish(placed, {}, output_root=settings.output_root, run_id="r")
    assert [p.dir_name for p in plan.partitions] == ["t-0"]


def test_jobs_grouped_per_core_by_staged_bytes():
    """The Spark runner's tasks: at most one per core, every job once, bytes spread evenly."""

    def job(partition: int, size: int) -> RelayoutJob:
        share = TaskManifest("r", "t", "0", "t", partition, 0, 0, 0, 0, "/s", (), size_bytes=size)
        return RelayoutJob("t", partition, (share,))

    jobs = [job(p, size) for p, size in enumerate([10, 80, 30, 50, 40, 20, 60, 70])]
    groups = job_groups(jobs, 2)
    assert len(groups) == 2
    assert sorted(i for g in groups for i, _ in g) == list(range(8))
    assert all(jobs[i] is j for g in groups for i, j in g)
    assert sorted(sum(j.shares[0].size_bytes for _, j in g) for g in groups) == [180, 180]
    assert len(job_groups(jobs[:1], 4)) == 1 and job_groups([], 2) == [[]]


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
    # task 0 fsyncs its share (a one-split run has nothing to lay out); later tasks' shares are
    # laid out again after it, so their tasks stage them without fsync
    assert [m.durable for m in full] == [True, False, False]
    kept, jobs = plan_relayout(full, settings)
    assert kept == [] and [job.merge for job in jobs] == [False]  # kept as staged, synced
    placed, report = relayout(full, settings, local_runner(settings))
    assert report.partitions == 0 and report.synced == 1 and "no partition" in report.describe()
    assert [m.durable for m in placed] == [True]
    assert placed[0].segment_bases == [0, 3, 6]
    assert all(p.stat().st_nlink > 1 for p in Path(placed[0].staging_dir).iterdir())
    durable = [dataclasses.replace(m, durable=True) for m in full]  # e.g. written with fsync
    assert plan_relayout(durable, settings) == (durable, [])

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
