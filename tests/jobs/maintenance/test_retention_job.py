"""The retention job on generated log dirs: dry run, --apply, idempotence, kills, the CLI."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest

import jobs.retention as retention_job
from jobs.maintenance.report import read_report
from kafkalog_core.config import LogConfig
from kafkalog_core.log.checkpoints import OffsetCheckpointFile
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.maintenance.retention import (
    mark_segments_deleted,
    purge_deleted_files,
    roll_empty_segment,
)
from kafkalog_core.maintenance.verify import verify_partition
from tests.log.test_partition_log import batch_size, singles

DAY = 86_400_000
NOW = int(time.time() * 1000)
SEGMENT_BYTES = 5 * batch_size()  # five single-record batches per segment


def _partition(root: Path, name: str, start_ts: int, segments: int = 4) -> None:
    log = PartitionLog.create(root / name, LogConfig.from_dict({"segment.bytes": SEGMENT_BYTES}))
    for k in range(segments):
        log.append_batches(singles(log, 5, start_ts=start_ts + k * DAY))
    log.close()


@pytest.fixture()
def log_dir(tmp_path: Path) -> Path:
    root = tmp_path / "src" / "logs"
    _partition(root, "events-0", NOW - 40 * DAY)  # segments of 40, 39, 38, 37 days ago
    _partition(root, "events-1", NOW - 2 * DAY)  # all young
    _partition(root, "changelog-0", NOW - 40 * DAY)  # compacted: time retention never applies
    (root.parent / "topics.yaml").write_text(
        "defaults: {retention.ms: 864000000}\n"  # 10 days
        "topics:\n  changelog: {cleanup.policy: compact}\n"
    )
    return root


def _checksums(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _run(spark, root: Path, **kw):
    kw.setdefault("topic_config", str(root.parent / "topics.yaml"))
    kw.setdefault("now", NOW)
    return retention_job.run(spark, str(root), out=lambda _line: None, **kw)


def test_dry_run_reports_every_segment_and_changes_nothing(spark, log_dir: Path) -> None:
    before = _checksums(log_dir)
    result = _run(spark, log_dir, report=str(log_dir.parent / "report"))
    assert _checksums(log_dir) == before
    rows = result.rows.to_pylist()
    assert len(rows) == 12
    events0 = [r for r in rows if (r["topic"], r["partition"]) == ("events", 0)]
    # issue 37 item 2: the breached active segment goes too, a broker rolls a new one first
    assert [r["action"] for r in events0] == ["delete"] * 4
    assert {r["rule"] for r in events0} == {"retention.ms"}
    assert "a broker rolls a new empty one at 20 first" in events0[3]["reason"]
    assert {r["action"] for r in rows if r["topic"] != "events" or r["partition"] != 0} == {"keep"}
    assert "retention.ms=864000000 (file" in events0[0]["settings"]
    assert "dry run" in result.summary and "delete 4 segments" in result.summary
    assert "1 partitions lose every segment" in result.summary and "events-0" in result.summary
    # written just now with 40-day-old CreateTimes: the backfill trap
    assert len(result.warnings) == 1 and "events" in result.warnings[0]
    assert "changelog" not in result.warnings[0]
    assert read_report(log_dir.parent / "report").num_rows == 12
    assert result.report is not None and result.report.count() == 12


def test_apply_deletes_advances_the_log_start_offset_and_is_idempotent(
    spark, log_dir: Path
) -> None:
    recovery = OffsetCheckpointFile(log_dir / "recovery-point-offset-checkpoint")
    recovery.write({("events", 0): 5, ("events", 1): 20, ("gone", 0): 7})
    result = _run(spark, log_dir, apply=True)
    pdir = log_dir / "events-0"
    # every segment breached retention: a new empty active segment at the LEO, as a broker rolls
    assert sorted(p.name for p in pdir.glob("*.log")) == ["00000000000000000020.log"]
    assert (pdir / "00000000000000000020.log").stat().st_size == 0
    assert not list(log_dir.rglob("*.deleted"))
    starts = OffsetCheckpointFile(log_dir / "log-start-offset-checkpoint").read()
    assert starts[("events", 0)] == 20
    # the recovery point below the new log start moves up to it; the others stay as they were
    assert recovery.read() == {("events", 0): 20, ("events", 1): 20, ("gone", 0): 7}
    reopened = PartitionLog.open(pdir, LogConfig())
    assert reopened.log_start_offset == 20 and reopened.log_end_offset == 20
    assert not reopened.load_report.changed_anything
    reopened.close()
    assert verify_partition(pdir, 4096).is_ok  # rebuild-index's verify finds nothing to fix
    assert "applied" in result.summary
    after = _checksums(log_dir)
    again = _run(spark, log_dir, apply=True)
    assert {r["action"] for r in again.rows.to_pylist()} == {"keep"}
    assert _checksums(log_dir) == after


def _crash_after(k: int):
    calls = {"n": 0}

    def hook(step: str, path: Path) -> None:
        calls["n"] += 1
        if calls["n"] > k:
            raise KeyboardInterrupt(f"killed before {step} {path.name}")

    return hook


def _visible_segments(pdir: Path) -> list[str]:
    return sorted(p.name for p in pdir.glob("*.log"))


@pytest.mark.parametrize("phase", ["roll", "rename", "checkpoint", "purge"])
def test_a_kill_at_any_step_converges(
    spark, log_dir: Path, tmp_path: Path, monkeypatch, phase: str
) -> None:
    clean = tmp_path / "clean" / "logs"
    shutil.copytree(log_dir.parent, clean.parent)
    _run(spark, clean, apply=True)
    want = _checksums(clean)
    original = _visible_segments(log_dir / "events-0")
    # a roll creates 3 files; 4 segments of 3 files each (.log .index .timeindex) are renamed,
    # then unlinked
    steps = {
        "roll": range(3),
        "rename": range(0, 12, 2),
        "checkpoint": [None],
        "purge": range(0, 12, 3),
    }[phase]
    for k in steps:
        work = tmp_path / f"kill-{phase}-{k}"
        shutil.copytree(log_dir.parent, work)
        root = work / "logs"
        options = retention_job.RetentionOptions(str(root), NOW, apply=True)
        unit = {
            "topic": "events",
            "partition": 0,
            "dir": "events-0",
            "config": {"retention.ms": 864000000},
            "settings": "",
            "log_start_offset": 0,
            "high_watermark": None,
            "recovery_from": None,
            "uploaded_offset": None,
        }
        if phase == "roll":
            patched = functools.partial(roll_empty_segment, hook=_crash_after(k))
            monkeypatch.setattr(retention_job, "roll_empty_segment", patched)
            with pytest.raises(KeyboardInterrupt):
                retention_job.retention_task(options)(unit)
            monkeypatch.undo()
        elif phase == "rename":
            patched = functools.partial(mark_segments_deleted, hook=_crash_after(k))
            monkeypatch.setattr(retention_job, "mark_segments_deleted", patched)
            with pytest.raises(KeyboardInterrupt):
                retention_job.retention_task(options)(unit)
            monkeypatch.undo()
        else:
            retention_job.retention_task(options)(unit)  # phase one done, then killed
            if phase == "purge":
                with pytest.raises(KeyboardInterrupt):
                    purge_deleted_files(root / "events-0", hook=_crash_after(k))
        # what a broker would load now: a suffix of the original segments, whole, and perhaps
        # the new empty one after them
        seen = [n for n in _visible_segments(root / "events-0") if n not in original]
        assert seen in ([], ["00000000000000000020.log"])
        old = [n for n in _visible_segments(root / "events-0") if n in original]
        assert old == original[len(original) - len(old) :]
        log = PartitionLog.open(root / "events-0", LogConfig())
        assert log.log_end_offset == 20
        log.close()
        _run(spark, root, apply=True)
        assert _checksums(root) == want, (phase, k)


def test_cli_dry_run_and_bad_input(log_dir: Path, capsys) -> None:
    code = retention_job.main(["--log-dir", str(log_dir / "missing")])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kafkalog: error:") and "missing" in err[0]
    bad = log_dir.parent / "bad.yaml"
    bad.write_text("topics:\n  events: {retention.ms: soon}\n")
    assert retention_job.main(["--log-dir", str(log_dir), "--topic-config", str(bad)]) == 1
    assert "retention.ms" in capsys.readouterr().err


def test_apply_refuses_topics_whose_deletion_settings_are_assumed(
    spark, log_dir: Path, capsys
) -> None:
    """Nothing names `events`' settings (the file speaks for `changelog` only, no history, no
    broker metadata): --apply refuses before any change; the dry run says why."""
    partial = log_dir.parent / "partial.yaml"
    partial.write_text("topics:\n  changelog: {cleanup.policy: compact}\n")
    before = _checksums(log_dir)
    args = ["--log-dir", str(log_dir), "--topic-config", str(partial), "--now", str(NOW)]
    assert retention_job.main([*args, "--apply"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kafkalog: error: retention --apply refuses topic ")
    assert "topic events:" in err[0] and "changelog" not in err[0]
    assert "--topic-config FILE" in err[0] and "--assume-defaults" in err[0]
    assert _checksums(log_dir) == before
    dry = _run(spark, log_dir, topic_config=str(partial))
    assert dry.warnings[0].startswith(
        "topic events: cleanup.policy, retention.ms, retention.bytes are Kafka's defaults by "
        "assumption"
    )
    assert "delete 4 segments" in dry.summary  # still reported: 40 days > the 7-day default
    assert _run(spark, log_dir, topic_config=str(partial), topics=["changelog"], apply=True)
    applied = _run(spark, log_dir, topic_config=str(partial), apply=True, assume_defaults=True)
    assert sum(r["applied"] for r in applied.rows.to_pylist()) == 4
    assert "as --assume-defaults asks" in applied.warnings[0]


def test_a_broker_dirs_own_metadata_names_the_settings(spark, log_dir: Path) -> None:
    """A KRaft broker's __cluster_metadata says `events` keeps everything: --apply goes ahead
    and keeps it, reporting where the setting came from."""
    from tests.log.test_cluster_metadata import (
        ORDERS_ID,
        config_record,
        data_batch,
        metadata_dir,
        topic_record,
    )

    records = [
        topic_record("events", ORDERS_ID),
        config_record("retention.ms", "-1", resource="events"),
    ]
    (metadata_dir(log_dir) / f"{0:020d}.log").write_bytes(data_batch(0, records))
    events = {k: v for k, v in _checksums(log_dir).items() if k.startswith("events-")}
    applied = _run(spark, log_dir, topic_config=None, topics=["events"], apply=True)
    assert not any(r["applied"] for r in applied.rows.to_pylist())
    assert {k: v for k, v in _checksums(log_dir).items() if k.startswith("events-")} == events
    settings = applied.rows.column("settings")[0].as_py()
    assert "retention.ms=-1 (broker metadata (__cluster_metadata))" in settings


def test_quarantine_files_are_listed_then_deleted_after_retention_ms(spark, log_dir: Path) -> None:
    pdir = log_dir / "events-1"
    old = pdir / "00000000000000000000.log.quarantine"
    young = pdir / "00000000000000000005.log.1.quarantine"
    for path, age in ((old, 11 * DAY), (young, 9 * DAY)):  # retention.ms is 10 days
        path.write_bytes(b"corrupt tail")
        os.utime(path, ns=((NOW - age) * 10**6,) * 2)
    before = _checksums(log_dir)
    dry = _run(spark, log_dir)
    assert _checksums(log_dir) == before
    rows = [r for r in dry.rows.to_pylist() if r["kind"] == "quarantine"]
    assert [(r["file"], r["action"], r["applied"]) for r in rows] == [
        (old.name, "delete", False),
        (young.name, "keep", False),
    ]
    assert rows[0]["size_bytes"] == len(b"corrupt tail") and rows[0]["rule"] == "retention.ms"
    assert {r["kind"] for r in dry.rows.to_pylist()} == {"segment", "quarantine"}
    assert "delete 4 segments" in dry.summary  # the segment counts leave them out
    assert f"events-1/{old.name}" in dry.summary and "--apply" in dry.summary
    applied = _run(spark, log_dir, apply=True)
    assert not old.exists() and young.exists()
    assert [r["applied"] for r in applied.rows.to_pylist() if r["file"] == old.name] == [True]


def test_the_task_reads_the_quarantine_suffix_it_is_given(log_dir: Path) -> None:
    pdir = log_dir / "events-1"
    custom = pdir / "00000000000000000000.log.bad"  # rebuild_partition(quarantine_suffix=".bad")
    unfinished = pdir / "00000000000000000005.log.bad.tmp"  # a killed rebuild's copy
    default = pdir / "00000000000000000000.log.quarantine"
    for path in (custom, unfinished, default):
        path.write_bytes(b"corrupt tail")
        os.utime(path, ns=((NOW - 11 * DAY) * 10**6,) * 2)  # retention.ms below is 10 days
    unit = {
        "topic": "events",
        "partition": 1,
        "dir": "events-1",
        "config": {"retention.ms": 10 * DAY},
        "settings": "",
        "log_start_offset": 0,
        "high_watermark": None,
    }
    options = retention_job.RetentionOptions(str(log_dir), NOW, True, quarantine_suffix=".bad")
    rows = [r for r in retention_job.retention_task(options)(unit) if r["kind"] == "quarantine"]
    assert [(r["file"], r["rule"], r["applied"]) for r in rows] == [
        (custom.name, "retention.ms", True),
        (unfinished.name, "unfinished-quarantine", True),
    ]
    assert not custom.exists() and not unfinished.exists() and default.exists()


def test_tiered_topics_need_the_upload_state_to_apply(spark, log_dir: Path, capsys) -> None:
    """Issue 36 item 3: remote.storage.enable topics go by local.retention.ms, and a broker
    deletes only uploaded segments. The dry run says the upload state is unknown; --apply
    refuses without --uploaded-offsets or --accept-unknown-uploads."""
    tiered = log_dir.parent / "tiered.yaml"
    tiered.write_text(
        "topics:\n"
        "  events: {remote.storage.enable: true, retention.ms: 8640000000,"
        " local.retention.ms: 864000000}\n"  # 100 days in all, 10 days locally
        "  changelog: {cleanup.policy: compact}\n"
    )
    before = _checksums(log_dir)
    dry = _run(spark, log_dir, topic_config=str(tiered), topics=["events"])
    events0 = [r for r in dry.rows.to_pylist() if r["partition"] == 0]
    assert [(r["action"], r["rule"]) for r in events0] == [("delete", "local.retention.ms")] * 3 + [
        ("keep", "")
    ]
    assert "once it is uploaded" in events0[3]["reason"]
    assert "upload state of partitions events-0, events-1 is unknown" in dry.warnings[0]
    args = ["--log-dir", str(log_dir), "--topic-config", str(tiered), "--now", str(NOW)]
    assert retention_job.main([*args, "--topics", "events", "--apply"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "refuses topic events (remote.storage.enable=true)" in err[0]
    assert "--uploaded-offsets FILE" in err[0] and "--accept-unknown-uploads" in err[0]
    assert _checksums(log_dir) == before
    uploaded = log_dir.parent / "uploaded.txt"
    uploaded.write_text("# highest offset in remote storage\nevents 0 9\nevents 1 4\n")
    applied = _run(
        spark,
        log_dir,
        topic_config=str(tiered),
        topics=["events"],
        apply=True,
        uploaded_offsets=str(uploaded),
    )
    assert [r["applied"] for r in applied.rows.to_pylist() if r["partition"] == 0] == [
        True,
        True,
        False,
        False,
    ]
    assert _visible_segments(log_dir / "events-0")[0] == f"{10:020d}.log"
    accepted = _run(
        spark,
        log_dir,
        topic_config=str(tiered),
        topics=["events"],
        apply=True,
        accept_unknown_uploads=True,
    )
    assert [r["applied"] for r in accepted.rows.to_pylist() if r["partition"] == 0] == [
        True,
        False,
    ]
    assert "as --accept-unknown-uploads asks" in accepted.warnings[0]
    uploaded.write_text("events zero 9\n")
    assert retention_job.main([*args, "--uploaded-offsets", str(uploaded)]) == 1
    assert "line 1: expected '<topic> <partition> <offset>'" in capsys.readouterr().err


def test_a_partition_a_brokers_load_would_cut_is_left_unjudged(spark, log_dir: Path) -> None:
    """No clean shutdown and a recovery point at 0: a broker's load CRC-checks every segment of
    events-0 and cuts the second where a batch fails, deleting the two after it; its retention
    then judges what is left. The run judges and deletes nothing in that partition, says why in
    one line per partition, and exits 1; the other partitions are judged as before."""
    OffsetCheckpointFile(log_dir / "recovery-point-offset-checkpoint").write({("events", 0): 0})
    damaged = sorted((log_dir / "events-0").glob("*.log"))[1]
    data = bytearray(damaged.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's record: its CRC fails, its header is fine
    damaged.write_bytes(bytes(data))
    before = _checksums(log_dir / "events-0")
    result = _run(spark, log_dir, apply=True)
    rows = [r for r in result.rows.to_pylist() if r["topic"] == "events"]
    zero = [r for r in rows if r["partition"] == 0]
    assert {(r["action"], r["rule"]) for r in zero} == {("keep", "load-cut")}
    assert f"{damaged.name} (no clean shutdown) and would cut it at position 0" in zero[0]["reason"]
    assert "deleting the 2 segments after it" in zero[0]["reason"]
    assert _checksums(log_dir / "events-0") == before
    assert result.problems == 1
    assert "1 partitions not judged, nothing deleted in them" in result.summary
    assert "events-0: not judged: a broker's load recovers" in result.summary
    # a clean shutdown recovers nothing: the same files are judged (and all 40-day-old: deleted)
    (log_dir / ".kafka_cleanshutdown").write_text("")
    again = _run(spark, log_dir, apply=True)
    assert again.problems == 0
    zero = [r for r in again.rows.to_pylist() if (r["topic"], r["partition"]) == ("events", 0)]
    assert {r["action"] for r in zero} == {"delete"}
