"""Control records (KAFKA_LOG_FACTS.md §1.5): end-transaction markers and control record types.

A control batch has attribute bit 5 set and holds exactly one record with no headers. Its key is
`int16 version (0) | int16 type`; for COMMIT/ABORT the value is the end-transaction marker
`int16 version (0) | int32 coordinatorEpoch`. Readers follow Kafka's rules: too few bytes or a
negative version is corruption; a version above 0 is accepted and parsed as version 0.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from enum import IntEnum

from kafkalog_core.errors import CorruptRecordError, InvalidRecordError
from kafkalog_core.record.batch import NO_PARTITION_LEADER_EPOCH, NO_SEQUENCE, TimestampType

_log = logging.getLogger(__name__)

CONTROL_RECORD_KEY = struct.Struct(">hh")  # version, type
END_TXN_MARKER_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch
CONTROL_RECORD_KEY_SIZE = CONTROL_RECORD_KEY.size  # 4
END_TXN_MARKER_VALUE_SIZE = END_TXN_MARKER_VALUE.size  # 6
CURRENT_CONTROL_RECORD_KEY_VERSION = 0
CURRENT_END_TXN_MARKER_VERSION = 0
END_TXN_MARKER_BATCH_SIZE = 78  # 61-byte header + the 17-byte marker record


class ControlRecordType(IntEnum):
    """Control record types (ControlRecordType.java); UNKNOWN is parsed, never written."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    def key_bytes(self) -> bytes:
        """The 4-byte record key a control record of this type carries."""
        if self is ControlRecordType.UNKNOWN:
            raise InvalidRecordError("control record type UNKNOWN cannot be written")
        return CONTROL_RECORD_KEY.pack(CURRENT_CONTROL_RECORD_KEY_VERSION, int(self))


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A COMMIT or ABORT marker written by the transaction coordinator."""

    control_type: ControlRecordType
    coordinator_epoch: int

    def __post_init__(self) -> None:
        if self.control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise InvalidRecordError(
                f"end-transaction marker type must be ABORT or COMMIT, not {self.control_type!r}"
            )

    def key_bytes(self) -> bytes:
        return self.control_type.key_bytes()

    def value_bytes(self) -> bytes:
        return END_TXN_MARKER_VALUE.pack(CURRENT_END_TXN_MARKER_VERSION, self.coordinator_epoch)

    @classmethod
    def from_record(
        cls, key: bytes | memoryview, value: bytes | memoryview
    ) -> EndTransactionMarker:
        """Parse a marker from a control record's key and value."""
        control_type = parse_control_record_key(key)
        if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise InvalidRecordError(
                f"control record of type {control_type.name} is not an end-transaction marker"
            )
        return cls(control_type, parse_end_txn_marker_value(value))


def build_end_txn_marker_batch(
    *,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    control_type: ControlRecordType,
    timestamp: int,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """The 78-byte control batch MemoryRecords.writeEndTransactionalMarker writes.

    Transactional + control bits, CreateTime, no compression, baseSequence -1, one record at
    offset delta 0 with the marker's key and value and no headers.
    """
    # The encoder loads here, not at the top: readers parse control batches but never write one.
    from kafkalog_core.record.encoder import Record, build_batch

    marker = EndTransactionMarker(ControlRecordType(control_type), coordinator_epoch)
    return build_batch(
        [Record(0, timestamp, marker.key_bytes(), marker.value_bytes())],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        timestamp_type=TimestampType.CREATE_TIME,
        is_transactional=True,
        is_control=True,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
    )


def parse_control_record_key(key: bytes | memoryview | None) -> ControlRecordType:
    """The type of a control record from its key (ControlRecordType.parse)."""
    if key is None or len(key) < CONTROL_RECORD_KEY_SIZE:
        found = "a null key" if key is None else f"only {len(key)} bytes"
        raise CorruptRecordError(
            f"control record key must have at least {CONTROL_RECORD_KEY_SIZE} bytes, found {found}"
        )
    version, type_id = CONTROL_RECORD_KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptRecordError(
            f"control record key has negative version {version}: data corruption"
        )
    if version > CURRENT_CONTROL_RECORD_KEY_VERSION:
        _log.warning(
            "control record key version %d is newer than 0; reading it as version 0", version
        )
    try:
        return ControlRecordType(type_id) if type_id >= 0 else ControlRecordType.UNKNOWN
    except ValueError:
        return ControlRecordType.UNKNOWN


def parse_end_txn_marker_value(value: bytes | memoryview | None) -> int:
    """The coordinator epoch of an end-transaction marker value (EndTransactionMarker.deserialize)."""
    if value is None or len(value) < END_TXN_MARKER_VALUE_SIZE:
        found = "a null value" if value is None else f"only {len(value)} bytes"
        raise CorruptRecordError(
            f"end-transaction marker value must have at least {END_TXN_MARKER_VALUE_SIZE} bytes, "
            f"found {found}"
        )
    version, coordinator_epoch = END_TXN_MARKER_VALUE.unpack_from(value, 0)
    if version < 0:
        raise CorruptRecordError(
            f"end-transaction marker has negative version {version}: data corruption"
        )
    if version > CURRENT_END_TXN_MARKER_VERSION:
        _log.warning(
            "end-transaction marker version %d is newer than 0; reading it as version 0", version
        )
    return coordinator_epoch
