"""The state of a `PartitionLog` that its base classes (append, reads) work on.

`PartitionLog.__init__` (partition_log.py) sets every attribute declared here;
`PartitionLogAppends` and `PartitionLogReads` derive from `PartitionLogState` so that each of
them says, in one place, what it may use. Declarations, `active_segment` (both need it) and
the clock helper every `now_ms=` parameter shares.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kafkalog_core.log.segment.log_segment import now_ms

if TYPE_CHECKING:
    from kafkalog_core.config import LogConfig
    from kafkalog_core.log.checkpoints import LeaderEpochCache
    from kafkalog_core.log.segment.log_segment import LogSegment


class PartitionLogState:
    """Attributes and helpers of PartitionLog shared by its base classes (set in partition_log.py)."""

    dir: Path
    config: LogConfig
    log_start_offset: int
    recovery_point: int
    leader_epoch: int | None
    leader_epoch_cache: LeaderEpochCache
    _segments: list[LogSegment]  # oldest first; the last one is active
    _bases: list[int]  # the segments' base offsets, for bisect
    _next_offset: int  # the log end offset
    _epoch_dirty: bool  # the epoch cache changed since it was last written

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    if TYPE_CHECKING:  # defined by PartitionLog

        def roll(self, expected_next_offset: int | None = None) -> LogSegment: ...

        def _check_open(self) -> None: ...


def resolve_now(now: int | None) -> int:
    """`now` in ms, the wall clock when None (every `now_ms=` parameter of the log)."""
    return now_ms() if now is None else int(now)
