"""The scalar encoder: one batch from a list of `Record`s (tests, control batches, small writes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kafkalog_core.errors import InvalidRecordError
from kafkalog_core.record.batch import (
    INT32_MAX,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    Compression,
    TimestampType,
    make_attributes,
    pack_header,
)
from kafkalog_core.record.varint import encode_varint

HeaderPair = tuple[str | bytes, bytes | None]


@dataclass(slots=True)
class Record:
    """One record for `build_batch`: any offset delta (gaps are fine), timestamp -1 or >= 0."""

    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[HeaderPair] = field(default_factory=tuple)


def _header_key_bytes(key: str | bytes | None, where: str) -> bytes:
    if key is None:
        raise InvalidRecordError(
            f"{where}: header key is null (Kafka header keys must be non-null)"
        )
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


def _encode_record_body(record: Record, timestamp_delta: int, where: str) -> bytes:
    """attributes .. last header of one record (everything its length varint counts)."""
    parts = [b"\x00", encode_varint(timestamp_delta), encode_varint(record.offset_delta)]
    for blob in (record.key, record.value):
        if blob is None:
            parts.append(b"\x01")  # varint(-1)
        else:
            parts.append(encode_varint(len(blob)))
            parts.append(bytes(blob))
    headers = record.headers or ()
    parts.append(encode_varint(len(headers)))
    for h_key, h_value in headers:
        key = _header_key_bytes(h_key, where)
        parts.append(encode_varint(len(key)))
        parts.append(key)
        if h_value is None:
            parts.append(b"\x01")
        else:
            parts.append(encode_varint(len(h_value)))
            parts.append(bytes(h_value))
    return b"".join(parts)


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression: Compression = Compression.NONE,
    compression_level: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
    delete_horizon_ms: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    last_offset_delta: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Encode one v2 batch record by record, with every header field settable.

    This is the path for control batches, tests and the cleaner (gaps in offset deltas, a kept
    lastOffsetDelta, a delete horizon, empty batches). Defaults follow MemoryRecordsBuilder:
    baseTimestamp = the delete horizon if set, else the first record's timestamp, else -1;
    maxTimestamp = -1 raised by each strictly greater record timestamp (pass `max_timestamp` for
    LogAppendTime); lastOffsetDelta = the last record's offset delta (0 for an empty batch).
    An empty batch is written uncompressed, like DefaultRecordBatch.writeEmptyHeader.
    """
    records = list(records)
    previous = -1
    for index, record in enumerate(records):
        where = f"record {index} (offset {base_offset + record.offset_delta})"
        if not 0 <= record.offset_delta <= INT32_MAX or record.offset_delta <= previous:
            raise InvalidRecordError(
                f"record {index}: offset delta {record.offset_delta} must be in 0..{INT32_MAX} "
                f"and larger than the previous record's ({previous})"
            )
        previous = record.offset_delta
        if record.timestamp < NO_TIMESTAMP:
            raise InvalidRecordError(
                f"{where}: timestamp {record.timestamp} is negative (only -1 allowed)"
            )

    if base_timestamp is None:
        if delete_horizon_ms is not None:
            base_timestamp = delete_horizon_ms
        elif records:
            base_timestamp = records[0].timestamp
        else:
            base_timestamp = NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = NO_TIMESTAMP
        for record in records:
            if record.timestamp > max_timestamp:
                max_timestamp = record.timestamp
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset_delta if records else 0
    if not records:
        compression = Compression.NONE

    chunks = []
    for index, record in enumerate(records):
        body = _encode_record_body(
            record,
            record.timestamp - base_timestamp,
            f"record {index} (offset {base_offset + record.offset_delta})",
        )
        chunks.append(encode_varint(len(body)))
        chunks.append(body)
    payload = b"".join(chunks)
    compression = Compression(compression)
    if compression is not Compression.NONE:
        from kafkalog_core.record.compression import compress

        payload = compress(compression, payload, compression_level)

    attributes = make_attributes(
        compression,
        TimestampType(timestamp_type),
        is_transactional,
        is_control,
        delete_horizon_ms is not None,
    )
    out = bytearray(RECORD_BATCH_OVERHEAD + len(payload))
    out[RECORD_BATCH_OVERHEAD:] = payload
    pack_header(
        out,
        0,
        base_offset=base_offset,
        length=len(out) - LOG_OVERHEAD,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=len(records),
    )
    return bytes(out)
