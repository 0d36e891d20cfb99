"""The compact job on a log dir: dry run, --apply, what readers and the audit see afterwards,
a second run, bad input, and kill -9 at seeded steps of a real process."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

import jobs.compact as compact_job
from jobs.maintenance.common import MaintenanceError
from jobs.maintenance.report import read_report
from kafkalog_core.log.checkpoints import read_cleaner_checkpoint
from kafkalog_core.log.names import CLEAN_SHUTDOWN_FILE, log_file_name, segment_log_files
from kafkalog_core.maintenance.cleaner import CleanerSettings
from kafkalog_core.record.decoder import decode_records
from kafkalog_core.root.meta_area import compact_journal_path
from kafkalog_core.root.run_lock import RunLock, RunLockedError
from tests.jobs.maintenance import kill_cases
from tests.log.cleaner_logs import NOW

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture()
def log_dir(tmp_path: Path) -> Path:
    return kill_cases.changelog(tmp_path) / "logs"


def _run(spark, root: Path, **kw):
    kw.setdefault("topic_config", str(root.parent / "topics.yaml"))
    kw.setdefault("now", NOW)
    return compact_job.run(spark, str(root), out=lambda _line: None, **kw)


def _files(root: Path) -> dict[str, tuple[str, int | None]]:
    """Every file under the root: its SHA-256, and the mtime of the segment files whose mtime
    the cleaner sets (the last source segment's)."""
    return {
        str(p.relative_to(root)): (
            hashlib.sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mtime_ns if p.suffix in (".log", ".index", ".timeindex") else None,
        )
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _latest_records(pdir: Path, end: int) -> set[tuple[int, bytes, bytes | None]]:
    """Per key, its latest data record below `end` (aborted transactions left out), as
    (offset, key, value): what one cleaning round keeps of the range."""
    latest: dict[bytes, tuple[int, bytes, bytes | None]] = {}
    for p in segment_log_files(pdir):
        t = decode_records(p.read_bytes())
        columns = (t.column(c).to_pylist() for c in ("offset", "key", "value"))
        for o, k, v in zip(*columns, strict=True):
            if k is not None and o < end and o not in (14, 15):  # 14-15: the aborted txn
                latest[k] = (o, k, v)
    return set(latest.values())


def test_dry_run_reports_each_round_and_changes_nothing(spark, log_dir: Path) -> None:
    before = _files(log_dir)
    result = _run(spark, log_dir, report=str(log_dir.parent / "report"))
    assert _files(log_dir) == before
    rows = {(r["topic"], r["partition"]): r for r in result.rows.to_pylist()}
    assert sorted(rows) == [("changelog", 0), ("changelog", 1)]  # events is not compacted
    r = rows[("changelog", 1)]
    assert r["status"] == "would clean" and not r["applied"]
    assert (r["first_dirty_offset"], r["round_end_offset"]) == (0, 75)
    assert r["segments_before"] == 4 and r["segments_after"] == 3
    assert r["bytes_after"] < r["bytes_before"]
    assert r["null_key_removed"] == 1 and r["aborted_removed"] == 2
    assert "would clean 2 partitions" in result.summary
    assert "not compacted, left alone: events" in result.summary
    assert any("records without a key would be dropped" in w for w in result.warnings)
    assert read_report(log_dir.parent / "report").num_rows == 2


def test_apply_keeps_the_latest_record_per_key_for_every_reader(
    spark, log_dir: Path, kafka_client
) -> None:
    want = _latest_records(log_dir / "changelog-0", 75)
    result = _run(spark, log_dir, apply=True)
    assert {r["status"] for r in result.rows.to_pylist()} == {"cleaned"}
    assert read_cleaner_checkpoint(log_dir) == {("changelog", 0): 75, ("changelog", 1): 75}
    assert not list(compact_journal_path(log_dir, "x").parent.glob("*"))
    # Spark's reader: one record per live key, the latest (k4's tombstone passed its horizon)
    rows = (
        spark.read.format("kafkalog")
        .option("subscribe", "changelog")
        .load(str(log_dir))
        .where("partition = 0")
        .select("offset", "key", "value")
        .collect()
    )
    got = {(r.offset, bytes(r.key), None if r.value is None else bytes(r.value)) for r in rows}
    assert got == {r for r in want if r[1] != b"k4"} | {
        (75, b"fresh-a", b"a"),
        (76, b"fresh-b", b"b"),
    }
    keys = [k for _, k, _ in got]
    assert len(keys) == len(set(keys))
    # the audit finds nothing superseded and nothing a round would remove now
    from jobs.compaction_audit import run as audit

    report = audit(
        spark,
        str(log_dir),
        topic_config=str(log_dir.parent / "topics.yaml"),
        now=NOW,
        out=lambda _: None,
    )
    p0 = [r for r in report.rows.to_pylist() if r["partition"] == 0][0]
    assert (p0["superseded_records"], p0["removable_records_now"]) == (0, 0)
    assert p0["first_dirty_offset"] == 75
    # Kafka's client reads every batch and record (ensureValid) of the cleaned log dir
    read = kafka_client.kafka_client_read(log_dir)
    assert {
        (r.offset, r.key, r.value) for r in read.records if r.dir == "changelog-0" and not r.control
    } == got


def test_a_second_run_right_after_changes_no_byte(spark, log_dir: Path) -> None:
    _run(spark, log_dir, apply=True)
    before = _files(log_dir)
    again = _run(spark, log_dir, apply=True)
    assert _files(log_dir) == before
    assert {r["status"] for r in again.rows.to_pylist()} == {"not cleaned"}
    assert "2 partitions: nothing to clean" in again.summary


def test_bad_input_is_one_line_and_changes_nothing(spark, log_dir: Path, capsys) -> None:
    before = _files(log_dir)
    with pytest.raises(MaintenanceError, match="events is not compacted.*--topics"):
        _run(spark, log_dir, topics=["changelog", "events"], apply=True)
    with RunLock(log_dir, "ingest-7"), pytest.raises(RunLockedError, match="ingest-7"):
        _run(spark, log_dir, apply=True)
    assert _files(log_dir) == before
    code = compact_job.main(["--log-dir", str(log_dir), "--topics", "events"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and err[0].startswith("kafkalog: error: topic events")
    code = compact_job.main(["--log-dir", str(log_dir), "--dedupe-buffer-size", "40"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "too small for the offset map" in err[0]
    assert _files(log_dir) == before


def test_a_corrupt_partition_is_skipped_and_said_so(spark, log_dir: Path) -> None:
    path = log_dir / "changelog-1" / log_file_name(10)
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF  # the second batch's length: a broker's cleaner fails on it too
    path.write_bytes(bytes(data))
    (log_dir / CLEAN_SHUTDOWN_FILE).write_text("")  # else a broker's load would cut it first
    before = _files(log_dir / "changelog-1")
    result = _run(spark, log_dir, apply=True)
    rows = {r["partition"]: r for r in result.rows.to_pylist()}
    assert rows[0]["status"] == "cleaned"
    assert rows[1]["status"] == "uncleanable"
    assert "bytes after the last whole batch" in rows[1]["reason"]
    assert _files(log_dir / "changelog-1") == before
    assert read_cleaner_checkpoint(log_dir) == {("changelog", 0): 75}
    assert result.problems == 1 and "changelog-1: uncleanable" in result.summary


# ---------------------------------------------------------------------------------------------
# kill -9
# ---------------------------------------------------------------------------------------------

# A process running the apply's work (the task of each partition, then the driver's
# checkpoint) that SIGKILLs itself before its Nth file system change; N = -1 counts them.
KILLER = r"""
import json, os, signal, sys
from pathlib import Path
import pyarrow as pa
import jobs.compact as c

root, kill_at, units = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
options = c.CompactOptions(str(root), int(sys.argv[4]), True, json.loads(sys.argv[5]))
steps = 0

def hook(step, path):
    global steps
    if steps == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    steps += 1

task = c.compact_task(options, hook)
rows = [row for unit in units for row in task(unit)]
c.commit_checkpoints(root, pa.Table.from_pylist(rows, schema=c.REPORT_SCHEMA), hook)
print(steps)
"""


def _killer(root: Path, kill_at: int, units, settings) -> subprocess.CompletedProcess:
    import json

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [str(root), str(kill_at), json.dumps(units), str(NOW), json.dumps(asdict(settings))]
    return subprocess.run(
        [sys.executable, "-c", KILLER, *args], env=env, capture_output=True, text=True
    )


def test_kill_9_at_seeded_steps_then_a_rerun_leaves_an_uninterrupted_runs_files(
    spark, tmp_path: Path, log_dir: Path
) -> None:
    from jobs.maintenance.common import prepare_run

    settings = CleanerSettings(io_buffer_size=1200)
    setup = prepare_run(
        "compact", log_dir, run_id="r", now=NOW, topics=["changelog"],
        topic_config=str(log_dir.parent / "topics.yaml"),
    )  # fmt: skip
    units = compact_job._units(setup.root, setup.refs, setup.configs)
    whole = tmp_path / "whole" / "logs"
    shutil.copytree(log_dir, whole)
    done = _killer(whole, -1, units, settings)
    assert done.returncode == 0, done.stderr
    total = int(done.stdout)
    want = _files(whole)
    assert total > 40
    for k in sorted(random.Random(9).sample(range(total), 4)):
        root = tmp_path / f"kill-{k}" / "logs"
        shutil.copytree(log_dir, root)
        killed = _killer(root, k, units, settings)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        # the rerun: the job itself, with Spark
        topics = str(log_dir.parent / "topics.yaml")
        _run(spark, root, apply=True, topics=["changelog"], settings=settings, topic_config=topics)
        assert _files(root) == want, k
        assert not list(compact_journal_path(root, "x").parent.glob("*.json"))
