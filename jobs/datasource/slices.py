"""What the driver plans and a task reads: byte ranges of segments, packed into input partitions.

Kept apart from the task-side decode (`scan.py`) so that the planning worker, which Spark
starts for every query, imports only these small classes and not the decoder (numpy masks,
pyarrow.compute, the C record walk).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from kafkalog_core.errors import CorruptRecordError, KafkaLogError

__all__ = ["LOG", "LogSlice", "SliceFilter", "SlicePack", "report_data_loss"]

LOG = logging.getLogger("kafkalog.datasource")


@dataclass(frozen=True)
class SliceFilter:
    """Row bounds pushed down by Spark, beyond the offset range: timestamps in microseconds,
    both inclusive (None = unbounded)."""

    min_timestamp_us: int | None = None
    max_timestamp_us: int | None = None


@dataclass(frozen=True)
class LogSlice:
    """A byte range of one segment and the offsets wanted from it."""

    topic: str
    partition: int
    log_path: str
    start_position: int
    end_position: int
    start_offset: int  # rows with start_offset <= offset < end_offset
    end_offset: int
    aborted: tuple[tuple[int, int, int], ...] = ()  # read_committed: (producer id, first, last)
    row_filter: SliceFilter = SliceFilter()


@dataclass(frozen=True)
class SlicePack(InputPartition):
    """One Spark input partition: consecutive slices, packed like Spark packs small files."""

    slices: tuple[LogSlice, ...]

    @property
    def size(self) -> int:
        return sum(s.end_position - s.start_position for s in self.slices)


def report_data_loss(
    message: str, fail: bool, error: type[KafkaLogError] = CorruptRecordError
) -> None:
    """Spark's failOnDataLoss: raise `error`, or log and warn and read on."""
    if fail:
        raise error(
            f"kafkalog: {message} (set failOnDataLoss=false to read what is there, with a warning)"
        )
    LOG.warning("kafkalog: %s; reading on (failOnDataLoss=false)", message)
    warnings.warn(f"kafkalog: {message}; reading on (failOnDataLoss=false)", stacklevel=3)
