"""The .log walker (and a KRaft .checkpoint's): batch lines, record lines, trailing bytes (§12.3).

Large segments are memory-mapped and walked batch by batch; with deep iteration, runs of
consecutive v2 batches are decoded in one vectorized call, bounded in bytes, and a batch whose
records fail is redone alone to name it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from kafkalog_core.errors import CorruptRecordError, KafkaLogError
from kafkalog_core.log.mapped import mapped_file
from kafkalog_core.record.batch import INT32_MAX, MAGIC_V2, BatchHeader, iter_batch_headers
from kafkalog_core.tools.dump_log.events import (
    base_offset_of,
    batch_event,
    record_events,
    v2_record_events,
)
from kafkalog_core.tools.dump_log.options import DumpOptions
from kafkalog_core.tools.dump_log.report import DumpReport, describe, error_event


def dump_log(path: str, options: DumpOptions, report: DumpReport) -> Iterator[dict[str, Any]]:
    """Batch lines, record lines with deep iteration, and the trailing invalid bytes (§12.3)."""
    name = os.path.basename(path)
    if name.endswith(".log"):
        yield {"kind": "log_start", "file": path, "log_start_offset": base_offset_of(path)}
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
                    event = batch_event(view, header, valid_bytes)
                    event["file"] = path
                    yield event
                    if deep:
                        records = decoded[i]
                        if isinstance(records, BaseException):
                            report.errors += 1
                            yield error_event(
                                path, "corrupt_batch", message=describe(path, records)
                            )
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
            yield error_event(
                path, "corrupt_log", message=describe(path, failure), position=valid_bytes
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
                    results.append(list(v2_record_events(header, rows, options)))
                    at += header.records_count
                return results
        except Exception:  # noqa: BLE001 - redo batch by batch to pin the culprit
            pass
    single: list[list[dict[str, Any]] | BaseException] = []
    for header in group:
        try:
            single.append(list(record_events(view, header, options)))
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
