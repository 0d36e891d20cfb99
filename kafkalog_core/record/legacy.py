"""Magic 0/1 message sets (§1.9), read-only, into the same RECORD_SCHEMA as v2 batches.

Old segments and fetch responses can still hold them (mixed with v2 batches). Per-message
Python is fine here: nothing writes this format any more, so it is never a hot path.

Message layout (big-endian), after the 12-byte log overhead (offset int64, size int32):

    crc        uint32   CRC-32 (IEEE) of magic .. end
    magic      int8     0 or 1
    attributes int8     bits 0-2 codec, bit 3 timestamp type (v1 only)
    timestamp  int64    v1 only
    keyLength  int32    -1 = null
    key
    valueLength int32   -1 = null
    value               for a compressed wrapper: a compressed message set

Inner offsets of a v1 wrapper are relative (absolute = wrapper offset - last inner relative offset
+ inner relative offset); a v0 wrapper's inner offsets are absolute. A LogAppendTime v1 wrapper
gives every inner message the wrapper's timestamp.
"""

from __future__ import annotations

import struct
import zlib

import pyarrow as pa

from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.record.batch import (
    COMPRESSION_CODEC_MASK,
    LOG_OVERHEAD,
    MAGIC_V0,
    MAGIC_V1,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Compression,
)
from kafkalog_core.record.schema import HEADERS_TYPE, RECORD_SCHEMA, RECORD_SIZE_FIELD

__all__ = ["LegacyMessage", "decode_legacy_entry", "iter_legacy_messages"]

_OFFSET_SIZE = struct.Struct(">qi")
_CRC_MAGIC_ATTR = struct.Struct(">IbB")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
# body bytes after the log overhead: crc 4 + magic 1 + attributes 1 [+ timestamp 8] + 4 + 4
_MIN_BODY = {MAGIC_V0: 14, MAGIC_V1: 22}
NO_TIMESTAMP_TYPE = -1


class LegacyMessage:
    """One decoded v0/v1 message (slots only: these are produced one by one)."""

    __slots__ = (
        "offset",
        "magic",
        "attributes",
        "timestamp",
        "key",
        "value",
        "position",
        "crc",
        "crc_valid",
        "stored_magic",
    )

    def __init__(
        self,
        offset: int,
        magic: int,
        attributes: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        position: int,
        crc: int,
        crc_valid: bool,
    ) -> None:
        self.offset = offset
        self.magic = magic
        self.attributes = attributes
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.position = position
        self.crc = crc
        self.crc_valid = crc_valid
        self.stored_magic = magic  # as written: a v0 wrapper's inner messages read as v0

    @property
    def codec(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        if self.magic == MAGIC_V0:
            return NO_TIMESTAMP_TYPE
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0


def _read_message(
    view: memoryview, position: int, limit: int, where: str
) -> tuple[LegacyMessage, int]:
    """Parse the message at `position`; returns it and the position after it."""
    if position + LOG_OVERHEAD > limit:
        raise CorruptRecordError(f"{where}: truncated message at byte {position}")
    offset, size = _OFFSET_SIZE.unpack_from(view, position)
    body = position + LOG_OVERHEAD
    end = body + size
    if size < _MIN_BODY[MAGIC_V0]:
        raise CorruptRecordError(f"{where}: message at byte {position} has size {size} below 14")
    if end > limit:
        raise CorruptRecordError(
            f"{where}: message at byte {position} declares {size} bytes but only {limit - body} remain"
        )
    crc, magic, attributes = _CRC_MAGIC_ATTR.unpack_from(view, body)
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise CorruptRecordError(
            f"{where}: message at byte {position} has magic {magic}, expected 0 or 1"
        )
    if size < _MIN_BODY[magic]:
        raise CorruptRecordError(
            f"{where}: magic {magic} message at byte {position} has size {size} below {_MIN_BODY[magic]}"
        )
    at = body + 6
    timestamp = NO_TIMESTAMP
    if magic == MAGIC_V1:
        timestamp = _INT64.unpack_from(view, at)[0]
        at += 8
    key, at = _read_bytes(view, at, end, where, position, "key")
    value, at = _read_bytes(view, at, end, where, position, "value")
    if at != end:
        raise CorruptRecordError(
            f"{where}: message at byte {position}: {end - at} bytes left after the value"
        )
    crc_valid = (zlib.crc32(view[body + 4 : end]) & 0xFFFFFFFF) == crc
    return LegacyMessage(
        offset, magic, attributes, timestamp, key, value, position, crc, crc_valid
    ), end


def _read_bytes(
    view: memoryview, at: int, end: int, where: str, position: int, what: str
) -> tuple[bytes | None, int]:
    if at + 4 > end:
        raise CorruptRecordError(
            f"{where}: message at byte {position}: {what} length runs past its end"
        )
    length = _INT32.unpack_from(view, at)[0]
    at += 4
    if length == -1:
        return None, at
    if length < 0 or at + length > end:
        raise CorruptRecordError(
            f"{where}: message at byte {position}: invalid {what} length {length}"
        )
    return bytes(view[at : at + length]), at + length


def iter_legacy_messages(
    buf: bytes | bytearray | memoryview, header: BatchHeader, *, verify: bool = True
) -> list[LegacyMessage]:
    """The logical messages of one top-level v0/v1 entry: itself, or a wrapper's inner messages.

    Offsets are absolute and timestamps are what a consumer sees (the wrapper's for a
    LogAppendTime v1 wrapper). With `verify`, every CRC (wrapper and inner) must match.
    """
    view = memoryview(buf)
    where = f"legacy message set at position {header.position} (offset {header.base_offset})"
    outer, _ = _read_message(view, header.position, header.position + header.size, where)
    if verify and not outer.crc_valid:
        raise CorruptRecordError(f"{where}: stored CRC {outer.crc} does not match its CRC-32")
    codec_id = outer.codec
    if codec_id == 0:
        return [outer]
    if codec_id not in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4):
        raise CorruptRecordError(
            f"{where}: compression codec id {codec_id} is not valid for magic {outer.magic}"
        )
    if outer.value is None:
        raise CorruptRecordError(f"{where}: compressed wrapper message has a null value")
    from kafkalog_core.record.compression import decompress

    codec = Compression(codec_id)
    try:
        inner_bytes = decompress(codec, outer.value, magic=outer.magic)
    except CorruptRecordError as error:
        raise CorruptRecordError(f"{where}: {codec.kafka_name} wrapper: {error}") from None
    inner_view = memoryview(inner_bytes)
    inner_where = f"{where}, decompressed inner message set"
    messages: list[LegacyMessage] = []
    at = 0
    while at < len(inner_bytes):
        message, at = _read_message(inner_view, at, len(inner_bytes), inner_where)
        if verify and not message.crc_valid:
            raise CorruptRecordError(
                f"{inner_where}: message at byte {message.position} has a bad CRC {message.crc}"
            )
        if message.codec != 0:
            raise CorruptRecordError(
                f"{inner_where}: message at byte {message.position} is compressed again"
            )
        messages.append(message)
    if not messages:
        raise CorruptRecordError(f"{where}: compressed wrapper holds no messages")
    if outer.magic >= MAGIC_V1:
        shift = outer.offset - messages[-1].offset
        for message in messages:
            message.offset += shift
    if outer.magic == MAGIC_V1 and outer.attributes & TIMESTAMP_TYPE_MASK:
        for message in messages:
            message.timestamp = outer.timestamp
            message.attributes |= TIMESTAMP_TYPE_MASK
    if outer.magic == MAGIC_V0:
        for message in messages:  # v0 has no timestamps, whatever an inner message claims
            message.timestamp = NO_TIMESTAMP
            message.magic = MAGIC_V0
    return messages


def message_size(message: LegacyMessage) -> int:
    """Bytes of the message with its log overhead (a compressed wrapper's inner size)."""
    key = 0 if message.key is None else len(message.key)
    value = 0 if message.value is None else len(message.value)
    return LOG_OVERHEAD + _MIN_BODY[message.magic] + key + value


def decode_legacy_entry(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    *,
    verify: bool = True,
    with_sizes: bool = False,
) -> pa.Table:
    """One top-level v0/v1 entry as RECORD_SCHEMA rows (timestamp_type -1 for magic 0).

    `with_sizes` adds RECORD_SIZE_FIELD: each message's bytes including its log overhead.
    """
    messages = iter_legacy_messages(buf, header, verify=verify)
    table = pa.Table.from_arrays(
        [
            pa.array([m.offset for m in messages], pa.int64()),
            pa.array([m.timestamp for m in messages], pa.int64()),
            pa.array([m.timestamp_type for m in messages], pa.int8()),
            pa.array([m.key for m in messages], pa.binary()),
            pa.array([m.value for m in messages], pa.binary()),
            pa.array([[] for _ in messages], HEADERS_TYPE),
        ],
        schema=RECORD_SCHEMA,
    )
    if with_sizes:
        sizes = pa.array([message_size(m) for m in messages], pa.int32())
        table = table.append_column(RECORD_SIZE_FIELD, sizes)
    return table
