"""The rebuild-index job: verify is read-only, rebuild fixes and quarantines, a kill at any step
converges, the real-broker fixtures (no indexes; a 2.x broker's byte-exact .index)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

import jobs.rebuild_index as index_job
import jobs.retention as retention_job
from jobs.ingestion.commit.plan import plan_publish
from jobs.ingestion.commit.publish import publish
from jobs.ingestion.commit.state import scan_existing_state
from jobs.ingestion.run.history import IngestHistory
from jobs.maintenance.common import plan_slices
from jobs.maintenance.report import read_report
from tests.jobs.commit_helpers import stage_range
from tests.killer import Killer
from tests.log.test_broker_fixtures import copy_writable
from tests.log.test_recovery import write_log

BROKER = "segments/broker-2x-interval4096/test_topic_a-0"


def _checksums(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _quiet(spark, root: Path, **kw):
    return index_job.run(spark, str(root), out=lambda _line: None, **kw)


@pytest.fixture()
def damaged(tmp_path: Path) -> Path:
    """orders-0/1 (index.interval.bytes 200): a missing index, zero padding, a corrupt batch."""
    root = tmp_path / "src" / "logs"
    for p in (0, 1):
        write_log(root / f"orders-{p}")
    (root.parent / "topics.yaml").write_text("topics:\n  orders: {index.interval.bytes: 200}\n")
    logs0 = sorted((root / "orders-0").glob("*.log"))
    logs0[0].with_suffix(".index").unlink()
    with open(logs0[1].with_suffix(".timeindex"), "ab") as f:
        f.write(bytes(12 * 4))
    logs1 = sorted((root / "orders-1").glob("*.log"))
    data = bytearray(logs1[1].read_bytes())
    data[200] ^= 0xFF  # inside the segment's third or fourth batch: a CRC mismatch
    logs1[1].write_bytes(bytes(data))
    return root


def test_verify_is_read_only_and_names_every_problem(spark, damaged: Path) -> None:
    before = _checksums(damaged)
    result = _quiet(
        spark,
        damaged,
        topic_config=str(damaged.parent / "topics.yaml"),
        report=str(damaged.parent / "r"),
    )
    assert _checksums(damaged) == before
    rows = result.rows.to_pylist()
    by_file = {(r["topic_partition"], r["log_file"]): r for r in rows}
    first = sorted(by_file)[0]
    assert by_file[first]["index_status"] == "missing"
    assert {r["time_index_status"] for r in rows if r["topic_partition"] == "orders-0"} >= {
        "zero-padded"
    }
    corrupt = [r for r in rows if r["log_status"] == "corrupt-tail"]
    assert len(corrupt) == 1 and corrupt[0]["topic_partition"] == "orders-1"
    assert corrupt[0]["first_bad_offset"] is not None and corrupt[0]["bytes_after_bad"] > 0
    assert all(
        r["after_corrupt_segment"]
        for r in rows
        if r["topic_partition"] == "orders-1" and r["base_offset"] > corrupt[0]["base_offset"]
    )
    assert result.problems > 0 and "--mode rebuild" in result.summary
    assert read_report(damaged.parent / "r").num_rows == len(rows)


def test_rebuild_fixes_quarantines_and_is_idempotent(spark, damaged: Path) -> None:
    conf = str(damaged.parent / "topics.yaml")
    corrupt_log = sorted((damaged / "orders-1").glob("*.log"))[1]
    original = corrupt_log.read_bytes()
    result = _quiet(spark, damaged, mode="rebuild", topic_config=conf)
    assert result.problems == 0
    quarantined = sorted((damaged / "orders-1").glob("*.quarantine"))
    assert quarantined, "the corrupt tail and the segments after it are kept aside"
    tail = next(q for q in quarantined if q.name.startswith(corrupt_log.name))
    assert corrupt_log.read_bytes() + tail.read_bytes() == original  # nothing lost
    assert "moved to" in result.summary
    again = _quiet(spark, damaged, topic_config=conf)
    assert again.problems == 0 and {r["ok"] for r in again.rows.to_pylist()} == {True}
    before = _checksums(damaged)
    _quiet(spark, damaged, mode="rebuild", topic_config=conf)
    assert _checksums(damaged) == before


def test_a_kill_at_any_step_of_a_rebuild_converges(
    spark, damaged: Path, tmp_path: Path, monkeypatch
) -> None:
    clean = tmp_path / "clean"
    shutil.copytree(damaged.parent, clean)
    _quiet(spark, clean / "logs", mode="rebuild", topic_config=str(clean / "topics.yaml"))
    want = _checksums(clean / "logs")
    k = 0
    while True:
        work = tmp_path / f"kill-{k}"
        shutil.copytree(damaged.parent, work)
        options = index_job.IndexJobOptions(str(work / "logs"), "rebuild", False)
        Killer(monkeypatch, k)
        finished = True
        try:
            for p in (0, 1):
                unit = {
                    "topic": "orders",
                    "partition": p,
                    "dir": f"orders-{p}",
                    "index_interval_bytes": 200,
                }
                index_job.index_task(options)(unit)
        except KeyboardInterrupt:
            finished = False
        finally:
            monkeypatch.undo()
        _quiet(spark, work / "logs", mode="rebuild", topic_config=str(work / "topics.yaml"))
        assert _checksums(work / "logs") == want, f"killed after {k} steps"
        if finished:
            break
        k += 1
    assert k >= 5  # the rebuild has several steps; each was interrupted once


def test_real_broker_dir_without_indexes(spark, fixtures_dir: Path, tmp_path: Path) -> None:
    src = fixtures_dir / "logdirs" / "confluent-5.1.2"
    before = _checksums(src)
    result = _quiet(spark, src)  # verify is read-only: it runs on the fixture itself
    assert _checksums(src) == before
    rows = result.rows.to_pylist()
    assert len(rows) > 100 and {r["log_status"] for r in rows} == {"ok"}
    assert {r["index_status"] for r in rows} == {"missing"}
    work = copy_writable(src, tmp_path / "confluent")
    _quiet(spark, work, mode="rebuild")
    assert _quiet(spark, work).problems == 0


def test_broker_segments_give_the_broker_index_byte_for_byte(
    spark, fixtures_dir: Path, tmp_path: Path
) -> None:
    src = fixtures_dir / BROKER
    root = tmp_path / "logs"
    pdir = copy_writable(src, root / src.name)
    for p in [*pdir.glob("*.index"), *pdir.glob("*.timeindex")]:
        p.unlink()
    _quiet(spark, root, mode="rebuild")  # Kafka's default index.interval.bytes, 4096
    for p in sorted(src.glob("*.index")):
        assert (pdir / p.name).read_bytes() == p.read_bytes(), p.name
    assert _quiet(spark, root).problems == 0


def test_cli_exit_codes(damaged: Path, capsys) -> None:
    conf = str(damaged.parent / "topics.yaml")
    assert index_job.main(["--log-dir", str(damaged), "--topic-config", conf]) == 1
    assert index_job.main(["--log-dir", str(damaged), "--topic-config", conf, "--all"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["kafkalog: error: --all rebuilds every index: it needs --mode rebuild"]
    assert (
        index_job.main(["--log-dir", str(damaged), "--topic-config", conf, "--mode", "rebuild"])
        == 0
    )
    assert index_job.main(["--log-dir", str(damaged), "--topic-config", conf]) == 0


def test_big_partitions_are_split_by_segment_with_the_same_answers(spark, damaged: Path) -> None:
    conf = str(damaged.parent / "topics.yaml")
    units = [{"dir": "orders-0"}, {"dir": "small-0"}]
    sizes = {"orders-0": [(0, 100), (10, 100), (20, 100), (30, 100)], "small-0": [(0, 50)]}
    planned = plan_slices(units, lambda u: sizes[u["dir"]], slots=2)
    assert [u.get("only_segments") for u in planned] == [[0, 10, 20], [30], None]
    assert [u["bytes"] for u in planned] == [300, 100, 50]
    assert plan_slices(units, lambda u: sizes[u["dir"]], slots=2, split=False)[0]["bytes"] == 400
    on_disk = {
        d.name: [(int(f.name[:20]), f.stat().st_size) for f in sorted(d.glob("*.log"))]
        for d in sorted(damaged.iterdir())
    }
    slices = plan_slices([{"dir": d} for d in on_disk], lambda u: on_disk[u["dir"]], slots=6)
    assert sum(1 for u in slices if u["dir"] == "orders-1") > 1  # the run below splits it
    whole = _quiet(spark, damaged, topic_config=conf, tasks=1).rows
    split = _quiet(spark, damaged, topic_config=conf, tasks=6).rows
    assert split.to_pylist() == whole.to_pylist()
    assert any(r["after_corrupt_segment"] for r in split.to_pylist())


def test_retention_finds_what_a_rebuild_with_another_suffix_quarantined(damaged: Path) -> None:
    rebuild = index_job.IndexJobOptions(str(damaged), "rebuild", False, quarantine_suffix=".bad")
    unit = {"topic": "orders", "partition": 1, "dir": "orders-1", "index_interval_bytes": 200}
    rows = index_job.index_task(rebuild)(unit)
    written = sorted(p.name for p in (damaged / "orders-1").glob("*.log.bad"))
    assert written and sorted(r["quarantine_file"] for r in rows if r["quarantine_file"]) == written
    assert not list((damaged / "orders-1").glob("*.quarantine*"))
    unit.update(
        config={"retention.ms": -1},
        settings="",
        log_start_offset=0,
        high_watermark=None,
    )
    for suffix, found in ((".quarantine", []), (".bad", written)):
        options = retention_job.RetentionOptions(str(damaged), 0, False, quarantine_suffix=suffix)
        listed = retention_job.retention_task(options)(unit)
        assert [r["file"] for r in listed if r["kind"] == "quarantine"] == found, suffix


def test_a_rebuild_finishes_an_interrupted_ingest_publish_first(spark, tmp_path: Path) -> None:
    """A publish killed after moving a staged segment in as `.cleaned`: the rebuild completes
    it from its journal (a split's roll-back would have deleted the moved-in segment)."""
    root = tmp_path / "logs"
    r1 = [stage_range(root, "r1", "orders", 0, 0, 0, [3, 4])]
    publish(plan_publish(r1, {}, output_root=root, run_id="r1"))
    r2 = [stage_range(root, "r2", "orders", 0, 0, 7, [2, 3])]
    plan = plan_publish(r2, scan_existing_state(root), output_root=root, run_id="r2")

    def crash(step: str) -> None:
        if step.startswith("swap:"):
            raise KeyboardInterrupt(f"killed before {step}")

    with pytest.raises(KeyboardInterrupt):
        publish(plan, hook=crash)
    assert list((root / "orders-0").glob("*.cleaned"))
    lines: list[str] = []
    result = index_job.run(spark, str(root), mode="rebuild", out=lines.append)
    assert "kafkalog: an interrupted ingest publish was completed first" in lines
    assert IngestHistory(root).find_run("r2") is not None
    assert not [p for p in (root / "orders-0").iterdir() if p.suffix in (".cleaned", ".swap")]
    assert result.rows.num_rows == 4 and _quiet(spark, root).problems == 0
