"""Appending to a partition log: encode at the log end offset, stamp the leader epoch, roll (§5).

`PartitionLogAppends` is a base class of `PartitionLog` (partition_log.py), which owns the
segments and the state (partition_log_state.py); every method is still called on the log.
`append_records` encodes a table in pieces (optionally appending piece k on a writer thread
while piece k + 1 is encoded), `append_batches` checks and appends ready batches with Kafka's
roll check before each batch, vectorized over the batches' header arrays. `AppendInfo` and
`batch_options_for` are the value types and config mapping both the log and the Spark writers use.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from typing import TYPE_CHECKING, Any

import numpy as np

from kafkalog_core.errors import InvalidOffsetError, RecordTooLargeError
from kafkalog_core.log.partition.state import PartitionLogState, resolve_now
from kafkalog_core.log.segment.log_segment import LogSegment, RollParams
from kafkalog_core.record.batch import PARTITION_LEADER_EPOCH_OFFSET

if TYPE_CHECKING:
    from kafkalog_core.config import LogConfig
    from kafkalog_core.record.encoder import EncodedBatches


@dataclass
class AppendInfo:
    """What one append did (Kafka's LogAppendInfo, the fields an offline writer needs)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    num_batches: int
    num_records: int
    valid_bytes: int
    log_append_time_ms: int = -1
    rolled_segments: list[int] = field(default_factory=list)  # base offsets of segments created


def batch_options_for(
    config: LogConfig,
    *,
    leader_epoch: int | None = None,
    now_ms: int | None = None,
    max_batch_bytes: int | None = None,
) -> Any:
    """How a topic's records become batches, from its LogConfig.

    Codec and level from compression.type (`producer` keeps "the producer's codec": we are the
    producer and write uncompressed batches), timestamp type from message.timestamp.type
    (LogAppendTime stamps `now_ms`), batches targeting `max_batch_bytes` (default 1 MiB) capped
    by max.message.bytes and segment.bytes, and the leader epoch a broker would stamp.
    """
    from kafkalog_core.record.batch import Compression, TimestampType
    from kafkalog_core.record.encoder import BatchOptions

    codec = config.codec or Compression.NONE
    ts_type = config.timestamp_type
    max_message = int(config.max_message_bytes)
    return BatchOptions(
        compression=codec,
        compression_level=config.compression_level(codec),
        timestamp_type=ts_type,
        log_append_time_ms=resolve_now(now_ms)
        if ts_type is TimestampType.LOG_APPEND_TIME
        else None,
        max_batch_bytes=max(
            min(max_batch_bytes or (1 << 20), max_message, int(config.segment_bytes)), 62
        ),
        max_message_bytes=max_message,
        partition_leader_epoch=-1 if leader_epoch is None else leader_epoch,
    )


class PartitionLogAppends(PartitionLogState):
    """The append path of `PartitionLog`."""

    def batch_options(self, now: int | None = None, max_batch_bytes: int | None = None) -> Any:
        """The BatchOptions this log's config asks for (codec, level, timestamp type, epoch)."""
        return batch_options_for(
            self.config,
            leader_epoch=self.leader_epoch,
            now_ms=resolve_now(now),
            max_batch_bytes=max_batch_bytes,
        )

    def append_records(
        self,
        table: Any,
        *,
        now_ms: int | None = None,
        max_batch_bytes: int | None = None,
        options: Any = None,
        write_behind: bool = True,
    ) -> AppendInfo:
        """Encode `table` (key/value/timestamp/headers columns) at the LEO and append it.

        Codec, level and timestamp type come from the config; LogAppendTime stamps `now_ms`.
        Batches target `max_batch_bytes` (default 1 MiB), capped by max.message.bytes and
        segment.bytes. `options` overrides everything (its epoch is still stamped over).

        The encode streams in pieces of a few MiB. With `write_behind` (the default) a second
        thread appends piece k while piece k + 1 is encoded (the C encoder and the file write
        both run without the GIL); the files are the same either way.
        """
        from kafkalog_core.record.encoder import DEFAULT_CHUNK_BYTES, encode_records_chunked

        self._check_open()
        now = resolve_now(now_ms)
        opts = options if options is not None else self.batch_options(now, max_batch_bytes)
        # Appending in pieces is all-or-nothing only when every batch the encoder accepts also
        # passes append_batches' size limits; otherwise one piece.
        chunk = None if opts.max_message_bytes > min(self._size_limits()) else DEFAULT_CHUNK_BYTES
        pieces = encode_records_chunked(
            table,
            base_offset=self._next_offset,
            options=opts,
            chunk_bytes=chunk,
            buffers=2 if write_behind else 1,
        )
        # a table smaller than one piece has nothing to overlap: no thread for it
        if write_behind and chunk is not None and _table_bytes(table) > chunk:
            infos = self._append_behind(pieces, now)
        else:
            infos = [self.append_batches(piece, now_ms=now) for piece in pieces]
        info = _merge_append_infos(infos)
        if opts.log_append_time_ms is not None:
            info.log_append_time_ms = opts.log_append_time_ms
        return info

    def _append_behind(self, pieces: Iterator[EncodedBatches], now: int) -> list[AppendInfo]:
        """append_batches of each piece on one writer thread, overlapping the next piece's
        encode (which the encoder writes into the other of its two buffers). Pieces are
        appended in order, one at a time; the first failure stops the stream and is raised."""
        from concurrent.futures import Future, ThreadPoolExecutor

        infos: list[AppendInfo] = []
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafkalog-append") as writer:
            pending: Future[AppendInfo] | None = None
            for piece in pieces:  # the encode of this piece ran while `pending` was written
                if pending is not None:
                    infos.append(pending.result())
                pending = writer.submit(self.append_batches, piece, now_ms=now)
            if pending is not None:
                infos.append(pending.result())
        return infos

    def append_batches(self, encoded: EncodedBatches, *, now_ms: int | None = None) -> AppendInfo:
        """Append ready batches; the first base offset must be the LEO. Rolls as Kafka does (§5).

        Each batch is one append: the producer path. Kafka's maybeRoll runs once per append,
        with the whole set's size and largest timestamp, and a Java producer's request holds
        one batch per partition (RecordAccumulator.drain takes at most one per partition), so
        a broker fed these batches by producers checks the roll before each batch, as here;
        this call is exactly the sequence of one-batch appends. (A multi-batch append, a
        follower's fetch, would roll once for the set: no writer here appends so.) With
        `leader_epoch` set, batches are stamped with it in place (PLE is outside the CRC) and
        the leader-epoch-checkpoint is maintained.
        """
        self._check_open()
        n = len(encoded)
        if n == 0:
            return AppendInfo(self._next_offset, self._next_offset - 1, -1, -1, 0, 0, 0)
        base_offsets = encoded.base_offsets
        last_offsets = encoded.last_offsets
        sizes = encoded.sizes
        if int(base_offsets[0]) != self._next_offset:
            raise InvalidOffsetError(
                f"{self.dir}: first batch base offset {int(base_offsets[0])} is not the log end "
                f"offset {self._next_offset}"
            )
        if n > 1 and np.any(base_offsets[1:] <= last_offsets[:-1]):
            i = int(np.flatnonzero(base_offsets[1:] <= last_offsets[:-1])[0]) + 1
            raise InvalidOffsetError(
                f"{self.dir}: batch {i} base offset {int(base_offsets[i])} does not follow the "
                f"previous batch's last offset {int(last_offsets[i - 1])}"
            )
        if np.any(last_offsets < base_offsets):
            raise InvalidOffsetError(f"{self.dir}: a batch has last offset < base offset")
        max_message, segment_bytes = self._size_limits()
        too_big = np.flatnonzero(sizes > min(max_message, segment_bytes))
        if len(too_big):
            i = int(too_big[0])
            limit = "max.message.bytes" if int(sizes[i]) > max_message else "segment.bytes"
            raise RecordTooLargeError(
                f"{self.dir}: batch at offset {int(base_offsets[i])} is {int(sizes[i])} bytes, "
                f"larger than {limit} ({max_message if limit == 'max.message.bytes' else segment_bytes})"
            )
        # PLEs read once: the stamp check and the epoch cache share them
        ples = _gather_i32(encoded.buffer, encoded.positions + PARTITION_LEADER_EPOCH_OFFSET)
        encoded, ples = self._stamp_leader_epoch(encoded, ples)
        self._assign_epochs(encoded, ples)
        now = resolve_now(now_ms)
        rolled = self._append_with_rolls(encoded, now)
        self._next_offset = int(last_offsets[-1]) + 1
        if self._epoch_dirty:
            self.leader_epoch_cache.write(sync=False)
            self._epoch_dirty = False
        ts = encoded.max_timestamps
        k = int(np.argmax(ts))
        return AppendInfo(
            first_offset=int(base_offsets[0]),
            last_offset=int(last_offsets[-1]),
            max_timestamp=int(ts[k]),
            offset_of_max_timestamp=int(last_offsets[k]),
            num_batches=n,
            num_records=int(encoded.record_counts.sum()),
            valid_bytes=int(sizes.sum()),
            rolled_segments=rolled,
        )

    def _size_limits(self) -> tuple[int, int]:
        """(max.message.bytes, segment.bytes): no batch larger than either is appended."""
        max_message = int(getattr(self.config, "max_message_bytes", 1048588))
        return max_message, int(self.config.segment_bytes)

    def _stamp_leader_epoch(
        self, encoded: EncodedBatches, ples: np.ndarray
    ) -> tuple[EncodedBatches, np.ndarray]:
        """Write our leader epoch into every batch's PLE field (outside the CRC).

        Zero copies in the common case: `batch_options` has the encoder write our epoch, so
        this is one comparison. Batches encoded with another epoch are stamped into a copy (the
        caller's buffer is left as it was).
        """
        if self.leader_epoch is None or np.all(ples == self.leader_epoch):
            return encoded, ples
        buf = bytearray(encoded.buffer)
        arr = np.frombuffer(buf, dtype=np.uint8)
        idx = (encoded.positions + PARTITION_LEADER_EPOCH_OFFSET)[:, None] + np.arange(4)
        arr[idx] = np.frombuffer(np.array([self.leader_epoch], dtype=">i4").tobytes(), np.uint8)
        stamped = dc_replace(encoded, buffer=memoryview(buf))
        return stamped, np.full(len(encoded), self.leader_epoch, dtype=np.int64)

    def _assign_epochs(self, encoded: EncodedBatches, ples: np.ndarray) -> None:
        """Leader-epoch cache: a batch whose PLE exceeds the latest epoch starts that epoch."""
        latest = self.leader_epoch_cache.latest_epoch
        latest = -1 if latest is None else latest
        running = np.maximum.accumulate(np.concatenate(([latest], ples)))[:-1]
        for i in np.flatnonzero(ples > running).tolist():
            if self.leader_epoch_cache.assign(int(ples[i]), int(encoded.base_offsets[i])):
                self._epoch_dirty = True

    def _append_with_rolls(self, encoded: EncodedBatches, now: int) -> list[int]:
        """Roll check before each batch (§5), batches between rolls appended in runs."""
        cfg = self.config
        max_segment_ms = int(cfg.max_segment_ms)
        segment_bytes = int(cfg.segment_bytes)
        sizes = encoded.sizes
        ts = encoded.max_timestamps
        lasts = encoded.last_offsets
        bases = encoded.base_offsets
        n = len(encoded)
        rolled: list[int] = []
        i = 0
        while i < n:
            seg = self.active_segment
            params = RollParams(
                max_segment_ms, segment_bytes, int(ts[i]), int(lasts[i]), int(sizes[i]), now
            )
            if seg.should_roll(params):
                seg = self.roll(max(int(bases[i]), self._next_offset))
                rolled.append(seg.base_offset)
            seg.append_batches(encoded, i, i + 1)
            j = self._run_end(seg, encoded, i + 1, now, max_segment_ms, segment_bytes)
            if j > i + 1:
                seg.append_batches(encoded, i + 1, j)
            self._next_offset = int(lasts[j - 1]) + 1
            i = j
        return rolled

    @staticmethod
    def _run_end(
        seg: LogSegment,
        encoded: EncodedBatches,
        start: int,
        now: int,
        max_segment_ms: int,
        segment_bytes: int,
    ) -> int:
        """Largest j such that batches [start, j) need no roll check (all four conditions false)."""
        n = len(encoded)
        if start >= n:
            return start
        sizes = encoded.sizes[start:]
        fits = seg.size + np.cumsum(sizes) <= segment_bytes
        ok = fits
        rbt = seg.rolling_based_timestamp
        limit = max_segment_ms - seg.roll_jitter_ms
        if rbt is not None and rbt >= 0:
            ok = ok & ((encoded.max_timestamps[start:] - rbt) <= limit)
        elif now - seg.created_ms > limit:
            return start
        rel = encoded.last_offsets[start:] - seg.base_offset
        ok = ok & (rel >= 0) & (rel <= 2**31 - 1)
        free = min(
            seg.offset_index.max_entries - seg.offset_index.entries,
            seg.time_index.max_entries - 1 - seg.time_index.entries,
        )
        # each batch adds at most one entry; stay strictly below "full" before every check
        max_run = max(0, free - 1)
        bad = np.flatnonzero(~ok)
        end = start + (int(bad[0]) if len(bad) else len(sizes))
        return min(end, start + max_run)


def _table_bytes(table: Any) -> int:
    """Arrow's buffer size of `table` (a Table/RecordBatch or a mapping of columns)."""
    if hasattr(table, "nbytes"):
        return int(table.nbytes)
    return sum(int(getattr(column, "nbytes", 0)) for column in table.values())


def _merge_append_infos(infos: list[AppendInfo]) -> AppendInfo:
    """One AppendInfo for consecutive appends (the earliest offset wins a max-timestamp tie)."""
    if len(infos) == 1:
        return infos[0]
    appended = [i for i in infos if i.num_batches] or infos[:1]
    first, last = appended[0], appended[-1]
    top = max(appended, key=lambda i: i.max_timestamp)  # max() keeps the first of equals
    return AppendInfo(
        first_offset=first.first_offset,
        last_offset=last.last_offset,
        max_timestamp=top.max_timestamp,
        offset_of_max_timestamp=top.offset_of_max_timestamp,
        num_batches=sum(i.num_batches for i in infos),
        num_records=sum(i.num_records for i in infos),
        valid_bytes=sum(i.valid_bytes for i in infos),
        rolled_segments=[base for i in infos for base in i.rolled_segments],
    )


def _gather_i32(buffer: Any, at: np.ndarray) -> np.ndarray:
    arr = np.frombuffer(buffer, dtype=np.uint8)
    idx = np.asarray(at, dtype=np.int64)[:, None] + np.arange(4)
    return arr[idx].copy().view(">i4").ravel().astype(np.int64)
