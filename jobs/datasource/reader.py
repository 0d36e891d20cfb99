"""Batch reads: `spark.read.format("kafkalog")` planned on the driver, decoded in the tasks.

Spark plans in a Python worker of its own: this module imports only what planning needs, and
the decoder (`scan.py`) loads in the task that reads.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from jobs.datasource.filters import PushedBounds, push_filters
from jobs.datasource.layout import partition_views
from jobs.datasource.options import ReadOptions
from jobs.datasource.plan import check_start_before_end, plan_partitions, resolve_offsets
from jobs.datasource.slices import SlicePack
from kafkalog_core.errors import KafkaLogError

if TYPE_CHECKING:
    import pyarrow as pa

    from jobs.datasource.decoded import DecodedColumns

__all__ = ["KafkaLogFilteringReader", "KafkaLogReader", "SliceReading", "planning_filter_pushdown"]

_PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"


class SliceReading:
    """`read` of batch and streaming readers alike: one planned SlicePack -> Arrow batches."""

    options: ReadOptions
    decoded: DecodedColumns | None = None

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SlicePack):  # Spark's InputPartition(None): nothing to read
            return
        from jobs.datasource.one_line import one_line_errors
        from jobs.datasource.scan import read_pack

        with one_line_errors():
            yield from read_pack(
                partition,
                include_headers=self.options.include_headers,
                fail_on_data_loss=self.options.fail_on_data_loss,
                decoded=self.decoded,
            )


class KafkaLogReader(SliceReading, DataSourceReader):
    """Offsets from the options; one input partition per segment byte range."""

    def __init__(self, options: ReadOptions, decoded: DecodedColumns | None = None) -> None:
        self.options = options
        self.decoded = decoded
        self.pushed = PushedBounds()

    def partitions(self) -> Sequence[InputPartition]:
        try:
            with partition_views(self.options.path, self.options.subscription) as views:
                starts = resolve_offsets(views, self.options.starting, self.options, starting=True)
                ends = resolve_offsets(views, self.options.ending, self.options, starting=False)
                check_start_before_end(starts, ends)
                return plan_partitions(views, starts, ends, self.options, self.pushed)
        except NotImplementedError as error:
            # Spark reads NotImplementedError from partitions() as "no partitioning" and would
            # silently read nothing: surface it instead.
            raise KafkaLogError(f"kafkalog: planning {self.options.path}: {error!r}") from error


class KafkaLogFilteringReader(KafkaLogReader):
    """The reader plus filter pushdown (topic, partition, offset, timestamp)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 (Spark's name)
        self.pushed, rest = push_filters(filters)
        return rest


def planning_filter_pushdown() -> bool:
    """True when Spark asks for the reader to push filters into it.

    Spark refuses a reader that implements pushFilters unless
    `spark.sql.python.filterPushdown.enabled` is true, and a data source cannot read that
    setting. Spark plans pushdown in its own worker module, so the reader with pushFilters is
    handed out exactly there, and the plain one everywhere else (default sessions keep working).
    """
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == _PUSHDOWN_WORKER:
            return True
        frame = frame.f_back
    return False
