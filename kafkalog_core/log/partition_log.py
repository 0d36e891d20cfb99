"""PartitionLog: one `<topic>-<partition>` directory of segments (Kafka's UnifiedLog + LocalLog,
§5-§7, §9.3-§9.4; loading an existing directory is `log_loader`'s job).

Typical use inside a Spark task (one partition per task):

    log = PartitionLog.create(dir, config, base_offset=0, topic_id=tid, leader_epoch=0)
    log.append_batches(encode_records(table, base_offset=log.log_end_offset, options=...))
    log.close()

`open()` loads an existing directory the way a broker does at startup (§6, passes 1-12),
including crash leftovers, and says what it did in `load_report`.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kafkalog_core.errors import (
    InvalidOffsetError,
    KafkaLogError,
    LogDirError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from kafkalog_core.log.checkpoints import (
    LeaderEpochCache,
    LeaderEpochCheckpointFile,
    PartitionMetadataFile,
)
from kafkalog_core.log.log_loader import LoadReport, LogLoader
from kafkalog_core.log.names import (
    DELETED_FILE_SUFFIX,
    INDEX_SUFFIXES,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_FILE_SUFFIX,
    PARTITION_METADATA_FILE,
)
from kafkalog_core.log.retention import (
    RetentionDecision,
    SegmentFacts,
    purge_deleted_files,
    retention_decisions,
)
from kafkalog_core.log.segment import (
    FetchDataInfo,
    LogSegment,
    RollParams,
    TimestampAndOffset,
    now_ms,
    segment_file_name,
)
from kafkalog_core.record.batch import PARTITION_LEADER_EPOCH_OFFSET, iter_batch_headers

if TYPE_CHECKING:
    import pyarrow as pa

    from kafkalog_core.config import LogConfig
    from kafkalog_core.record.encoder import EncodedBatches

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


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
        log_append_time_ms=_now(now_ms) if ts_type is TimestampType.LOG_APPEND_TIME else None,
        max_batch_bytes=max(
            min(max_batch_bytes or (1 << 20), max_message, int(config.segment_bytes)), 62
        ),
        max_message_bytes=max_message,
        partition_leader_epoch=-1 if leader_epoch is None else leader_epoch,
    )


class PartitionLog:
    """The segments of one topic-partition directory, oldest first; the last one is active."""

    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        leader_epoch: int | None = None,
        topic_id: uuid.UUID | None = None,
        load_report: LoadReport | None = None,
    ) -> None:
        self.dir = Path(dir)
        self.config = config
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.leader_epoch = leader_epoch
        self.topic_id = topic_id
        self.load_report = load_report or LoadReport(self.dir)
        checkpoint = LeaderEpochCheckpointFile(self.dir / LEADER_EPOCH_CHECKPOINT_FILE)
        try:
            epoch_entries = checkpoint.read()
        except (KafkaLogError, ValueError):
            epoch_entries = []  # the loader reported it; recovery rebuilt what it could
        self.leader_epoch_cache = LeaderEpochCache(checkpoint, entries=epoch_entries)
        self._epoch_dirty = False
        self._next_offset = segments[-1].read_next_offset() if segments else log_start_offset
        self._closed = False

    # ---- construction ---------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        dir: str | os.PathLike[str],
        config: LogConfig,
        *,
        base_offset: int = 0,
        topic_id: uuid.UUID | None = None,
        leader_epoch: int | None = None,
    ) -> PartitionLog:
        """A new, empty partition directory whose first segment starts at `base_offset`.

        Refuses a directory that already holds segments (open it instead). Writes
        `partition.metadata` (when topic_id is given) and an empty leader-epoch-checkpoint, as a
        broker does when it creates a replica.
        """
        path = Path(dir)
        path.mkdir(parents=True, exist_ok=True)
        existing = [p.name for p in path.iterdir() if p.name.endswith(LOG_FILE_SUFFIX)]
        if existing:
            raise LogDirError(
                f"{path} already holds segments ({existing[0]}); use PartitionLog.open"
            )
        if base_offset < 0:
            raise InvalidOffsetError(f"base offset {base_offset} for {path} must be >= 0")
        if topic_id is not None:
            PartitionMetadataFile(path / PARTITION_METADATA_FILE).write(topic_id)
        LeaderEpochCheckpointFile(path / LEADER_EPOCH_CHECKPOINT_FILE).write([])
        segment = LogSegment.open(path, base_offset, config)
        log = cls(
            path,
            config,
            [segment],
            log_start_offset=base_offset,
            recovery_point=base_offset,
            leader_epoch=leader_epoch,
            topic_id=topic_id,
        )
        log._next_offset = base_offset
        return log

    @classmethod
    def open(
        cls,
        dir: str | os.PathLike[str],
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
        had_clean_shutdown: bool = False,
        now_ms: int | None = None,
        leader_epoch: int | None = None,
    ) -> PartitionLog:
        """Load a partition directory like LogLoader.load (§6), crash leftovers included.

        Differences from Kafka (both make the result *more* trustworthy): a missing
        `.timeindex` is rebuilt from the .log (Kafka creates it empty), and offset/time indexes
        failing a sanity check (ragged, zero-padded, pointing past the log) are rebuilt (Kafka
        ≥ 2.3 trusts them).
        """
        del now_ms  # accepted for symmetry; segment creation times use the wall clock
        path = Path(dir)
        if not path.is_dir():
            raise LogDirError(f"partition directory {path} does not exist")
        loader = LogLoader(path, config, recovery_point, log_start_offset or 0, had_clean_shutdown)
        segments, report = loader.load()
        topic_id = None
        meta = path / PARTITION_METADATA_FILE
        if meta.exists():
            try:
                topic_id = PartitionMetadataFile(meta).read()
            except KafkaLogError as e:
                report.warnings.append(f"unreadable {meta}: {e}")
        log = cls(
            path,
            config,
            segments,
            log_start_offset=loader.log_start_offset,
            recovery_point=loader.recovery_point,
            leader_epoch=leader_epoch,
            topic_id=topic_id,
            load_report=report,
        )
        log._next_offset = loader.log_end_offset
        # pass 11: the leader-epoch cache follows the log's range
        cache = log.leader_epoch_cache
        if loader.epoch_entries is not None:
            cache.clear()
            for entry in loader.epoch_entries:
                cache.assign(*entry)
        before = cache.entries
        cache.truncate_from_end(log._next_offset)
        cache.truncate_from_start(log.log_start_offset)
        if cache.entries != before or loader.epoch_entries is not None:
            cache.write()
        report.log_start_offset = log.log_start_offset
        report.log_end_offset = log._next_offset
        report.recovery_point = log.recovery_point
        return log

    # ---- basic properties -----------------------------------------------------------------------
    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def size_in_bytes(self) -> int:
        """Sum of the segments' .log sizes (what retention.bytes measures)."""
        return sum(s.size for s in self._segments)

    @property
    def high_watermark(self) -> int:
        """Offline logs are fully replicated: HW = LEO."""
        return self._next_offset

    def __repr__(self) -> str:
        return (
            f"PartitionLog({str(self.dir)!r}, segments={len(self._segments)}, "
            f"log_start_offset={self.log_start_offset}, log_end_offset={self._next_offset})"
        )

    def _floor_segment(self, offset: int) -> LogSegment | None:
        i = bisect.bisect_right(self._bases, offset) - 1
        return self._segments[i] if i >= 0 else None

    # ---- append ----------------------------------------------------------------------------------
    def batch_options(self, now: int | None = None, max_batch_bytes: int | None = None) -> Any:
        """The BatchOptions this log's config asks for (codec, level, timestamp type, epoch)."""
        return batch_options_for(
            self.config,
            leader_epoch=self.leader_epoch,
            now_ms=_now(now),
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
        now = _now(now_ms)
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

        Each batch is one append (the producer path), so a broker rebuilding our indexes gets
        the same bytes. With `leader_epoch` set, batches are stamped with it in place (PLE is
        outside the CRC) and the leader-epoch-checkpoint is maintained.
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
        now = _now(now_ms)
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

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, LEO) (§5 roll actions)."""
        self._check_open()
        new_offset = max(expected_next_offset or 0, self._next_offset)
        active = self.active_segment
        if new_offset in self._bases:
            if active.base_offset == new_offset and active.size == 0:
                self._segments.pop()
                self._bases.pop()
                active.delete()
                active = self._segments[-1] if self._segments else None  # type: ignore[assignment]
            else:
                raise KafkaLogError(
                    f"Trying to roll a new log segment for {self.dir} with start offset "
                    f"{new_offset} which already exists"
                )
        elif new_offset < active.base_offset:
            raise KafkaLogError(
                f"Trying to roll a new log segment for {self.dir} with start offset {new_offset} "
                f"lower than the active segment's base offset {active.base_offset}"
            )
        for suffix in (LOG_FILE_SUFFIX, *INDEX_SUFFIXES):
            with contextlib.suppress(FileNotFoundError):
                (self.dir / segment_file_name(new_offset, suffix)).unlink()
        if active is not None:
            active.on_become_inactive_segment()
            active.flush()
            active.offset_index.close()
            active.time_index.close()
            active.release_handles()
        segment = LogSegment.open(self.dir, new_offset, self.config)
        self._segments.append(segment)
        self._bases.append(new_offset)
        self.recovery_point = max(self.recovery_point, new_offset)
        return segment

    # ---- reads -----------------------------------------------------------------------------------
    def read(
        self, start_offset: int, max_size: int, *, min_one_message: bool = False
    ) -> FetchDataInfo:
        """Kafka's LocalLog.read: batches from the one holding `start_offset`, at most max_size bytes."""
        if start_offset == self._next_offset:
            seg = self.active_segment
            return FetchDataInfo(start_offset, seg.base_offset, seg.size, b"")
        if start_offset > self._next_offset or start_offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"Received request for offset {start_offset} for {self.dir}, but we only have "
                f"log segments in the range {self.log_start_offset} to {self._next_offset}"
            )
        i = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        for seg in self._segments[i:]:
            info = seg.read(start_offset, max_size, None, min_one_message)
            if info is not None:
                return info
        seg = self.active_segment
        return FetchDataInfo(start_offset, seg.base_offset, seg.size, b"")

    def read_records(
        self,
        start_offset: int | None = None,
        end_offset: int | None = None,
        *,
        include_control: bool = False,
    ) -> pa.Table:
        """Records with start_offset <= offset < end_offset (default: the whole log) as Arrow."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from kafkalog_core.record.decoder import RECORD_SCHEMA, decode_records

        start = (
            self.log_start_offset
            if start_offset is None
            else max(start_offset, self.log_start_offset)
        )
        end = self._next_offset if end_offset is None else min(end_offset, self._next_offset)
        if start >= end:
            return RECORD_SCHEMA.empty_table()
        parts = []
        first = max(0, bisect.bisect_right(self._bases, start) - 1)
        for k, seg in enumerate(self._segments[first:], start=first):
            if seg.base_offset >= end:
                break
            nxt = self._bases[k + 1] if k + 1 < len(self._bases) else None
            if nxt is not None and nxt <= start:
                continue
            mapping = seg.translate_offset(start)
            if mapping is None:
                continue
            data = seg._pread(mapping.position, seg.size - mapping.position)
            table = decode_records(data, include_control=include_control)
            if table.num_rows:
                offs = table.column("offset")
                mask = pc.and_(pc.greater_equal(offs, start), pc.less(offs, end))
                table = table.filter(mask)
                parts.append(table)
        if not parts:
            return RECORD_SCHEMA.empty_table()
        return pa.concat_tables(parts)

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: -2 earliest, -1 latest, -3 max timestamp, else first record with ts >= T."""
        cache = self.leader_epoch_cache
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return TimestampAndOffset(
                -1, self.log_start_offset, cache.epoch_for_offset(self.log_start_offset)
            )
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, self._next_offset, cache.latest_epoch)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return TimestampAndOffset(-1, -1, None)  # no tiered storage offline
        if timestamp == MAX_TIMESTAMP:
            best = None
            for seg in self._segments:
                if best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far:
                    best = seg
            if best is None or best.max_timestamp_so_far < 0:
                return None
            return best.find_max_timestamp_record()
        return offset_for_timestamp(self._segments, timestamp, self.log_start_offset)

    # ---- truncation -----------------------------------------------------------------------------
    def truncate_to(self, target_offset: int) -> bool:
        """Drop everything at and above `target_offset` (UnifiedLog.truncateTo); True if anything went."""
        self._check_open()
        if target_offset < 0:
            raise InvalidOffsetError(
                f"cannot truncate {self.dir} to negative offset {target_offset}"
            )
        if target_offset >= self._next_offset:
            return False
        if target_offset < self._bases[0]:
            # truncate everything: one fresh segment at target
            for seg in self._segments:
                seg.delete()
            seg = LogSegment.open(self.dir, target_offset, self.config)
            self._segments, self._bases = [seg], [target_offset]
            self.log_start_offset = target_offset
        else:
            while len(self._segments) > 1 and self._bases[-1] > target_offset:
                seg = self._segments.pop()
                self._bases.pop()
                seg.delete()
            self.active_segment.truncate_to(target_offset)
        self._next_offset = self.active_segment.read_next_offset()
        self.recovery_point = min(self.recovery_point, self._next_offset)
        self.log_start_offset = min(self.log_start_offset, self._next_offset)
        self.leader_epoch_cache.truncate_from_end(self._next_offset)
        self.leader_epoch_cache.write(sync=False)
        return True

    # ---- retention (decisions are pure, in `retention`; delete_segments acts) ----------------
    def segment_facts(self) -> list[SegmentFacts]:
        """What the retention rules read about each segment, from the open segments."""
        facts = []
        for k, seg in enumerate(self._segments):
            nxt = self._segments[k + 1].base_offset if k + 1 < len(self._segments) else None
            facts.append(
                SegmentFacts(
                    base_offset=seg.base_offset,
                    size=seg.size,
                    next_offset=self._next_offset if nxt is None else nxt,
                    max_timestamp=seg.max_timestamp_so_far,
                    last_modified_ms=seg.last_modified_ms,
                    batches=-1,  # not needed by the rules
                )
            )
        return facts

    def retention_decisions(self, now_ms: int | None = None) -> list[RetentionDecision]:
        """Kafka's deleteOldSegments decisions (§7) for this log, active segment included."""
        return retention_decisions(
            self.segment_facts(),
            self.config,
            now_ms=_now(now_ms),
            log_start_offset=self.log_start_offset,
            high_watermark=self.high_watermark,
            keep_active=False,
        )

    def delete_old_segments(self, now_ms: int | None = None) -> list[int]:
        """Kafka's deleteOldSegments: start-offset, size, then time breaches (§7)."""
        victims = {d.base_offset for d in self.retention_decisions(now_ms) if d.delete}
        return self.delete_segments([s for s in self._segments if s.base_offset in victims])

    def delete_segments(self, segments: Iterable[LogSegment]) -> list[int]:
        """Remove `segments` (a prefix): roll first if all would go, rename files to .deleted,
        advance the log start offset. Returns the deleted base offsets."""
        self._check_open()
        victims = list(segments)
        if not victims:
            return []
        if len(victims) == len(self._segments):
            new_active = self.roll()
            victims = [s for s in victims if s is not new_active]
        ids = {id(s) for s in victims}
        keep = [s for s in self._segments if id(s) not in ids]
        self._segments = keep
        self._bases = [s.base_offset for s in keep]
        self.log_start_offset = max(self.log_start_offset, self._bases[0])
        # Kafka's updateLogStartOffset: nothing below the log start is left to recover
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        for seg in victims:
            seg.close()
            seg.change_file_suffixes("", DELETED_FILE_SUFFIX)
        if self.leader_epoch_cache.truncate_from_start(self.log_start_offset):
            self.leader_epoch_cache.write(sync=False)
        return [s.base_offset for s in victims]

    def purge_deleted_files(self) -> list[str]:
        """Physically remove `*.deleted` files (Kafka does it file.delete.delay.ms later)."""
        return purge_deleted_files(self.dir)

    # ---- lifecycle -------------------------------------------------------------------------------
    def start_writeback(self) -> None:
        """Ask the OS to start writing the active segment's appended bytes to disk, without
        waiting: for a writer that will fsync at the end (a staged log), the disk then works
        while it encodes the next records. (A segment rolled since the last call is left to
        the OS and the final fsync.)"""
        self.active_segment.start_writeback()

    def flush(self, fsync: bool = True) -> None:
        """Write buffered bytes and index entries of every segment (fsync those written since
        their last fsync); advance the recovery point to the LEO."""
        for seg in self._segments:
            seg.flush(fsync=fsync)  # only segments written since their last fsync do work
        if self._epoch_dirty:
            self.leader_epoch_cache.write(sync=fsync)
            self._epoch_dirty = False
        self.recovery_point = self._next_offset

    def close(self, fsync: bool = True) -> None:
        """Kafka's close: every segment gets its final time-index entry and trimmed indexes."""
        if self._closed:
            return
        for seg in self._segments:
            seg.close(fsync=fsync)  # rolled segments written in this session are fsynced too
        if self._epoch_dirty:
            self.leader_epoch_cache.write(sync=fsync)
            self._epoch_dirty = False
        self.recovery_point = self._next_offset
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaLogError(f"log {self.dir} is closed")

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def offset_for_timestamp(
    segments: Iterable[LogSegment], timestamp: int, log_start_offset: int
) -> TimestampAndOffset | None:
    """ListOffsets for a timestamp >= 0 (§3.6): the first segment whose largest timestamp
    reaches it, then the first record there with ts >= timestamp; None when there is none."""
    if timestamp < 0:
        raise ValueError(f"unsupported special timestamp {timestamp}")
    for seg in segments:
        if seg.largest_timestamp >= timestamp:
            return seg.find_offset_by_timestamp(timestamp, log_start_offset)
    return None


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


def _now(now: int | None) -> int:
    return now_ms() if now is None else int(now)


def read_all_headers(path: Path) -> list[Any]:
    """Headers of every batch in a .log file (tests, tools)."""
    return list(iter_batch_headers(path.read_bytes()))
