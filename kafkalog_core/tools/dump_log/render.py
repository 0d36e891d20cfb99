"""Events -> output: the exact line DumpLogSegments prints for each, or one JSON object.

`render_text` is the only place Kafka's text formats live (Java booleans, OptionalLong, the
stray brace of the legacy record line); `to_json` gives the same event as JSON Lines, bytes as
a string plus an encoding (see `DumpOptions`).
"""

from __future__ import annotations

import base64
import codecs
import json
from typing import Any

from kafkalog_core.record.batch import MAGIC_V2
from kafkalog_core.tools.dump_log.options import DumpOptions

RECORD_INDENT = "|"


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


def _optional_long(value: int | None) -> str:
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _java_replace(error: UnicodeDecodeError) -> tuple[str, int]:
    """One U+FFFD per malformed sequence as Java's `new String(bytes, UTF_8)` counts them.

    Python replaces each maximal ill-formed subpart (Unicode's practice) and so does Java,
    except after ED: Java takes ED A0..BF (an encoded surrogate half) as one sequence, three
    bytes long when a continuation byte follows and two otherwise, or the rest of the input when
    it ends there; Python replaces each of those bytes alone.
    """
    data, start = error.object, error.start
    if data[start] == 0xED and start + 1 < len(data) and 0xA0 <= data[start + 1] <= 0xBF:
        if start + 2 >= len(data):
            return "\ufffd", len(data)
        return "\ufffd", start + (3 if data[start + 2] & 0xC0 == 0x80 else 2)
    return "\ufffd", error.end


codecs.register_error("kafkalog.java_replace", _java_replace)


def _decode_text(data: bytes) -> str:
    """StringDecoder: UTF-8 with malformed input replaced by U+FFFD as Java replaces it."""
    return data.decode("utf-8", errors="kafkalog.java_replace")


def render_text(event: dict[str, Any], options: DumpOptions) -> str:
    """The exact line DumpLogSegments prints for an event."""
    kind = event["kind"]
    if kind == "dumping":
        return f"Dumping {event['file']}"
    if kind == "batch":
        return _render_batch(event)
    if kind == "record":
        return _render_record(event, options)
    if kind == "log_start":
        return f"Log starting offset: {event['log_start_offset']}"
    if kind == "snapshot_start":
        return f"Snapshot end offset: {event['end_offset']}, epoch: {event['epoch']}"
    if kind == "bootstrap_snapshot":
        return "KRaft bootstrap snapshot"
    if kind == "invalid_bytes":
        return f"Found {event['bytes']} invalid bytes at the end of {event['name']}"
    if kind == "index_entry":
        return f"offset: {event['offset']} position: {event['position']}"
    if kind == "time_index_entry":
        return f"timestamp: {event['timestamp']} offset: {event['offset']}"
    if kind == "index_empty":
        return f"{event['file']} is empty."
    if kind == "sanity_check_passed":
        return f"{event['file']} passed sanity check."
    if kind == "aborted_txn":
        return (
            f"version: {event['version']} producerId: {event['producer_id']} "
            f"firstOffset: {event['first_offset']} lastOffset: {event['last_offset']} "
            f"lastStableOffset: {event['last_stable_offset']}"
        )
    if kind == "producer_entry":
        line = (
            f"producerId: {event['producer_id']} producerEpoch: {event['producer_epoch']} "
            f"coordinatorEpoch: {event['coordinator_epoch']} "
            f"currentTxnFirstOffset: {_optional_long(event['current_txn_first_offset'])} "
            f"lastTimestamp: {event['last_timestamp']} "
        )
        metadata = event.get("batch_metadata")
        if metadata is not None:
            line += (
                f"firstSequence: {metadata['first_sequence']} "
                f"lastSequence: {metadata['last_sequence']} "
                f"lastOffset: {metadata['last_offset']} offsetDelta: {metadata['offset_delta']} "
                f"timestamp: {metadata['timestamp']}"
            )
        return line
    if kind == "unknown_file":
        return f"Ignoring unknown file {event['file']}"
    if kind == "error":
        if event["error"] == "corrupt_snapshot":
            return event["message"]
        return f"kafkalog: error: {event['message']}"
    raise AssertionError(f"no text form for event kind {kind!r}")


def _render_batch(e: dict[str, Any]) -> str:
    if e["magic"] >= MAGIC_V2:
        head = (
            f"baseOffset: {e['base_offset']} lastOffset: {e['last_offset']} count: {e['count']} "
            f"baseSequence: {e['base_sequence']} lastSequence: {e['last_sequence']} "
            f"producerId: {e['producer_id']} producerEpoch: {e['producer_epoch']} "
            f"partitionLeaderEpoch: {e['partition_leader_epoch']} "
            f"isTransactional: {_java_bool(e['is_transactional'])} "
            f"isControl: {_java_bool(e['is_control'])} "
            f"deleteHorizonMs: {_optional_long(e['delete_horizon_ms'])}"
        )
    else:
        head = f"offset: {e['last_offset']}"
    return (
        f"{head} position: {e['position']} {e['timestamp_type']}: {e['max_timestamp']} "
        f"size: {e['size']} magic: {e['magic']} compresscodec: {e['compresscodec']} "
        f"crc: {e['crc']} isvalid: {_java_bool(e['is_valid'])}"
    )


def _render_record(e: dict[str, Any], options: DumpOptions) -> str:
    parts: list[str] = []
    prefix = f"{RECORD_INDENT} "
    if not options.skip_record_metadata:
        parts.append(
            f"{prefix}offset: {e['offset']} {e['timestamp_type']}: {e['timestamp']} "
            f"keySize: {e['key_size']} valueSize: {e['value_size']}"
        )
        prefix = " "
        if e["magic"] >= MAGIC_V2:
            parts.append(f" sequence: {e['sequence']} headerKeys: [{','.join(e['header_keys'])}]")
        else:
            # Kafka's format string has a stray closing brace here; reproduced on purpose.
            parts.append(f" isValid: {_java_bool(e['is_valid'])} crc: {e['crc']}}}")
        if "control_type" in e:
            if "coordinator_epoch" in e:
                parts.append(
                    f" endTxnMarker: {e['control_type']} coordinatorEpoch: {e['coordinator_epoch']}"
                )
            else:
                parts.append(f" controlType: {e['control_type']}({e['control_type_id']})")
    if "key" in e:  # only with --print-data-log and for non-control batches
        if e["key"] is not None:
            parts.append(f"{prefix}key: {_decode_text(e['key'])}")
        if e["value"] is not None:
            # Kafka prints the payload with a plain leading space whatever came before.
            parts.append(f" payload: {_decode_text(e['value'])}")
    return "".join(parts)


def _encode_bytes(data: bytes | None) -> tuple[str | None, str | None]:
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def to_json(event: dict[str, Any]) -> str:
    """One JSON Lines object; bytes become a string plus an encoding field (see DumpOptions)."""
    if event["kind"] == "record" and "key" in event:
        event = dict(event)
        event["key"], event["key_encoding"] = _encode_bytes(event["key"])
        event["value"], event["value_encoding"] = _encode_bytes(event["value"])
    return json.dumps(event, separators=(",", ":"))
