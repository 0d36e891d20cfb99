"""A KRaft broker's metadata log read for topic ids and settings.

The record values are built here from Kafka's metadata schemas (TopicRecord.json,
ConfigRecord.json, RemoveTopicRecord.json, the transaction records; AbstractApiMessageSerde's
frame) by a small encoder of this file, independent of the reader and checked against
kafka-python's schema-driven encoder, and put in batches by our record encoder, in
`__cluster_metadata-0` as a broker lays it out.
"""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

import pytest

from kafkalog_core.errors import MetadataRecordError
from kafkalog_core.log.cluster_metadata import PartitionState, read_cluster_metadata
from kafkalog_core.record.control import ControlRecordType
from kafkalog_core.record.encoder import Record, build_batch
from kafkalog_core.record.metadata import (
    ConfigRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    parse_metadata_record,
)

ORDERS_ID = uuid.UUID("6f0d3f8e-3c2a-4a8e-9a55-0c2b1d1f4e01")
OLD_ID = uuid.UUID("0b7c2e51-9d0e-4f4b-8d7e-3f1f2a9b6c02")
NEW_ID = uuid.UUID("5a1e9c3d-7b2f-4e6a-b0c4-8d9e1f2a3b03")


# ---- an encoder written from the schemas (KIP-482 flexible versions) ----------------------------
def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def compact_string(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    raw = text.encode()
    return uvarint(len(raw) + 1) + raw


def frame(api_key: int, body: bytes, *, tagged: bytes = b"\x00", version: int = 0) -> bytes:
    """frame version 1, api key, version, the message, its tagged fields (none: one 0 byte)."""
    return uvarint(1) + uvarint(api_key) + uvarint(version) + body + tagged


def topic_record(name: str, topic_id: uuid.UUID) -> bytes:
    return frame(2, compact_string(name) + topic_id.bytes)


def config_record(
    name: str, value: str | None, *, resource: str = "orders", kind: int = 2, tagged=b"\x00"
) -> bytes:
    body = struct.pack(">b", kind) + compact_string(resource) + compact_string(name)
    return frame(4, body + compact_string(value), tagged=tagged)


def remove_topic_record(topic_id: uuid.UUID) -> bytes:
    return frame(9, topic_id.bytes)


def partition_record(topic_id: uuid.UUID, partition: int) -> bytes:
    """PartitionRecord v0: what a metadata log holds most of; the reader must pass it by."""
    replicas = uvarint(2) + struct.pack(">i", 1)  # compact array of one int32
    body = struct.pack(">i", partition) + topic_id.bytes + replicas + replicas
    body += uvarint(1) + uvarint(1) + struct.pack(">iii", 1, 0, 0)
    return frame(3, body)


def begin_transaction(name: str) -> bytes:  # Name is tagged field 0
    name_bytes = compact_string(name)
    return frame(23, b"", tagged=uvarint(1) + uvarint(0) + uvarint(len(name_bytes)) + name_bytes)


END_TRANSACTION = frame(24, b"")
ABORT_TRANSACTION = frame(25, b"")


# ---- batches in a partition dir, by our record encoder ------------------------------------------
def data_batch(base_offset: int, values: list[bytes]) -> bytes:
    records = [Record(i, 1_700_000_000_000, None, v) for i, v in enumerate(values)]
    return build_batch(records, base_offset=base_offset, partition_leader_epoch=1)


def control_batch(base_offset: int, kind: ControlRecordType) -> bytes:
    record = Record(0, 1_700_000_000_000, kind.key_bytes(), b"\x00\x00" + b"\x00" * 8)
    return build_batch([record], base_offset=base_offset, is_control=True)


def metadata_dir(root: Path) -> Path:
    pdir = root / "__cluster_metadata-0"
    pdir.mkdir(parents=True, exist_ok=True)
    return pdir


def test_no_metadata_log_is_none(tmp_path: Path) -> None:
    assert read_cluster_metadata(tmp_path) is None


def test_the_log_alone_gives_topics_their_ids_and_settings(tmp_path: Path) -> None:
    batches = [
        control_batch(0, ControlRecordType.LEADER_CHANGE),
        data_batch(
            1,
            [
                topic_record("orders", ORDERS_ID),
                partition_record(ORDERS_ID, 0),
                config_record("cleanup.policy", "compact"),
                config_record("retention.ms", "1000", tagged=uvarint(1) + b"\x05\x02ab"),
                config_record("segment.bytes", "8192"),
                config_record("log.retention.ms", "5", resource="", kind=4),  # a broker's
            ],
        ),
        data_batch(7, [config_record("segment.bytes", None)]),  # null: back to the default
        data_batch(
            8, [topic_record("old", OLD_ID), config_record("retention.ms", "1", resource="old")]
        ),
        data_batch(10, [remove_topic_record(OLD_ID), topic_record("old", NEW_ID)]),
        data_batch(12, [begin_transaction("t"), config_record("retention.bytes", "9")]),
        data_batch(14, [config_record("max.message.bytes", "100"), END_TRANSACTION]),
        data_batch(16, [begin_transaction("u"), config_record("retention.ms", "2")]),
        data_batch(18, [ABORT_TRANSACTION]),
        data_batch(19, [begin_transaction("v"), config_record("retention.ms", "3")]),  # never ends
    ]
    (metadata_dir(tmp_path) / f"{0:020d}.log").write_bytes(b"".join(batches))
    metadata = read_cluster_metadata(tmp_path)
    assert metadata is not None
    assert metadata.topics == {"orders": ORDERS_ID, "old": NEW_ID}
    assert metadata.settings_of("orders") == {
        "cleanup.policy": "compact",
        "retention.ms": "1000",
        "retention.bytes": "9",
        "max.message.bytes": "100",
    }
    assert metadata.settings_of("old") == {}  # the removed topic's settings went with it
    assert metadata.settings_of("missing") is None
    assert metadata.broker_configs == {"": {"log.retention.ms": "5"}}
    assert metadata.read_from == "the log (no snapshot)"


def test_the_newest_snapshot_then_the_log_after_it(tmp_path: Path) -> None:
    pdir = metadata_dir(tmp_path)
    old_snapshot = [data_batch(0, [topic_record("orders", OLD_ID)])]
    (pdir / "00000000000000000002-0000000001.checkpoint").write_bytes(b"".join(old_snapshot))
    snapshot = [
        control_batch(0, ControlRecordType.SNAPSHOT_HEADER),
        data_batch(1, [topic_record("orders", ORDERS_ID), config_record("retention.ms", "-1")]),
        control_batch(3, ControlRecordType.SNAPSHOT_FOOTER),
    ]
    (pdir / "00000000000000000005-0000000002.checkpoint").write_bytes(b"".join(snapshot))
    (pdir / "00000000000000000009-0000000002.checkpoint.part").write_bytes(b"partial")
    # a segment wholly below the snapshot (skipped), one that spans it, one above it
    (pdir / f"{0:020d}.log").write_bytes(data_batch(0, [config_record("cleanup.policy", "x")]))
    (pdir / f"{1:020d}.log").write_bytes(
        data_batch(1, [config_record("retention.ms", "7")] * 4)  # offsets 1..4: in the snapshot
        + data_batch(5, [config_record("segment.ms", "60000")])
    )
    (pdir / f"{6:020d}.log").write_bytes(data_batch(6, [config_record("retention.bytes", "5")]))
    metadata = read_cluster_metadata(tmp_path)
    assert metadata is not None
    assert metadata.topics == {"orders": ORDERS_ID}
    assert metadata.settings_of("orders") == {
        "retention.ms": "-1",
        "segment.ms": "60000",
        "retention.bytes": "5",
    }
    assert metadata.read_from == (
        "snapshot 00000000000000000005-0000000002.checkpoint and the log from offset 5"
    )


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (uvarint(0) + uvarint(4) + uvarint(0), "frame version 0 .*2.8 preview"),
        (frame(4, b"\x02", tagged=b""), r"ConfigRecord: .*runs past the end"),
        (frame(2, compact_string("t") + ORDERS_ID.bytes) + b"!", "garbage after TopicRecord"),
        (frame(4, b"\x02" + compact_string(None)), "ResourceName was serialized as null"),
        (frame(2, compact_string("t") + ORDERS_ID.bytes, version=1), "TopicRecord version 1"),
    ],
)
def test_a_bad_record_is_one_line_naming_the_file(tmp_path: Path, value: bytes, match: str) -> None:
    (metadata_dir(tmp_path) / f"{0:020d}.log").write_bytes(data_batch(0, [value]))
    with pytest.raises(MetadataRecordError, match=f"__cluster_metadata-0/{0:020d}.log: .*{match}"):
        read_cluster_metadata(tmp_path)


def test_a_corrupt_batch_is_one_line_naming_the_file(tmp_path: Path) -> None:
    batch = bytearray(data_batch(0, [topic_record("orders", ORDERS_ID)]))
    batch[-1] ^= 0xFF
    (metadata_dir(tmp_path) / f"{0:020d}.log").write_bytes(bytes(batch))
    with pytest.raises(MetadataRecordError, match=r"__cluster_metadata-0/0+\.log: .*(?i:crc)"):
        read_cluster_metadata(tmp_path)


# Kafka's metadata schemas (metadata/src/main/resources/common/metadata/*.json), as data for
# kafka-python's schema-driven KIP-482 encoder: a second encoder we did not write.
SCHEMAS = {
    2: [{"name": "Name", "type": "string"}, {"name": "TopicId", "type": "uuid"}],
    4: [
        {"name": "ResourceType", "type": "int8"},
        {"name": "ResourceName", "type": "string"},
        {"name": "Name", "type": "string"},
        {"name": "Value", "type": "string", "nullableVersions": "0+"},
    ],
    9: [{"name": "TopicId", "type": "uuid"}],
}


def kafka_python_value(api_key: int, *fields: object) -> bytes:
    from kafka.protocol.schemas import StructField

    schema = {
        "name": f"Record{api_key}",
        "type": "metadata",
        "versions": "0+",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [{**f, "versions": "0+"} for f in SCHEMAS[api_key]],
    }
    body = StructField(schema).encode(fields, version=0, compact=True, tagged=True)
    return uvarint(1) + uvarint(api_key) + uvarint(0) + body


@pytest.mark.parametrize(
    ("api_key", "fields", "ours", "parsed"),
    [
        (
            2,
            ("orders", ORDERS_ID),
            topic_record("orders", ORDERS_ID),
            TopicRecord("orders", ORDERS_ID),
        ),
        (
            4,
            (2, "orders", "retention.ms", "-1"),
            config_record("retention.ms", "-1"),
            ConfigRecord(2, "orders", "retention.ms", "-1"),
        ),
        (
            4,
            (4, "", "log.retention.ms", None),
            config_record("log.retention.ms", None, resource="", kind=4),
            ConfigRecord(4, "", "log.retention.ms", None),
        ),
        (9, (OLD_ID,), remove_topic_record(OLD_ID), RemoveTopicRecord(OLD_ID)),
    ],
)
def test_records_as_kafka_pythons_schema_encoder_writes_them(api_key, fields, ours, parsed) -> None:
    value = kafka_python_value(api_key, *fields)
    assert value == ours  # the two encoders agree on the bytes...
    assert parse_metadata_record(value) == parsed  # ...and the reader reads them


# PartitionRecord and PartitionChangeRecord as Kafka 4.1's schemas define them (versions 0-2,
# tagged fields), for kafka-python's encoder: the fields' names, types, versions and tags.
def _field(name: str, kind: str, versions: str = "0+", **more: object) -> dict[str, object]:
    return {"name": name, "type": kind, "versions": versions, **more}


def _tagged(name: str, kind: str, tag: int, versions: str = "0+", default: str = "null"):
    nullable = {"nullableVersions": versions} if kind.startswith("[]") else {}
    return _field(
        name, kind, versions, taggedVersions=versions, tag=tag, default=default, **nullable
    )


PARTITION_SCHEMAS = {
    3: [
        _field("PartitionId", "int32"),
        _field("TopicId", "uuid"),
        _field("Replicas", "[]int32"),
        _field("Isr", "[]int32"),
        _field("RemovingReplicas", "[]int32"),
        _field("AddingReplicas", "[]int32"),
        _field("Leader", "int32"),
        _tagged("LeaderRecoveryState", "int8", 0, default="0"),
        _field("LeaderEpoch", "int32"),
        _field("PartitionEpoch", "int32"),
        _field("Directories", "[]uuid", "1+"),
        _tagged("EligibleLeaderReplicas", "[]int32", 1, "2+"),
        _tagged("LastKnownElr", "[]int32", 2, "2+"),
    ],
    5: [
        _field("PartitionId", "int32"),
        _field("TopicId", "uuid"),
        _tagged("Isr", "[]int32", 0),
        _tagged("Leader", "int32", 1, default="-2"),
        _tagged("Replicas", "[]int32", 2),
        _tagged("RemovingReplicas", "[]int32", 3),
        _tagged("AddingReplicas", "[]int32", 4),
        _tagged("LeaderRecoveryState", "int8", 5, default="-1"),
        _tagged("Directories", "[]uuid", 8, "1+"),
        _tagged("EligibleLeaderReplicas", "[]int32", 6, "2+"),
        _tagged("LastKnownElr", "[]int32", 7, "2+"),
    ],
}


def partition_value(api_key: int, version: int, **fields: object) -> bytes:
    """A PartitionRecord (3) or PartitionChangeRecord (5) value by kafka-python's encoder."""
    from kafka.protocol.schemas import StructField

    schema = {
        "name": f"Record{api_key}",
        "type": "metadata",
        "validVersions": "0-2",
        "flexibleVersions": "0+",
        "fields": PARTITION_SCHEMAS[api_key],
    }
    body = StructField(schema).encode(fields, version=version, compact=True, tagged=True)
    return uvarint(1) + uvarint(api_key) + uvarint(version) + body


DIR_A = uuid.UUID("11111111-2222-4333-8444-555555555555")
DIR_B = uuid.UUID("66666666-7777-4888-9999-aaaaaaaaaaaa")


def created(partition: int, replicas: list[int], version: int = 2, **more: object) -> bytes:
    fields: dict[str, object] = {
        "partition_id": partition,
        "topic_id": ORDERS_ID,
        "replicas": replicas,
        "isr": replicas,
        "removing_replicas": [],
        "adding_replicas": [],
        "leader": replicas[0],
        "leader_epoch": 0,
        "partition_epoch": 0,
        "directories": [DIR_A] * len(replicas),
        "leader_recovery_state": 0,
        "eligible_leader_replicas": [],
        "last_known_elr": [],
        **more,
    }
    return partition_value(3, version, **fields)


def changed(partition: int, version: int = 2, **fields: object) -> bytes:
    return partition_value(5, version, partition_id=partition, topic_id=ORDERS_ID, **fields)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_partition_records_of_every_version_as_kafka_pythons_encoder_writes_them(version) -> None:
    parsed = parse_metadata_record(created(4, [1, 2, 3], version, leader_epoch=7))
    assert parsed == PartitionRecord(
        4, ORDERS_ID, (1, 2, 3), (1, 2, 3), (), (), 1, 7, (DIR_A,) * 3 if version else ()
    )
    change = changed(4, version, isr=[2], leader=2, directories=[DIR_B] * 3)
    assert parse_metadata_record(change) == PartitionChangeRecord(
        4, ORDERS_ID, isr=(2,), leader=2, directories=(DIR_B,) * 3 if version else None
    )
    assert parse_metadata_record(changed(4, version)) == PartitionChangeRecord(4, ORDERS_ID)


def test_partitions_are_replayed_only_when_asked(tmp_path: Path) -> None:
    """Created, then changed: leader and ISR moved, a reassignment started and finished (its
    directories unknown until a record names them), a broker fenced (no leader); a removed
    topic's partitions go with it."""
    batches = [
        data_batch(0, [topic_record("orders", ORDERS_ID), created(0, [1]), created(1, [1, 2])]),
        data_batch(3, [changed(1, isr=[2], leader=2)]),
        data_batch(4, [changed(0, replicas=[1, 3], adding_replicas=[3])]),
        data_batch(5, [changed(0, isr=[1, 3], adding_replicas=[])]),
        data_batch(6, [changed(1, leader=-1), changed(9, leader=1)]),  # 9: never created
        data_batch(8, [topic_record("old", OLD_ID), remove_topic_record(OLD_ID)]),
    ]
    (metadata_dir(tmp_path) / f"{0:020d}.log").write_bytes(b"".join(batches))
    assert read_cluster_metadata(tmp_path).partitions == {}  # maintenance's read: not parsed
    metadata = read_cluster_metadata(tmp_path, partitions=True)
    assert metadata is not None
    assert metadata.partitions_of("orders") == {
        0: PartitionState((1, 3), (1, 3), 1, (), (), ()),
        1: PartitionState((1, 2), (2,), -1, (), (), (DIR_A, DIR_A)),
    }
    assert metadata.partitions_of("orders")[1].directory_of(2) == DIR_A
    assert metadata.partitions_of("orders")[0].directory_of(3) is None
    assert metadata.partitions_of("old") is None and OLD_ID not in metadata.partitions


def test_a_partition_record_newer_than_the_reader_is_one_line(tmp_path: Path) -> None:
    value = created(0, [1], version=2)
    newer = value[:2] + uvarint(3) + value[3:]
    (metadata_dir(tmp_path) / f"{0:020d}.log").write_bytes(data_batch(0, [newer]))
    with pytest.raises(MetadataRecordError, match="PartitionRecord version 3 is newer .*2"):
        read_cluster_metadata(tmp_path, partitions=True)
