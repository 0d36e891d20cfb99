"""The task side of a read: one byte range of one .log -> Arrow batches in Spark's Kafka schema.

A task maps its .log read-only, decodes exactly the bytes the driver planned (the core's
vectorized `decode_records`, CRC-checked) and keeps the rows inside the offset range, outside
aborted transactions and inside the pushed-down timestamp bounds, all with numpy masks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.datasource.slices import LogSlice, SliceFilter, SlicePack, report_data_loss
from kafkalog_core.errors import CorruptRecordError, OffsetOutOfRangeError
from kafkalog_core.log.mapped import mapped_file
from kafkalog_core.record.batch import iter_batch_headers
from kafkalog_core.record.decoder import decode_records

if TYPE_CHECKING:
    from jobs.datasource.decoded import DecodedColumns

__all__ = [
    "LogSlice",
    "SlicePack",
    "SliceFilter",
    "read_pack",
    "read_slice",
    "report_data_loss",
    "set_read_hook",
]

_ROWS_PER_BATCH = 1 << 16
# Spark's Arrow form of array<struct<key string, value binary>> (list item named "element")
_SPARK_HEADERS = pa.list_(
    pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())]))
)


def spark_headers(headers: pa.ChunkedArray) -> pa.ChunkedArray:
    """The `headers` column as Spark's Kafka source gives it: null for a record without headers
    (KafkaRecordToRowConverter), never an empty array."""
    empty = pc.equal(pc.list_value_length(headers), 0)
    return pc.if_else(empty, pa.scalar(None, headers.type), headers).cast(_SPARK_HEADERS)


# Called with (log path, start position, end position) for every byte range a task reads: the
# tests' proof that a narrow read touches only the bytes it needs.
_read_hook: Callable[[str, int, int], None] | None = None


def set_read_hook(hook: Callable[[str, int, int], None] | None) -> None:
    global _read_hook
    _read_hook = hook


def read_pack(
    pack: SlicePack,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    decoded: DecodedColumns | None = None,
) -> Iterator[pa.RecordBatch]:
    for piece in pack.slices:
        yield from read_slice(
            piece,
            include_headers=include_headers,
            fail_on_data_loss=fail_on_data_loss,
            decoded=decoded,
        )


def read_slice(
    piece: LogSlice,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    decoded: DecodedColumns | None = None,
) -> Iterator[pa.RecordBatch]:
    """The slice's rows as Arrow record batches of the Kafka source schema."""
    if _read_hook is not None:
        _read_hook(piece.log_path, piece.start_position, piece.end_position)
    if not os.path.exists(piece.log_path):
        report_data_loss(
            f"{piece.log_path}: removed since the read was planned (retention?)",
            fail_on_data_loss,
            OffsetOutOfRangeError,
        )
        return
    with mapped_file(piece.log_path) as view:
        end = min(piece.end_position, len(view))
        if end < piece.end_position:
            report_data_loss(
                f"{piece.log_path}: ends at byte {len(view)}, {piece.end_position - len(view)} "
                "bytes earlier than when the read was planned",
                fail_on_data_loss,
            )
        table = _decode(view, piece.start_position, end, piece.log_path, fail_on_data_loss)
        aborted_ranges = (
            _aborted_batches(view, piece.start_position, end, piece.aborted)
            if piece.aborted and table.num_rows
            else None
        )
    if table.num_rows == 0:
        return
    offsets = table.column("offset").to_numpy()
    keep = (offsets >= piece.start_offset) & (offsets < piece.end_offset)
    if aborted_ranges is not None and len(aborted_ranges[0]):
        firsts, lasts = aborted_ranges
        slot = np.searchsorted(firsts, offsets, side="right") - 1
        inside = (slot >= 0) & (offsets <= lasts[np.maximum(slot, 0)])
        keep &= ~inside
    bounds = piece.row_filter
    if bounds.min_timestamp_us is not None or bounds.max_timestamp_us is not None:
        ts_us = table.column("timestamp").to_numpy() * 1000
        if bounds.min_timestamp_us is not None:
            keep &= ts_us >= bounds.min_timestamp_us
        if bounds.max_timestamp_us is not None:
            keep &= ts_us <= bounds.max_timestamp_us
    if not keep.all():
        table = table.filter(pa.array(keep))
    if table.num_rows == 0:
        return
    yield from to_kafka_batches(table, piece.topic, piece.partition, include_headers, decoded)


def to_kafka_batches(
    table: pa.Table,
    topic: str,
    partition: int,
    include_headers: bool,
    decoded: DecodedColumns | None = None,
) -> Iterator[pa.RecordBatch]:
    """RECORD_SCHEMA rows -> Spark Kafka source columns (no per-record Python)."""
    n = table.num_rows
    topic_column = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(n, np.int32)), pa.array([topic], pa.string())
    ).cast(pa.string())
    timestamps = pc.multiply(table.column("timestamp"), 1000).cast(pa.timestamp("us", tz="UTC"))
    columns = [
        table.column("key"),
        table.column("value"),
        topic_column,
        pa.array(np.full(n, partition, np.int32)),
        table.column("offset"),
        timestamps,
        table.column("timestamp_type").cast(pa.int32()),
    ]
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if include_headers:  # a record without headers has null, as in Spark's Kafka source
        columns.append(spark_headers(table.column("headers")))
        names.append("headers")
    out = pa.Table.from_arrays(columns, names=names)
    for batch in out.to_batches(max_chunksize=_ROWS_PER_BATCH):
        if decoded is not None:  # per batch: a batch's records are decoded together
            batch = decoded.add_to(pa.Table.from_batches([batch]), topic, partition)
            yield from batch.to_batches()
        else:
            yield batch


def _decode(view: memoryview, start: int, end: int, path: str, fail: bool) -> pa.Table:
    """Records of [start, end); a corrupt batch fails or, when allowed, ends the readable part."""
    try:
        return decode_records(view, start=start, end=end, verify=True)
    except CorruptRecordError as error:
        if fail:
            report_data_loss(f"{path}: {error}", True)
        first_error = error
    # The error path only: decode batch by batch up to the first one that fails.
    parts: list[pa.Table] = []
    try:
        for header in iter_batch_headers(view, start=start, end=end, verify=True):
            parts.append(
                decode_records(view, start=header.position, end=header.position + header.size)
            )
    except CorruptRecordError as error:
        first_error = error
    report_data_loss(f"{path}: {first_error}; records after it in this range are skipped", False)
    if not parts:
        return decode_records(b"")
    return pa.concat_tables(parts)


def _aborted_batches(
    view: memoryview, start: int, end: int, aborted: tuple[tuple[int, int, int], ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Offset ranges [first, last] of the data batches that belong to aborted transactions.

    A batch is aborted data when its producer has an aborted transaction whose first offset is
    at or below the batch and whose ABORT marker comes after it (a consumer's rule, §4).
    """
    by_producer: dict[int, list[tuple[int, int]]] = {}
    for producer_id, first, last in aborted:
        by_producer.setdefault(producer_id, []).append((first, last))
    firsts: list[int] = []
    lasts: list[int] = []
    for header in iter_batch_headers(view, start=start, end=end):
        spans = by_producer.get(header.producer_id)
        if not spans or not header.is_transactional or header.is_control:
            continue
        if any(first <= header.base_offset <= last for first, last in spans):
            firsts.append(header.base_offset)
            lasts.append(header.last_offset)
    return np.array(firsts, np.int64), np.array(lasts, np.int64)
