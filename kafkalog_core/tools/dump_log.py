"""`kafka-dump-log.sh` (DumpLogSegments) compatible dumps of segment files (KAFKA_LOG_FACTS.md §12).

Why it is shaped this way: every file kind has one generator that walks the file and yields
*events* (plain dicts with a `kind`). One renderer turns an event into the exact line Kafka
prints; `--json` serializes the same event as one JSON object per line instead. So the text and
JSON forms cannot drift apart, and the walkers never think about formatting.

What goes where, as in Kafka:

- stdout: `Dumping <file>`, then the file's lines.
- stderr, after *all* files: offset-index mismatches, then time-index problems (timestamp
  mismatches, out-of-order timestamps, offsets not found), then non-consecutive record offsets.
  Kafka keeps the index mismatches and the non-consecutive pairs in a Scala `List` it prepends
  to, so they come out newest first; the time-index lists come out in file order. Both are
  reproduced. Across several files Kafka iterates a hash map; we keep the order files were given.
- stderr, at once: `Ignoring unknown file <file>` and, where Kafka would die with a stack trace
  (missing file, garbage where a batch should start, an index entry pointing past the log), one
  `kafkalog: error: ...` line. The dump then goes on with the next file and the run exits 1.

`--json` writes everything, errors included (`"kind": "error"`), to stdout as JSON Lines; see
`DumpOptions.json` for the record key/value encoding.

Large segments are memory-mapped and walked batch by batch; only one batch's records are
decoded at a time.
"""

from __future__ import annotations

import base64
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from kafkalog_core.errors import CorruptRecordError, CorruptSnapshotError, KafkaLogError
from kafkalog_core.log.mapped import mapped_file
from kafkalog_core.log.names import offset_from_file_name
from kafkalog_core.log.offset_index import OffsetIndex
from kafkalog_core.log.producer_state import read_snapshot
from kafkalog_core.log.time_index import TimeIndex
from kafkalog_core.log.txn_index import TransactionIndex
from kafkalog_core.record.batch import (
    INT32_MAX,
    MAGIC_V0,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Compression,
    increment_sequence,
    is_valid,
    iter_batch_headers,
)
from kafkalog_core.record.control import (
    ControlRecordType,
    parse_control_record_key,
    parse_end_txn_marker_value,
)

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "DumpOptions",
    "DumpReport",
    "dump_files",
    "dump_file_events",
]

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
NO_TIMESTAMP = -1
RECORD_INDENT = "|"

_CONTROL_TYPE_ID = struct.Struct(">h")  # bytes 2-4 of a control record key


@dataclass(frozen=True)
class DumpOptions:
    """The options of `kafka-dump-log.sh` that kafkalog supports, plus `json`.

    `json`: one JSON object per line instead of Kafka's text. Record keys and values (only with
    `print_data_log`, as in the text form) are emitted as `"key"`/`"value"` plus
    `"key_encoding"`/`"value_encoding"`: `"utf-8"` with the decoded string when the bytes are
    valid UTF-8, else `"base64"` with the base64 text; both `null` for a null key/value.
    """

    print_data_log: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_bytes: int = INT32_MAX
    skip_record_metadata: bool = False
    json: bool = False

    @property
    def is_deep_iteration(self) -> bool:
        """--print-data-log implies --deep-iteration (as in Kafka)."""
        return self.deep_iteration or self.print_data_log


@dataclass
class DumpReport:
    """What Kafka collects during the run and prints on stderr at the end, keyed by abs path."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    errors: int = 0

    def error_events(self) -> Iterator[dict[str, Any]]:
        """The collected problems in Kafka's end-of-run order, as `kind: error` events."""
        for path, pairs in self.index_mismatches.items():
            for index_offset, log_offset in reversed(pairs):
                yield _error(
                    path, "index_mismatch", index_offset=index_offset, log_offset=log_offset
                )
        for path, pairs in self.time_mismatches.items():
            for index_ts, log_ts in pairs:
                yield _error(
                    path, "time_index_mismatch", index_timestamp=index_ts, log_timestamp=log_ts
                )
        for path, pairs in self.time_out_of_order.items():
            for index_ts, previous in pairs:
                yield _error(
                    path,
                    "time_index_out_of_order",
                    index_timestamp=index_ts,
                    previous_timestamp=previous,
                )
        for path, pairs in self.time_not_found.items():
            for index_offset, log_offset in pairs:
                yield _error(
                    path,
                    "time_index_offset_not_found",
                    index_offset=index_offset,
                    log_offset=log_offset,
                )
        for path, pairs in self.non_consecutive.items():
            for first, second in reversed(pairs):
                yield _error(path, "non_consecutive_offsets", offset=first, next_offset=second)

    def text_lines(self) -> Iterator[str]:
        """The same problems as the stderr lines DumpLogSegments prints at the end."""
        for path, pairs in self.index_mismatches.items():
            yield f"Mismatches in :{path}"
            for index_offset, log_offset in reversed(pairs):
                yield f"  Index offset: {index_offset}, log offset: {log_offset}"
        for path, pairs in self.time_mismatches.items():
            yield f"Found timestamp mismatch in :{path}"
            for index_ts, log_ts in pairs:
                yield f"  Index timestamp: {index_ts}, log timestamp: {log_ts}"
        for path, pairs in self.time_out_of_order.items():
            yield f"Found out of order timestamp in :{path}"
            for index_ts, previous in pairs:
                yield f"  Index timestamp: {index_ts}, Previously indexed timestamp: {previous}"
        for pairs in self.time_not_found.values():
            yield "The following indexed offsets are not found in the log."
            for index_offset, log_offset in pairs:
                yield f"Indexed offset: {index_offset}, found log offset: {log_offset}"
        for path, pairs in self.non_consecutive.items():
            yield f"Non-consecutive offsets in {path}"
            for first, second in reversed(pairs):
                yield f"  {first} is followed by {second}"


def _error(path: str, error: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "error", "file": path, "error": error, **fields}


# ---------------------------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------------------------


def dump_files(paths: list[str], options: DumpOptions, out: TextIO, err: TextIO) -> int:
    """Dump every file like DumpLogSegments; returns 0, or 1 if any file could not be dumped."""
    report = DumpReport()
    for path in paths:
        for event in dump_file_events(path, options, report):
            if options.json:
                out.write(_to_json(event) + "\n")
            elif event["kind"] in ("error", "unknown_file"):
                err.write(_render_text(event, options) + "\n")
            else:
                out.write(_render_text(event, options) + "\n")
    out.flush()
    if options.json:
        for event in report.error_events():
            out.write(_to_json(event) + "\n")
        out.flush()
    else:
        for line in report.text_lines():
            err.write(line + "\n")
    err.flush()
    return 1 if report.errors else 0


def dump_file_events(
    path: str, options: DumpOptions, report: DumpReport
) -> Iterator[dict[str, Any]]:
    """`Dumping <file>` and then the events of the file kind chosen by its suffix (§12.2).

    A KafkaLogError or OSError ends this file with one `error` event (and counts in `report`);
    problems Kafka reports at the end of the run are added to `report` instead.
    """
    yield {"kind": "dumping", "file": path}
    name = os.path.basename(path)
    suffix = name[name.rfind(".") :] if "." in name else ""
    walkers = {
        ".log": dump_log,
        ".checkpoint": dump_log,
        ".index": dump_offset_index,
        ".timeindex": dump_time_index,
        ".snapshot": dump_producer_snapshot,
        ".txnindex": dump_txn_index,
    }
    walker = walkers.get(suffix)
    if walker is None:
        yield {"kind": "unknown_file", "file": path}
        return
    try:
        if not os.path.isfile(path):  # Kafka dies with NoSuchFileException; we say it in a line
            raise FileNotFoundError(2, "No such file or directory", path)
        yield from walker(path, options, report)
    except Exception as error:  # noqa: BLE001 - one line per file, never a traceback
        report.errors += 1
        yield _error(path, "exception", message=_describe(path, error))


def _describe(path: str, error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return f"{error.filename or path}: {error.strerror}"
    text = str(error) or type(error).__name__
    if not isinstance(error, KafkaLogError):  # unexpected: keep the type, it says what broke
        text = f"{type(error).__name__}: {text}"
    return text if path in text else f"{path}: {text}"


# ---------------------------------------------------------------------------------------------
# helpers shared by the walkers
# ---------------------------------------------------------------------------------------------


def _base_offset_of(path: str) -> int:
    """Kafka takes the part of the file name before the FIRST dot as the base offset."""
    return offset_from_file_name(os.path.basename(path))


def _sibling(path: str, suffix: str) -> str:
    """The file of the same segment with another suffix (`<base>.log` next to `<base>.index`)."""
    absolute = os.path.abspath(path)
    stem = os.path.basename(absolute).split(".")[0]
    return os.path.join(os.path.dirname(absolute), stem + suffix)


def _timestamp_type_name(header: BatchHeader) -> str:
    if header.magic == MAGIC_V0:
        return "NoTimestampType"
    return "LogAppendTime" if header.attributes & TIMESTAMP_TYPE_MASK else "CreateTime"


def _codec_name(header: BatchHeader) -> str:
    codec_id = header.attributes & 0x07
    try:
        return Compression(codec_id).kafka_name
    except ValueError:
        return f"unknown({codec_id})"


def _batch_event(view: memoryview, header: BatchHeader, position: int) -> dict[str, Any]:
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
        "timestamp_type": _timestamp_type_name(header),
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


def _record_events(
    view: memoryview, header: BatchHeader, options: DumpOptions
) -> Iterator[dict[str, Any]]:
    """One event per record of the batch (legacy wrappers: one per inner message)."""
    ts_type = _timestamp_type_name(header)
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

    yield from _v2_record_events(header, RecordBatch(view, header).records(), options)


def _v2_record_events(
    header: BatchHeader, table: Any, options: DumpOptions
) -> Iterator[dict[str, Any]]:
    """Record events of one v2 batch from its RECORD_SCHEMA rows."""
    where = f"batch at position {header.position} (base offset {header.base_offset})"
    ts_type = _timestamp_type_name(header)
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


# ---------------------------------------------------------------------------------------------
# .log (and KRaft .checkpoint)
# ---------------------------------------------------------------------------------------------


def dump_log(path: str, options: DumpOptions, report: DumpReport) -> Iterator[dict[str, Any]]:
    """Batch lines, record lines with deep iteration, and the trailing invalid bytes (§12.3)."""
    name = os.path.basename(path)
    if name.endswith(".log"):
        yield {"kind": "log_start", "file": path, "log_start_offset": _base_offset_of(path)}
    else:
        yield _checkpoint_start(path)
    absolute = os.path.abspath(path)
    deep = options.is_deep_iteration
    with mapped_file(path) as view:
        # FileRecords.slice(0, maxBytes): the walk never looks past min(size, maxBytes).
        limit = min(len(view), max(options.max_bytes, 0))
        valid_bytes = 0
        last_offset = -1
        failure: CorruptRecordError | None = None
        try:
            for group in _grouped(iter_batch_headers(view, end=limit), deep):
                decoded = _decode_group(view, group, options) if deep else []
                for i, header in enumerate(group):
                    event = _batch_event(view, header, valid_bytes)
                    event["file"] = path
                    yield event
                    if deep:
                        records = decoded[i]
                        if isinstance(records, BaseException):
                            report.errors += 1
                            yield _error(path, "corrupt_batch", message=_describe(path, records))
                            records = []
                        for record in records:
                            offset = record["offset"]
                            if last_offset != -1 and offset != last_offset + 1:
                                report.non_consecutive.setdefault(absolute, []).append(
                                    (last_offset, offset)
                                )
                            last_offset = offset
                            record["file"] = path
                            yield record
                    valid_bytes += header.size
        except CorruptRecordError as error:  # garbage where a batch should start
            failure = error
        if failure is not None:
            report.errors += 1
            yield _error(
                path, "corrupt_log", message=_describe(path, failure), position=valid_bytes
            )
        trailing = limit - valid_bytes
        if trailing > 0 and options.max_bytes == INT32_MAX:
            yield {"kind": "invalid_bytes", "file": path, "name": name, "bytes": trailing}


# Deep iteration decodes runs of consecutive v2 batches in one vectorized call; this bounds
# the bytes (and so the record events) held at once.
_DECODE_GROUP_BYTES = 1 << 20


def _grouped(headers: Iterator[BatchHeader], deep: bool) -> Iterator[list[BatchHeader]]:
    """Batches in runs to decode together: single batches unless deep-iterating v2 batches.

    A CorruptRecordError from the header walk is raised only after the run before it.
    """
    group: list[BatchHeader] = []
    size = 0
    try:
        for header in headers:
            if not deep or header.magic < MAGIC_V2:
                if group:
                    yield group
                    group, size = [], 0
                yield [header]
                continue
            group.append(header)
            size += header.size
            if size >= _DECODE_GROUP_BYTES:
                yield group
                group, size = [], 0
    except CorruptRecordError:
        if group:
            yield group
        raise
    if group:
        yield group


def _decode_group(
    view: memoryview, group: list[BatchHeader], options: DumpOptions
) -> list[list[dict[str, Any]] | BaseException]:
    """Record events per batch of the run, or the exception that batch's records raised."""
    if len(group) > 1:
        from kafkalog_core.record.decoder import decode_records

        try:
            table = decode_records(
                view,
                start=group[0].position,
                end=group[-1].position + group[-1].size,
                verify=False,
                include_control=True,
            )
            if table.num_rows == sum(h.records_count for h in group):
                results: list[list[dict[str, Any]] | BaseException] = []
                at = 0
                for header in group:
                    rows = table.slice(at, header.records_count)
                    results.append(list(_v2_record_events(header, rows, options)))
                    at += header.records_count
                return results
        except Exception:  # noqa: BLE001 - redo batch by batch to pin the culprit
            pass
    single: list[list[dict[str, Any]] | BaseException] = []
    for header in group:
        try:
            single.append(list(_record_events(view, header, options)))
        except Exception as error:  # noqa: BLE001 - a corrupt batch is one error line
            single.append(error)
    return single


def _checkpoint_start(path: str) -> dict[str, Any]:
    """A KRaft snapshot is named `<20-digit end offset>-<10-digit epoch>.checkpoint`."""
    name = os.path.basename(path)
    if name == "bootstrap.checkpoint":
        return {"kind": "bootstrap_snapshot", "file": path}
    stem = name[: -len(".checkpoint")]
    offset_text, _, epoch_text = stem.partition("-")
    try:
        return {
            "kind": "snapshot_start",
            "file": path,
            "end_offset": int(offset_text),
            "epoch": int(epoch_text),
        }
    except ValueError:
        raise KafkaLogError(
            f"{path}: not a KRaft snapshot name (<end offset>-<epoch>.checkpoint)"
        ) from None


# ---------------------------------------------------------------------------------------------
# .index
# ---------------------------------------------------------------------------------------------


def dump_offset_index(
    path: str, options: DumpOptions, report: DumpReport
) -> Iterator[dict[str, Any]]:
    """Entries checked against the first batch at each position of the segment's .log (§12.4)."""
    base_offset = _base_offset_of(path)
    log_path = _sibling(path, ".log")
    if not os.path.isfile(log_path):  # Kafka opens the .log before anything else
        raise FileNotFoundError(2, "No such file or directory", log_path)
    index = OffsetIndex(path, base_offset)
    if index.entries == 0:
        yield {"kind": "index_empty", "file": path}
        return
    if options.index_sanity_check:
        index.sanity_check()
        yield {"kind": "sanity_check_passed", "file": path}
        return
    absolute = os.path.abspath(path)
    offsets, positions = index.entries_array()
    with mapped_file(log_path) as view:
        for i in range(index.entries):
            offset, position = int(offsets[i]), int(positions[i])
            if i > 0 and offset == base_offset:
                return  # zero padding left by a crash
            if position > len(view):
                raise KafkaLogError(
                    f"{path}: entry {i} (offset {offset}) points at position {position}, past "
                    f"the end of {log_path} ({len(view)} bytes)"
                )
            end = min(position + options.max_message_size, len(view))
            first = next(iter_batch_headers(view, start=position, end=end), None)
            if first is None:
                raise KafkaLogError(
                    f"{path}: no complete batch within --max-message-size "
                    f"{options.max_message_size} bytes at position {position} of {log_path} "
                    f"(entry {i}, offset {offset})"
                )
            if first.last_offset != offset:
                report.index_mismatches.setdefault(absolute, []).append((offset, first.last_offset))
            if not options.verify_index_only:
                yield {"kind": "index_entry", "file": path, "offset": offset, "position": position}


# ---------------------------------------------------------------------------------------------
# .timeindex
# ---------------------------------------------------------------------------------------------


def dump_time_index(
    path: str, options: DumpOptions, report: DumpReport
) -> Iterator[dict[str, Any]]:
    """Entries checked against the batch each one names, found via the offset index (§12.5)."""
    base_offset = _base_offset_of(path)
    log_path = _sibling(path, ".log")
    if not os.path.isfile(log_path):
        raise FileNotFoundError(2, "No such file or directory", log_path)
    # A missing .index reads as an empty one (Kafka creates it; we do not write anything).
    index = OffsetIndex(_sibling(path, ".index"), base_offset)
    time_index = TimeIndex(path, base_offset)
    if options.index_sanity_check:
        time_index.sanity_check()
        yield {"kind": "sanity_check_passed", "file": path}
        return
    absolute = os.path.abspath(path)
    timestamps, entry_offsets = time_index.entries_array()
    previous_timestamp = NO_TIMESTAMP
    with mapped_file(log_path) as view:
        for i in range(time_index.entries):
            timestamp, offset = int(timestamps[i]), int(entry_offsets[i])
            if i > 0 and offset == base_offset:
                return  # zero padding left by a crash
            position = index.lookup(offset).position
            if position > len(view):
                raise KafkaLogError(
                    f"{path}: offset index maps offset {offset} to position {position}, past "
                    f"the end of {log_path} ({len(view)} bytes)"
                )
            found = None
            for header in iter_batch_headers(view, start=position):
                if header.last_offset >= offset:
                    found = header
                    break
            if found is None:
                report.time_not_found.setdefault(absolute, []).append((offset, -1))
            elif found.last_offset != offset:
                report.time_not_found.setdefault(absolute, []).append((offset, found.last_offset))
            else:
                log_max = _max_record_timestamp(view, found)
                if log_max != timestamp:
                    report.time_mismatches.setdefault(absolute, []).append((timestamp, log_max))
                if previous_timestamp >= timestamp:
                    report.time_out_of_order.setdefault(absolute, []).append(
                        (timestamp, previous_timestamp)
                    )
            if not options.verify_index_only:
                yield {
                    "kind": "time_index_entry",
                    "file": path,
                    "timestamp": timestamp,
                    "offset": offset,
                }
            previous_timestamp = timestamp


def _max_record_timestamp(view: memoryview, header: BatchHeader) -> int:
    """The largest record timestamp of the batch (-1 if none), as dump-log computes it."""
    if header.magic < MAGIC_V2:
        from kafkalog_core.record.legacy import iter_legacy_messages

        messages = iter_legacy_messages(view, header, verify=False)
        return max([NO_TIMESTAMP, *(m.timestamp for m in messages)])
    from kafkalog_core.record.decoder import RecordBatch

    timestamps = RecordBatch(view, header).records().column("timestamp").to_pylist()
    return max([NO_TIMESTAMP, *timestamps])


# ---------------------------------------------------------------------------------------------
# .txnindex and .snapshot
# ---------------------------------------------------------------------------------------------


def dump_txn_index(path: str, options: DumpOptions, report: DumpReport) -> Iterator[dict[str, Any]]:
    """One line per 34-byte AbortedTxn entry (§4, §12.6); a ragged tail is ignored as in Kafka."""
    index = TransactionIndex(path, _base_offset_of(path))
    for txn in index.all_entries():
        yield {
            "kind": "aborted_txn",
            "file": path,
            "version": txn.version,
            "producer_id": txn.producer_id,
            "first_offset": txn.first_offset,
            "last_offset": txn.last_offset,
            "last_stable_offset": txn.last_stable_offset,
        }


def dump_producer_snapshot(
    path: str, options: DumpOptions, report: DumpReport
) -> Iterator[dict[str, Any]]:
    """One line per producer of a `.snapshot` (§9.6, §12.7); corruption is one stderr line."""
    try:
        entries = read_snapshot(path)
    except CorruptSnapshotError as error:
        # Kafka prints the exception message to stderr and carries on (exit status unchanged).
        yield _error(path, "corrupt_snapshot", message=str(error))
        return
    for entry in entries:
        event: dict[str, Any] = {
            "kind": "producer_entry",
            "file": path,
            "producer_id": entry.producer_id,
            "producer_epoch": entry.producer_epoch,
            "coordinator_epoch": entry.coordinator_epoch,
            "current_txn_first_offset": (
                entry.current_txn_first_offset if entry.current_txn_first_offset >= 0 else None
            ),
            "last_timestamp": entry.timestamp,
        }
        if entry.has_batch_metadata:
            event["batch_metadata"] = {
                "first_sequence": entry.first_sequence,
                "last_sequence": entry.last_sequence,
                "last_offset": entry.last_offset,
                "offset_delta": entry.offset_delta,
                "timestamp": entry.timestamp,
            }
        yield event


# ---------------------------------------------------------------------------------------------
# rendering
# ---------------------------------------------------------------------------------------------


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


def _optional_long(value: int | None) -> str:
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _decode_text(data: bytes) -> str:
    """StringDecoder: UTF-8 with malformed input replaced by U+FFFD."""
    return data.decode("utf-8", errors="replace")


def _render_text(event: dict[str, Any], options: DumpOptions) -> str:
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


def _to_json(event: dict[str, Any]) -> str:
    """One JSON Lines object; bytes become a string plus an encoding field (see DumpOptions)."""
    if event["kind"] == "record" and "key" in event:
        event = dict(event)
        event["key"], event["key_encoding"] = _encode_bytes(event["key"])
        event["value"], event["value_encoding"] = _encode_bytes(event["value"])
    return json.dumps(event, separators=(",", ":"))
