"""The relayout: a partition written by several tasks gives the bytes of one task.

A share that continues an earlier task's is staged as records; the relayout cuts the first
share's last batch and encodes its rows and the record shares after it as one writer does. The
oracle is the core's `PartitionLog.append_records` encoding every row of the partition in one
call (its own chunking), independent of the tasks' chunks, carries and the relayout's cut.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import jobs.ingest as ingest
from jobs.ingestion.commit.place import place_ranges
from jobs.ingestion.commit.plan import plan_publish
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.relayout.shares import (
    RelayoutJob,
    job_groups,
    local_runner,
    plan_relayout,
    relayout,
)
from jobs.ingestion.run.meta import PlanError
from jobs.ingestion.staging.task_staging import SEGMENT_FILE, TaskManifest, verify_manifest
from jobs.ingestion.tasks.planner import OnePassPlan
from jobs.ingestion.tasks.writer import WriterSettings, continue_staged_range, write_task_direct
from kafkalog_core.config import LogConfig
from kafkalog_core.log.partition.append import batch_options_for
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.record.batch import iter_batch_headers
from tests.jobs.ingest_helpers import (
    BASE_MS,
    SOURCE_SCHEMA,
    config_doc,
    expected_records,
    read_root,
    snapshot,
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


def _one_writer(
    directory: Path, config: LogConfig, rows: pa.Table, published=None, batch_bytes=BATCH_BYTES
) -> dict:
    """One PartitionLog encoding all `rows` in one call (continuing a copy of `published`, as
    a broker reopens it), batches of `batch_bytes` at most; its segment files."""
    if published is not None:
        shutil.copytree(published, directory)
        log = PartitionLog.open(directory, config, had_clean_shutdown=True, leader_epoch=0)
    else:
        log = PartitionLog.create(directory, config, leader_epoch=0)
    log.append_records(
        rows.select(["key", "value", "timestamp"]), now_ms=NOW, max_batch_bytes=batch_bytes
    )
    log.close(fsync=False)
    return _segment_files(directory)


# --- without Spark ----------------------------------------------------------------------------
def _table(n: int, *, seed: int = 5) -> pa.Table:
    """Rows of one partition, of 0-200 byte values: several records a batch."""
    rng = np.random.default_rng(seed)
    values = [bytes(rng.integers(0, 255, int(s)).astype(np.uint8)) for s in rng.integers(0, 200, n)]
    return pa.table(
        {
            "topic": pa.array(["t"] * n),
            "partition": pa.array([0] * n, pa.int32()),
            "key": pa.array([b"k%d" % (i % 11) for i in range(n)], pa.binary()),
            "value": pa.array(values, pa.binary()),
            "timestamp": pa.array(1_700_000_000_000 + np.cumsum(rng.integers(0, 900, n))),
        }
    )


def _staged_shares(
    tmp: Path,
    config: LogConfig,
    sizes: list[int],
    *,
    table: pa.Table | None = None,
    published: tuple[int, int] | None = None,
    chunk_bytes: int = 1500,
    root: Path | None = None,
):
    """One partition written by len(sizes) direct tasks in one pass (shares of `sizes` rows,
    in order; a size 0: the task lacks the partition), placed by the driver; `published`: (log
    end offset, last segment base) of a published log the first share continues."""
    options = batch_options_for(config, leader_epoch=0, now_ms=NOW, max_batch_bytes=BATCH_BYTES)
    settings = WriterSettings(
        output_root=str(tmp / "logs" if root is None else root),
        run_id="r",
        configs={"t": config},
        batch_options={"t": options},
        continue_segments={} if published is None else {("t", 0): published[1]},
        chunk_bytes=chunk_bytes,  # several chunks a share: carried batches inside shares
    )
    table = _table(sum(sizes)) if table is None else table
    leo = {} if published is None else {("t", 0): published[0]}
    staged, at = [], 0
    for task, n in enumerate(sizes):
        rows = table.slice(at, n).to_batches(max_chunksize=7)
        staged += list(write_task_direct(iter(rows), task, "0", OnePassPlan(leo), settings))
        at += n
    placed = place_ranges(staged, leo, lambda m, offset: continue_staged_range(m, offset, settings))
    return staged, placed, settings, table


@pytest.mark.parametrize("sizes", [[3, 40, 1, 1, 90, 7], [200, 150, 300], [0, 0, 120, 80]])
@pytest.mark.parametrize("segment_ms", [None, 20_000], ids=["size-rolls", "time-rolls"])
def test_shares_laid_out_as_one_writer(tmp_path, sizes, segment_ms):
    """Any split of a partition over tasks gives one writer's bytes: the first share's segments
    continued after its last batch is cut, rolls by size and (segment.ms) by time, a partition
    whose first share is records (its first tasks lack it)."""
    settings_doc = {"segment.bytes": SEGMENT_BYTES, "index.interval.bytes": 300}
    if segment_ms is not None:
        settings_doc["segment.ms"] = segment_ms
    config = LogConfig.from_dict(settings_doc)
    staged, placed, settings, table = _staged_shares(tmp_path, config, sizes)
    shares = [n for n in sizes if n]
    assert [m.records is not None for m in staged] == [
        i > 0 or sizes[0] == 0 for i in range(len(shares))
    ]
    assert all(m.files == () and not m.durable for m in staged if m.records is not None)
    kept, jobs = plan_relayout(placed)
    assert not kept and len(jobs) == 1
    out, report = relayout(placed, settings, local_runner(settings))
    assert len(out) == 1 and (report.partitions, report.shares) == (
        1,
        len(shares) - 1 + (sizes[0] == 0),
    )
    merged = out[0]
    assert (merged.first_offset, merged.next_offset) == (0, sum(sizes))
    assert merged.record_count == sum(sizes) and merged.durable and merged.records is None
    assert report.segments_after == len(merged.segment_bases) >= 3  # rolls
    expected = _one_writer(tmp_path / "oracle", config, table)
    assert _segment_files(Path(merged.staging_dir)) == expected
    batches = list(
        iter_batch_headers(b"".join(v for k, v in expected.items() if k.endswith(".log")))
    )
    assert max(h.records_count for h in batches) > 2  # batches of several records
    verify_manifest(merged)  # sizes and CRC-32Cs (the continued tail's: extended, not re-read)


def test_a_tail_that_continues_the_published_segment(tmp_path):
    """The first share continued the published last segment (its writer reopened a copy, as
    a broker does); its last batch is cut there and the record shares continue it."""
    config = LogConfig.from_dict({"segment.bytes": SEGMENT_BYTES, "index.interval.bytes": 300})
    log = PartitionLog.create(tmp_path / "logs" / "t-0", config, leader_epoch=0)
    log.append_records(
        _table(12, seed=9).select(["key", "value", "timestamp"]),
        now_ms=NOW,
        max_batch_bytes=BATCH_BYTES,
    )
    published = (log.log_end_offset, log.active_segment.base_offset)
    log.close(fsync=False)
    copy = tmp_path / "published"
    shutil.copytree(tmp_path / "logs" / "t-0", copy)
    for sizes in ([1, 3, 30, 1], [0, 3, 30], [4]):
        _, placed, settings, table = _staged_shares(
            tmp_path, config, sizes, published=published, root=tmp_path / "logs"
        )
        out, report = relayout(placed, settings, local_runner(settings))
        assert report.partitions == (len(sizes) > 1)
        assert out[0].replaces == published[1]
        expected = _one_writer(tmp_path / f"oracle{sizes}", config, table, copy)
        kept = {n: b for n, b in expected.items() if int(n[:20]) >= published[1]}
        assert _segment_files(Path(out[0].staging_dir)) == kept, sizes
        verify_manifest(out[0])


def test_record_shares_are_never_published_as_they_are(tmp_path):
    """The guard: only the relayout's (encoded, fsynced) output of record shares publishes."""
    config = LogConfig.from_dict({"segment.bytes": SEGMENT_BYTES})
    _, placed, settings, _ = _staged_shares(tmp_path, config, [5, 5])
    with pytest.raises(PlanError, match="staged as records"):
        plan_publish(placed, {}, output_root=settings.output_root, run_id="r")
    out, _ = relayout(placed, settings, local_runner(settings))
    plan = plan_publish(out, {}, output_root=settings.output_root, run_id="r")
    assert [p.dir_name for p in plan.partitions] == ["t-0"]


def test_the_first_shares_kept_segments_are_hard_links(tmp_path):
    """Only the first share's last segment is copied (and cut); its others are links, and a
    partition of one share is kept as it is."""
    config = LogConfig.from_dict({"segment.bytes": 1500, "index.interval.bytes": 300})
    _, placed, settings, _ = _staged_shares(tmp_path, config, [120, 30])
    first = placed[0]
    assert len(first.segment_bases) >= 3 and first.carry is not None
    out, _ = relayout(placed, settings, local_runner(settings))
    merged = Path(out[0].staging_dir)
    links = {int(p.name[:20]) for p in merged.glob("*.log") if p.stat().st_nlink > 1}
    assert links == set(first.segment_bases[:-1])
    _, alone, settings, _ = _staged_shares(tmp_path / "alone", config, [120])
    assert relayout(alone, settings, local_runner(settings))[0] == alone


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


# --- through the ingest job --------------------------------------------------------------------
def _config(src: Path, root: Path, mode: str, direct_tasks: str = "splits") -> IngestConfig:
    doc = config_doc(
        src, root, topics=TOPICS, ordering="source" if mode == "direct" else ("event_time", "id")
    )
    doc["output"]["write_mode"] = mode
    if mode == "direct":  # the arrow reader: files in name order, whatever the split count
        del doc["mapping"]["headers"]
        doc["source"]["task_reader"] = "arrow"
        doc["output"]["direct_tasks"] = direct_tasks  # splits: the relayout's way
    return IngestConfig.from_dict(doc)


def _bound(root: Path, partition_dir: str) -> tuple[int, int]:
    """(new segments, the bound ceil(bytes / (segment.bytes - largest batch)) + 1)."""
    logs = sorted((root / partition_dir).glob("*.log"))
    data = b"".join(p.read_bytes() for p in logs)
    largest = max(h.size for h in iter_batch_headers(data))
    return len(logs), math.ceil(len(data) / (SEGMENT_BYTES - largest)) + 1


@pytest.mark.spark
def test_direct_one_split_and_many_give_one_writers_bytes(spark, tmp_path, small_splits):
    """One file of 12 row groups (a split each, each holding a share of every partition) gives
    the bytes of one file read whole; 8 files in many splits give the records in Spark's source
    order (its splits by size, not file name: the order depends on the split size, so only the
    records are compared there); the segment bound holds. Tasks that each own partitions and
    read every split (`direct_tasks: partitions`, no relayout) give the relayout's bytes."""
    rows = source_rows(1200, seed=21)
    one, groups, files = tmp_path / "src-one", tmp_path / "src-row-groups", tmp_path / "src-files"
    write_parquet(one, rows, files=1)
    groups.mkdir()
    table = pa.Table.from_pylist(rows, schema=SOURCE_SCHEMA)
    pq.write_table(table, groups / "part-000.parquet", row_group_size=100)
    write_parquet(files, rows, files=8)
    roots = {}
    ways = [("one", one), ("row-groups", groups), ("files", files), ("owners", files)]
    for way, src in ways:
        roots[way] = root = tmp_path / f"out-{way}" / "logs"
        result = ingest.run(
            spark,
            _config(src, root, "direct", "partitions" if way == "owners" else "splits"),
            run_id="r",
            batch_bytes=BATCH_BYTES,
            now_ms=NOW,
            out=lambda _: None,
        )
        ordered, _ = spark_read_order(spark, src, rows)
        assert result.write_mode == "direct" and result.records == len(rows)
        for pdir in (p.name for p in root.iterdir() if p.is_dir()):
            count, bound = _bound(root, pdir)
            assert count <= bound, pdir
        if way in ("row-groups", "files"):
            assert "the relayout encoded" in result.summary and "3 partitions" in result.summary
        if way == "owners":
            assert result.direct_tasks == "partitions"
            assert "segments: no partition had shares to lay out" in result.summary
        expected = expected_records(ordered, {"events": 3}, in_order=True)
        assert read_root(root) == [(t, p, o, k, v, [], ts) for t, p, o, k, v, _, ts in expected]
    assert snapshot(roots["row-groups"]) == snapshot(roots["one"])
    assert snapshot(roots["owners"]) == snapshot(roots["files"])


@pytest.mark.spark
def test_range_hot_partition_over_tasks_new_and_continued(spark, tmp_path):
    """A hot partition split over 4 then 5 tasks, the second run continuing the first's
    segments, gives one task's bytes."""
    first = source_rows(700, hot_user="hot", seed=11)
    second = source_rows(500, start_id=700, hot_user="hot", seed=12, start_ms=BASE_MS + 3_600_000)
    roots = {}
    for way in ("one", "many"):
        roots[way] = root = tmp_path / way / "logs"
        for run_id, rows, tasks in (("r1", first, 4), ("r2", second, 5)):
            src = write_parquet(tmp_path / way / run_id, rows, files=2)
            result = ingest.run(
                spark,
                _config(src, root, "range"),
                run_id=run_id,
                tasks=1 if way == "one" else tasks,
                batch_bytes=BATCH_BYTES,
                now_ms=NOW,
                out=lambda _: None,
            )
            assert result.write_mode == "range" and result.records == len(rows)
            if way == "many":
                assert "the relayout encoded" in result.summary
        hot = max((p for p in root.iterdir() if p.is_dir()), key=lambda p: len(list(p.iterdir())))
        count, bound = _bound(root, hot.name)
        assert count <= bound
    assert snapshot(roots["many"]) == snapshot(roots["one"])
