"""The index walkers: .index and .timeindex checked against the .log (§12.4, §12.5), .txnindex.

Index entries are checked against the batches they name; mismatches go to the run's
`DumpReport`, printed at the end as Kafka does. Nothing is written: a missing .index reads as
an empty one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from kafkalog_core.errors import KafkaLogError
from kafkalog_core.log.index.offset_index import OffsetIndex
from kafkalog_core.log.index.time_index import TimeIndex
from kafkalog_core.log.index.txn_index import TransactionIndex
from kafkalog_core.log.mapped import mapped_file
from kafkalog_core.record.batch import MAGIC_V2, BatchHeader, iter_batch_headers
from kafkalog_core.tools.dump_log.events import base_offset_of, sibling_path
from kafkalog_core.tools.dump_log.options import DumpOptions
from kafkalog_core.tools.dump_log.report import DumpReport

NO_TIMESTAMP = -1


def dump_offset_index(
    path: str, options: DumpOptions, report: DumpReport
) -> Iterator[dict[str, Any]]:
    """Entries checked against the first batch at each position of the segment's .log (§12.4)."""
    base_offset = base_offset_of(path)
    log_path = sibling_path(path, ".log")
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
    base_offset = base_offset_of(path)
    log_path = sibling_path(path, ".log")
    if not os.path.isfile(log_path):
        raise FileNotFoundError(2, "No such file or directory", log_path)
    # A missing .index reads as an empty one (Kafka creates it; we do not write anything).
    index = OffsetIndex(sibling_path(path, ".index"), base_offset)
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
    index = TransactionIndex(path, base_offset_of(path))
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
