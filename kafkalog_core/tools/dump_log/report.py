"""What a dump-log run reports besides the dump: `DumpReport` and the error events (§12).

Kafka collects index mismatches, time-index problems and non-consecutive offsets during the run
and prints them on stderr at the end; `DumpReport` keeps them in Kafka's order and gives them as
text lines or `kind: error` events. `describe` turns an exception into the one line a file's
failure gets instead of a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kafkalog_core.errors import KafkaLogError


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
                yield error_event(
                    path, "index_mismatch", index_offset=index_offset, log_offset=log_offset
                )
        for path, pairs in self.time_mismatches.items():
            for index_ts, log_ts in pairs:
                yield error_event(
                    path, "time_index_mismatch", index_timestamp=index_ts, log_timestamp=log_ts
                )
        for path, pairs in self.time_out_of_order.items():
            for index_ts, previous in pairs:
                yield error_event(
                    path,
                    "time_index_out_of_order",
                    index_timestamp=index_ts,
                    previous_timestamp=previous,
                )
        for path, pairs in self.time_not_found.items():
            for index_offset, log_offset in pairs:
                yield error_event(
                    path,
                    "time_index_offset_not_found",
                    index_offset=index_offset,
                    log_offset=log_offset,
                )
        for path, pairs in self.non_consecutive.items():
            for first, second in reversed(pairs):
                yield error_event(path, "non_consecutive_offsets", offset=first, next_offset=second)

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


def error_event(path: str, error: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "error", "file": path, "error": error, **fields}


def describe(path: str, error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return f"{error.filename or path}: {error.strerror}"
    text = str(error) or type(error).__name__
    if not isinstance(error, KafkaLogError):  # unexpected: keep the type, it says what broke
        text = f"{type(error).__name__}: {text}"
    return text if path in text else f"{path}: {text}"
