"""The files of a partition directory and a log dir (KAFKA_LOG_FACTS.md §2-§9).

Public API of the log engine; index, checkpoint and producer-state types live in their modules.

The names load on first use (PEP 562): a Spark worker that needs one segment class does not
pay for the loader, the log manager and the verifier.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_MODULES = {
    "AppendInfo": "kafkalog_core.log.partition.append",
    "EARLIEST_TIMESTAMP": "kafkalog_core.log.partition.reads",
    "FetchDataInfo": "kafkalog_core.log.segment.log_segment",
    "LATEST_TIMESTAMP": "kafkalog_core.log.partition.reads",
    "LoadReport": "kafkalog_core.log.log_loader",
    "LogDirLoadReport": "kafkalog_core.log.log_manager",
    "LogManager": "kafkalog_core.log.log_manager",
    "LogOffsetPosition": "kafkalog_core.log.segment.log_segment",
    "LogSegment": "kafkalog_core.log.segment.log_segment",
    "MAX_TIMESTAMP": "kafkalog_core.log.partition.reads",
    "PartitionLog": "kafkalog_core.log.partition.partition_log",
    "RollParams": "kafkalog_core.log.segment.log_segment",
    "SegmentScan": "kafkalog_core.log.segment.scan",
    "TimestampAndOffset": "kafkalog_core.log.segment.log_segment",
    "TxnTracker": "kafkalog_core.log.segment.scan",
    "scan_segment": "kafkalog_core.log.segment.scan",
}

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendInfo",
    "FetchDataInfo",
    "LoadReport",
    "LogDirLoadReport",
    "LogManager",
    "LogOffsetPosition",
    "LogSegment",
    "PartitionLog",
    "RollParams",
    "SegmentScan",
    "TimestampAndOffset",
    "TxnTracker",
    "scan_segment",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULES))


if TYPE_CHECKING:  # the same names, eagerly, for type checkers
    from kafkalog_core.log.log_loader import LoadReport
    from kafkalog_core.log.log_manager import LogDirLoadReport, LogManager
    from kafkalog_core.log.partition.append import AppendInfo
    from kafkalog_core.log.partition.partition_log import PartitionLog
    from kafkalog_core.log.partition.reads import (
        EARLIEST_TIMESTAMP,
        LATEST_TIMESTAMP,
        MAX_TIMESTAMP,
    )
    from kafkalog_core.log.segment.log_segment import LogSegment, RollParams
    from kafkalog_core.log.segment.reads import FetchDataInfo, LogOffsetPosition, TimestampAndOffset
    from kafkalog_core.log.segment.scan import SegmentScan, TxnTracker, scan_segment
