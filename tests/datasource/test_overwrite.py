"""mode("overwrite") replaces the written topics inside one journaled publish: a crash at any
step leaves old or new partition dirs (never a mix, never a partial dir), recovery converges
to the uninterrupted result, and a lost staging rolls the old dirs back.

The tasks' side runs in this process (`KafkaLogWriter.write` outside Spark is task 0), so the
driver's commit can be crashed at every file-system step through the publish hook.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.datasource.writer import KafkaLogWriter, commit_write, parse_write_options
from jobs.ingestion.commit.publish import recover_interrupted_publish
from jobs.ingestion.run.history import IngestHistory
from jobs.ingestion.staging.task_staging import TaskManifest
from kafkalog_core.log.checkpoints import OffsetCheckpointFile
from kafkalog_core.root.meta_area import meta_root, publish_journal_path
from tests.datasource.helpers import oracle
from tests.jobs.commit_helpers import copy_tree, segments_only, visible

publish_module = importlib.import_module("jobs.ingestion.commit.publish")


class Crash(Exception):
    pass


def _rows(prefix: str, n: int) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "key": pa.array([b"k%d" % (i % 13) for i in range(n)]),
            "value": pa.array([f"{prefix}-{i}".encode() for i in range(n)]),
        }
    )


def _stage(root: Path, run_id: str, topic: str, partitions: int, rows: pa.RecordBatch, **kw):
    options = parse_write_options(
        {
            "path": str(root),
            "topic": topic,
            f"topics.{topic}.partitions": str(partitions),
            "runId": run_id,
            "topic_defaults.config.segment.bytes": "1500",
        }  # fmt: skip
    )
    message = KafkaLogWriter(options, False, **kw).write(iter([rows]))
    return options, [TaskManifest.from_json(m) for m in message.manifests]


def _write(root: Path, run_id: str, topic: str, partitions: int, rows, overwrite=False) -> None:
    options, manifests = _stage(root, run_id, topic, partitions, rows)
    commit_write(options, manifests, overwrite=overwrite)


def _topic_dirs(root: Path, topic: str) -> dict[str, dict[str, bytes]]:
    return {
        d: segments_only(files)
        for d, files in visible(root).items()
        if d.rsplit("-", 1)[0] == topic
    }


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch):
    """old: orders (3 partitions, 3 segments or more each) and clicks; a staged overwrite of
    orders with 2 partitions; the template to restore, the steps and the uninterrupted end."""
    return _scenario(tmp_path, monkeypatch, 2, _rows("new", 50))


def _scenario(tmp_path: Path, monkeypatch, partitions: int, rows: pa.RecordBatch):
    work = tmp_path / "work"
    root = work / "logs"
    _write(root, "a", "orders", 3, _rows("old", 120))
    _write(root, "c", "clicks", 1, _rows("click", 10))
    log_start = OffsetCheckpointFile(root / "log-start-offset-checkpoint")
    log_start.write({("orders", 0): 5, ("orders", 2): 3, ("clicks", 0): 1})  # retention ran
    old = _topic_dirs(root, "orders")
    clicks = visible(root)["clicks-0"]
    options, manifests = _stage(root, "b", "orders", partitions, rows)
    template = tmp_path / "template"
    copy_tree(work, template)

    steps: list[str] = []
    monkeypatch.setattr(publish_module, "_noop", steps.append)
    commit_write(options, manifests, overwrite=True)
    monkeypatch.setattr(publish_module, "_noop", lambda step: None)
    new = _topic_dirs(root, "orders")
    end = visible(root)
    copy_tree(template, work)
    return root, work, template, options, manifests, steps, old, new, clicks, end


def test_overwrite_replaces_the_topic_and_keeps_the_others(scenario) -> None:
    root, _, _, options, manifests, steps, old, new, clicks, end = scenario
    assert sorted(old) == ["orders-0", "orders-1", "orders-2"]
    assert sorted(new) == ["orders-0", "orders-1"]  # orders-2 retired, not rewritten
    assert [s for s in steps if s.startswith("retire:")] == [f"retire:orders-{p}" for p in range(3)]
    values = sorted(v for p in range(2) for _, _, _, v in oracle_from(end, f"orders-{p}", root))
    assert values == sorted(f"new-{i}".encode() for i in range(50))
    assert end["clicks-0"] == clicks
    # checkpoints: orders-2 gone everywhere, orders-0's log start offset reset, clicks kept
    log_start = _checkpoint(end, "log-start-offset-checkpoint", root)
    assert log_start == {("clicks", 0): 1}
    recovery = _checkpoint(end, "recovery-point-offset-checkpoint", root)
    assert ("orders", 2) not in recovery and recovery[("clicks", 0)] == 10
    assert recovery[("orders", 0)] + recovery[("orders", 1)] == 50


def _checkpoint(end: dict[str, dict[str, bytes]], name: str, root: Path) -> dict:
    path = root.parent.parent / "end" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(end["."][name])
    return OffsetCheckpointFile(path).read()


def oracle_from(end: dict[str, dict[str, bytes]], dir_name: str, root: Path):
    """kafka-python's reading of a partition dir held as {file: bytes}."""
    out = root.parent.parent / "oracle" / dir_name
    out.mkdir(parents=True, exist_ok=True)
    for name, data in end[dir_name].items():
        (out / name).write_bytes(data)
    return oracle(out)


def _crash_at(step: str, options, manifests, monkeypatch) -> None:
    """The overwrite's commit, crashed right before `step`."""

    def crash(s: str) -> None:
        if s == step:
            raise Crash(step)

    monkeypatch.setattr(publish_module, "_noop", crash)
    with pytest.raises(Crash):
        commit_write(options, manifests, overwrite=True)
    monkeypatch.setattr(publish_module, "_noop", lambda s: None)


def test_crash_at_every_step_leaves_old_or_new_and_recovery_finishes(scenario, monkeypatch):
    _crash_at_every_step(scenario, monkeypatch)


def test_an_overwrite_leaves_every_partition_of_the_count(tmp_path: Path, monkeypatch) -> None:
    """Rows for one of 5 partitions: the other 4 are published as empty partition dirs in the
    same journaled publish (a kill leaves the old topic or the new one, whole)."""
    one_key = pa.record_batch({"key": pa.array([b"k"] * 7), "value": pa.array([b"v"] * 7)})
    scenario = _scenario(tmp_path, monkeypatch, 5, one_key)
    new, steps = scenario[7], scenario[5]
    assert sorted(new) == [f"orders-{p}" for p in range(5)]
    empty = sorted(d for d, files in new.items() if not any(files.values()))
    assert len(empty) == 4
    assert all(new[d]["00000000000000000000.log"] == b"" for d in empty)
    assert [s for s in steps if s.startswith("empty:")] == [f"empty:{d}" for d in empty]
    _crash_at_every_step(scenario, monkeypatch)


def _crash_at_every_step(scenario, monkeypatch) -> None:
    root, work, template, options, manifests, steps, old, new, clicks, end = scenario
    assert len(steps) > 10
    for i, step in enumerate(steps):
        copy_tree(template, work)
        _crash_at(step, options, manifests, monkeypatch)
        seen = _topic_dirs(root, "orders")
        # every visible partition dir is complete, and old and new never mix
        assert all(seen[d] == old[d] for d in seen) or all(seen[d] == new.get(d) for d in seen), (
            f"step {i} {step}: {sorted(seen)}"
        )
        assert visible(root)["clicks-0"] == clicks
        # the retry of the same run (Spark's job retry, or the next write) finishes the publish
        commit_write(options, manifests, overwrite=True)
        assert _topic_dirs(root, "orders") == new, f"step {i} {step}"
        assert not publish_journal_path(root).exists()
        assert IngestHistory(root).read().column("run_id").to_pylist().count("b") == 1


def test_lost_staging_rolls_the_old_dirs_back(scenario, monkeypatch) -> None:
    root, work, template, options, manifests, steps, old, new, clicks, end = scenario
    _crash_at(next(s for s in steps if s.startswith("swap:")), options, manifests, monkeypatch)
    assert _topic_dirs(root, "orders") == {}  # retired, the new ones not yet in
    for m in manifests:  # the tasks' staging is lost (a disk cleaned up, say)
        for f in Path(m.staging_dir).iterdir():
            f.unlink()
    assert recover_interrupted_publish(root) == "rolled back"
    assert _topic_dirs(root, "orders") == old
    assert not any((meta_root(root) / "staging" / "b").rglob("*.log"))
