"""The state of a `LogSegment` that its base classes (append, reads, recovery) work on.

`LogSegment.__init__` (segment.py) sets every attribute declared here; `SegmentAppends`,
`SegmentReads` and `SegmentRecovery` derive from `SegmentState` so that each of them says, in
one place, what it may use. Declarations only: nothing here runs or holds a value.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkalog_core.log.index.offset_index import OffsetIndex
from kafkalog_core.log.index.time_index import TimeIndex
from kafkalog_core.log.index.txn_index import TransactionIndex

if TYPE_CHECKING:
    from collections.abc import Iterator

    from kafkalog_core.log.segment.scan import InvalidBatch
    from kafkalog_core.record.batch import BatchHeader


class SegmentState:
    """Attributes and helpers of LogSegment shared by its base classes (set in segment.py)."""

    base_offset: int
    index_interval_bytes: int
    log_path: Path
    offset_index: OffsetIndex
    time_index: TimeIndex
    txn_index: TransactionIndex
    time_index_newly_created: bool
    _size: int  # bytes of batches in the .log
    _preallocated: bool  # zeros follow the batches (preallocate=true)
    _dirty: bool  # bytes sit in the write buffer
    _needs_fsync: bool
    _bytes_since_last_index_entry: int
    _rolling_based_timestamp: int | None  # None = not loaded yet
    _max_ts_and_offset: tuple[int, int] | None  # None = not loaded yet
    recovery_cut: InvalidBatch | None  # where and why the last `recover` cut the .log

    if TYPE_CHECKING:  # defined by LogSegment or one of its base classes

        def _handle(self) -> Any: ...

        def _pread(self, position: int, size: int) -> bytes: ...

        def _max_ts(self) -> tuple[int, int]: ...

        def _truncate_log(self, target: int) -> int: ...

        def _headers_from(self, position: int, end: int | None = None) -> Iterator[BatchHeader]: ...

        def _largest_timestamp_after(self, position: int) -> tuple[int, int]: ...

        def read_next_offset(self) -> int: ...
