"""The producer-state `.snapshot` walker: one line per producer (§9.6, §12.7)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kafkalog_core.errors import CorruptSnapshotError
from kafkalog_core.log.producer_state import read_snapshot
from kafkalog_core.tools.dump_log.options import DumpOptions
from kafkalog_core.tools.dump_log.report import DumpReport, error_event


def dump_producer_snapshot(
    path: str, options: DumpOptions, report: DumpReport
) -> Iterator[dict[str, Any]]:
    """One line per producer of a `.snapshot` (§9.6, §12.7); corruption is one stderr line."""
    try:
        entries = read_snapshot(path)
    except CorruptSnapshotError as error:
        # Kafka prints the exception message to stderr and carries on (exit status unchanged).
        yield error_event(path, "corrupt_snapshot", message=str(error))
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
