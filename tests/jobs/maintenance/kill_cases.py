"""Small log dirs for the kill tests of the maintenance jobs (tests/jobs/maintenance/
test_maintenance_kill9.py, test_compact_job.py, bench/crash.py), and the jobs as they run on
them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import jobs.compact as compact_job
import jobs.rebuild_index as index_job
import jobs.retention as retention_job
from kafkalog_core.log.checkpoints import LeaderEpochCache, OffsetCheckpointFile
from kafkalog_core.log.names import LEADER_EPOCH_CHECKPOINT_FILE
from kafkalog_core.maintenance.cleaner import CleanerSettings
from tests.killer import snapshot
from tests.log import cleaner_logs
from tests.log.test_recovery import write_log
from tests.log.test_split import raise_base_offset
from tests.serial_spark import SerialSpark

# what the jobs import on first use: imported once by a forkserver, not in every forked child
# (tests.killer.killed_run)
PRELOAD = (
    "jobs.maintenance.topic_configs",
    "jobs.ingestion.run.history",
    "deltalake",
    "yaml",
    "pandas",
)
INTERVAL = 200  # write_log's index.interval.bytes
NOW = 10_000 + 10 * 200 + 1_000  # write_log's timestamps are 10_000 + 10 * offset


def quiet(_line: str) -> None:
    pass


def rebuild(root: str, conf: str, spark=None) -> None:
    """`rebuild-index --mode rebuild` (on `spark`, else `SerialSpark`)."""
    index_job.run(spark or SerialSpark(), root, mode="rebuild", topic_config=conf, out=quiet)


def retention(root: str, conf: str, spark=None) -> None:
    """`retention --apply --now NOW` (on `spark`, else `SerialSpark`)."""
    retention_job.run(
        spark or SerialSpark(), root, apply=True, now=NOW, topic_config=conf, out=quiet
    )


# compact's io buffer: a round of the changelog case writes in several buffers
COMPACT_IO_BUFFER = 1200


def compact(root: str, conf: str, spark=None) -> None:
    """`compact --apply --now cleaner_logs.NOW` with a small io buffer (on `spark`, else
    `SerialSpark`)."""
    compact_job.run(
        spark or SerialSpark(),
        root,
        apply=True,
        now=cleaner_logs.NOW,
        topic_config=conf,
        out=quiet,
        settings=CleanerSettings(io_buffer_size=COMPACT_IO_BUFFER),
    )


def spark_submit(job: str, root: Path) -> list[str]:
    """The command line of `job` on `root/logs` with `root/topics.yaml`, as `rebuild`,
    `retention` or `compact` runs it, for ./spark-submit.sh on one core (one task at a time)."""
    logs, conf = str(root / "logs"), str(root / "topics.yaml")
    args = {
        "rebuild": ["rebuild-index", "--mode", "rebuild"],
        "retention": ["retention", "--apply", "--now", str(NOW)],
        "compact": [
            "compact",
            "--apply",
            "--now",
            str(cleaner_logs.NOW),
            "--io-buffer-size",
            str(COMPACT_IO_BUFFER),
        ],
    }[job]
    return [
        "./spark-submit.sh",
        "--master",
        "local[1]",
        args[0],
        "--log-dir",
        logs,
        *args[1:],
        "--topic-config",
        conf,
    ]


def reference_run(job, source: Path, target: Path, spark) -> dict[str, bytes]:
    """`job` run once on Spark, on a copy of `source` at `target`: the files it leaves."""
    shutil.copytree(source, target)
    job(str(target / "logs"), str(target / "topics.yaml"), spark)
    return snapshot(target / "logs")


def damaged(base: Path) -> Path:
    """Three partitions, each needing another kind of repair: a missing offset index and a
    zero-padded time index; a corrupt batch (its tail and the segments after it go to
    quarantine, a leader-epoch entry above the new log end goes); a raised base offset in the
    last segment (split)."""
    root = base / "logs"
    for p in range(3):
        write_log(root / f"orders-{p}", n=90)
    (root.parent / "topics.yaml").write_text(
        f"topics:\n  orders: {{index.interval.bytes: {INTERVAL}}}\n"
    )
    logs = [sorted((root / f"orders-{p}").glob("*.log")) for p in range(3)]
    logs[0][0].with_suffix(".index").unlink()
    with open(logs[0][1].with_suffix(".timeindex"), "ab") as f:
        f.write(bytes(12 * 4))
    data = bytearray(logs[1][1].read_bytes())
    data[1500] ^= 0xFF  # inside a batch of the middle segment: a CRC mismatch
    logs[1][1].write_bytes(bytes(data))
    epochs = LeaderEpochCache(root / "orders-1" / LEADER_EPOCH_CHECKPOINT_FILE)
    epochs.assign(0, 0)
    epochs.assign(1, 80)
    epochs.write()
    raise_base_offset(logs[2][-1], 1)
    return base


def expiring(base: Path) -> Path:
    """Two partitions whose oldest segments are past retention.ms, a rebuild's old quarantine
    file, leader epochs below the new log start, recovery points below it."""
    root = base / "logs"
    for p in range(2):
        write_log(root / f"events-{p}", n=90 + 40 * p)
        epochs = LeaderEpochCache(root / f"events-{p}" / LEADER_EPOCH_CHECKPOINT_FILE)
        epochs.assign(0, 0)
        epochs.assign(1, 40)
        epochs.assign(2, 85)
        epochs.write()
    quarantined = root / "events-0" / "00000000000000000036.log.quarantine"
    quarantined.write_bytes(b"a corrupt tail")
    os.utime(quarantined, (0, 0))  # quarantined long before NOW: past retention.ms
    OffsetCheckpointFile(root / "recovery-point-offset-checkpoint").write(
        {("events", 0): 10, ("events", 1): 90}
    )
    (root.parent / "topics.yaml").write_text("topics:\n  events: {retention.ms: 2000}\n")
    return base


CHANGELOG_TOPICS = """
topics:
  changelog: {cleanup.policy: compact, segment.bytes: 1200, index.interval.bytes: 256}
  events: {cleanup.policy: delete}
"""


def changelog(base: Path) -> Path:
    """Two compacted partitions (tests/log/cleaner_logs: superseded keys, tombstones, an
    aborted transaction, several segments) and a partition of a delete-policy topic that
    compact leaves alone."""
    root = base / "logs"
    fresh = [
        (b"fresh-a", b"a", cleaner_logs.NOW - 1000),
        (b"fresh-b", b"b", cleaner_logs.NOW - 999),
    ]
    cleaner_logs.changelog_partition(root / "changelog-0", active=fresh)
    cleaner_logs.changelog_partition(root / "changelog-1")
    cleaner_logs.changelog_partition(root / "events-0")
    (base / "topics.yaml").write_text(CHANGELOG_TOPICS)
    return base
