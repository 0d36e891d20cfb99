"""The files of a partition directory and a log dir (KAFKA_LOG_FACTS.md §2-§9).

Public API of the log engine; index, checkpoint and producer-state types live in their modules.
"""

from kafkalog_core.log.log_loader import LoadReport
from kafkalog_core.log.log_manager import LogDirLoadReport, LogManager
from kafkalog_core.log.partition_log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
    PartitionLog,
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
