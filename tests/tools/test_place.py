"""`kafkalog place`: ingested partitions put into a stopped KRaft broker's log dir.

The output root is written by kafkalog's partition log; the broker's log dir is laid out as a
broker leaves it after a clean stop: meta.properties, its metadata log (records built by
tests/log/test_cluster_metadata.py's encoders: TopicRecord, PartitionRecord, ConfigRecord), the
empty partition dirs it created for the topic, root checkpoints with entries of other topics,
`.lock` and the clean-shutdown marker."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from kafkalog_core.log.checkpoints import (
    CleanShutdownFile,
    MetaProperties,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    topic_id_for_name,
    topic_id_to_str,
)
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.root.meta_area import compact_journal_path, publish_journal_path
from kafkalog_core.root.run_lock import ReadLock, RunLock, RunLockedError
from kafkalog_core.tools.check_logdir import check_log_dir
from kafkalog_core.tools.cli import main
from kafkalog_core.tools.place import broker_locks, place
from tests.killer import killed_run, read_steps
from tests.log.test_cluster_metadata import (
    DIR_A,
    ORDERS_ID,
    changed,
    config_record,
    created,
    data_batch,
    metadata_dir,
    topic_record,
)
from tests.log.test_recovery import config, write_log

CLUSTER = "Qk9PS0tFRVBFUi1DTFVTVEVS"
OTHER_ID = uuid.UUID("0b7c2e51-9d0e-4f4b-8d7e-3f1f2a9b6c02")
RECORDS = (120, 200)  # records in orders-0, orders-1


def make_output(root: Path, records: tuple[int, ...] = RECORDS) -> Path:
    """What an ingest of `orders` (two partitions, no topic_id) leaves in its output root."""
    ends = {}
    for p, n in enumerate(records):
        ends[("orders", p)] = write_log(root / f"orders-{p}", n).log_end_offset
        PartitionMetadataFile(root / f"orders-{p}" / "partition.metadata").write(
            topic_id_for_name("orders")
        )
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        OffsetCheckpointFile(root / name).write(ends)
    return root


@pytest.fixture
def output(tmp_path: Path) -> Path:
    return make_output(tmp_path / "out")


def metadata_records(replicas=(1,), partitions: int = 2) -> list[bytes]:
    return [
        topic_record("orders", ORDERS_ID),
        *[created(p, list(replicas)) for p in range(partitions)],
        config_record("index.interval.bytes", "200"),
        config_record("segment.bytes", "4000"),
        topic_record("other", OTHER_ID),
        created(0, [1]).replace(ORDERS_ID.bytes, OTHER_ID.bytes),
    ]


def make_broker(
    path: Path, *, node: int = 1, cluster: str = CLUSTER, records: list[bytes] | None = None
) -> Path:
    """A stopped broker's log dir that has created the topic's (empty) partition dirs."""
    path.mkdir(parents=True)
    meta = MetaProperties(version=1, cluster_id=cluster, node_id=node, directory_id=DIR_A)
    meta.write(path / "meta.properties", date="Sun Nov 29 06:00:00 UTC 2026")
    values = metadata_records() if records is None else records
    (metadata_dir(path) / f"{0:020d}.log").write_bytes(data_batch(0, values))
    for p in range(2):
        PartitionLog.create(path / f"orders-{p}", config(), topic_id=ORDERS_ID).close()
    write_log(path / "other-0", 30)
    PartitionMetadataFile(path / "other-0" / "partition.metadata").write(OTHER_ID)
    checkpoints = {
        "replication-offset-checkpoint": {("other", 0): 30, ("orders", 0): 0},
        "recovery-point-offset-checkpoint": {("other", 0): 30, ("orders", 0): 0},
        # a stale entry from an earlier topic of the same name: it would delete the placed data
        "log-start-offset-checkpoint": {("other", 0): 0, ("orders", 1): 9999},
    }
    for name, entries in checkpoints.items():
        OffsetCheckpointFile(path / name).write(entries)
    (path / ".lock").touch()
    CleanShutdownFile(path).write()
    return path


@pytest.fixture
def broker(tmp_path: Path) -> Path:
    return make_broker(tmp_path / "broker")


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and directory (None) below `root`."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["place", *args])
    return status, out.getvalue(), err.getvalue()


def placed_partition_is_the_output(broker: Path, output: Path, p: int) -> None:
    ours, theirs = tree(output / f"orders-{p}"), tree(broker / f"orders-{p}")
    assert theirs.pop("partition.metadata") == PartitionMetadataFile.to_bytes(ORDERS_ID)
    ours.pop("partition.metadata")
    assert theirs == ours


def test_a_dry_run_says_what_it_would_do_and_changes_nothing(output: Path, broker: Path) -> None:
    (broker / ".lock").unlink()  # a dry run does not create the broker's lock file
    before = tree(broker)
    status, out, err = cli(str(output), str(broker), "--topic", "orders")
    assert (status, err) == (0, "")
    assert tree(broker) == before
    lines = out.splitlines()
    assert lines[0].startswith(f"cluster metadata: {broker / '__cluster_metadata-0'}")
    assert f"{broker / 'orders-0'}: from {output / 'orders-0'} (" in out
    assert "replaces the broker's empty dir" in out
    assert f"topic id {topic_id_to_str(ORDERS_ID)}" in out
    assert "orders: the cluster's cleanup.policy=delete (Kafka default" in out
    assert f"{broker / 'log-start-offset-checkpoint'}: orders-0=dropped, orders-1=dropped" in out
    assert lines[-1] == "dry run: nothing changed; --apply places 2 partition dir(s)"


def test_a_partition_written_without_a_leader_epoch_is_named_in_the_plan(
    output: Path, broker: Path
) -> None:
    """write_log's partitions carry epoch -1 (PartitionLog without leader_epoch); one written
    with epoch 0, as the ingest writes, is placed without a word."""
    shutil.rmtree(output / "orders-1")
    log = PartitionLog.create(output / "orders-1", config(), leader_epoch=0)
    log.append_records(pa.table({"key": [b"k"], "value": [b"v"], "timestamp": [10_000]}))
    log.close()
    PartitionMetadataFile(output / "orders-1" / "partition.metadata").write(
        topic_id_for_name("orders")
    )
    status, out, err = cli(str(output), str(broker), "--topic", "orders")
    assert (status, err) == (0, ""), out
    notes = [line for line in out.splitlines() if "without a leader epoch" in line]
    assert notes == [
        f"{output / 'orders-0'}: written without a leader epoch (its batches carry -1, its "
        "leader-epoch-checkpoint no entry): the broker serves it, but a follower added later "
        "fails on it and never joins the ISR (docs/broker.md, Leader epochs); the ingest and "
        'format("kafkalog") write epoch 0'
    ]


def test_apply_places_every_partition_merges_the_checkpoints_and_a_rerun_changes_nothing(
    output: Path, broker: Path
) -> None:
    status, out, err = cli(str(output), str(broker), "--topic", "orders", "--apply")
    assert (status, err) == (0, ""), out
    for p in range(2):
        placed_partition_is_the_output(broker, output, p)
        log = PartitionLog.open(broker / f"orders-{p}", config())
        assert log.log_end_offset == RECORDS[p] and log.topic_id == ORDERS_ID
        log.close()
    assert not list(broker.glob("*-delete"))
    assert OffsetCheckpointFile(broker / "replication-offset-checkpoint").read() == {
        ("orders", 0): RECORDS[0],
        ("orders", 1): RECORDS[1],
        ("other", 0): 30,
    }
    assert OffsetCheckpointFile(broker / "recovery-point-offset-checkpoint").read() == {
        ("orders", 0): RECORDS[0],
        ("orders", 1): RECORDS[1],
        ("other", 0): 30,
    }
    assert OffsetCheckpointFile(broker / "log-start-offset-checkpoint").read() == {("other", 0): 0}
    check = check_log_dir(broker, 200)
    assert not [f for f in check.findings if f.severity != "note"], check.findings
    assert out.splitlines()[-1].startswith(f"check-logdir {broker}: 3 partitions")
    assert "placed 2 partition dir(s), 0 already placed" in out

    after = tree(broker)
    status, out, _ = cli(str(output), str(broker), "--topic", "orders", "--apply")
    assert status == 0 and "placed 0 partition dir(s), 2 already placed" in out
    assert tree(broker) == after


def test_a_partition_the_broker_never_created_a_dir_for_is_placed_too(
    output: Path, broker: Path
) -> None:
    shutil.rmtree(broker / "orders-1")
    place(output, [broker], ["orders"], apply=True)
    placed_partition_is_the_output(broker, output, 1)


# Kafka's FileLock: FileChannel.open(CREATE, READ, WRITE), then tryLock() (an fcntl lock on Linux)
JAVA_FILE_LOCK = """
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

public class HoldLock {
    public static void main(String[] args) throws Exception {
        FileChannel channel = FileChannel.open(Path.of(args[0]), StandardOpenOption.CREATE,
            StandardOpenOption.READ, StandardOpenOption.WRITE);
        System.out.println(channel.tryLock() == null ? "busy" : "locked");
        System.out.flush();
        Thread.sleep(60_000);
    }
}
"""


def java_lock(path: Path, tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """A JVM taking `path`'s lock as a broker does; (the process, "locked" or "busy")."""
    source = tmp_path / "HoldLock.java"
    source.write_text(JAVA_FILE_LOCK)
    java = subprocess.Popen(["java", str(source), str(path)], stdout=subprocess.PIPE, text=True)
    assert java.stdout is not None
    return java, java.stdout.readline().strip()


def test_a_broker_cannot_start_while_place_holds_its_lock(broker: Path, tmp_path: Path) -> None:
    with broker_locks([broker], create=True):
        java, state = java_lock(broker / ".lock", tmp_path)
        java.kill()
        java.wait()
    assert state == "busy"


def _stale_records(path: Path) -> None:
    """The broker's orders-0 has taken records of its own."""
    segment = f"{0:020d}.log"
    (path / "orders-0" / segment).write_bytes((path / "other-0" / segment).read_bytes())


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("running", r"broker/\.lock is locked: a broker is running on .*; stop it"),
        ("partitions", "topic orders has 3 partitions in the cluster, the output root 2 .*"),
        ("records", r"broker/orders-0 already holds records: .*new, empty topic"),
        ("id", r"topic id \S+ given for orders is not in the cluster's metadata .*--describe"),
        ("missing", "topic orders is not in the cluster's metadata .*create it first"),
        ("cluster", "the log dirs belong to different clusters .*is cluster OTHER"),
        (
            "replicas",
            r"orders-0 has replicas on brokers \[1, 2, 3\], .*broker\(s\) \[2, 3\] .*truncates",
        ),
        ("follower", r"orders-0's replicas are on broker\(s\) \[2\], none of the log dirs"),
        ("ingest-id", r"orders-0/partition.metadata holds topic id \S+ \(the ingest's topics"),
        ("settings", r"topic orders's settings differ .*cleanup.policy=compact here, delete in"),
        ("unformatted", "has no meta.properties: not a formatted broker log dir"),
        ("ingesting", r"out is locked by run ingest-7 \(pid \d+"),
        ("publishing", r"out: a killed run left its publish half-done .*next ingest run settles"),
        ("compacting", r"out/orders-1: a killed compact run left a cleaning round open"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    output: Path, tmp_path: Path, case: str, message: str
) -> None:
    records = {
        "partitions": metadata_records(partitions=3),
        "missing": metadata_records()[4:],
        "replicas": metadata_records(replicas=(1, 2, 3)),
        "follower": [*metadata_records(), changed(0, replicas=[2], isr=[2], leader=2)],
    }.get(case)
    broker = make_broker(tmp_path / "broker", records=records)
    args = [str(output), str(broker), "--topic", "orders", "--apply"]
    holder = None
    if case == "running":
        holder, state = java_lock(broker / ".lock", tmp_path)
        assert state == "locked"
    elif case == "records":
        _stale_records(broker)
    elif case == "id":
        args += ["--topic-id", topic_id_to_str(uuid.UUID(int=7))]
    elif case == "cluster":
        args.insert(2, str(make_broker(tmp_path / "second", node=2, cluster="OTHER")))
    elif case == "ingest-id":
        PartitionMetadataFile(output / "orders-0" / "partition.metadata").write(uuid.UUID(int=9))
    elif case == "settings":
        (tmp_path / "ingest.properties").write_text("cleanup.policy=compact\nsegment.bytes=4000\n")
        args += ["--topic-config", str(tmp_path / "ingest.properties")]
    elif case == "unformatted":
        (broker / "meta.properties").unlink()
    elif case == "publishing":
        publish_journal_path(output).parent.mkdir()
        publish_journal_path(output).write_text("{}")
    elif case == "compacting":
        compact_journal_path(output, "orders-1").parent.mkdir(parents=True)
        compact_journal_path(output, "orders-1").write_text("{}")
    ingest = RunLock(output, "ingest-7").acquire() if case == "ingesting" else None
    before = tree(broker)
    try:
        status, out, err = cli(*args)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        if ingest is not None:
            ingest.release()
    assert (status, out) == (1, "")
    assert len(err.splitlines()) == 1 and err.startswith("kafkalog: error: "), err
    assert re.search(message, err), err
    assert tree(broker) == before


def test_place_shares_the_roots_run_lock_with_readers_and_keeps_writers_out(
    output: Path, broker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only run (an audit) may read the root beside it; an ingest or a maintenance run
    that writes cannot start until the copy is done."""
    from kafkalog_core.tools import place as place_module

    copy = place_module.apply_plan
    refused = []

    def apply_while_a_writer_tries(plan) -> None:
        with pytest.raises(RunLockedError, match=r"in use by another run: a read-only run"):
            RunLock(output, "retention-1").acquire()
        refused.append(True)
        copy(plan)

    with ReadLock(output, "compaction-audit-1"):  # a reader: place goes ahead beside it
        status, out, err = cli(str(output), str(broker), "--topic", "orders")
    assert (status, err) == (0, ""), out
    monkeypatch.setattr(place_module, "apply_plan", apply_while_a_writer_tries)
    status, out, err = cli(str(output), str(broker), "--topic", "orders", "--apply")
    assert (status, err, refused) == (0, "", [True]), out
    placed_partition_is_the_output(broker, output, 0)
    with RunLock(output, "ingest-8"):  # released when place is done
        pass


def test_every_replica_placed_in_one_run_is_allowed(output: Path, tmp_path: Path) -> None:
    """All three brokers stopped and all three log dirs given: every replica gets the bytes,
    so whichever leads has them."""
    records = metadata_records(replicas=(1, 2, 3))
    brokers = [make_broker(tmp_path / f"b{n}", node=n, records=records) for n in (1, 2, 3)]
    place(output, brokers, ["orders"], apply=True)
    for path in brokers:
        for p in range(2):
            placed_partition_is_the_output(path, output, p)


# ---- killed at every step ------------------------------------------------------------------------
def apply_place(output: str, broker: str) -> None:
    place(output, [broker], ["orders"], apply=True)


def test_killed_at_every_step_then_rerun_gives_the_uninterrupted_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One segment per partition keeps the steps few; the decoder's lazy imports (pandas) are
    made once in the fork server, not in every killed child; fsync guards against a power
    loss, not a kill, so the reruns here skip it as the killed runs do (tests/killer.py)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    output = make_output(tmp_path / "out", (20, 30))
    template = make_broker(tmp_path / "template")
    original = tree(template)
    reference = tmp_path / "reference"
    shutil.copytree(template, reference)
    place(output, [reference], ["orders"], apply=True)
    want = tree(reference)
    after = 0
    while True:
        broker = tmp_path / f"run{after}"
        shutil.copytree(template, broker)
        log = tmp_path / f"steps{after}.log"
        done = killed_run(
            apply_place,
            str(output),
            str(broker),
            log=log,
            after=after,
            under=broker,
            preload=("pandas",),
        )
        if done:
            break
        state = tree(broker)
        for p in range(2):  # each partition is the broker's empty dir or the placed one
            name = f"orders-{p}/"
            mine = {k: v for k, v in state.items() if k.startswith(name)}
            assert mine in (
                {k: v for k, v in original.items() if k.startswith(name)},
                {k: v for k, v in want.items() if k.startswith(name)},
            ), (after, read_steps(log)[-1])
        place(output, [broker], ["orders"], apply=True)
        assert tree(broker) == want, (after, read_steps(log)[-1])
        shutil.rmtree(broker)
        after += 1
    assert tree(broker) == want
    kinds = {line.split(" ")[0] for line in read_steps(log)}
    # the swap of the staged and the empty dir is one renameat2 call, no step of its own
    assert {"mkdir", "open", "replace", "unlink", "rmdir"} <= kinds, kinds


def test_a_partition_goes_to_the_log_dir_the_controller_assigned(
    output: Path, tmp_path: Path
) -> None:
    """Two log dirs of broker 1 (JBOD) and a metadata log dir of its own (--metadata-dir): with
    no partition dir yet, each partition goes where PartitionRecord.Directories says."""
    second = uuid.UUID("66666666-7777-4888-9999-aaaaaaaaaaaa")
    records = [
        topic_record("orders", ORDERS_ID),
        created(0, [1], directories=[DIR_A]),
        created(1, [1], directories=[second]),
        config_record("index.interval.bytes", "200"),
    ]
    metadata = make_broker(tmp_path / "metadata", records=records)
    first = make_broker(tmp_path / "first", records=[])
    other = make_broker(tmp_path / "second", records=[])
    for path in (first, other):
        shutil.rmtree(path / "__cluster_metadata-0")
        for p in range(2):
            shutil.rmtree(path / f"orders-{p}")
    meta = MetaProperties(version=1, cluster_id=CLUSTER, node_id=1, directory_id=second)
    meta.write(other / "meta.properties")
    status, out, err = cli(
        str(output), str(first), str(other), "--topic", "orders", "--metadata-dir",
        str(metadata), "--apply",
    )  # fmt: skip
    assert (status, err) == (0, ""), out
    placed_partition_is_the_output(first, output, 0)
    placed_partition_is_the_output(other, output, 1)
    assert not (first / "orders-1").exists() and not (other / "orders-0").exists()


def test_a_log_dir_that_does_not_exist_is_one_line(output: Path, tmp_path: Path) -> None:
    status, out, err = cli(str(output), str(tmp_path / "nowhere"), "--topic", "orders", "--apply")
    assert (status, out) == (1, "")
    assert err == f"kafkalog: error: broker log dir {tmp_path / 'nowhere'} does not exist\n"
    assert not (tmp_path / "nowhere").exists()
