"""Checkpoint and metadata files (§9, §6, §13 cases 28, 45-47) and the confluent-5.1.2 log dir."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from kafkalog_core.errors import CorruptCheckpointError
from kafkalog_core.log.checkpoints import (
    CleanShutdownFile,
    EpochEntry,
    LeaderEpochCache,
    LeaderEpochCheckpointFile,
    MetaProperties,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    atomic_write,
    new_topic_id,
    parse_properties,
    topic_id_from_str,
    topic_id_to_str,
)

CONFLUENT = Path("logdirs/confluent-5.1.2")
OFFSET_CHECKPOINTS = (
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
    "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint",
)


def test_atomic_write_leaves_no_tmp(tmp_path: Path) -> None:
    target = tmp_path / "x"
    atomic_write(target, b"one")
    atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(os.listdir(tmp_path)) == ["x"]


# ---- offset checkpoints (case 45) -----------------------------------------------------------------
def test_offset_checkpoint_round_trip(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    offsets = {("foo", 1): 5, ("bar", 2): 10}
    cp.write(offsets)
    lines = cp.path.read_text().split("\n")
    assert lines[:2] == ["0", "2"]
    assert sorted(lines[2:4]) == ["bar 2 10", "foo 1 5"]
    assert lines[4:] == [""]
    assert cp.path.read_bytes() == b"0\n2\nbar 2 10\nfoo 1 5\n"  # sorted for determinism
    assert cp.read() == offsets


def test_offset_checkpoint_empty_and_missing(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "cp")
    assert cp.read() == {}
    cp.ensure_exists()
    assert cp.path.read_bytes() == b""
    assert cp.read() == {}
    cp.path.write_bytes(b"0\n")  # missing count line
    assert cp.read() == {}
    cp.write({})
    assert cp.path.read_bytes() == b"0\n0\n"
    assert cp.read() == {}


def test_version_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "cp"

    class VersionOne(OffsetCheckpointFile):
        VERSION = 1

    VersionOne(path).write({("foo", 1): 5})
    assert path.read_bytes() == b"1\n1\nfoo 1 5\n"
    with pytest.raises(CorruptCheckpointError, match="Unrecognised version:1, expected version: 0"):
        OffsetCheckpointFile(path).read()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"0\n2\nfoo 1 5\n", r"Expected \[2\] entries .* but found only \[1\]"),
        (b"0\n1\nfoo 1\n", r"Malformed line in checkpoint file \[.*\]: foo 1"),
        (b"0\n1\nfoo x 5\n", "Malformed line"),
        (b"0\n1\n foo 1 5\n", "Malformed line"),  # Java split keeps a leading empty part
        (b"0\n1\n\n", "Malformed line"),
        (b"x\n", "Malformed line"),
        (b"0\nx\n", "Malformed line"),
        (b"0\n1\nfoo 3000000000 5\n", "Malformed line"),  # partition must fit an int
    ],
)
def test_offset_checkpoint_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=message) as err:
        OffsetCheckpointFile(path).read()
    assert str(path) in str(err.value)


def test_offset_checkpoint_lenient_whitespace(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"0\r\n2\r\nfoo\t1   5  \r\nbar 0 -1\r\n")
    assert OffsetCheckpointFile(path).read() == {("foo", 1): 5, ("bar", 0): -1}


def test_confluent_offset_checkpoints(fixtures_dir: Path, tmp_path: Path) -> None:
    recovery = OffsetCheckpointFile(fixtures_dir / CONFLUENT / OFFSET_CHECKPOINTS[0]).read()
    assert len(recovery) == 104
    assert recovery[("__consumer_offsets", 9)] == 46
    assert recovery[("_confluent-controlcenter-5-1-2-1-actual-group-consumption-rekey", 0)] == 14
    assert recovery[("__consumer_offsets", 22)] == 0
    for name in OFFSET_CHECKPOINTS:
        source = fixtures_dir / CONFLUENT / name
        original = OffsetCheckpointFile(source).read()
        copy = OffsetCheckpointFile(tmp_path / name)
        copy.write(original)
        assert copy.read() == original
        # same lines, possibly in another order (order carries no meaning)
        theirs = source.read_bytes().split(b"\n")
        ours = copy.path.read_bytes().split(b"\n")
        assert theirs[:2] == ours[:2]
        assert sorted(theirs[2:]) == sorted(ours[2:])
    assert OffsetCheckpointFile(fixtures_dir / CONFLUENT / "cleaner-offset-checkpoint").read() == {}


# ---- leader epoch checkpoint and cache (case 28, §9.3, §6 step 11) --------------------------------
def test_epoch_cache_from_recovery_batches(tmp_path: Path) -> None:  # case 28
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    for ple, base in ((0, 104), (1, 106), (1, 108), (2, 110)):
        if ple >= 0 and (cache.latest_epoch is None or ple > cache.latest_epoch):
            cache.assign(ple, base)
    assert cache.entries == [(0, 104), (1, 106), (2, 110)]
    cache.write()
    assert cache.checkpoint is not None
    assert cache.checkpoint.path.read_bytes() == b"0\n3\n0 104\n1 106\n2 110\n"
    assert LeaderEpochCache(tmp_path / "leader-epoch-checkpoint").entries == cache.entries


def test_epoch_cache_assign_rules() -> None:
    cache = LeaderEpochCache()
    assert cache.latest_epoch is None
    assert cache.assign(2, 10)
    assert not cache.assign(2, 10)  # same epoch, same offset
    assert not cache.assign(2, 15)  # same epoch, later offset
    assert cache.assign(2, 6)  # same epoch, earlier offset replaces it
    assert cache.entries == [(2, 6)]
    assert cache.assign(3, 20)
    assert cache.assign(4, 30)
    assert cache.assign(3, 25)  # lower epoch: removes entries from the end with epoch >= 3
    assert cache.entries == [(2, 6), (3, 25)]
    assert cache.assign(5, 7)  # earlier offset: removes entries with start >= 7
    assert cache.entries == [(2, 6), (5, 7)]
    with pytest.raises(ValueError):
        cache.assign(-1, 5)
    with pytest.raises(ValueError):
        cache.assign(1, -5)
    assert cache.epoch_for_offset(6) == 2 and cache.epoch_for_offset(100) == 5
    assert cache.epoch_for_offset(5) is None


def test_epoch_cache_truncation() -> None:
    cache = LeaderEpochCache(entries=[EpochEntry(0, 0), EpochEntry(1, 106), EpochEntry(2, 110)])
    assert cache.truncate_from_end(200) == []
    assert cache.truncate_from_end(110) == [(2, 110)]
    assert cache.entries == [(0, 0), (1, 106)]
    cache.assign(2, 110)
    assert cache.truncate_from_start(50) == [(0, 0)]
    assert cache.entries == [(0, 50), (1, 106), (2, 110)]
    assert cache.truncate_from_start(108) == [(0, 50), (1, 106)]
    assert cache.entries == [(1, 108), (2, 110)]
    assert cache.truncate_from_start(5) == []
    assert cache.truncate_from_start(110) == [(1, 108), (2, 110)]
    assert cache.entries == [(2, 110)]
    assert cache.truncate_from_end(0) == [(2, 110)]
    assert cache.entries == []


def test_confluent_leader_epoch_checkpoints(fixtures_dir: Path, tmp_path: Path) -> None:
    paths = sorted((fixtures_dir / CONFLUENT).glob("*/leader-epoch-checkpoint"))
    assert len(paths) > 100
    for path in paths:
        entries = LeaderEpochCheckpointFile(path).read()
        expected = [(0, 14)] if path.parent.name == "_confluent-monitoring-0" else [(0, 0)]
        assert entries == expected, path
        copy = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
        copy.write(entries)
        assert copy.path.read_bytes() == path.read_bytes()


def test_leader_epoch_checkpoint_errors(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n1\n0 0 0\n")
    with pytest.raises(CorruptCheckpointError, match="Malformed line"):
        LeaderEpochCheckpointFile(path).read()


# ---- partition.metadata (case 46) ---------------------------------------------------------------
def test_partition_metadata_exact_bytes(tmp_path: Path) -> None:
    topic_id = new_topic_id()
    pm = PartitionMetadataFile(tmp_path / "partition.metadata")
    pm.write(topic_id)
    data = pm.path.read_bytes()
    assert data == b"version: 0\ntopic_id: " + topic_id_to_str(topic_id).encode()
    assert not data.endswith(b"\n")
    lines = data.decode().split("\n")
    assert lines == ["version: 0", f"topic_id: {topic_id_to_str(topic_id)}"]
    assert pm.read() == topic_id
    assert pm.read_version_and_topic_id() == (0, topic_id)


def test_topic_id_strings() -> None:
    kafka_style = uuid.UUID(bytes=bytes(range(16)))
    text = topic_id_to_str(kafka_style)
    assert text == "AAECAwQFBgcICQoLDA0ODw" and len(text) == 22
    assert topic_id_from_str(text) == kafka_style
    assert topic_id_from_str(text + "==") == kafka_style
    assert topic_id_to_str(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    for bad in ("AAECAwQFBgcICQoLDA0O", "AAECAwQFBgcICQoLDA0ODw" * 2, "AAECAwQFBgcICQoLDA0OD!"):
        with pytest.raises(ValueError):
            topic_id_from_str(bad)
    for _ in range(200):
        tid = new_topic_id()
        assert tid.int not in (0, 1)
        assert not topic_id_to_str(tid).startswith("-")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "Invalid topic ID"),
        (b"version: -1\ntopic_id: AAECAwQFBgcICQoLDA0ODw", "Unrecognized version"),
        (b"version:0\ntopic_id: AAECAwQFBgcICQoLDA0ODw", "Malformed line"),
        (b"version: 0\n", "Malformed line"),
        (b"version: x\ntopic_id: AAECAwQFBgcICQoLDA0ODw", "Malformed line"),
        (b"topic_id: AAECAwQFBgcICQoLDA0ODw\nversion: 0", "Malformed line"),
        (b"version: 0\ntopic_id: AAEC", "16 bytes"),
    ],
)
def test_partition_metadata_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=message):
        PartitionMetadataFile(path).read()


def test_partition_metadata_newer_version_and_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(b"version: 1\ntopic_id: AAECAwQFBgcICQoLDA0ODw\n")
    assert PartitionMetadataFile(path).read_version_and_topic_id()[0] == 1


# ---- meta.properties --------------------------------------------------------------------------
def test_confluent_meta_properties(fixtures_dir: Path) -> None:
    meta = MetaProperties.read(fixtures_dir / CONFLUENT / "meta.properties")
    assert meta.version == 0
    assert meta.node_id == 1001
    assert meta.cluster_id is None
    assert meta.to_properties() == {"version": "0", "broker.id": "1001"}


def test_meta_properties_v1_round_trip(tmp_path: Path) -> None:
    dir_id = new_topic_id()
    meta = MetaProperties(
        version=1, cluster_id="MkU3OEVBNTcwNTJENDM2Qg", node_id=3, directory_id=dir_id
    )
    path = tmp_path / "meta.properties"
    meta.write(path, date="Fri May 24 22:16:18 UTC 2019")
    text = path.read_text()
    lines = text.split("\n")
    assert lines[0] == "#" and lines[1] == "#Fri May 24 22:16:18 UTC 2019" and lines[-1] == ""
    assert sorted(lines[2:-1]) == sorted(
        [
            "version=1",
            "cluster.id=MkU3OEVBNTcwNTJENDM2Qg",
            "node.id=3",
            f"directory.id={topic_id_to_str(dir_id)}",
        ]
    )
    assert MetaProperties.read(path) == meta
    meta.write(path)  # real date line
    assert path.read_text().split("\n")[1].startswith("#")


def test_meta_properties_v1_requires_ids(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_text("#\nversion=1\nnode.id=1\n")
    with pytest.raises(CorruptCheckpointError, match="cluster.id"):
        MetaProperties.read(path)
    path.write_text("#\nversion=1\ncluster.id=abc\n")
    with pytest.raises(CorruptCheckpointError, match="node.id"):
        MetaProperties.read(path)
    path.write_text("version=2\n")
    with pytest.raises(CorruptCheckpointError, match="version"):
        MetaProperties.read(path)


def test_java_properties_parsing() -> None:
    text = "# c\n! also\n  a = 1\nb:2\nc 3\nd=x\\\n   y\ne=\\u0041\\=\\:\nf\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "xy", "e": "A=:", "f": ""}


# ---- clean shutdown (case 47) -----------------------------------------------------------------
def test_clean_shutdown_file(tmp_path: Path) -> None:
    marker = CleanShutdownFile(tmp_path)
    assert not marker.exists
    assert marker.read() == -1
    marker.write(10)
    assert marker.exists
    assert marker.path.name == ".kafka_cleanshutdown"
    assert marker.path.read_bytes() == b'{"version":0,"brokerEpoch":10}'
    assert marker.read() == 10
    assert marker.delete()
    assert not marker.exists and not marker.delete()
    marker.write_empty()  # <= 3.6 form
    assert marker.exists and marker.read() == -1
