"""`kafkalog check-logdir`: refuse / repair / note per file, read-only, on generated log dirs
and on a real broker's log dir (confluent 5.1.2)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from kafkalog_core.log.checkpoints import (
    CleanShutdownFile,
    MetaProperties,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    new_topic_id,
)
from kafkalog_core.tools.check_logdir import NOTE, REFUSE, REPAIR, check_log_dir
from kafkalog_core.tools.cli import main
from tests.log.test_recovery import write_log
from tests.log.test_verify import checksums

FIXTURE = Path("/work/shared/fixtures/logdirs/confluent-5.1.2")
INTERVAL = 200  # tests.log.test_recovery.config's index.interval.bytes


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A healthy log dir: two partitions of one topic with one topic id, checkpoints, marker."""
    root = tmp_path / "logs"
    topic_id = new_topic_id()
    for p in (0, 1):
        write_log(root / f"orders-{p}")
        PartitionMetadataFile(root / f"orders-{p}" / "partition.metadata").write(topic_id)
    ends = {("orders", 0): 0, ("orders", 1): 0}
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        OffsetCheckpointFile(root / name).write(ends)
    MetaProperties(version=1, cluster_id="c1", node_id=1).write(root / "meta.properties")
    CleanShutdownFile(root).write()
    return root


def _findings(root: Path) -> list[tuple[str, str]]:
    return [(f.severity, f.path) for f in check_log_dir(root, INTERVAL).findings]


def _cli(*args: str) -> tuple[int, list[str]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["check-logdir", *args])
    return status, out.getvalue().splitlines()


def test_a_healthy_dir_has_no_findings_and_exit_0(root: Path) -> None:
    check = check_log_dir(root, INTERVAL)
    assert check.findings == [] and check.partitions == 2 and check.segments >= 6
    status, lines = _cli(str(root), "--index-interval-bytes", str(INTERVAL))
    assert status == 0
    assert lines[-1].startswith(f"check-logdir {root}: 2 partitions") and len(lines) == 1


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda r: (r / "lost+found").mkdir(), (REFUSE, "lost+found")),
        (lambda r: (r / "meta.properties").write_text("version=7\n"), (REFUSE, "meta.properties")),
        (
            lambda r: (r / "replication-offset-checkpoint").write_text("0\n1\nx\n"),
            (REFUSE, "replication-offset-checkpoint"),
        ),
        (
            lambda r: (r / "cleaner-offset-checkpoint").write_text("1\n"),
            (REFUSE, "cleaner-offset-checkpoint"),
        ),
        (
            lambda r: (r / "orders-1" / "partition.metadata").write_text("version: 0\n"),
            (REFUSE, "orders-1/partition.metadata"),
        ),
        (
            lambda r: PartitionMetadataFile(r / "orders-1" / "partition.metadata").write(
                new_topic_id()
            ),
            (REFUSE, "orders"),
        ),
        (
            lambda r: (r / "orders-0" / "leader-epoch-checkpoint").write_text("0\n1\n0\n"),
            (REFUSE, "orders-0/leader-epoch-checkpoint"),
        ),
        (
            lambda r: (r / "recovery-point-offset-checkpoint").write_text("zero\n"),
            (REPAIR, "recovery-point-offset-checkpoint"),
        ),
        (
            lambda r: (r / "orders-0" / "00000000000000000000.log.deleted").write_bytes(b"x"),
            (REPAIR, "orders-0/00000000000000000000.log.deleted"),
        ),
        (
            lambda r: (r / "orders-0" / "00000000000000000000.index").unlink(),
            (REPAIR, "orders-0/00000000000000000000.index"),
        ),
        (
            lambda r: OffsetCheckpointFile(r / "log-start-offset-checkpoint").write(
                {("orders", 1): 10**9}
            ),
            (REPAIR, "log-start-offset-checkpoint"),
        ),
        (lambda r: (r / "orders-0.0123abcd-delete").mkdir(), (REPAIR, "orders-0.0123abcd-delete")),
        (lambda r: CleanShutdownFile(r).delete(), (NOTE, ".kafka_cleanshutdown")),
    ],
)
def test_each_damage_is_one_finding_naming_its_file(root: Path, damage, expected) -> None:
    damage(root)
    assert _findings(root) == [expected]
    status, lines = _cli(str(root), "--index-interval-bytes", str(INTERVAL))
    assert status == (1 if expected[0] == REFUSE else 0)
    assert lines[0].startswith(f"{expected[0]}: {expected[1]}: ")


def test_a_corrupt_tail_is_repaired_and_later_segments_dropped(root: Path) -> None:
    logs = sorted((root / "orders-0").glob("*.log"))
    data = bytearray(logs[0].read_bytes())
    data[-5] ^= 0xFF  # the last batch's CRC no longer matches
    logs[0].write_bytes(bytes(data))
    findings = check_log_dir(root, INTERVAL).findings
    repairs = [f for f in findings if f.severity == REPAIR]
    assert repairs[0].path == f"orders-0/{logs[0].name}" and "truncates" in repairs[0].message
    dropped = {f.path for f in repairs if "follows a corrupt segment" in f.message}
    assert dropped == {f"orders-0/{p.name}" for p in logs[1:]}


def test_the_real_broker_dir_loads_with_repairs_only_and_is_not_touched() -> None:
    if not FIXTURE.is_dir():
        pytest.skip("shared fixtures not present")
    before = checksums(FIXTURE)
    check = check_log_dir(FIXTURE)
    assert checksums(FIXTURE) == before
    assert not check.refused and check.partitions == 102
    severities = {f.severity for f in check.findings}
    assert severities == {NOTE, REPAIR}
    # the dir was copied without its .index files: a broker rebuilds them
    assert any(f.path.endswith(".index") and "rebuilds" in f.message for f in check.findings)
    # a 2.x broker's record-level time indexes are accepted as they are (equivalent)
    assert not [f for f in check.findings if f.path.endswith(".timeindex") and "wrong" in f.message]
    status, lines = _cli(str(FIXTURE))
    assert status == 0 and "102 partitions" in lines[-1] and "0 refuse" in lines[-1]
