"""Recovering and checking a segment at load: `recover` and the index checks (§3.5, §6).

`SegmentRecovery` is a base class of `LogSegment` (segment.py), which owns the files and the
state (segment_state.py). `recover` rebuilds the three indexes from one walk of the .log
(`segment_scan.scan_segment`) and cuts the first invalid batch and all after it;
`indexes_look_valid`, `distrust_indexes` and `sanity_check` decide whether a loaded segment's
indexes can be used as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from kafkalog_core.errors import CorruptIndexError
from kafkalog_core.log.segment.scan import scan_segment
from kafkalog_core.log.segment.state import SegmentState

if TYPE_CHECKING:
    pass


class SegmentRecovery(SegmentState):
    """Recovery and load-time index checks of `LogSegment`."""

    # ---- recovery --------------------------------------------------------------------------------
    def recover(self, producer_state: Any = None, leader_epoch_cache: Any = None) -> int:
        """Rebuild indexes from the .log, cut the first invalid batch and all after it (§3.5).

        `producer_state` may be a `TxnTracker` (default: a fresh one), a
        `ProducerStateManager` (its `update(header, control_type)`), or any object with
        `on_batch(header, control_type) -> AbortedTxn | None`. `leader_epoch_cache` needs
        `latest_epoch` and `assign(epoch, start_offset)`. Returns the bytes truncated;
        `recovery_cut` says where and why. Files change only after the walk and the offset and
        time indexes took their entries (in memory), so a recovery that raises there (an offset
        overflow, offsets out of order) leaves the .log and the .txnindex as they were.
        """
        self.recovery_cut = None
        scan = self._scan(producer_state, leader_epoch_cache, check_crc=True)
        self._take_index_entries(scan, txn=True)
        truncated = scan.truncated_bytes
        if truncated:
            self._truncate_log(scan.valid_bytes)
            self.recovery_cut = scan.invalid
        self._finish_indexes(scan)
        return truncated

    def rebuild_indexes(
        self, producer_state: Any = None, txn: bool = False, time: bool = True
    ) -> None:
        """Rebuild the .index, with `time` the .timeindex and with `txn` the .txnindex from the .log,
        cutting nothing: kafkalog's own distrust of a segment's indexes (`indexes_look_valid`,
        a split's piece) is no reason of Kafka's to truncate, so the walk goes past a CRC
        mismatch as a reader does and stops only where no batch can be read. Raises
        LogSegmentOffsetOverflowError / InvalidOffsetError as `recover` does, files unchanged."""
        scan = self._scan(producer_state, None, check_crc=False)
        self._take_index_entries(scan, txn=txn, time=time)
        self._finish_indexes(scan, time=time)

    def _scan(self, producer_state: Any, leader_epoch_cache: Any, check_crc: bool) -> Any:
        fh = self._handle()
        if self._dirty:
            fh.flush()
            self._dirty = False
        return scan_segment(
            self.log_path,
            fd=fh.fileno(),
            size=self._size,
            base_offset=self.base_offset,
            index_interval_bytes=self.index_interval_bytes,
            producer_state=producer_state,
            leader_epoch_cache=leader_epoch_cache,
            check_crc=check_crc,
        )

    def _take_index_entries(self, scan: Any, txn: bool, time: bool = True) -> None:
        """The walk's offset and time entries (in memory: an entry out of order raises before
        any file changed), then the .txnindex's."""
        self.offset_index.reset()
        self.offset_index.append_many(scan.index_offsets, scan.index_positions)
        if time:
            self.time_index.reset()
        if time and len(scan.walk_timestamps):
            self.time_index.maybe_append_many(scan.walk_timestamps, scan.walk_offsets)
        if txn:
            self.txn_index.reset()
            for aborted in scan.aborted_txns:
                self.txn_index.append(aborted)

    def _finish_indexes(self, scan: Any, time: bool = True) -> None:
        """Recovery's closing time entry for the max timestamp, both indexes trimmed."""
        self.offset_index.trim_to_valid_size()
        if time:
            max_ts = (scan.max_timestamp, scan.offset_of_max_timestamp)
            self._max_ts_and_offset = max_ts
            self.time_index.maybe_append(max_ts[0], max_ts[1], skip_full_check=True)
            self.time_index.trim_to_valid_size()
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp = None
        self._needs_fsync = True

    # ---- continuing a closed segment ---------------------------------------------------------------
    def resume_as_active(self, opened_at: int | None = None) -> None:
        """Take this closed segment back to the live state its writer had just before closing
        it, so that further appends give the bytes that writer would have written.

        A reopen alone does not (§3.3, §3.5): the close added a final time-index entry, and a
        reopened segment counts the bytes since the last offset-index entry from zero. Both are
        read back from the files: the writer's last index point is the later of its last
        offset-index entry and `opened_at`, the next offset when it opened the segment (the
        base offset when it created it; a continued segment's first new offset when it
        reopened one as a broker does). Time-index entries the writer appended while live refer
        to batches up to that point, so an entry past it is the close's: it is dropped and
        becomes the running max it recorded. Call on the active segment of a loaded log.
        """
        start = self.base_offset if opened_at is None else int(opened_at)
        last = self.offset_index.last_entry
        if len(self.offset_index) and last.offset >= start:
            since_from, live_to = last.position, last.offset  # the writer's last index point
        elif start > self.base_offset:  # reopened: no index point since, count from there
            at = self.translate_offset(start)
            since_from, live_to = (self._size if at is None else at.position), start - 1
        else:
            since_from, live_to = 0, start - 1
        self._bytes_since_last_index_entry = self._size - since_from
        final = self.time_index.last_entry
        if len(self.time_index) and final.offset > live_to:
            self.time_index.truncate_to(final.offset)
            self._max_ts_and_offset = (final.timestamp, final.offset)
        else:
            self._max_ts_and_offset = None  # the time index's last entry, as for a reopen
        self.offset_index.resize(self.offset_index.max_index_size)
        self.time_index.resize(self.time_index.max_index_size)

    # ---- verification ------------------------------------------------------------------------------
    def indexes_look_valid(self) -> str | None:
        """Why this segment's .index/.timeindex cannot be trusted, or None.

        Stronger than Kafka ≥ 2.3 (which trusts them): Kafka's sanity checks, plus strictly
        increasing offsets (catches crash-left zero padding), positions inside the .log and
        offsets not past the last batch (catches an index longer than its log).
        """
        try:
            self.offset_index.sanity_check()
            self.time_index.sanity_check()
        except CorruptIndexError as e:
            return str(e)
        off, pos = self.offset_index.entries_array()
        if len(off):
            if np.any(np.diff(off) <= 0) or np.any(np.diff(pos) <= 0):
                return f"{self.offset_index.path}: entries not strictly increasing (zero padding?)"
            if int(pos[-1]) >= self._size or int(pos[0]) < 0:
                return f"{self.offset_index.path}: position {int(pos[-1])} beyond the .log size {self._size}"
            header = next(self._headers_from(int(pos[-1])), None)
            if (
                header is None
                or header.position != int(pos[-1])
                or header.last_offset < int(off[-1])
            ):
                return f"{self.offset_index.path}: last entry does not point at its batch"
        ts, toff = self.time_index.entries_array()
        if len(ts):
            if np.any(np.diff(ts) <= 0) or np.any(np.diff(toff) < 0):
                return f"{self.time_index.path}: entries not increasing (zero padding?)"
            if int(toff[0]) < self.base_offset:
                return f"{self.time_index.path}: offset below the base offset"
        if len(ts) or len(off):
            next_offset = self.read_next_offset()
            if (len(off) and int(off[-1]) >= next_offset) or (
                len(ts) and int(toff[-1]) >= next_offset
            ):
                return (
                    f"index of {self.log_path} refers to offsets at or past the end {next_offset}"
                )
        return None

    def distrust_indexes(self) -> None:
        """For readers that must not write: forget the .index/.timeindex entries in memory, so
        lookups scan the .log from its start and the max timestamp comes from a header walk."""
        self.offset_index.forget_entries()
        self.time_index.forget_entries()
        self._max_ts_and_offset = self._largest_timestamp_after(0)

    def sanity_check(self, time_index_newly_created: bool | None = None) -> None:
        """Kafka's load-time check: a missing .index is an error; a missing .timeindex is created
        empty; the txn index is checked. Raises FileNotFoundError / CorruptIndexError."""
        newly = (
            self.time_index_newly_created
            if time_index_newly_created is None
            else time_index_newly_created
        )
        if not self.offset_index.path.exists():
            raise FileNotFoundError(
                f"{self.offset_index.path} (offset index of {self.log_path}) does not exist"
            )
        if newly:
            self.time_index.resize(0)
            self.time_index.flush(sync=False)
        self.txn_index.sanity_check()
