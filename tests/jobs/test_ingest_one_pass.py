"""The one pass (no counting pass) over any task cuts publishes the bytes of one task, in both
modes.

Without Spark: rows are cut into tasks by hand, so each way a task share can fall is forced.
The range mode (sorted rows): a hot partition split over several tasks, a partition starting
exactly at a task's first row (staged provisionally, then continuing the published active
segment). The direct mode (rows in source order, every task holding any partition): task 0's
shares in place, every later task's staged, a partition task 0 lacks (its first share is a
later task's, continuing the published segment), the shares laid out again by the relayout.
Both with segment rolls inside a task's share, multi-record batches and two topics. The
reference is one task writing every partition in place (tests/jobs/counted_plan.py); a share
that continues another is staged as records and encoded by the relayout after it, so batch
boundaries never follow task boundaries: both ways publish into their own root, and every file
must match.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jobs.ingestion.commit.place import place_ranges
from jobs.ingestion.commit.plan import RunInfo, plan_publish
from jobs.ingestion.commit.publish import publish
from jobs.ingestion.commit.state import scan_existing_state
from jobs.ingestion.commit.topic_ids import topic_ids_for
from jobs.ingestion.relayout.shares import local_runner, relayout
from jobs.ingestion.tasks.planner import OnePassPlan
from jobs.ingestion.tasks.writer import (
    WriterSettings,
    continue_staged_range,
    write_task,
    write_task_direct,
)
from kafkalog_core.config import LogConfig
from kafkalog_core.log.partition.append import batch_options_for
from tests.jobs.commit_helpers import visible
from tests.jobs.counted_plan import count_task, counted_plan

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
CONFIGS = {
    # rolls inside a task's share: several segments per share, an index entry every 512 bytes
    "t": LogConfig.from_dict({"segment.bytes": 6000, "index.interval.bytes": 512}),
    "u": LogConfig.from_dict({"segment.bytes": 1 << 20, "compression.type": "lz4"}),
}


def _rows(parts: list[tuple[str, int, int]], seed: int) -> pa.Table:
    """`count` records of each (topic, partition, count), sorted as the range mode sorts them."""
    rng = np.random.default_rng(seed)
    columns: dict[str, list] = {k: [] for k in ("topic", "partition", "key", "value", "ts")}
    ts = 1_700_000_000_000
    for topic, partition, count in sorted(parts):
        for i in range(count):
            ts += int(rng.integers(0, 2000))
            columns["topic"].append(topic)
            columns["partition"].append(partition)
            columns["key"].append(b"k%d" % (i % 11))
            value = bytes(rng.integers(0, 255, int(rng.integers(0, 150))).astype(np.uint8))
            columns["value"].append(None if i % 41 == 7 else value)
            columns["ts"].append(ts)
    n = len(columns["ts"])
    return pa.table(
        {
            "topic": pa.array(columns["topic"]),
            "partition": pa.array(columns["partition"], pa.int32()),
            "key": pa.array(columns["key"], pa.binary()),
            "value": pa.array(columns["value"], pa.binary()),
            "headers": pa.array([[{"key": "h", "value": b"%d" % i}] for i in range(n)], HEADERS),
            "timestamp": pa.array(columns["ts"], pa.int64()),
        }
    )


def _tasks(table: pa.Table, cuts: list[int]) -> list[list[pa.RecordBatch]]:
    """The rows cut at `cuts` into tasks, each task's rows in 50-row Arrow batches."""
    bounds = [0, *cuts, table.num_rows]
    return [
        table.slice(a, b - a).to_batches(max_chunksize=50)
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]


def _settings(root: Path, run_id: str) -> WriterSettings:
    state = scan_existing_state(root)
    continued = {}
    for tp, s in state.items():
        base = s.segment_to_continue(int(CONFIGS[tp[0]].segment_bytes))
        if base is not None:
            continued[tp] = base
    return WriterSettings(
        output_root=str(root),
        run_id=run_id,
        configs=CONFIGS,
        batch_options={
            t: batch_options_for(c, leader_epoch=0, now_ms=None, max_batch_bytes=700)
            for t, c in CONFIGS.items()
        },
        continue_segments=continued,
    )


def _ingest(root: Path, tasks, run_id: str, *, one_pass: bool, direct: bool = False) -> list:
    """One run the counted way (counting pass, exact plan) or in one pass (then the relayout of
    the partitions with record shares); publishes. `direct`: the direct mode's writer."""
    root.mkdir(parents=True, exist_ok=True)
    state = scan_existing_state(root)
    leo = {tp: s.log_end_offset for tp, s in state.items()}
    settings = _settings(root, run_id)
    write = write_task_direct if direct else write_task
    if one_pass:
        plan = OnePassPlan(leo)
        staged = [m for i, t in enumerate(tasks) for m in write(t, i, "0", plan, settings)]
        manifests = place_ranges(
            staged, leo, lambda m, offset: continue_staged_range(m, offset, settings)
        )
        manifests, _ = relayout(manifests, settings, local_runner(settings))
    else:
        counts = [(i, t, p, c) for i, b in enumerate(tasks) for (t, p), c in count_task(b).items()]
        lookup = counted_plan(counts, leo)
        staged = [m for i, t in enumerate(tasks) for m in write(t, i, "0", lookup, settings)]
        manifests = staged
    topics = {m.topic for m in manifests}
    info = RunInfo(source="test", started_at_ms=1, description="test")
    plan = plan_publish(
        manifests,
        state,
        output_root=root,
        run_id=run_id,
        run_info=info,
        topic_ids=topic_ids_for(topics, state),
    )
    publish(plan)
    return staged


def _published(root: Path) -> dict[str, dict[str, bytes]]:
    return {d: files for d, files in visible(root).items() if d != "."}


# (partitions and their row counts, the task cuts) of each run
FIRST = ([("t", 0, 300), ("t", 1, 40), ("t", 2, 260), ("u", 0, 120)], [130, 300, 340, 470])
# t-0 is hot (split over tasks 0..2); t-1 starts exactly at task 3's first row; t-2 spans
# tasks 3-4 and continues its active segment; u-0 is a task's last and only partition
SECOND = ([("t", 0, 500), ("t", 1, 90), ("t", 2, 150), ("u", 0, 60)], [200, 400, 500, 560, 700])


@pytest.mark.parametrize("second_cuts", [SECOND[1], [250, 590], [500]])
def test_one_pass_publishes_the_counted_bytes_new_and_appended(tmp_path, second_cuts):
    first = _rows(FIRST[0], seed=1)
    second = _rows(SECOND[0], seed=2)
    roots = {}
    for one_pass in (False, True):
        root = tmp_path / ("one-pass" if one_pass else "counted") / "logs"
        cuts = (FIRST[1], second_cuts) if one_pass else ([], [])  # the reference: one task
        _ingest(root, _tasks(first, cuts[0]), "r1", one_pass=one_pass)
        staged = _ingest(root, _tasks(second, cuts[1]), "r2", one_pass=one_pass)
        roots[one_pass] = root
        if one_pass and second_cuts == SECOND[1]:
            # every way a share can fall occurred: provisional shares (a task's first
            # partition) and shares written in place continuing the published segment
            assert any(m.records is not None for m in staged)
            assert any(m.replaces is not None for m in staged)
            record_tp = {(m.topic, m.partition) for m in staged if m.records is not None}
            assert ("t", 1) in record_tp  # starts at task 3's first row: encoded from its start
    counted, one = _published(roots[False]), _published(roots[True])
    assert counted.keys() == one.keys()
    for name in counted:
        assert one[name] == counted[name], name
    # several segments per partition of t: rolls inside shares and at share starts
    assert sum(n.endswith(".log") for n in counted["t-0"]) >= 4


def _source_order(table: pa.Table, first_task: int, seed: int) -> pa.Table:
    """The rows interleaved over their partitions (source order, as the direct mode reads),
    the first `first_task` rows without t-2: task 0 lacks that partition."""
    perm = np.random.default_rng(seed).permutation(table.num_rows)
    skipped = np.array(
        [
            t == "t" and p == 2
            for t, p in zip(
                table.column("topic").to_pylist(),
                table.column("partition").to_pylist(),
                strict=True,
            )
        ]
    )
    head = [int(i) for i in perm if not skipped[i]][:first_task]
    rest = [int(i) for i in perm if int(i) not in set(head)]
    return table.take(pa.array(head + rest))


@pytest.mark.parametrize("second_cuts", [[90, 300, 420, 600], [150]])
def test_direct_one_pass_publishes_the_counted_bytes_new_and_appended(tmp_path, second_cuts):
    first = _source_order(_rows(FIRST[0], seed=1), 100, seed=4)
    second = _source_order(_rows(SECOND[0], seed=2), second_cuts[0], seed=5)
    roots = {}
    for one_pass in (False, True):
        root = tmp_path / ("one-pass" if one_pass else "counted") / "logs"
        cuts = ([100, 330, 500], second_cuts) if one_pass else ([], [])  # the reference: one task
        staged = _ingest(root, _tasks(first, cuts[0]), "r1", one_pass=one_pass, direct=True)
        if one_pass:
            assert not any(m.partition == 2 and m.task_key == "task-0" for m in staged)
        staged = _ingest(root, _tasks(second, cuts[1]), "r2", one_pass=one_pass, direct=True)
        roots[one_pass] = root
        if one_pass:
            # task 0 in place (continuing the published segments), every later task's records
            assert all((m.records is not None) == (m.task_key != "task-0") for m in staged)
            assert any(m.replaces is not None for m in staged)
            assert not any(m.partition == 2 and m.task_key == "task-0" for m in staged)
    counted, one = _published(roots[False]), _published(roots[True])
    assert counted.keys() == one.keys()
    for name in counted:
        assert one[name] == counted[name], name
    assert sum(n.endswith(".log") for n in counted["t-0"]) >= 4


def test_place_ranges_refuses_an_in_place_range_out_of_task_order(tmp_path):
    table = _rows([("t", 0, 100)], seed=3)
    root = tmp_path / "logs"
    root.mkdir()
    settings = _settings(root, "r1")
    plan = OnePassPlan({})
    tasks = _tasks(table, [50])
    staged = [m for i, t in enumerate(tasks) for m in write_task(t, i, "0", plan, settings)]
    assert [m.records is not None for m in staged] == [False, True]
    placed = place_ranges(staged, {})
    assert [(m.first_offset, m.next_offset, m.range_index) for m in placed] == [
        (0, 50, 0),
        (50, 100, 1),
    ]
    from jobs.ingestion.run.meta import PlanError

    with pytest.raises(PlanError, match="task order"):
        place_ranges(staged[:1], {("t", 0): 7})
