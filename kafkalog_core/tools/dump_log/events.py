"""Events of batches and records: what the .log walker yields, before any formatting.

An event is a plain dict with a `kind`; `batch_event` holds a batch header's fields as
DumpLogSegments prints them, `record_events` one event per record (v2 records decoded through
the record decoder, legacy messages one by one), control records with their marker fields.
Also the file-name helpers the walkers share.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import Any

from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.log.names import offset_from_file_name
from kafkalog_core.record.batch import (
    MAGIC_V0,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Compression,
    increment_sequence,
    is_valid,
)
from kafkalog_core.record.control import (
    ControlRecordType,
    parse_control_record_key,
    parse_end_txn_marker_value,
)
from kafkalog_core.tools.dump_log.options import DumpOptions

_CONTROL_TYPE_ID = struct.Struct(">h")  # bytes 2-4 of a control record key


def base_offset_of(path: str) -> int:
    """Kafka takes the part of the file name before the FIRST dot as the base offset."""
    return offset_from_file_name(os.path.basename(path))


def sibling_path(path: str, suffix: str) -> str:
    """The file of the same segment with another suffix (`<base>.log` next to `<base>.index`)."""
    absolute = os.path.abspath(path)
    stem = os.path.basename(absolute).split(".")[0]
    return os.path.join(os.path.dirname(absolute), stem + suffix)


def timestamp_type_name(header: BatchHeader) -> str:
    if header.magic == MAGIC_V0:
        return "NoTimestampType"
    return "LogAppendTime" if header.attributes & TIMESTAMP_TYPE_MASK else "CreateTime"


def _codec_name(header: BatchHeader) -> str:
    codec_id = header.attributes & 0x07
    try:
        return Compression(codec_id).kafka_name
    except ValueError:
        return f"unknown({codec_id})"


def batch_event(view: memoryview, header: BatchHeader, position: int) -> dict[str, Any]:
    return {
        "kind": "batch",
        "base_offset": header.base_offset,
        "last_offset": header.last_offset,
        "count": header.records_count if header.magic >= MAGIC_V2 else None,
        "base_sequence": header.base_sequence,
        "last_sequence": header.last_sequence,
        "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch,
        "partition_leader_epoch": header.partition_leader_epoch,
        "is_transactional": header.is_transactional,
        "is_control": header.is_control,
        "delete_horizon_ms": header.delete_horizon_ms,
        "position": position,
        "timestamp_type": timestamp_type_name(header),
        "base_timestamp": header.base_timestamp,
        "max_timestamp": header.max_timestamp,
        "size": header.size,
        "length": header.length,
        "magic": header.magic,
        "attributes": header.attributes,
        "compresscodec": _codec_name(header),
        "crc": header.crc,
        "is_valid": is_valid(view, header),
    }


def _control_fields(key: bytes | None, value: bytes | None, where: str) -> dict[str, Any]:
    """ControlRecordType.parseTypeId + EndTransactionMarker.deserialize, as dump-log uses them."""
    try:
        control_type = parse_control_record_key(key)
        assert key is not None  # parse_control_record_key refuses a null key
        fields: dict[str, Any] = {
            "control_type": control_type.name,
            "control_type_id": _CONTROL_TYPE_ID.unpack_from(key, 2)[0],  # raw, even for UNKNOWN
        }
        if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            fields["coordinator_epoch"] = parse_end_txn_marker_value(value)
    except CorruptRecordError as error:
        raise CorruptRecordError(f"{where}: {error}") from None
    return fields


def record_events(
    view: memoryview, header: BatchHeader, options: DumpOptions
) -> Iterator[dict[str, Any]]:
    """One event per record of the batch (legacy wrappers: one per inner message)."""
    ts_type = timestamp_type_name(header)
    with_data = options.print_data_log and not header.is_control
    if header.magic < MAGIC_V2:
        from kafkalog_core.record.legacy import iter_legacy_messages

        for message in iter_legacy_messages(view, header, verify=False):
            event: dict[str, Any] = {
                "kind": "record",
                "batch_position": header.position,
                "offset": message.offset,
                "timestamp_type": ts_type,
                "timestamp": message.timestamp,
                "key_size": -1 if message.key is None else len(message.key),
                "value_size": -1 if message.value is None else len(message.value),
                "magic": header.magic,
                "is_valid": message.crc_valid,
                "crc": message.crc,
            }
            if with_data:
                event["key"], event["value"] = message.key, message.value
            yield event
        return

    from kafkalog_core.record.decoder import RecordBatch

    yield from v2_record_events(header, RecordBatch(view, header).records(), options)


def v2_record_events(
    header: BatchHeader, table: Any, options: DumpOptions
) -> Iterator[dict[str, Any]]:
    """Record events of one v2 batch from its RECORD_SCHEMA rows."""
    where = f"batch at position {header.position} (base offset {header.base_offset})"
    ts_type = timestamp_type_name(header)
    with_data = options.print_data_log and not header.is_control
    offsets = table.column("offset").to_pylist()
    timestamps = table.column("timestamp").to_pylist()
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    headers = table.column("headers").to_pylist()
    base_sequence = header.base_sequence
    for offset, timestamp, key, value, record_headers in zip(
        offsets, timestamps, keys, values, headers, strict=True
    ):
        sequence = (
            increment_sequence(base_sequence, offset - header.base_offset)
            if base_sequence >= 0
            else -1
        )
        event = {
            "kind": "record",
            "batch_position": header.position,
            "offset": offset,
            "timestamp_type": ts_type,
            "timestamp": timestamp,
            "key_size": -1 if key is None else len(key),
            "value_size": -1 if value is None else len(value),
            "magic": header.magic,
            "sequence": sequence,
            "header_keys": [h["key"] for h in record_headers or ()],
        }
        if header.is_control:
            event.update(_control_fields(key, value, f"{where}, record at offset {offset}"))
        if with_data:
            event["key"], event["value"] = key, value
        yield event
