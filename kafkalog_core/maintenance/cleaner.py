"""One cleaning round of one partition: Kafka's log cleaner, run offline (§8).

`clean_partition` does what a broker's cleaner thread does when it picks the partition:

1. the cleaner manager's view (`cleaner_audit.partition_cleaning_state`, shared with the
   audit): first dirty offset from `cleaner-offset-checkpoint`, the cleanable range (active
   segment, last stable offset, min.compaction.lag.ms), the dirty ratio and the verdict. A
   partition the broker would not pick is left alone;
2. the offset map over [first dirty, first uncleanable) (§8.2, `offset_map`), segment by segment
   from the offset index's position of the first dirty offset, skipping aborted transactions;
   its latest offset + 1 ends the round (earlier when the map is full);
3. every segment below the round's end, grouped by segment.bytes and segment.index.bytes
   (§8.3), each group filtered into one `<base>.log.cleaned` segment (`cleaner_rewrite`) with
   the group's last segment's mtime;
4. the swap (`log.swap.replace_segments`, Kafka's replaceSegments) of all the round's groups at
   once, so that a kill at any point leaves either the old segments (a broker's loader rolls
   back) or the new ones (it completes the swap).

With `apply=False` the same work runs into byte counters: the report of what the round would
do, to the byte, and nothing on disk changes.

Before a round, an interrupted one is settled. The round's journal (its end offset, written
after the `.cleaned` files are complete and before the first `.swap` rename) tells the caller
the checkpoint to write when the swap was committed (no `.cleaned` file left: the loader
completes it); otherwise the loader rolls the swap back and the round runs again. Either way
the files end as an uninterrupted round leaves them. The caller writes the checkpoint (one
file per log dir, so a Spark job's driver writes it once for all partitions) and then removes
the journal.

A round fails where a broker's cleaner fails: a corrupt batch header, a record that does not
parse, or bytes after the last whole batch, in a segment the round reads (the dirty segments it
maps, the segments it rewrites). The partition is then uncleanable, as a broker marks it:
nothing is written and the result says why. CRCs are not checked (Kafka's filterTo copies a
batch it keeps as it is), and the active segment, which the cleaner never reads, may end in a
partial batch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from kafkalog_core.config import LogConfig
from kafkalog_core.errors import ConfigError, CorruptRecordError, KafkaLogError
from kafkalog_core.log.checkpoints import atomic_write
from kafkalog_core.log.index.offset_index import OffsetIndex
from kafkalog_core.log.mapped import mapped_file
from kafkalog_core.log.names import (
    CLEANED_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    index_file_name,
    log_file_name,
    time_index_file_name,
)
from kafkalog_core.log.producer_state import ProducerStateManager
from kafkalog_core.log.segment.log_segment import LogSegment
from kafkalog_core.log.swap import Hook, complete_interrupted_swaps, replace_segments
from kafkalog_core.maintenance.cleaner_audit import (
    BOUND_OPEN_TRANSACTION,
    CleaningState,
    SegmentSummary,
    floor_segment,
    partition_cleaning_state,
    scan_partition,
    verdict,
)
from kafkalog_core.maintenance.cleaner_legacy import clean_legacy, map_legacy
from kafkalog_core.maintenance.cleaner_rewrite import (
    DEFAULT_IO_BUFFER_SIZE,
    DEFAULT_MAX_IO_BUFFER_SIZE,
    DEFAULT_SLAB_BYTES,
    ChunkWriter,
    CleaningError,
    CleanStats,
    RoundRules,
    clean_segment,
    control_types,
    header_columns,
    magic_runs,
    slabs,
    whole_batches,
)
from kafkalog_core.maintenance.cleaner_txn import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ActiveProducers,
    CleanedTransactions,
    read_aborted_txns,
)
from kafkalog_core.maintenance.offset_map import (
    DEFAULT_DEDUPE_BUFFER_SIZE,
    DEFAULT_LOAD_FACTOR,
    OffsetMap,
    key_digests,
    max_keys_for,
)
from kafkalog_core.maintenance.retention import purge_deleted_files
from kafkalog_core.maintenance.segment_facts import load_cut, load_cut_outcome
from kafkalog_core.record.batch import (
    CONTROL_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
)
from kafkalog_core.record.decoder import record_spans

__all__ = [
    "CLEANED",
    "FINISHED",
    "NOT_ELIGIBLE",
    "PENDING",
    "UNCLEANABLE",
    "WOULD_CLEAN",
    "CleanerSettings",
    "CleaningError",
    "CleanStats",
    "RoundResult",
    "build_offset_map",
    "clean_partition",
    "finish_interrupted_round",
    "group_segments",
]

# RoundResult.status
CLEANED = "cleaned"
WOULD_CLEAN = "would clean"  # a dry run of a round
NOT_ELIGIBLE = "not cleaned"  # the cleaner manager would not pick it (verdict says why)
UNCLEANABLE = "uncleanable"  # a corrupt or unsupported batch: skipped, as a broker skips it
FINISHED = "finished interrupted round"  # a killed round's committed swap, completed
PENDING = "interrupted round pending"  # a dry run found a killed round's files


@dataclass(frozen=True)
class CleanerSettings:
    """The broker's cleaner settings (CleanerConfig; `threads` divides the buffers)."""

    dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE  # log.cleaner.dedupe.buffer.size
    threads: int = 1  # log.cleaner.threads
    load_factor: float = DEFAULT_LOAD_FACTOR  # log.cleaner.io.buffer.load.factor
    io_buffer_size: int = DEFAULT_IO_BUFFER_SIZE  # log.cleaner.io.buffer.size
    max_io_buffer_size: int = DEFAULT_MAX_IO_BUFFER_SIZE  # message.max.bytes
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    slab_bytes: int = DEFAULT_SLAB_BYTES  # batches decoded at once (memory, not behaviour)

    @property
    def max_keys(self) -> int:
        return max_keys_for(self.dedupe_buffer_size, self.threads, self.load_factor)

    def check(self) -> CleanerSettings:
        """ConfigError unless a cleaner with these settings can make progress (Kafka's own
        require: the map holds at least one key; every buffer at least a byte)."""
        if self.threads < 1:
            raise ConfigError(f"log.cleaner.threads={self.threads} must be at least 1")
        if self.max_keys < 1:
            raise ConfigError(
                f"log.cleaner.dedupe.buffer.size={self.dedupe_buffer_size} over {self.threads} "
                "thread(s) is too small for the offset map to hold a single key"
            )
        if self.io_buffer_size // self.threads // 2 < 1:
            raise ConfigError(f"log.cleaner.io.buffer.size={self.io_buffer_size} is too small")
        return self


@dataclass
class RoundResult:
    """What a round did (or, in a dry run, would do) to one partition."""

    status: str
    reason: str  # the verdict, or why it was skipped
    state: CleaningState | None = None
    end_offset: int | None = None  # the new cleaner-offset-checkpoint entry, when one is due
    keys_mapped: int = 0
    map_full: bool = False  # the offset map filled: the round ends early
    groups: list[list[int]] = field(default_factory=list)  # source segment bases per output
    bytes_before: int = 0  # of the segments the round rewrites
    bytes_after: int = 0
    stats: CleanStats = field(default_factory=CleanStats)


@contextmanager
def _reading(path: Path) -> Iterator[memoryview]:
    """A segment the round reads, mapped; what it fails on names the file."""
    with mapped_file(path) as view:
        try:
            yield view
        except (CorruptRecordError, CleaningError) as error:
            raise CleaningError(f"{path}: {error}") from None


# ---------------------------------------------------------------------------------------------
# the offset map (§8.2)
# ---------------------------------------------------------------------------------------------


def build_offset_map(
    partition_dir: str | os.PathLike[str],
    state: CleaningState,
    offset_map: OffsetMap,
    slab_bytes: int = DEFAULT_SLAB_BYTES,
) -> tuple[int, bool]:
    """Kafka's buildOffsetMap over [first dirty, first uncleanable): (latest offset, full).

    Each segment is read from its offset index's entry for the first dirty offset on (as Kafka
    does; aborted transactions are told apart by the `.txnindex` entries of the segment holding
    the first dirty offset and all later ones).
    """
    pdir = Path(partition_dir)
    start, end = state.first_dirty_offset, state.first_uncleanable_offset
    later = state.segments[floor_segment(state.segments, start) :]
    dirty = [s for s in later if s.base_offset < end]
    # an aborted transaction's marker (and so its .txnindex entry) may lie beyond the range
    txns = CleanedTransactions(
        read_aborted_txns(pdir, [s.base_offset for s in later], state.log_start_offset)
    )
    latest = -1
    for k, seg in enumerate(dirty):
        position = 0
        index = pdir / index_file_name(seg.base_offset)
        if index.exists():
            position = (
                OffsetIndex(index, seg.base_offset, max(index.stat().st_size, 8))
                .lookup(start)
                .position
            )
        with _reading(pdir / log_file_name(seg.base_offset)) as view:
            for slab, _ in slabs(whole_batches(view, start=position), slab_bytes):
                for v2, run in magic_runs(slab):
                    if v2:
                        latest, full = _map_slab(view, run, start, offset_map, txns, latest)
                    else:
                        latest, full = map_legacy(view, run, start, offset_map, latest)
                    if full:
                        return latest, True
        latest = (dirty[k + 1].base_offset if k + 1 < len(dirty) else end) - 1
    return latest, False


def _map_slab(
    view: memoryview,
    headers: list[BatchHeader],
    start: int,
    offset_map: OffsetMap,
    txns: CleanedTransactions,
    latest: int,
) -> tuple[int, bool]:
    h = header_columns(headers)
    control = (h["attributes"] & CONTROL_MASK) != 0
    txn_rows = np.flatnonzero(control | ((h["attributes"] & TRANSACTIONAL_MASK) != 0)).tolist()
    aborted = np.zeros(len(headers), bool)
    for b in txn_rows:
        header = headers[b]
        if control[b]:
            kind = None
            if header.records_count > 0:
                spans = record_spans(view, [header])
                kind = control_types(spans.arr, spans.fields.key_pos[:1], spans.fields.key_len[:1])[
                    0
                ]
            txns.on_control_batch(header, kind)
        else:
            aborted[b] = txns.on_data_batch(header)
    mapped = np.flatnonzero(~control & ~aborted & (h["last_offset"] >= start))
    reached = h["last_offset"] >= start
    if mapped.size:
        spans = record_spans(view, [headers[b] for b in mapped.tolist()])
        f = spans.fields
        batch = np.repeat(mapped, spans.counts)
        offsets = h["base_offset"][batch] + f.offset_delta
        put = np.flatnonzero((f.key_len >= 0) & (offsets >= start))
        result = offset_map.put(
            key_digests(spans.arr, f.key_pos[put], f.key_len[put]), offsets[put]
        )
        if result.full:
            # the map filled before entry `result.put`: the batches before its batch were read
            # whole, and the entries before it were put
            stop_batch = int(batch[put[result.put]])
            done = reached & (np.arange(len(headers)) < stop_batch)
            if done.any():
                latest = max(latest, int(h["last_offset"][done].max()))
            if result.put:
                latest = max(latest, int(offsets[put[result.put - 1]]))
            return latest, True
    if reached.any():
        latest = max(latest, int(h["last_offset"][reached].max()))
    return latest, False


# ---------------------------------------------------------------------------------------------
# grouping (§8.3)
# ---------------------------------------------------------------------------------------------

_INT_MAX = 2**31 - 1


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def group_segments(
    partition_dir: str | os.PathLike[str],
    segments: list[SegmentSummary],
    config: LogConfig,
    first_uncleanable_offset: int,
) -> list[list[SegmentSummary]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose .log, .index and .timeindex
    sizes each sum to at most segment.bytes / segment.index.bytes, with offsets that fit one
    segment's int32 relative offsets: a segment joins when the worst-case last offset it may
    hold (the next segment's base - 1, or the first uncleanable offset - 1 for the last one)
    is at most Int.MaxValue past the group's first (oldest) base offset, as the new segment's
    index entries are relative to that base. An empty segment always joins."""
    pdir = Path(partition_dir)
    index = [_file_size(pdir / index_file_name(s.base_offset)) for s in segments]
    time_index = [_file_size(pdir / time_index_file_name(s.base_offset)) for s in segments]
    groups: list[list[SegmentSummary]] = []
    k = 0
    while k < len(segments):
        group = [segments[k]]
        log_size, index_size, time_size = segments[k].size, index[k], time_index[k]
        k += 1
        while k < len(segments):
            nxt = segments[k]
            last_offset = (
                segments[k + 1].base_offset - 1
                if k + 1 < len(segments)
                else first_uncleanable_offset - 1
            )
            if not (
                log_size + nxt.size <= config.segment_bytes
                and index_size + index[k] <= config.segment_index_bytes
                and time_size + time_index[k] <= config.segment_index_bytes
                and (nxt.size == 0 or last_offset - group[0].base_offset <= _INT_MAX)
            ):
                break
            group.append(nxt)
            log_size += nxt.size
            index_size += index[k]
            time_size += time_index[k]
            k += 1
        groups.append(group)
    return groups


# ---------------------------------------------------------------------------------------------
# an interrupted round
# ---------------------------------------------------------------------------------------------


def _has_files(pdir: Path, *suffixes: str) -> bool:
    return any(p.name.endswith(suffixes) for p in pdir.iterdir())


def finish_interrupted_round(partition_dir: str | os.PathLike[str], journal: Path) -> int | None:
    """Settle a round a kill interrupted: the checkpoint offset it committed, else None.

    A swap with a `.cleaned` file left never committed: the loader rolls it back and the journal
    goes (the round runs again). Otherwise the loader completes it and the caller writes the
    journal's end offset to `cleaner-offset-checkpoint`, then removes the journal.
    """
    if not journal.exists():
        return None
    pdir = Path(partition_dir)
    record = json.loads(journal.read_bytes())
    rolled_back = _has_files(pdir, CLEANED_FILE_SUFFIX)
    complete_interrupted_swaps(pdir)
    if rolled_back:
        journal.unlink()
        return None
    return int(record["end_offset"])


# ---------------------------------------------------------------------------------------------
# the round
# ---------------------------------------------------------------------------------------------


class _Counter:
    """A dry run's segment: counts what would be appended."""

    def __init__(self) -> None:
        self.size = 0

    def append(self, largest_offset: int, largest_ts: int, shallow: int, records: bytes) -> None:
        self.size += len(records)


def _no_hook(_step: str, _path: Path) -> None:
    return None


def clean_partition(
    partition_dir: str | os.PathLike[str],
    config: LogConfig,
    now_ms: int,
    *,
    cleaner_checkpoint: int | None = None,
    log_start_checkpoint: int | None = None,
    high_watermark: int | None = None,
    recovery_from: int | None = None,
    apply: bool = False,
    settings: CleanerSettings = CleanerSettings(),
    journal: Path | None = None,
    hook: Hook = _no_hook,
    trace: Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None = None,
) -> RoundResult:
    """One cleaning round of the partition (see the module doc). `journal` is where the round
    records its end offset for a rerun after a kill (apply only; None: no record); `hook` runs
    before every file system change, `trace` sees each batch's transaction and producer
    decisions (RoundRules.trace). `recovery_from`: the log dir's recovery point for the partition
    after an unclean shutdown (None: a clean one), where a broker's load rebuilds the time
    indexes that min.compaction.lag.ms reads (`scan_partition`)."""
    pdir = Path(partition_dir)
    if apply:
        if journal is not None:
            finished = finish_interrupted_round(pdir, journal)
            if finished is not None:
                return RoundResult(
                    FINISHED, "completed the swap of an interrupted round", end_offset=finished
                )
        complete_interrupted_swaps(pdir)
    elif (journal is not None and journal.exists()) or _has_files(
        pdir, CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX
    ):
        return RoundResult(
            PENDING, "an interrupted round's files are waiting (a run with --apply settles them)"
        )

    producers = ProducerStateManager()
    # no CRC check but the recovered segments' (Kafka's cleaner checks none; its log is the
    # loaded one) and no refusal yet: only a segment the round reads can make it fail
    scan = scan_partition(pdir, strict=False, producers=producers, recovery_from=recovery_from)
    state = partition_cleaning_state(
        pdir,
        config,
        cleaner_checkpoint,
        now_ms,
        log_start_checkpoint=log_start_checkpoint,
        high_watermark=high_watermark,
        scan=scan,
    )
    cut = load_cut(state.segments)
    if cut is not None:
        return RoundResult(
            UNCLEANABLE,
            f"uncleanable: {pdir / log_file_name(cut.base_offset)}: a broker's load recovers "
            f"it (no clean shutdown; recovery point {recovery_from}) and "
            + load_cut_outcome(state.segments, cut),
            state,
        )
    damaged = next((x for x in state.segments[:-1] if _damaged(x)), None)
    if damaged is not None and state.uncleanable_bound == BOUND_OPEN_TRANSACTION:
        # the walk stopped at the damage, so the end of a transaction after it was not seen;
        # a broker (which loaded the whole log) reads this segment and fails on it
        if damaged.corrupt_at is not None:
            what = f"a corrupt batch header at position {damaged.corrupt_at}"
        else:
            what = (
                f"{damaged.size - damaged.valid_bytes} bytes after the last whole batch "
                f"(position {damaged.valid_bytes})"
            )
        return RoundResult(
            UNCLEANABLE,
            f"uncleanable: {pdir / log_file_name(damaged.base_offset)}: {what}, where a "
            "broker's cleaner fails too; recovery would cut them (rebuild-index --mode rebuild)",
            state,
        )
    words = verdict(state, None, config)
    if not state.eligible:
        reset = state.log_start_offset if apply and state.checkpoint_reset else None
        return RoundResult(NOT_ELIGIBLE, words, state, end_offset=reset)
    try:
        return _round(
            pdir, config, state, producers, now_ms, apply, settings, journal, hook, words, trace
        )
    except KafkaLogError as error:
        # what a broker's cleaner fails on marks the partition uncleanable (LogCleaningException)
        return RoundResult(UNCLEANABLE, f"uncleanable: {error}", state)


def _damaged(segment: SegmentSummary) -> bool:
    """A corrupt header or bytes after the last whole batch: what a broker's cleaner fails on."""
    tail = segment.valid_bytes is not None and segment.valid_bytes < segment.size
    return segment.corrupt_at is not None or tail


def _drop_cleaned(pdir: Path) -> None:
    for leftover in pdir.iterdir():
        if leftover.name.endswith(CLEANED_FILE_SUFFIX):
            leftover.unlink()


def _write_groups(
    pdir: Path,
    config: LogConfig,
    groups: list[list[SegmentSummary]],
    rules: RoundRules,
    apply: bool,
    hook: Hook,
    txns: CleanedTransactions,
    stats: CleanStats,
    legacy_horizon_ms: int,
) -> int:
    """Filter each group into its `.cleaned` segment (a dry run: into a counter); the bytes
    written. A segment still open when an error ends the round is closed before it goes."""
    bytes_after = 0
    for group in groups:
        base = group[0].base_offset
        if apply:
            hook("create", pdir / log_file_name(base, CLEANED_FILE_SUFFIX))
            sink = LogSegment.open(pdir, base, config, file_suffix=CLEANED_FILE_SUFFIX)
            txns.index_sink = sink.txn_index.append
        else:
            sink = _Counter()
            txns.index_sink = None
        try:
            writer = ChunkWriter(
                sink, rules.io_buffer_size, rules.max_io_buffer_size, rules.max_message_bytes
            )
            for seg in group:
                # LogCleaner's retainLegacyDeletesAndTxnMarkers, per source segment
                legacy = partial(
                    clean_legacy,
                    rules=rules,
                    retain_deletes=seg.last_modified_ms > legacy_horizon_ms,
                    stats=stats,
                )
                with _reading(pdir / log_file_name(seg.base_offset)) as view:
                    clean_segment(view, rules, writer, stats, legacy)
            bytes_after += writer.written
            if apply:
                hook("flush", sink.log_path)
                sink.on_become_inactive_segment()
                sink.flush(fsync=True)
                sink.set_last_modified(group[-1].last_modified_ms)
                sink.close()
        except BaseException:
            if apply:
                sink.close_handlers()
            raise
    return bytes_after


def _round(
    pdir: Path,
    config: LogConfig,
    state: CleaningState,
    producers: ProducerStateManager,
    now_ms: int,
    apply: bool,
    settings: CleanerSettings,
    journal: Path | None,
    hook: Hook,
    words: str,
    trace: Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None,
) -> RoundResult:
    offset_map = OffsetMap(settings.max_keys)
    latest, full = build_offset_map(pdir, state, offset_map, settings.slab_bytes)
    end = latest + 1
    round_segments = [s for s in state.segments if s.base_offset < end]
    groups = group_segments(pdir, round_segments, config, state.first_uncleanable_offset)
    txns = CleanedTransactions(
        read_aborted_txns(pdir, [s.base_offset for s in state.segments], state.log_start_offset)
    )
    rules = RoundRules(
        offset_map=offset_map,
        latest_offset=latest,
        upper_bound=state.first_uncleanable_offset,
        now_ms=now_ms,
        delete_retention_ms=config.delete_retention_ms,
        producers=ActiveProducers(producers.entries, now_ms, settings.producer_id_expiration_ms),
        transactions=txns,
        max_message_bytes=config.max_message_bytes,
        io_buffer_size=settings.io_buffer_size // settings.threads // 2,
        max_io_buffer_size=settings.max_io_buffer_size,
        slab_bytes=settings.slab_bytes,
        trace=trace,
    )
    stats = CleanStats()
    try:
        bytes_after = _write_groups(
            pdir, config, groups, rules, apply, hook, txns, stats, state.delete_horizon_legacy_ms
        )
    except Exception:
        # Kafka deletes the cleaned segment of a failed round: nothing of it is published yet
        # (the journal and the first .swap rename come after), so the dir is as it was
        if apply:
            _drop_cleaned(pdir)
        raise
    stats.bytes_written = bytes_after
    result = RoundResult(
        CLEANED if apply else WOULD_CLEAN,
        words,
        state,
        end_offset=end,
        keys_mapped=offset_map.size,
        map_full=full,
        groups=[[s.base_offset for s in g] for g in groups],
        bytes_before=sum(s.size for s in round_segments),
        bytes_after=bytes_after,
        stats=stats,
    )
    if apply:
        if journal is not None:
            hook("journal", journal)
            journal.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(journal, json.dumps({"end_offset": end, "groups": result.groups}).encode())
        replace_segments(
            pdir, [g[0] for g in result.groups], [s.base_offset for s in round_segments], hook=hook
        )
        purge_deleted_files(pdir, hook=hook)
    return result
