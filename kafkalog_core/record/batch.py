"""Record batch v2 header: the byte layout in one place, and a cheap header-only reader.

Layout (KAFKA_LOG_FACTS.md §1.1), all big-endian, 61 bytes before the records:

    offset  size  field
    0       8     baseOffset
    8       4     length               (batch size - 12)
    12      4     partitionLeaderEpoch (not covered by the CRC)
    16      1     magic                (= 2)
    17      4     crc                  (CRC-32C of bytes [21, end))
    21      2     attributes
    23      4     lastOffsetDelta
    27      8     baseTimestamp        (deleteHorizonMs when bit 6 is set)
    35      8     maxTimestamp
    43      8     producerId
    51      2     producerEpoch
    53      4     baseSequence
    57      4     recordsCount
    61      ...   records (raw, or one compressed stream)

Legacy message sets (magic 0/1, §1.9) share the first 17 bytes' meaning for offset, size and
magic; `iter_batch_headers` reports them with the same `BatchHeader` type so that the log layer
(recovery, indexes, retention) never needs to care which generation wrote a segment.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from crc32c import crc32c

from kafkalog_core.errors import CorruptRecordError

# --- sizes -------------------------------------------------------------------------------------
LOG_OVERHEAD = 12  # baseOffset + length: the part of a batch not counted by `length`
HEADER_SIZE_UP_TO_MAGIC = 17  # FileLogInputStream reads this much before deciding
RECORD_BATCH_OVERHEAD = 61
LEGACY_RECORD_OVERHEAD_V0 = 14  # smallest legal `length` of any entry in a log
MAX_RECORD_OVERHEAD = 21

MAGIC_V0 = 0
MAGIC_V1 = 1
MAGIC_V2 = 2

# --- the v2 header as one struct --------------------------------------------------------------
#                         baseOffset length ple magic crc attrs lastOffsetDelta baseTs maxTs
#                         producerId producerEpoch baseSequence recordsCount
HEADER = struct.Struct(">qiibIhiqqqhii")
assert HEADER.size == RECORD_BATCH_OVERHEAD

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

# --- attribute bits (low byte of the int16 at offset 21) -----------------------------------------
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

# --- "none" sentinels ----------------------------------------------------------------------------
NO_PARTITION_LEADER_EPOCH = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
INT32_MAX = 2**31 - 1

_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_LEGACY_V1_TIMESTAMP = struct.Struct(">q")  # at byte 18 of a magic-1 message


class Compression(IntEnum):
    """Codec ids of attribute bits 0-2 (CompressionType.java)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def kafka_name(self) -> str:
        """The name Kafka prints (`compresscodec: none`) and accepts in compression.type."""
        return self.name.lower()

    @classmethod
    def from_name(cls, name: str) -> Compression:
        """Parse Kafka's codec names; 'uncompressed' is compression.type's spelling of none."""
        key = name.strip().lower()
        if key == "uncompressed":
            key = "none"
        for codec in cls:
            if codec.kafka_name == key:
                return codec
        raise ValueError(f"unknown compression codec {name!r}")


class TimestampType(IntEnum):
    """Attribute bit 3. NoTimestampType (-1) cannot be written in v2."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def kafka_name(self) -> str:
        return "CreateTime" if self is TimestampType.CREATE_TIME else "LogAppendTime"


def make_attributes(
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
    has_delete_horizon: bool = False,
) -> int:
    """Compose the attributes short; bits are only set when true (MemoryRecordsBuilder)."""
    attributes = int(compression) & COMPRESSION_CODEC_MASK
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if has_delete_horizon:
        attributes |= DELETE_HORIZON_MASK
    return attributes


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's wrapping sequence arithmetic (DefaultRecordBatch.incrementSequence)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Inverse of `increment_sequence` (DefaultRecordBatch.decrementSequence)."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The header of one batch (v2) or one top-level message (v0/v1) and where it lies.

    For legacy entries only `base_offset`, `length`, `magic`, `crc`, `attributes`,
    `max_timestamp` and `position` come from the bytes: a legacy entry's offset field is its
    *last* offset, so `last_offset_delta` is 0 and `base_offset` is that last offset. The log
    layer only needs last offsets, sizes and timestamps, which are exact for every magic.
    """

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0  # byte position of the batch in the buffer or file it was read from

    # ---- derived fields ----
    @property
    def size(self) -> int:
        """Total bytes of the batch, `length + 12`."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> Compression:
        try:
            return Compression(self.attributes & COMPRESSION_CODEC_MASK)
        except ValueError:
            raise CorruptRecordError(
                f"batch at position {self.position}: unknown compression codec id "
                f"{self.attributes & COMPRESSION_CODEC_MASK}"
            ) from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == MAGIC_V0:
            raise CorruptRecordError("magic v0 entries have no timestamp type")
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return self.magic >= MAGIC_V2 and bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return self.magic >= MAGIC_V2 and bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic >= MAGIC_V2 and bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """deleteHorizonMs (stored in the baseTimestamp field) when bit 6 is set."""
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID


def pack_header(
    buf: bytearray | memoryview,
    at: int,
    *,
    base_offset: int,
    length: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
) -> int:
    """Write a v2 header at `at` (records must already follow it) and fill in the CRC.

    Returns the CRC. The CRC covers [21, end of batch), so the records region must be in place.
    """
    HEADER.pack_into(
        buf,
        at,
        base_offset,
        length,
        partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    end = at + length + LOG_OVERHEAD
    crc = crc32c(memoryview(buf)[at + ATTRIBUTES_OFFSET : end])
    struct.pack_into(">I", buf, at + CRC_OFFSET, crc)
    return crc


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header of the batch starting at `position`; no CRC check, no record parsing.

    Raises CorruptRecordError when fewer header bytes than the magic requires are present.
    """
    view = memoryview(buf)
    available = len(view) - position
    if available < HEADER_SIZE_UP_TO_MAGIC:
        raise CorruptRecordError(
            f"batch at position {position}: only {available} bytes, need at least "
            f"{HEADER_SIZE_UP_TO_MAGIC} to read offset, length and magic"
        )
    magic = view[position + MAGIC_OFFSET]
    if magic == MAGIC_V2:
        if available < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"batch at position {position}: truncated v2 header ({available} of "
                f"{RECORD_BATCH_OVERHEAD} bytes)"
            )
        return BatchHeader(*HEADER.unpack_from(view, position), position=position)
    if magic in (MAGIC_V0, MAGIC_V1):
        return _read_legacy_header(view, position, magic)
    raise CorruptRecordError(f"batch at position {position}: unknown magic byte {magic}")


def _read_legacy_header(view: memoryview, position: int, magic: int) -> BatchHeader:
    """A v0/v1 top-level message: offset, size, crc (CRC-32), magic, attributes, [timestamp]."""
    offset = _INT64.unpack_from(view, position)[0]
    length = _INT32.unpack_from(view, position + 8)[0]
    crc = struct.unpack_from(">I", view, position + 12)[0]
    attributes = view[position + 17] if len(view) > position + 17 else 0
    timestamp = NO_TIMESTAMP
    if magic == MAGIC_V1 and len(view) >= position + 26:
        timestamp = _LEGACY_V1_TIMESTAMP.unpack_from(view, position + 18)[0]
    return BatchHeader(
        base_offset=offset,
        length=length,
        partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
        magic=magic,
        crc=crc,
        attributes=attributes,
        last_offset_delta=0,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        base_sequence=NO_SEQUENCE,
        records_count=1,
        position=position,
    )


def compute_crc(buf: bytes | bytearray | memoryview, header: BatchHeader) -> int:
    """The CRC the batch should carry: CRC-32C (v2) or CRC-32 (v0/v1) over the covered range."""
    view = memoryview(buf)
    start, end = header.position, header.position + header.size
    if header.magic >= MAGIC_V2:
        return crc32c(view[start + ATTRIBUTES_OFFSET : end])
    import zlib

    return zlib.crc32(view[start + 16 : end]) & 0xFFFFFFFF


def is_valid(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    """Kafka's isValid(): big enough for its header, inside the buffer, and the CRC matches."""
    minimum = RECORD_BATCH_OVERHEAD if header.magic >= MAGIC_V2 else LEGACY_RECORD_OVERHEAD_V0 + 12
    if header.size < minimum or header.position + header.size > len(buf):
        return False
    return compute_crc(buf, header) == header.crc


def ensure_valid(buf: bytes | bytearray | memoryview, header: BatchHeader) -> None:
    """Raise CorruptRecordError naming the position and the problem when `is_valid` is false."""
    minimum = RECORD_BATCH_OVERHEAD if header.magic >= MAGIC_V2 else LEGACY_RECORD_OVERHEAD_V0 + 12
    if header.size < minimum:
        raise CorruptRecordError(
            f"batch at position {header.position}: size {header.size} is smaller than the "
            f"minimum {minimum} for magic {header.magic}"
        )
    if header.position + header.size > len(buf):
        raise CorruptRecordError(
            f"batch at position {header.position}: declares {header.size} bytes but only "
            f"{len(buf) - header.position} remain"
        )
    actual = compute_crc(buf, header)
    if actual != header.crc:
        raise CorruptRecordError(
            f"batch at position {header.position} (base offset {header.base_offset}): "
            f"stored CRC {header.crc} does not match computed CRC {actual}"
        )


def iter_batch_headers(
    buf: bytes | bytearray | memoryview,
    *,
    start: int = 0,
    end: int | None = None,
    verify: bool = False,
) -> Iterator[BatchHeader]:
    """Walk the batches of a log buffer the way FileLogInputStream does (§1.8).

    Stops silently at a partial batch at the tail (that is not an error for a reader of a live
    log). Raises CorruptRecordError for a size field below 14 or an unknown magic. With
    `verify=True` each batch is CRC-checked (`ensure_valid`) before it is yielded, which is
    what recovery does.
    """
    view = memoryview(buf)
    limit = len(view) if end is None else min(end, len(view))
    position = start
    while position < limit - HEADER_SIZE_UP_TO_MAGIC:
        length = _INT32.unpack_from(view, position + LENGTH_OFFSET)[0]
        if length < LEGACY_RECORD_OVERHEAD_V0:
            raise CorruptRecordError(
                f"batch at position {position}: record size {length} is smaller than the "
                f"minimum record overhead ({LEGACY_RECORD_OVERHEAD_V0})"
            )
        if position > limit - LOG_OVERHEAD - length:
            return  # partial batch at the tail
        header = read_header(view[:limit], position)
        if verify:
            ensure_valid(view, header)
        yield header
        position += length + LOG_OVERHEAD
