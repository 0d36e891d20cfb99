"""One source segment through the cleaner's batch filter (Kafka's cleanInto + MemoryRecords.filterTo).

For every batch, in offset order, the cleaner decides (§8.4-§8.6):

- which records stay: beyond the round (offset > the map's latest offset) everything; else a
  keyed record whose offset is its key's latest mapped offset, unless it is a tombstone past its
  batch's delete horizon; a null-key record goes; the records of an aborted transaction go;
- the batch's retention: a producer's last batch and the batch that ends the round keep at
  least an empty header (RETAIN_EMPTY); an aborted data batch, or a marker past its horizon
  whose transaction is gone, goes whole (DELETE); otherwise it goes when no record stays
  (DELETE_EMPTY);
- how it is written: copied byte for byte when every record stays and no delete horizon must
  be set; rebuilt otherwise (same base and last offset, producer fields, leader epoch,
  timestamp type and codec at its default level; base timestamp = the first record's or the
  new delete horizon); or as a 61-byte empty header.

The record rules run vectorized over a slab of batches (one decode per slab); the transaction
bookkeeping (`CleanedTransactions`) runs per transactional or control batch; the rebuilt
records are re-framed with numpy varints around their original key/value/headers bytes
(`_rebuild`). The output is appended to the new segment in Kafka's read chunks (`ChunkWriter`):
a chunk is the whole batches that fit the cleaner's I/O buffer (log.cleaner.io.buffer.size /
threads / 2, grown for a batch that does not fit), cut short after a batch whose output
overflows the buffer; one append per chunk, so the new segment's index entries are Kafka's.

A record's key/value/headers bytes are copied as they are; Kafka re-serializes them, which
gives the same bytes whenever their length varints are canonical (every Kafka writer's are).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core.errors import KafkaLogError
from kafkalog_core.maintenance.cleaner_txn import ActiveProducers, CleanedTransactions
from kafkalog_core.maintenance.offset_map import OffsetMap, key_digests
from kafkalog_core.record.batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    Compression,
    iter_batch_headers,
)
from kafkalog_core.record.control import parse_control_record_key
from kafkalog_core.record.decoder import RecordSpans, record_spans
from kafkalog_core.record.decoder.spans import binary_from_spans
from kafkalog_core.record.encoder.framing import HEADER_DTYPE, fill_crcs
from kafkalog_core.record.encoder.varints import (
    ATTRIBUTES_FIELD,
    varint_fields_binary,
    varint_size_array,
)

__all__ = [
    "DEFAULT_IO_BUFFER_SIZE",
    "DEFAULT_MAX_IO_BUFFER_SIZE",
    "CleanStats",
    "LegacyFilter",
    "SlabOutput",
    "CleaningError",
    "ChunkWriter",
    "RoundRules",
    "clean_segment",
    "control_types",
    "header_columns",
    "magic_runs",
    "slabs",
    "whole_batches",
]

DEFAULT_IO_BUFFER_SIZE = 524_288  # log.cleaner.io.buffer.size
DEFAULT_MAX_IO_BUFFER_SIZE = 1_048_588  # message.max.bytes (broker): the buffers' growth limit
DEFAULT_SLAB_BYTES = 32 << 20  # bytes of batches decoded at once

# batch actions
DROP, COPY, REBUILD, EMPTY = 0, 1, 2, 3
_FLAGS = COMPRESSION_CODEC_MASK | TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK


class CleaningError(KafkaLogError):
    """A segment the cleaner cannot rewrite (a broker marks the partition uncleanable)."""


@dataclass
class CleanStats:
    """What a round read and wrote; `+` merges."""

    records_read: int = 0
    records_kept: int = 0
    superseded_removed: int = 0  # a later record of the same key is mapped
    tombstones_removed: int = 0  # past their delete horizon
    null_key_removed: int = 0  # no key: a compacted topic cannot hold them
    aborted_removed: int = 0  # records of aborted transactions
    markers_removed: int = 0  # transaction markers past their horizon
    tombstones_given_horizon: int = 0  # kept tombstones in batches that got a delete horizon
    markers_given_horizon: int = 0
    batches_read: int = 0
    batches_copied: int = 0
    batches_rebuilt: int = 0
    batches_emptied: int = 0  # kept as a 61-byte header
    batches_removed: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    def __add__(self, other: CleanStats) -> CleanStats:
        return CleanStats(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    @property
    def records_removed(self) -> int:
        return self.records_read - self.records_kept


@dataclass
class RoundRules:
    """What every batch of a round is judged against."""

    offset_map: OffsetMap
    latest_offset: int  # the map's latest offset: records above it are beyond this round
    upper_bound: int  # first uncleanable offset: the batch ending there keeps a header
    now_ms: int  # the cleaner's clock
    delete_retention_ms: int
    producers: ActiveProducers
    transactions: CleanedTransactions
    max_message_bytes: int  # the topic's max.message.bytes
    io_buffer_size: int = DEFAULT_IO_BUFFER_SIZE // 2  # per thread, / 2: read and write buffers
    max_io_buffer_size: int = DEFAULT_MAX_IO_BUFFER_SIZE
    slab_bytes: int = DEFAULT_SLAB_BYTES
    # (base offsets, discardable, producer's last) of each slab's batches: the transaction and
    # producer decisions, for tests that hand them to Kafka's own filter
    trace: Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None = None


# ---------------------------------------------------------------------------------------------
# header columns
# ---------------------------------------------------------------------------------------------

_HEADER_FIELDS = (
    "base_offset",
    "last_offset_delta",
    "length",
    "position",
    "attributes",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "base_timestamp",
    "max_timestamp",
    "partition_leader_epoch",
    "magic",
    "records_count",
)


def header_columns(headers: list[BatchHeader]) -> dict[str, np.ndarray]:
    """Header fields of a slab's batches as int64 arrays (one Python pass over the headers)."""
    rows = np.array([tuple(getattr(h, f) for f in _HEADER_FIELDS) for h in headers], np.int64)
    cols = {name: rows[:, k] for k, name in enumerate(_HEADER_FIELDS)}
    cols["last_offset"] = cols["base_offset"] + cols["last_offset_delta"]
    cols["size"] = cols["length"] + LOG_OVERHEAD
    return cols


def control_types(spans_arr: np.ndarray, key_pos: np.ndarray, key_len: np.ndarray) -> list[int]:
    """The control record type of each given control record (its key's second int16)."""
    out = []
    for pos, length in zip(key_pos.tolist(), key_len.tolist(), strict=True):
        key = None if length < 0 else spans_arr[pos : pos + length].tobytes()
        out.append(int(parse_control_record_key(key)))
    return out


# ---------------------------------------------------------------------------------------------
# one slab of batches
# ---------------------------------------------------------------------------------------------


@dataclass
class SlabOutput:
    """Per batch of a slab: bytes read, bytes written and what the chunk's append is told."""

    in_sizes: np.ndarray
    out_sizes: np.ndarray
    max_timestamps: np.ndarray
    shallow_offsets: np.ndarray
    max_offsets: np.ndarray
    data: np.ndarray  # the written batches back to back


@dataclass
class _Slab:
    """A slab's decisions: per batch (`h`, `counts`, `action`, ...) and per record (`bi` its
    batch, `keep`, ...), and where the records lie (`spans`)."""

    h: dict[str, np.ndarray]
    spans: RecordSpans
    counts: np.ndarray
    bi: np.ndarray
    offsets: np.ndarray
    timestamps: np.ndarray
    control: np.ndarray  # a marker record
    keyed: np.ndarray
    tomb: np.ndarray  # null value
    in_round: np.ndarray  # offset <= the map's latest offset
    latest: np.ndarray  # no later offset mapped for its key
    keep: np.ndarray
    discard_records: np.ndarray  # per batch: checkBatchRetention's discardBatchRecords
    needs_horizon: np.ndarray  # per batch: rebuilt with a new delete horizon
    horizon: np.ndarray  # per batch: the delete horizon it is written with, -1 for none
    action: np.ndarray  # per batch: DROP, COPY, REBUILD, EMPTY


def _judge(view: memoryview, headers: list[BatchHeader], rules: RoundRules) -> _Slab:
    """Every decision of filterTo for a slab of consecutive batches of one segment."""
    h = header_columns(headers)  # v2 batches only (magic_runs sends legacy ones elsewhere)
    backwards = np.flatnonzero(h["base_offset"][1:] <= h["last_offset"][:-1])
    if backwards.size:
        bad = headers[int(backwards[0]) + 1]
        raise CleaningError(
            f"batch at position {bad.position} starts at offset {bad.base_offset}, not after "
            f"the previous batch's last offset {int(h['last_offset'][backwards[0]])}"
        )
    nb = len(headers)
    spans = record_spans(view, headers)
    f, counts = spans.fields, spans.counts
    bi = np.repeat(np.arange(nb), counts)
    attrs = h["attributes"]
    control_b = (attrs & CONTROL_MASK) != 0
    horizon_b = (attrs & DELETE_HORIZON_MASK) != 0
    log_append_b = (attrs & TIMESTAMP_TYPE_MASK) != 0
    offsets = h["base_offset"][bi] + f.offset_delta
    timestamps = np.where(
        log_append_b[bi], h["max_timestamp"][bi], h["base_timestamp"][bi] + f.timestamp_delta
    )
    keyed = f.key_len >= 0
    tomb = f.value_len < 0
    control = control_b[bi]
    in_round = offsets <= rules.latest_offset

    # the record rule (Cleaner.shouldRetainRecord), for records of batches not discarded
    looked_up = ~control & keyed & in_round
    mapped = np.full(offsets.shape[0], -1, np.int64)
    if looked_up.any():
        rows = np.flatnonzero(looked_up)
        mapped[rows] = rules.offset_map.get(
            key_digests(spans.arr, f.key_pos[rows], f.key_len[rows])
        )
    keep_deletes_b = ~horizon_b | (rules.now_ms < h["base_timestamp"])
    latest = offsets >= mapped
    keep = control | ~in_round | (keyed & latest & (~tomb | keep_deletes_b[bi]))

    # the batch's retention (checkBatchRetention)
    discardable = _transactions(headers, h, spans, counts, control_b, rules.transactions)
    discard_records = np.where(
        control_b, discardable & horizon_b & (h["base_timestamp"] <= rules.now_ms), discardable
    )
    producer_last = rules.producers.last_batches(
        h["producer_id"], h["last_offset"], h["producer_epoch"], control_b
    )
    if rules.trace is not None:
        rules.trace(h["base_offset"], discardable, producer_last)
    retain_empty = producer_last | (h["last_offset"] + 1 == rules.upper_bound)
    keep &= ~discard_records[bi]
    kept = np.bincount(bi, weights=keep, minlength=nb).astype(np.int64)
    kept_tombs = np.bincount(bi, weights=keep & tomb & ~control, minlength=nb) > 0
    needs_horizon = (kept_tombs | (discardable & control_b)) & ~horizon_b
    action = np.where(
        (discard_records | (kept == 0)) & ~retain_empty,
        DROP,
        np.where(kept == 0, EMPTY, np.where((kept == counts) & ~needs_horizon, COPY, REBUILD)),
    )
    horizon = np.where(
        needs_horizon,
        rules.now_ms + rules.delete_retention_ms,
        np.where(horizon_b, h["base_timestamp"], NO_TIMESTAMP),
    )
    return _Slab(
        h, spans, counts, bi, offsets, timestamps, control, keyed, tomb, in_round, latest,
        keep, discard_records, needs_horizon, horizon, action,
    )  # fmt: skip


def _transactions(
    headers: list[BatchHeader],
    h: dict[str, np.ndarray],
    spans: RecordSpans,
    counts: np.ndarray,
    control_b: np.ndarray,
    txns: CleanedTransactions,
) -> np.ndarray:
    """CleanedTransactionMetadata per transactional or control batch, in offset order: which
    batches may go (aborted data, markers of transactions with nothing left)."""
    discardable = np.zeros(len(headers), bool)
    rows = np.flatnonzero(control_b | ((h["attributes"] & TRANSACTIONAL_MASK) != 0))
    if not rows.size:
        return discardable
    first_record = np.concatenate(([0], np.cumsum(counts)[:-1]))
    markers = rows[control_b[rows] & (counts[rows] > 0)]
    f = spans.fields
    kinds = dict(
        zip(
            markers.tolist(),
            control_types(
                spans.arr, f.key_pos[first_record[markers]], f.key_len[first_record[markers]]
            ),
            strict=True,
        )
    )
    for b in rows.tolist():
        header = headers[b]
        if control_b[b]:
            discardable[b] = txns.on_control_batch(header, kinds.get(b))
        else:
            discardable[b] = txns.on_data_batch(header)
    return discardable


def _count(s: _Slab, stats: CleanStats) -> None:
    removed = ~s.keep
    discarded = s.discard_records[s.bi]
    judged = removed & ~discarded & ~s.control & s.in_round  # by the record rule
    action = s.action
    stats.records_read += int(s.counts.sum())
    stats.records_kept += int(np.count_nonzero(s.keep))
    stats.aborted_removed += int(np.count_nonzero(removed & discarded & ~s.control))
    stats.markers_removed += int(np.count_nonzero(removed & s.control))
    stats.null_key_removed += int(np.count_nonzero(judged & ~s.keyed))
    stats.superseded_removed += int(np.count_nonzero(judged & s.keyed & ~s.latest))
    stats.tombstones_removed += int(np.count_nonzero(judged & s.keyed & s.latest & s.tomb))
    given = ((action == REBUILD) & s.needs_horizon)[s.bi] & s.keep
    stats.tombstones_given_horizon += int(np.count_nonzero(given & s.tomb & ~s.control))
    stats.markers_given_horizon += int(np.count_nonzero(given & s.control))
    stats.batches_read += int(action.shape[0])
    stats.batches_copied += int(np.count_nonzero(action == COPY))
    stats.batches_rebuilt += int(np.count_nonzero(action == REBUILD))
    stats.batches_emptied += int(np.count_nonzero(action == EMPTY))
    stats.batches_removed += int(np.count_nonzero(action == DROP))
    stats.bytes_read += int(s.h["size"].sum())


# ---------------------------------------------------------------------------------------------
# writing the slab's batches
# ---------------------------------------------------------------------------------------------


def _write(view: memoryview, s: _Slab) -> SlabOutput:
    """The slab's output in batch order, and per batch what filterTo's result records."""
    h, action = s.h, s.action
    nb = action.shape[0]
    out_sizes = np.zeros(nb, np.int64)
    copy, rebuild, empty = action == COPY, action == REBUILD, action == EMPTY
    out_sizes[copy] = h["size"][copy]
    out_sizes[empty] = RECORD_BATCH_OVERHEAD
    # copied batches and empty headers report their own header's max timestamp and last offset
    max_ts = h["max_timestamp"].copy()
    shallow = h["last_offset"].copy()
    max_off = h["last_offset"].copy()
    rebuilt = empties = np.empty(0, np.uint8)
    if rebuild.any():
        rebuilt, sizes, r_max_ts, r_shallow, r_max_off = _rebuild(s, rebuild)
        out_sizes[rebuild] = sizes
        max_ts[rebuild], shallow[rebuild], max_off[rebuild] = r_max_ts, r_shallow, r_max_off
    if empty.any():
        empties = _empty_headers(h, empty)

    data = np.empty(int(out_sizes.sum()), np.uint8)
    source = np.frombuffer(view, np.uint8)
    # runs of one action: copied runs are contiguous in the segment, rebuilt and empty ones in
    # their buffers, so one copy per run
    change = np.flatnonzero(np.diff(action)) + 1
    at = r_at = e_at = 0
    for lo, hi in zip(
        np.concatenate(([0], change)).tolist(), np.concatenate((change, [nb])).tolist(), strict=True
    ):
        n = int(out_sizes[lo:hi].sum())
        kind = int(action[lo])
        if kind == COPY:
            p = int(h["position"][lo])
            data[at : at + n] = source[p : p + n]
        elif kind == REBUILD:
            data[at : at + n] = rebuilt[r_at : r_at + n]
            r_at += n
        elif kind == EMPTY:
            data[at : at + n] = empties[e_at : e_at + n]
            e_at += n
        at += n
    return SlabOutput(h["size"], out_sizes, max_ts, shallow, max_off, data)


def _empty_headers(h: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """DefaultRecordBatch.writeEmptyHeader for each batch in `rows` (a mask)."""
    headers = np.zeros(int(rows.sum()), HEADER_DTYPE)
    headers["base_offset"] = h["base_offset"][rows]
    headers["length"] = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
    headers["partition_leader_epoch"] = h["partition_leader_epoch"][rows]
    headers["magic"] = MAGIC_V2
    headers["attributes"] = h["attributes"][rows] & (
        TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK
    )
    headers["last_offset_delta"] = h["last_offset_delta"][rows]
    headers["base_timestamp"] = NO_TIMESTAMP
    headers["max_timestamp"] = h["max_timestamp"][rows]
    headers["producer_id"] = h["producer_id"][rows]
    headers["producer_epoch"] = h["producer_epoch"][rows]
    headers["base_sequence"] = h["base_sequence"][rows]
    n = headers.shape[0]
    out = np.frombuffer(headers.tobytes(), np.uint8).copy()
    fill_crcs(
        out,
        np.arange(n, dtype=np.int64) * RECORD_BATCH_OVERHEAD,
        np.full(n, RECORD_BATCH_OVERHEAD, np.int64),
    )
    return out


def _rebuild(
    s: _Slab, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """MemoryRecords.buildRetainedRecordsInto for every batch in `rows` (a mask): the kept
    records re-framed (new timestamp and offset deltas, their other bytes as they were), the
    records area compressed with the batch's codec at its default level, a new header.

    Returns the batches back to back, their sizes, and per batch the (maxTimestamp, shallow
    offset, last kept offset) filterTo reports for it."""
    from kafkalog_core.record.compression import compress_many

    h, f = s.h, s.spans.fields
    batches = np.flatnonzero(rows)
    recs = np.flatnonzero(s.keep & rows[s.bi])
    rb = s.bi[recs]
    _, first = np.unique(rb, return_index=True)  # each batch's first kept record
    ts = s.timestamps[recs]
    # the new base timestamp: the delete horizon, else the first kept record's timestamp
    base_ts_b = np.full(rows.shape[0], NO_TIMESTAMP, np.int64)
    base_ts_b[batches] = np.where(s.horizon[batches] >= 0, s.horizon[batches], ts[first])
    ts_delta = ts - base_ts_b[rb]
    off_delta = s.offsets[recs] - h["base_offset"][rb]
    # the record's bytes from its key length on stay as they are; length, attributes and the
    # two deltas are written anew
    tail_start = f.key_pos[recs] - varint_size_array(f.key_len[recs], at_least_minus_one=True)
    tail_len = f.start[recs] + f.size[recs] - tail_start
    ts_size = varint_size_array(ts_delta)
    off_size = varint_size_array(off_delta, at_least_minus_one=True)
    body = 1 + ts_size + off_size + tail_len
    prefix = varint_fields_binary(
        [
            (body, varint_size_array(body, at_least_minus_one=True)),
            ATTRIBUTES_FIELD,
            (ts_delta, ts_size),
            (off_delta, off_size),
        ],
        recs.shape[0],
    )
    arr = s.spans.arr
    tails = binary_from_spans(arr, pa.py_buffer(arr), tail_start, tail_len)
    records = pc.binary_join_element_wise(
        prefix.cast(pa.large_binary()),
        tails.cast(pa.large_binary()),
        pa.scalar(b"", pa.large_binary()),
    )
    rec_offsets = np.frombuffer(records.buffers()[1], np.int64)[
        records.offset : records.offset + len(records) + 1
    ]
    bounds = np.concatenate((first, [recs.shape[0]]))
    regions = list(
        zip(rec_offsets[bounds[:-1]].tolist(), rec_offsets[bounds[1:]].tolist(), strict=True)
    )

    codecs = h["attributes"][batches] & COMPRESSION_CODEC_MASK
    data_view = memoryview(records.buffers()[2] or b"")
    payloads: list[memoryview | bytes] = [b""] * len(regions)
    for codec in np.unique(codecs).tolist():
        which = np.flatnonzero(codecs == codec).tolist()
        picked = [regions[i] for i in which]
        if codec == Compression.NONE:
            done: list[memoryview | bytes] = [data_view[a:b] for a, b in picked]
        else:
            done = list(compress_many(Compression(codec), data_view, picked))
        for i, payload in zip(which, done, strict=True):
            payloads[i] = payload
    payload_sizes = np.fromiter(map(len, payloads), np.int64, len(payloads))

    n = batches.shape[0]
    log_append = (h["attributes"][batches] & TIMESTAMP_TYPE_MASK) != 0
    max_ts = np.where(
        log_append,
        h["max_timestamp"][batches],
        np.maximum(np.maximum.reduceat(ts, first), NO_TIMESTAMP),
    )
    headers = np.zeros(n, HEADER_DTYPE)
    headers["base_offset"] = h["base_offset"][batches]
    headers["length"] = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + payload_sizes
    headers["partition_leader_epoch"] = h["partition_leader_epoch"][batches]
    headers["magic"] = MAGIC_V2
    headers["attributes"] = (h["attributes"][batches] & _FLAGS) | np.where(
        s.horizon[batches] >= 0, DELETE_HORIZON_MASK, 0
    )
    headers["last_offset_delta"] = h["last_offset_delta"][batches]  # the original last offset
    headers["base_timestamp"] = base_ts_b[batches]
    headers["max_timestamp"] = max_ts
    headers["producer_id"] = h["producer_id"][batches]
    headers["producer_epoch"] = h["producer_epoch"][batches]
    headers["base_sequence"] = h["base_sequence"][batches]
    headers["records_count"] = np.diff(bounds)
    sizes = RECORD_BATCH_OVERHEAD + payload_sizes
    positions = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    out = np.empty(int(sizes.sum()), np.uint8)
    head_bytes = np.frombuffer(headers.tobytes(), np.uint8).reshape(n, RECORD_BATCH_OVERHEAD)
    out[positions[:, None] + np.arange(RECORD_BATCH_OVERHEAD)] = head_bytes
    for pos, payload in zip((positions + RECORD_BATCH_OVERHEAD).tolist(), payloads, strict=True):
        out[pos : pos + len(payload)] = np.frombuffer(payload, np.uint8)
    fill_crcs(out, positions, sizes)
    # MemoryRecordsBuilder.info(): the shallow offset is the (original) last offset
    shallow = np.where(log_append | (max_ts != NO_TIMESTAMP), h["last_offset"][batches], -1)
    return out, sizes, max_ts, shallow, np.maximum.reduceat(s.offsets[recs], first)


# ---------------------------------------------------------------------------------------------
# the read chunks: one append per chunk
# ---------------------------------------------------------------------------------------------


@dataclass
class ChunkWriter:
    """Kafka's cleanInto loop over one source segment: which batches share a read chunk, and the
    one `sink.append` per chunk with what filterTo reports for it."""

    sink: Any  # a LogSegment, or a dry run's counter: the same append(...)
    io_buffer_size: int
    max_io_buffer_size: int
    max_message_bytes: int
    capacity: int = 0
    _pending: list[SlabOutput] = field(default_factory=list)
    written: int = 0

    def __post_init__(self) -> None:
        self.capacity = self.io_buffer_size

    def start_segment(self) -> None:
        """restoreBuffers: every source segment starts with the configured buffer size."""
        self.capacity = self.io_buffer_size

    def feed(self, part: SlabOutput, last: bool) -> None:
        """The next batches of the segment (`last`: the segment ends with them)."""
        self._pending.append(part)
        if len(self._pending) > 1:
            ps = self._pending
            merged = SlabOutput(
                *(
                    np.concatenate([getattr(p, name) for p in ps])
                    for name in (
                        "in_sizes",
                        "out_sizes",
                        "max_timestamps",
                        "shallow_offsets",
                        "max_offsets",
                        "data",
                    )
                )
            )
            self._pending = [merged]
        cur = self._pending[0]
        n = cur.in_sizes.shape[0]
        cum_in = np.concatenate(([0], np.cumsum(cur.in_sizes)))
        cum_out = np.concatenate(([0], np.cumsum(cur.out_sizes)))
        i = 0
        while i < n:
            fit = int(np.searchsorted(cum_in, cum_in[i] + self.capacity, side="right")) - 1
            if fit == i:
                self._grow(int(cur.in_sizes[i]))
                continue
            # filterTo stops after a batch whose output overflows the write buffer
            over = int(np.searchsorted(cum_out, cum_out[i] + self.capacity, side="right"))
            end = min(fit, over) if over <= n else fit
            if end == n and fit == n and not last and over > n:
                break  # the read window may reach into batches not seen yet
            self._append(cur, i, end, cum_out)
            i = end
        self._pending = [_tail(cur, i)] if i < n else []

    def _grow(self, batch_size: int) -> None:
        """growBuffersOrFail: double the buffers towards max(max.message.bytes, the batch)."""
        limit = batch_size if self.capacity >= self.max_message_bytes else self.max_message_bytes
        ceiling = max(limit, self.max_io_buffer_size)
        if self.capacity >= ceiling:
            raise CleaningError(
                f"a batch of {batch_size} bytes is larger than the cleaner's largest I/O buffer "
                f"({ceiling} bytes, max.message.bytes)"
            )
        self.capacity = min(self.capacity * 2, ceiling)

    def _append(self, cur: SlabOutput, i: int, end: int, cum_out: np.ndarray) -> None:
        lo, hi = int(cum_out[i]), int(cum_out[end])
        if hi == lo:
            return
        written = cur.out_sizes[i:end] > 0
        ts = np.where(written, cur.max_timestamps[i:end], NO_TIMESTAMP - 1)
        best = int(np.argmax(ts))
        max_ts = int(ts[best])
        shallow = int(cur.shallow_offsets[i + best]) if max_ts > NO_TIMESTAMP else -1
        max_ts = max(max_ts, NO_TIMESTAMP)
        max_offset = int(cur.max_offsets[i:end][written].max())
        self.sink.append(max_offset, max_ts, shallow, memoryview(cur.data)[lo:hi])
        self.written += hi - lo


def _tail(cur: SlabOutput, i: int) -> SlabOutput:
    start = int(cur.out_sizes[:i].sum())
    return SlabOutput(
        cur.in_sizes[i:],
        cur.out_sizes[i:],
        cur.max_timestamps[i:],
        cur.shallow_offsets[i:],
        cur.max_offsets[i:],
        cur.data[start:].copy(),
    )


# ---------------------------------------------------------------------------------------------
# a whole source segment
# ---------------------------------------------------------------------------------------------


def slabs(
    headers: Iterable[BatchHeader], slab_bytes: int
) -> Iterator[tuple[list[BatchHeader], bool]]:
    """Consecutive batches in groups of about `slab_bytes` (at least one batch each), and
    whether a group is the last: a segment is read a slab at a time, its headers too."""
    slab: list[BatchHeader] = []
    size = 0
    for header in headers:
        if slab and size + header.size > slab_bytes:
            yield slab, False
            slab, size = [], 0
        slab.append(header)
        size += header.size
    if slab:
        yield slab, True


def whole_batches(view: memoryview, start: int = 0) -> Iterator[BatchHeader]:
    """The batch headers of a segment the cleaner reads, from `start` to its end.

    What a broker's cleaner fails on fails here too: a corrupt header (CorruptRecordError) and
    bytes after the last whole batch, which its read loop can neither parse nor skip (it grows
    its buffers, then gives up). CRCs are not checked: filterTo never checks them.
    """
    end = start
    for header in iter_batch_headers(view, start=start):
        end = header.position + header.size
        yield header
    if end < len(view):
        raise CleaningError(
            f"{len(view) - end} bytes after the last whole batch (position {end}), where a "
            "broker's cleaner fails too; recovery would cut them (rebuild-index --mode rebuild)"
        )


def magic_runs(headers: list[BatchHeader]) -> list[tuple[bool, list[BatchHeader]]]:
    """Consecutive batches split into runs of v2 batches and of legacy entries: (v2, run)."""
    runs: list[tuple[bool, list[BatchHeader]]] = []
    for header in headers:
        v2 = header.magic >= MAGIC_V2
        if runs and runs[-1][0] == v2:
            runs[-1][1].append(header)
        else:
            runs.append((v2, [header]))
    return runs


# legacy entries of a segment through filterTo (cleaner_legacy.clean_legacy, bound to the round)
LegacyFilter = Callable[[memoryview, list[BatchHeader]], SlabOutput]


def clean_segment(
    view: memoryview,
    rules: RoundRules,
    writer: ChunkWriter,
    stats: CleanStats,
    legacy: LegacyFilter | None = None,
) -> None:
    """Filter every batch of one source segment (its mapped bytes) into `writer`; magic v0/v1
    entries go through `legacy`."""
    writer.start_segment()
    for batches, last in slabs(whole_batches(view), rules.slab_bytes):
        runs = magic_runs(batches)
        for k, (v2, run) in enumerate(runs):
            if v2:
                slab = _judge(view, run, rules)
                _count(slab, stats)
                out = _write(view, slab)
            elif legacy is None:
                raise CleaningError(f"batch at position {run[0].position} has magic {run[0].magic}")
            else:
                out = legacy(view, run)
            writer.feed(out, last=last and k == len(runs) - 1)
