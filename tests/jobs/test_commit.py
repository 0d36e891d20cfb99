"""Commit protocol: manifests, planning rules, publishing (fresh and incremental), cleanup."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from crc32c import crc32c

from jobs.ingestion.commit.plan import RunInfo, plan_publish
from jobs.ingestion.commit.publish import (
    cleanup_stale_staging,
    publish,
    recover_interrupted_publish,
)
from jobs.ingestion.commit.state import read_partition_state, scan_existing_state
from jobs.ingestion.run.history import IngestHistory
from jobs.ingestion.run.meta import ManifestError, PlanError, PublishError
from jobs.ingestion.staging.task_staging import (
    SEGMENT_FILE,
    TaskManifest,
    copy_segment_for_continuation,
    finalize_task_staging,
    read_manifest,
    segment_file_name,
    staging_root,
    task_staging_dir,
    verify_manifest,
    write_manifest,
)
from kafkalog_core.log.checkpoints import (
    LeaderEpochCheckpointFile,
    MetaProperties,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    topic_id_to_str,
)
from kafkalog_core.root.meta_area import meta_root, publish_journal_path
from tests.jobs.commit_helpers import fake_batch, stage_range, visible

TOPIC_ID = "AAECAwQFBgcICQoLDA0ODw"  # bytes 0..15 in base64url


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "logs"


def _plan(root, run_id, manifests, state=None, **kw):
    return plan_publish(
        manifests,
        scan_existing_state(root) if state is None else state,
        output_root=root,
        run_id=run_id,
        **kw,
    )


# --- layout and manifests ------------------------------------------------------------------------
def test_meta_area_is_a_hidden_sibling_outside_the_log_dir(root: Path) -> None:
    assert meta_root(root) == root.parent / ".logs.kafkalog"
    d = task_staging_dir(root, "run1", "orders-0-r0", 3)
    assert d.is_dir() and d == meta_root(root) / "staging" / "run1" / "orders-0-r0" / "attempt-3"
    assert staging_root(root, "run1") in d.parents
    assert not root.exists()  # nothing of ours inside the Kafka log dir
    with pytest.raises(Exception, match="not usable"):
        task_staging_dir(root, "../evil", "t", 0)


def test_task_staging_dir_is_unique_per_attempt_and_fresh(root: Path) -> None:
    a = task_staging_dir(root, "r", "task", 0)
    (a / "junk").write_bytes(b"x")
    b = task_staging_dir(root, "r", "task", 1)
    assert a != b
    assert not (task_staging_dir(root, "r", "task", 0) / "junk").exists()


def test_manifest_round_trips_through_json_and_file(root: Path) -> None:
    m = stage_range(root, "run1", "orders", 0, 0, 0, [4, 3])
    assert [f.name for f in m.files] == [
        segment_file_name(0, "index"),
        segment_file_name(0, "log"),
        segment_file_name(0, "timeindex"),
        segment_file_name(4, "index"),
        segment_file_name(4, "log"),
        segment_file_name(4, "timeindex"),
    ]
    assert m.segment_bases == [0, 4] and m.record_count == 7 and m.next_offset == 7
    assert TaskManifest.from_json(m.to_json()) == m
    json.loads(m.to_json())  # plain JSON for the Spark result
    path = write_manifest(m)
    assert read_manifest(path) == m
    verify_manifest(m)


def test_checksum_detects_a_modified_staged_file(root: Path) -> None:
    m = stage_range(root, "run1", "orders", 0, 0, 0, [4])
    log = Path(m.staging_dir) / segment_file_name(0, "log")
    data = bytearray(log.read_bytes())
    data[-1] ^= 1  # same size, different bytes
    log.write_bytes(bytes(data))
    verify_manifest(m, checksums=False)
    with pytest.raises(ManifestError, match="fails its CRC-32C"):
        verify_manifest(m)
    log.write_bytes(bytes(data[:-1]))
    with pytest.raises(ManifestError, match="has 72 bytes, manifest says 73"):
        verify_manifest(m, checksums=False)
    log.unlink()
    with pytest.raises(ManifestError, match="missing"):
        verify_manifest(m)


def test_manifest_checksums_are_crc32c_of_the_staged_bytes(root: Path) -> None:
    m = stage_range(root, "run1", "orders", 0, 0, 0, [4, 3])
    for entry in json.loads(m.to_json())["files"]:
        data = (Path(m.staging_dir) / entry["name"]).read_bytes()
        assert entry == {"name": entry["name"], "size": len(data), "crc32c": f"{crc32c(data):08x}"}
    bad = m.to_dict()
    bad["files"][0]["crc32c"] = "xyz"
    with pytest.raises(ManifestError, match="no valid CRC-32C"):
        TaskManifest.from_dict(bad)


def test_each_staged_file_is_fsynced_once_and_publish_checks_sizes(root: Path, monkeypatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    ms = [
        stage_range(root, "r1", "orders", 0, 0, 0, [3, 2]),
        stage_range(root, "r1", "x", 0, 0, 0, [1]),
    ]
    staged = [str(Path(m.staging_dir) / f.name) for m in ms for f in m.files]
    plan = _plan(root, "r1", ms)
    publish(plan)
    segment_syncs = [p for p in synced if SEGMENT_FILE.match(Path(p).name)]
    assert sorted(segment_syncs) == sorted(staged)  # once each, by the task, none by publish

    # publish re-checks sizes always, checksums only when asked.
    m = stage_range(root, "r2", "orders", 0, 0, 5, [2])
    plan = _plan(root, "r2", [m])
    log = Path(m.staging_dir) / segment_file_name(5, "log")
    data = bytearray(log.read_bytes())
    data[-1] ^= 1
    log.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="fails its CRC-32C"):
        publish(plan, verify_checksums=True)
    log.write_bytes(bytes(data[:-1]))
    with pytest.raises(ManifestError, match="manifest says"):
        publish(plan)
    assert not publish_journal_path(root).exists()


def test_malformed_manifests_are_refused(root: Path) -> None:
    m = stage_range(root, "run1", "orders", 0, 0, 0, [4])
    with pytest.raises(ManifestError, match="not JSON"):
        TaskManifest.from_json("{")
    bad = replace(m, next_offset=m.first_offset - 1).to_dict()
    with pytest.raises(ManifestError, match="next offset below first"):
        TaskManifest.from_dict(bad)
    bad = m.to_dict()
    bad["files"][0]["name"] = "../../etc/passwd"
    with pytest.raises(ManifestError, match="not a segment file name"):
        TaskManifest.from_dict(bad)


# --- planning ------------------------------------------------------------------------------------
def test_plan_rejects_gap_overlap_and_wrong_start_naming_the_partition(root: Path) -> None:
    a = stage_range(root, "r", "orders", 3, 0, 0, [5])
    gap = stage_range(root, "r", "orders", 3, 1, 6, [2])
    with pytest.raises(PlanError, match=r"orders-3: gap between offset 5 and .* \[6, 8\)"):
        _plan(root, "r", [a, gap])
    overlap = stage_range(root, "r", "orders", 3, 1, 4, [2])
    with pytest.raises(PlanError, match=r"orders-3: overlap between offset 5"):
        _plan(root, "r", [a, overlap])
    late = stage_range(root, "r", "clicks", 1, 0, 10, [2])
    with pytest.raises(
        PlanError, match="clicks-1: first range starts at 10, but the log end offset is 0"
    ):
        _plan(root, "r", [late])
    with pytest.raises(PlanError, match="manifest of run r, expected run other"):
        _plan(root, "other", [a])


def test_plan_start_must_be_the_existing_log_end_offset(root: Path) -> None:
    publish(_plan(root, "r1", [stage_range(root, "r1", "orders", 0, 0, 0, [5])]))
    state = scan_existing_state(root)
    assert state[("orders", 0)].log_end_offset == 5
    again = stage_range(root, "r2", "orders", 0, 0, 0, [5])
    with pytest.raises(
        PlanError, match="orders-0: first range starts at 0, but the log end offset is 5"
    ):
        _plan(root, "r2", [again])


def test_duplicate_attempts_resolve_deterministically(root: Path) -> None:
    attempts = [stage_range(root, "r", "orders", 0, 0, 0, [3], attempt=a) for a in (10, 2, 7)]
    for order in (attempts, attempts[::-1], attempts[1:] + attempts[:1]):
        plan = _plan(root, "r", order)
        assert plan.partitions[0].manifests[0].attempt_id == "2"
        assert sorted(m.attempt_id for m in plan.discarded) == ["10", "7"]
    # A winner whose staged files were damaged loses to the next attempt.
    (Path(attempts[1].staging_dir) / segment_file_name(0, "log")).write_bytes(b"torn")
    assert _plan(root, "r", attempts).partitions[0].manifests[0].attempt_id == "7"
    different = stage_range(root, "r", "orders", 0, 0, 0, [4], attempt=11)
    with pytest.raises(PlanError, match="attempts disagree"):
        _plan(root, "r", [*attempts, different])


def test_plan_rejects_continuing_a_segment_that_is_not_the_last(root: Path) -> None:
    publish(_plan(root, "r1", [stage_range(root, "r1", "orders", 0, 0, 0, [3, 2])]))
    m = stage_range(root, "r2", "orders", 0, 0, 5, [2], continue_segment=3)
    assert _plan(root, "r2", [m]).partitions[0].replaces == 3
    bad = replace(m, replaces=0, files=tuple(f for f in m.files))
    with pytest.raises(ManifestError):
        TaskManifest.from_dict(bad.to_dict())


# --- publishing ----------------------------------------------------------------------------------
def test_publish_into_empty_root(root: Path) -> None:
    ms = [
        stage_range(root, "r1", "orders", 0, 0, 0, [4, 3]),
        stage_range(root, "r1", "orders", 0, 1, 7, [2]),
        stage_range(root, "r1", "orders", 1, 0, 0, [5]),
        stage_range(root, "r1", "orders", 1, 0, 0, [5], attempt=1),  # speculative duplicate
    ]
    info = RunInfo(source="delta:/src", source_version="12", started_at_ms=1_700_000_000_000)
    plan = _plan(
        root,
        "r1",
        ms,
        run_info=info,
        topic_ids={"orders": TOPIC_ID},
        meta_properties={"version": "1", "cluster.id": "c1", "node.id": "1"},
    )
    result = publish(plan)
    assert not result.already_published and result.record_count == 14
    assert result.partitions == {"orders-0": [0, 9], "orders-1": [0, 5]}

    view = visible(root)
    assert sorted(view) == [".", "orders-0", "orders-1"]
    assert sorted(view["orders-0"]) == sorted(
        [segment_file_name(b, e) for b in (0, 4, 7) for e in ("log", "index", "timeindex")]
        + ["leader-epoch-checkpoint", "partition.metadata"]
    )
    assert view["orders-0"][segment_file_name(4, "log")] == fake_batch(4, 3)
    assert view["orders-1"][segment_file_name(0, "log")] == fake_batch(0, 5)
    assert view["orders-0"]["partition.metadata"] == f"version: 0\ntopic_id: {TOPIC_ID}".encode()
    assert LeaderEpochCheckpointFile(root / "orders-0" / "leader-epoch-checkpoint").read() == [
        (0, 0)
    ]
    expected = {("orders", 0): 9, ("orders", 1): 5}
    assert OffsetCheckpointFile(root / "recovery-point-offset-checkpoint").read() == expected
    assert OffsetCheckpointFile(root / "replication-offset-checkpoint").read() == expected
    assert MetaProperties.read(root / "meta.properties").cluster_id == "c1"

    # Staging and journal are gone; the history has the run.
    assert not staging_root(root, "r1").exists() and not publish_journal_path(root).exists()
    record = IngestHistory(root).find_run("r1")
    assert record["rows"] == 14 and record["source_version"] == "12"
    assert record["partitions"] == {"orders-0": [0, 9], "orders-1": [0, 5]}

    assert read_partition_state(root / "orders-0").log_end_offset == 9
    # Publishing the same plan again is a no-op.
    before = visible(root)
    assert publish(plan).already_published
    assert visible(root) == before


def test_incremental_publish_continues_last_segment_and_preserves_other_entries(root: Path) -> None:
    publish(
        _plan(
            root,
            "r1",
            [
                stage_range(root, "r1", "orders", 0, 0, 0, [4, 3]),
                stage_range(root, "r1", "orders", 1, 0, 0, [2]),
            ],
            topic_ids={"orders": TOPIC_ID},
        )
    )
    # A partition another tool owns, already in the root checkpoints.
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        cp = OffsetCheckpointFile(root / name)
        cp.write({**cp.read(), ("other", 0): 42})
    old_seg0 = (root / "orders-0" / segment_file_name(0, "log")).read_bytes()

    state = scan_existing_state(root)
    assert state[("orders", 0)].segment_bases == (0, 4)
    assert state[("orders", 0)].segment_to_continue(segment_bytes=1 << 20) == 4
    assert state[("orders", 0)].segment_to_continue(segment_bytes=70) is None
    assert state[("orders", 0)].topic_id == TOPIC_ID
    ms = [
        stage_range(root, "r2", "orders", 0, 0, 7, [2, 5], continue_segment=4, leader_epoch=3),
        stage_range(root, "r2", "orders", 1, 0, 2, [3]),  # rolls a new segment
        stage_range(root, "r2", "clicks", 0, 0, 0, [1]),  # a brand-new partition
    ]
    plan = _plan(root, "r2", ms, state=state, topic_ids={"clicks": "AQEBAQEBAQEBAQEBAQEBAQ"})
    assert [(p.dir_name, p.is_new, p.replaces) for p in plan.partitions] == [
        ("clicks-0", True, None),
        ("orders-0", False, 4),
        ("orders-1", False, None),
    ]
    publish(plan)

    d = root / "orders-0"
    assert (d / segment_file_name(0, "log")).read_bytes() == old_seg0  # untouched
    assert (d / segment_file_name(4, "log")).read_bytes() == fake_batch(4, 3) + fake_batch(7, 2)
    assert (d / segment_file_name(9, "log")).read_bytes() == fake_batch(9, 5)
    assert not [p.name for p in d.iterdir() if p.suffix in (".swap", ".cleaned", ".deleted")]
    assert LeaderEpochCheckpointFile(d / "leader-epoch-checkpoint").read() == [(0, 0), (3, 7)]
    assert topic_id_to_str(PartitionMetadataFile(d / "partition.metadata").read()) == TOPIC_ID
    assert sorted(p.name for p in (root / "orders-1").iterdir() if p.suffix == ".log") == [
        segment_file_name(0, "log"),
        segment_file_name(2, "log"),
    ]
    expected = {("orders", 0): 14, ("orders", 1): 5, ("clicks", 0): 1, ("other", 0): 42}
    assert OffsetCheckpointFile(root / "recovery-point-offset-checkpoint").read() == expected
    assert OffsetCheckpointFile(root / "replication-offset-checkpoint").read() == expected
    assert read_partition_state(d).log_end_offset == 14
    runs = IngestHistory(root).last_runs(5)
    assert [r["run_id"] for r in runs] == ["r2", "r1"]
    assert runs[0]["partitions"] == {"clicks-0": [0, 1], "orders-0": [7, 14], "orders-1": [2, 5]}


def test_history_record_is_written_last(root: Path, monkeypatch) -> None:
    ms = [stage_range(root, "r1", "orders", 0, 0, 0, [2])]
    plan = _plan(root, "r1", ms)
    seen = {}

    def spy(self, plan, **kw):
        seen["checkpoint"] = OffsetCheckpointFile(root / "recovery-point-offset-checkpoint").read()
        seen["segment"] = (root / "orders-0" / segment_file_name(0, "log")).exists()
        seen["journal"] = publish_journal_path(root).exists()
        return original(self, plan, **kw)

    original = IngestHistory.append_run
    monkeypatch.setattr(IngestHistory, "append_run", spy)
    steps: list[str] = []
    publish(plan, hook=steps.append)
    assert seen == {"checkpoint": {("orders", 0): 2}, "segment": True, "journal": True}
    assert steps[0] == "journal" and steps[-2:] == ["history", "cleanup"]


def test_publish_refuses_when_another_runs_journal_is_pending(root: Path) -> None:
    plan1 = _plan(root, "r1", [stage_range(root, "r1", "orders", 0, 0, 0, [2])])

    class Boom(Exception):
        pass

    def crash(step: str) -> None:
        if step.startswith("rename-dir:"):
            raise Boom

    with pytest.raises(Boom):
        publish(plan1, hook=crash)
    plan2 = _plan(root, "r2", [stage_range(root, "r2", "orders", 0, 0, 0, [2])], state={})
    with pytest.raises(PublishError, match="interrupted publish of run r1 must be recovered"):
        publish(plan2)


def test_cleanup_removes_stale_staging_but_keeps_current_and_pending(root: Path) -> None:
    for run in ("old1", "old2", "current"):
        stage_range(root, run, "orders", 0, 0, 0, [1])
    assert cleanup_stale_staging(root, "current") == ["old1", "old2"]
    assert staging_root(root, "current").exists()
    assert not staging_root(root, "old1").exists()
    assert cleanup_stale_staging(root / "nothing-here") == []


def test_scan_skips_non_partition_dirs_and_refuses_leftover_swaps(root: Path) -> None:
    publish(_plan(root, "r1", [stage_range(root, "r1", "orders", 0, 0, 0, [2])]))
    (root / "remote-log-index-cache").mkdir()
    assert list(scan_existing_state(root)) == [("orders", 0)]
    (root / "orders-0" / (segment_file_name(2, "log") + ".swap")).write_bytes(b"")
    with pytest.raises(Exception, match="unfinished swap files"):
        scan_existing_state(root)


# --- real segments written by the core's PartitionLog -------------------------------------------
def _records(start: int, n: int):
    import pyarrow as pa

    return pa.table(
        {
            "key": [f"k{i}".encode() for i in range(start, start + n)],
            "value": [f"value-{i}".encode() * 3 for i in range(start, start + n)],
            "timestamp": list(range(1_000 + start, 1_000 + start + n)),
        }
    )


def _stage_with_partition_log(root: Path, run_id: str, config, first: int, n: int, state=None):
    from kafkalog_core.log.partition.partition_log import PartitionLog

    task = task_staging_dir(root, run_id, "orders-0-r0", 0)
    directory = task / "orders-0"
    cont = state.segment_to_continue(config.segment_bytes) if state else None
    if cont is not None:
        directory.mkdir()
        copy_segment_for_continuation(root, "orders", 0, cont, directory)
        log = PartitionLog.open(directory, config, had_clean_shutdown=True, leader_epoch=0)
    else:
        log = PartitionLog.create(directory, config, base_offset=first, leader_epoch=0)
    assert log.log_end_offset == first
    for i in range(first, first + n, 7):  # several appends, so the log rolls by segment.bytes
        log.append_records(_records(i, min(7, first + n - i)), max_batch_bytes=200)
    log.close()
    return finalize_task_staging(
        directory,
        run_id=run_id,
        task_key="orders-0-r0",
        attempt_id=0,
        topic="orders",
        partition=0,
        range_index=0,
        first_offset=first,
        next_offset=first + n,
        record_count=n,
        replaces=cont,
        leader_epoch=0,
    )


def test_real_partition_log_segments_published_and_continued(tmp_path: Path) -> None:
    from kafkalog_core.config import LogConfig
    from kafkalog_core.log.partition.partition_log import PartitionLog
    from tests.jobs.commit_helpers import copy_tree

    config = LogConfig.from_dict({"segment.bytes": "1500"})
    work = tmp_path / "work"
    root = work / "logs"
    publish(_plan(root, "r1", [_stage_with_partition_log(root, "r1", config, 0, 40)], state={}))
    state = scan_existing_state(root)
    assert state[("orders", 0)].log_end_offset == 40
    assert len(state[("orders", 0)].segment_bases) > 1  # rolled
    m = _stage_with_partition_log(root, "r2", config, 40, 30, state=state[("orders", 0)])
    assert m.replaces == state[("orders", 0)].last_segment_base
    plan = _plan(root, "r2", [m], state=state)
    template = tmp_path / "template"
    copy_tree(work, template)
    steps: list[str] = []
    publish(plan, hook=steps.append)

    def values(directory: Path) -> list[bytes]:
        with PartitionLog.open(directory, config) as log:
            return log.read_records().column("value").to_pylist()

    new_bytes = visible(root)  # before any reader opens (and so touches) the dir
    assert read_partition_state(root / "orders-0").log_end_offset == 70
    expected = [f"value-{i}".encode() * 3 for i in range(70)]
    copy_tree(root / "orders-0", tmp_path / "reader" / "orders-0")
    assert values(tmp_path / "reader" / "orders-0") == expected

    # Our own loader, after a crash before any step: the old or the new log, never a mix.
    for step in steps:
        copy_tree(template, work)

        def crash(current: str, step=step) -> None:
            if current == step:
                raise RuntimeError(step)

        with pytest.raises(RuntimeError):
            publish(plan, hook=crash)
        probe = tmp_path / "probe" / "orders-0"
        copy_tree(root / "orders-0", probe)
        assert values(probe) in (expected[:40], expected), step
        recover_interrupted_publish(root) or publish(plan)
        now = visible(root)
        diff = [(d, n) for d in now for n in now[d] if now[d].get(n) != new_bytes.get(d, {}).get(n)]
        assert now == new_bytes, (step, diff, set(new_bytes["orders-0"]) - set(now["orders-0"]))
