"""KRaft metadata records (`__cluster_metadata`): the frame, and the messages settings come from.

A metadata record is an ordinary record with a null key; its value is a frame (Kafka's
AbstractApiMessageSerde): an unsigned varint frame version (1; 0 was the 2.8 preview's, which
Kafka refuses too), an unsigned varint api key, an unsigned varint message version, then the
message in the flexible-version encoding of KIP-482: compact strings (unsigned varint length + 1,
0 = null), 16-byte uuids, and at the end a tagged-field section (an unsigned varint count, then
tag, size and bytes each; tags this reader does not know are skipped, as Kafka skips them).

The messages read here, from Kafka's metadata schemas (version 0, flexible from 0):
- TopicRecord (api key 2): Name, TopicId;
- ConfigRecord (4): ResourceType int8 (2 topic, 4 broker), ResourceName, Name, Value (nullable:
  null deletes the setting);
- RemoveTopicRecord (9): TopicId (the topic and its configs go);
- BeginTransactionRecord (23), EndTransactionRecord (24), AbortTransactionRecord (25): the bounds
  of a metadata transaction (KIP-868); only their api key matters.
Every other api key is left alone: `parse_metadata_record` returns None for it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from kafkalog_core.errors import CorruptRecordError, MetadataRecordError
from kafkalog_core.record.varint import decode_unsigned_varint

FRAME_VERSION: Final = 1
CONFIG_RESOURCE_TOPIC: Final = 2  # ConfigResource.Type.TOPIC
CONFIG_RESOURCE_BROKER: Final = 4  # ConfigResource.Type.BROKER ("" = the cluster's default)


class MetadataApiKey(IntEnum):
    """The api keys of the metadata records this reader parses (MetadataRecordType)."""

    TOPIC = 2
    CONFIG = 4
    REMOVE_TOPIC = 9
    BEGIN_TRANSACTION = 23
    END_TRANSACTION = 24
    ABORT_TRANSACTION = 25


READ_API_KEYS: Final = frozenset(int(k) for k in MetadataApiKey)


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID


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


MetadataRecord = TopicRecord | ConfigRecord | RemoveTopicRecord | TransactionRecord


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

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # the tag: none of these messages declares one
            self.take(self.uvarint(), "tagged field")

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
    if version != 0:
        raise MetadataRecordError(f"{name} version {version} is newer than this reader (0)")
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
        else:
            return TransactionRecord(key)  # their fields do not matter here
        reader.tagged_fields()
        reader.end(name)
    except CorruptRecordError as error:
        raise MetadataRecordError(f"{name}: {error}") from None
    return record
