"""Magic v0/v1 entries through the cleaner, as Kafka's cleaner treats them (§8.2, §8.4).

Old compacted topics still hold message sets of the formats before record batch v2. Kafka's
cleaner maps and filters them like any batch, with two differences (LogCleaner, filterTo):

- a tombstone's delete horizon is not in its batch: a legacy tombstone goes once its source
  segment is older than the legacy horizon (the last clean segment's mtime minus
  delete.retention.ms), and a record without a key goes as always;
- an entry is one message, or a compressed wrapper of messages: it is copied as it is when
  every message stays, else rebuilt by MemoryRecordsBuilder in its own magic and codec (default
  level): the kept messages with offsets relative to the first kept one (v1; v0 keeps absolute
  ones), the wrapper at the last kept offset, timestamped with its max (or its LogAppendTime).
  An entry with nothing left goes; one that ends the round with nothing left makes Kafka's
  filterTo fail ("empty batches are only supported for magic v2"), so the round fails too.

Legacy entries carry no producer or transaction: none of those rules applies. Per-message
Python is fine here, as in `record/legacy.py`: nothing writes these formats any more.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import numpy as np

from kafkalog_core.maintenance.cleaner_rewrite import (
    CleaningError,
    CleanStats,
    RoundRules,
    SlabOutput,
)
from kafkalog_core.maintenance.offset_map import OffsetMap, key_digests
from kafkalog_core.record.batch import (
    COMPRESSION_CODEC_MASK,
    MAGIC_V0,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Compression,
)
from kafkalog_core.record.compression import compress, xxh32
from kafkalog_core.record.legacy import LegacyMessage, iter_legacy_messages

__all__ = ["clean_legacy", "legacy_message", "legacy_wrapper", "map_legacy"]

_OFFSET_SIZE = struct.Struct(">qi")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


def _messages(view: memoryview, header: BatchHeader) -> list[LegacyMessage]:
    # no CRC check: Kafka's cleaner iterates the messages without one
    return iter_legacy_messages(view, header, verify=False)


def _digests(keys: Sequence[bytes]) -> np.ndarray:
    lengths = np.fromiter(map(len, keys), np.int64, len(keys))
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    return key_digests(np.frombuffer(b"".join(keys) or b"\0", np.uint8), starts, lengths)


def map_legacy(
    view: memoryview,
    headers: list[BatchHeader],
    start: int,
    offset_map: OffsetMap,
    latest: int,
) -> tuple[int, bool]:
    """buildOffsetMapForSegment over legacy entries: (latest offset, full), as `_map_slab`."""
    for header in headers:
        keyed = [m for m in _messages(view, header) if m.key is not None and m.offset >= start]
        if keyed:
            offsets = np.array([m.offset for m in keyed], np.int64)
            result = offset_map.put(_digests([m.key for m in keyed]), offsets)
            if result.put:
                latest = max(latest, int(offsets[result.put - 1]))
            if result.full:
                return latest, True
        if header.last_offset >= start:
            latest = max(latest, header.last_offset)
    return latest, False


# ---------------------------------------------------------------------------------------------
# MemoryRecordsBuilder for magic 0/1
# ---------------------------------------------------------------------------------------------


def legacy_message(
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
) -> bytes:
    """One v0/v1 message with its log overhead (LegacyRecord.write): CRC-32 over magic on."""
    body = bytearray([magic, attributes])
    if magic > MAGIC_V0:
        body += _INT64.pack(timestamp)
    for field in (key, value):
        body += _INT32.pack(-1) if field is None else _INT32.pack(len(field)) + field
    crc = zlib.crc32(body) & 0xFFFFFFFF
    return _OFFSET_SIZE.pack(offset, len(body) + 4) + struct.pack(">I", crc) + bytes(body)


def _compress(codec: Compression, magic: int, data: bytes) -> bytes:
    """The wrapper's value: Kafka's codec stream; lz4 in a v0 wrapper keeps the old header
    checksum (KafkaLZ4BlockOutputStream hashed the frame magic too)."""
    out = compress(codec, data)
    if codec is Compression.LZ4 and magic == MAGIC_V0:
        fixed = bytearray(out)
        fixed[6] = (xxh32(fixed[:6]) >> 8) & 0xFF
        out = bytes(fixed)
    return out


def legacy_wrapper(
    messages: Sequence[tuple[int, int, bytes | None, bytes | None]],
    magic: int,
    codec: Compression,
    log_append_time: int | None = None,
) -> tuple[bytes, int, int]:
    """MemoryRecordsBuilder's compressed v0/v1 entry of (offset, timestamp, key, value)
    messages: (bytes, max timestamp, shallow offset of it), as its info() reports them.

    `log_append_time`: a LogAppendTime v1 wrapper's time (every message gets it)."""
    log_append = magic > MAGIC_V0 and log_append_time is not None
    inner_attributes = TIMESTAMP_TYPE_MASK if log_append else 0
    base, last = messages[0][0], messages[-1][0]
    max_ts = NO_TIMESTAMP
    inner = bytearray()
    for offset, timestamp, key, value in messages:
        ts = log_append_time if log_append else (timestamp if magic > MAGIC_V0 else -1)
        max_ts = max(max_ts, ts)
        inner_offset = offset - base if magic > MAGIC_V0 else offset
        inner += legacy_message(inner_offset, magic, inner_attributes, ts, key, value)
    data = legacy_message(
        last, magic, codec | inner_attributes, max_ts, None, _compress(codec, magic, bytes(inner))
    )
    if log_append:
        return data, max_ts, last
    return data, max_ts, (last if max_ts != NO_TIMESTAMP else -1)


def _rebuild(header: BatchHeader, kept: list[LegacyMessage]) -> tuple[bytes, int, int]:
    """buildRetainedRecordsInto for a compressed legacy entry, in its magic and codec."""
    log_append = header.magic > MAGIC_V0 and bool(header.attributes & TIMESTAMP_TYPE_MASK)
    return legacy_wrapper(
        [(m.offset, m.timestamp, m.key, m.value) for m in kept],
        header.magic,
        Compression(header.attributes & COMPRESSION_CODEC_MASK),
        header.max_timestamp if log_append else None,
    )


def clean_legacy(
    view: memoryview,
    headers: list[BatchHeader],
    rules: RoundRules,
    retain_deletes: bool,
    stats: CleanStats,
) -> SlabOutput:
    """filterTo over consecutive legacy entries of one source segment; `retain_deletes` is
    Kafka's retainLegacyDeletesAndTxnMarkers for the segment (mtime > the legacy horizon)."""
    n = len(headers)
    in_sizes = np.array([h.size for h in headers], np.int64)
    out_sizes = np.zeros(n, np.int64)
    max_ts = np.array([h.max_timestamp for h in headers], np.int64)
    shallow = np.array([h.last_offset for h in headers], np.int64)
    max_off = shallow.copy()
    parts: list[bytes] = []
    for b, header in enumerate(headers):
        messages = _messages(view, header)
        in_round = [m.offset <= rules.latest_offset for m in messages]
        keyed = [m.key is not None for m in messages]
        looked_up = [k and r for k, r in zip(keyed, in_round, strict=True)]
        found = np.full(len(messages), -1, np.int64)
        if any(looked_up):
            rows = [i for i, x in enumerate(looked_up) if x]
            found[rows] = rules.offset_map.get(_digests([messages[i].key for i in rows]))
        keep = []
        for i, m in enumerate(messages):
            if not in_round[i]:
                keep.append(True)
            elif not keyed[i]:
                keep.append(False)
                stats.null_key_removed += 1
            elif m.offset < found[i]:
                keep.append(False)
                stats.superseded_removed += 1
            elif m.value is None and not retain_deletes:
                keep.append(False)
                stats.tombstones_removed += 1
            else:
                keep.append(True)
        kept = [m for m, k in zip(messages, keep, strict=True) if k]
        stats.records_read += len(messages)
        stats.records_kept += len(kept)
        stats.batches_read += 1
        stats.bytes_read += header.size
        # the KAFKA-4298 check: an inner message of another magic than its wrapper's
        same_magic = all(m.stored_magic == header.magic for m in messages)
        if len(kept) == len(messages) and same_magic:
            start = header.position
            parts.append(bytes(view[start : start + header.size]))
            out_sizes[b] = header.size
            stats.batches_copied += 1
        elif kept:
            data, max_ts[b], shallow[b] = _rebuild(header, kept)
            max_off[b] = max(m.offset for m in kept)
            parts.append(data)
            out_sizes[b] = len(data)
            stats.batches_rebuilt += 1
        elif header.last_offset + 1 == rules.upper_bound:
            raise CleaningError(
                f"the magic {header.magic} entry at position {header.position} (offset "
                f"{header.last_offset}) ends the round with no record left, and Kafka's filterTo "
                "fails on it: empty batches are only supported for magic v2"
            )
        else:
            stats.batches_removed += 1
    data = np.frombuffer(b"".join(parts), np.uint8).copy()
    return SlabOutput(in_sizes, out_sizes, max_ts, shallow, max_off, data)
