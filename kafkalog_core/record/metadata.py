"""KRaft metadata records (`__cluster_metadata`): the frame, and the messages settings come from.

A metadata record is an ordinary record with a null key; its value is a frame (Kafka's
AbstractApiMessageSerde): an unsigned varint frame version (1; 0 was the 2.8 preview's, which
Kafka refuses too), an unsigned varint api key, an unsigned varint message version, then the
message in the flexible-version encoding of KIP-482: compact strings (unsigned varint length + 1,
0 = null), 16-byte uuids, and at the end a tagged-field section (an unsigned varint count, then
tag, size and bytes each; tags this reader does not know are skipped, as Kafka skips them).

The messages read here, from Kafka's metadata schemas (version 0, flexible from 0):
- TopicRecord (api key 2): Name, TopicId;
- PartitionRecord (3, versions 0-2): PartitionId, TopicId, Replicas, Isr, RemovingReplicas,
  AddingReplicas, Leader, LeaderEpoch, PartitionEpoch, from version 1 Directories (a log dir
  id per replica); tagged: LeaderRecoveryState (0), from version 2 the eligible leader replicas
  (1, 2), which are skipped;
- PartitionChangeRecord (5, versions 0-2): PartitionId, TopicId, every other field tagged and
  present only when it changed: Isr (0), Leader (1; -2 = unchanged), Replicas (2),
  RemovingReplicas (3), AddingReplicas (4), LeaderRecoveryState (5), Directories (8);
- ConfigRecord (4): ResourceType int8 (2 topic, 4 broker), ResourceName, Name, Value (nullable:
  null deletes the setting);
- RemoveTopicRecord (9): TopicId (the topic and its configs go);
- BeginTransactionRecord (23), EndTransactionRecord (24), AbortTransactionRecord (25): the bounds
  of a metadata transaction (KIP-868); only their api key matters.
Every other api key is left alone: `parse_metadata_record` returns None for it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, TypeVar

from kafkalog_core.errors import CorruptRecordError, MetadataRecordError
from kafkalog_core.record.varint import decode_unsigned_varint

T = TypeVar("T")

FRAME_VERSION: Final = 1
CONFIG_RESOURCE_TOPIC: Final = 2  # ConfigResource.Type.TOPIC
CONFIG_RESOURCE_BROKER: Final = 4  # ConfigResource.Type.BROKER ("" = the cluster's default)


class MetadataApiKey(IntEnum):
    """The api keys of the metadata records this reader parses (MetadataRecordType)."""

    TOPIC = 2
    PARTITION = 3
    CONFIG = 4
    PARTITION_CHANGE = 5
    REMOVE_TOPIC = 9
    BEGIN_TRANSACTION = 23
    END_TRANSACTION = 24
    ABORT_TRANSACTION = 25


READ_API_KEYS: Final = frozenset(int(k) for k in MetadataApiKey)
# the records of a partition's replicas and leader: one or more per partition, so most of a log
PARTITION_API_KEYS: Final = frozenset((MetadataApiKey.PARTITION, MetadataApiKey.PARTITION_CHANGE))
# the newest version of each message this reader knows (Kafka 4.1's metadata schemas)
_MAX_VERSION: Final = {MetadataApiKey.PARTITION: 2, MetadataApiKey.PARTITION_CHANGE: 2}
LEADER_UNCHANGED: Final = -2  # PartitionChangeRecord.Leader's default


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """A partition as the controller created (or snapshotted) it."""

    partition: int
    topic_id: uuid.UUID
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    leader: int  # -1: no leader
    leader_epoch: int
    directories: tuple[uuid.UUID, ...] = ()  # per replica, from version 1


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """What changed in a partition; None (or LEADER_UNCHANGED) for a field that did not."""

    partition: int
    topic_id: uuid.UUID
    isr: tuple[int, ...] | None = None
    leader: int = LEADER_UNCHANGED
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    directories: tuple[uuid.UUID, ...] | None = None


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    resource_type: int
    resource_name: str
    name: str
    value: str | None  # None: the setting is deleted (back to the default)


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class TransactionRecord:
    """Begin, End or Abort of a metadata transaction."""

    api_key: MetadataApiKey


MetadataRecord = (
    TopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | ConfigRecord
    | RemoveTopicRecord
    | TransactionRecord
)


class _Reader:
    """The flexible-version primitives over one record value."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def uvarint(self) -> int:
        value, self.pos = decode_unsigned_varint(self.data, self.pos)
        return value

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError(
                f"{what} of {n} bytes at position {self.pos} runs past the end of the record"
            )
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int8(self) -> int:
        return int.from_bytes(self.take(1, "int8"), "big", signed=True)

    def int32(self) -> int:
        return int.from_bytes(self.take(4, "int32"), "big", signed=True)

    def compact_array(self, field: str, item: Callable[[], T]) -> tuple[T, ...] | None:
        """A compact array (unsigned varint count + 1, 0 = null) of `item`s."""
        count = self.uvarint() - 1
        if count < 0:
            return None
        if count > len(self.data) - self.pos:  # every item is at least one byte
            raise CorruptRecordError(f"array {field} of {count} items runs past the end")
        return tuple(item() for _ in range(count))

    def int32_array(self, field: str) -> tuple[int, ...]:
        items = self.compact_array(field, self.int32)
        if items is None:
            raise CorruptRecordError(f"non-nullable field {field} was serialized as null")
        return items

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.take(16, "uuid"))

    def compact_string(self, field: str, *, nullable: bool = False) -> str | None:
        length = self.uvarint() - 1
        if length < 0:
            if not nullable:
                raise CorruptRecordError(f"non-nullable field {field} was serialized as null")
            return None
        raw = self.take(length, f"string {field}")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError(f"string {field} is not valid UTF-8") from None

    def tagged_fields(self) -> dict[int, _Reader]:
        """The tagged fields by tag, each a reader over its bytes (unknown ones are ignored)."""
        fields = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = _Reader(self.take(self.uvarint(), f"tagged field {tag}"))
        return fields

    def end(self, name: str) -> None:
        if self.pos != len(self.data):
            raise CorruptRecordError(f"{len(self.data) - self.pos} byte(s) of garbage after {name}")


def metadata_api_key(value: bytes) -> tuple[int, int]:
    """(api key, version) of one metadata record value, its frame version checked."""
    reader = _Reader(value)
    try:
        frame = reader.uvarint()
        if frame != FRAME_VERSION:
            raise MetadataRecordError(
                f"metadata record frame version {frame} (only {FRAME_VERSION} is known"
                + ("; frame version 0 is KRaft's 2.8 preview)" if frame == 0 else ")")
            )
        return reader.uvarint(), reader.uvarint()
    except CorruptRecordError as error:
        raise MetadataRecordError(f"metadata record frame: {error}") from None


def parse_metadata_record(value: bytes) -> MetadataRecord | None:
    """The record a metadata record value holds, or None for an api key not read here."""
    api_key, version = metadata_api_key(value)
    if api_key not in READ_API_KEYS:
        return None
    key = MetadataApiKey(api_key)
    name = f"{key.name.title().replace('_', '')}Record"
    newest = _MAX_VERSION.get(key, 0)
    if version > newest:
        raise MetadataRecordError(f"{name} version {version} is newer than this reader ({newest})")
    reader = _Reader(value)
    for _ in range(3):  # the frame: version, api key, message version
        reader.uvarint()
    try:
        record: MetadataRecord
        if key is MetadataApiKey.TOPIC:
            record = TopicRecord(str(reader.compact_string("Name")), reader.uuid())
        elif key is MetadataApiKey.CONFIG:
            record = ConfigRecord(
                reader.int8(),
                str(reader.compact_string("ResourceName")),
                str(reader.compact_string("Name")),
                reader.compact_string("Value", nullable=True),
            )
        elif key is MetadataApiKey.REMOVE_TOPIC:
            record = RemoveTopicRecord(reader.uuid())
        elif key is MetadataApiKey.PARTITION:
            record = _partition_record(reader, version)
        elif key is MetadataApiKey.PARTITION_CHANGE:
            record = _partition_change_record(reader, version)
        else:
            return TransactionRecord(key)  # their fields do not matter here
        if key is not MetadataApiKey.PARTITION_CHANGE:  # its reader took its tagged fields
            reader.tagged_fields()
        reader.end(name)
    except CorruptRecordError as error:
        raise MetadataRecordError(f"{name}: {error}") from None
    return record


def _partition_record(reader: _Reader, version: int) -> PartitionRecord:
    partition, topic_id = reader.int32(), reader.uuid()
    replicas, isr = reader.int32_array("Replicas"), reader.int32_array("Isr")
    removing, adding = reader.int32_array("RemovingReplicas"), reader.int32_array("AddingReplicas")
    leader, leader_epoch = reader.int32(), reader.int32()
    reader.int32()  # PartitionEpoch
    directories: tuple[uuid.UUID, ...] = ()
    if version >= 1:
        directories = reader.compact_array("Directories", reader.uuid) or ()
    return PartitionRecord(
        partition, topic_id, replicas, isr, removing, adding, leader, leader_epoch, directories
    )


def _partition_change_record(reader: _Reader, version: int) -> PartitionChangeRecord:
    partition, topic_id = reader.int32(), reader.uuid()
    tagged = reader.tagged_fields()

    def ints(tag: int, field: str) -> tuple[int, ...] | None:
        if tag not in tagged:
            return None
        field_reader = tagged[tag]
        value = field_reader.compact_array(field, field_reader.int32)
        field_reader.end(field)
        return value

    leader = LEADER_UNCHANGED
    if 1 in tagged:
        leader = tagged[1].int32()
        tagged[1].end("Leader")
    directories = None
    if version >= 1 and 8 in tagged:
        directories = tagged[8].compact_array("Directories", tagged[8].uuid)
        tagged[8].end("Directories")
    return PartitionChangeRecord(
        partition,
        topic_id,
        isr=ints(0, "Isr"),
        leader=leader,
        replicas=ints(2, "Replicas"),
        removing_replicas=ints(3, "RemovingReplicas"),
        adding_replicas=ints(4, "AddingReplicas"),
        directories=directories,
    )
