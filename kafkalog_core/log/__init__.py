"""The files of a partition directory and a log dir (KAFKA_LOG_FACTS.md §2-§9).

Public API of the log engine; index, checkpoint and producer-state types live in their modules.

The names load on first use (PEP 562): a Spark worker that needs one segment class does not
pay for the loader, the log manager and the verifier.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_MODULES = {
    "AppendInfo": "kafkalog_core.log.partition_log_append",
    "EARLIEST_TIMESTAMP": "kafkalog_core.log.partition_log_reads",
    "FetchDataInfo": "kafkalog_core.log.segment",
    "LATEST_TIMESTAMP": "kafkalog_core.log.partition_log_reads",
    "LoadReport": "kafkalog_core.log.log_loader",
    "LogDirLoadReport": "kafkalog_core.log.log_manager",
    "LogManager": "kafkalog_core.log.log_manager",
    "LogOffsetPosition": "kafkalog_core.log.segment",
    "LogSegment": "kafkalog_core.log.segment",
    "MAX_TIMESTAMP": "kafkalog_core.log.partition_log_reads",
    "PartitionLog": "kafkalog_core.log.partition_log",
    "PartitionVerification": "kafkalog_core.log.verify",
    "RollParams": "kafkalog_core.log.segment",
    "SegmentScan": "kafkalog_core.log.segment_scan",
    "SegmentVerification": "kafkalog_core.log.verify",
    "TimestampAndOffset": "kafkalog_core.log.segment",
    "TxnTracker": "kafkalog_core.log.segment_scan",
    "rebuild_partition": "kafkalog_core.log.rebuild",
    "rebuild_segment": "kafkalog_core.log.rebuild",
    "scan_segment": "kafkalog_core.log.segment_scan",
    "verify_partition": "kafkalog_core.log.verify",
    "verify_segment": "kafkalog_core.log.verify",
    "verify_time_index": "kafkalog_core.log.verify",
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
    "PartitionVerification",
    "RollParams",
    "SegmentScan",
    "SegmentVerification",
    "TimestampAndOffset",
    "TxnTracker",
    "rebuild_partition",
    "rebuild_segment",
    "scan_segment",
    "verify_partition",
    "verify_segment",
    "verify_time_index",
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
    from kafkalog_core.log.partition_log import PartitionLog
    from kafkalog_core.log.partition_log_append import AppendInfo
    from kafkalog_core.log.partition_log_reads import (
        EARLIEST_TIMESTAMP,
        LATEST_TIMESTAMP,
        MAX_TIMESTAMP,
    )
    from kafkalog_core.log.rebuild import rebuild_partition, rebuild_segment
    from kafkalog_core.log.segment import (
        FetchDataInfo,
        LogOffsetPosition,
        LogSegment,
        RollParams,
        TimestampAndOffset,
    )
    from kafkalog_core.log.segment_scan import SegmentScan, TxnTracker, scan_segment
    from kafkalog_core.log.verify import (
        PartitionVerification,
        SegmentVerification,
        verify_partition,
        verify_segment,
        verify_time_index,
    )
