"""The mapping's partitioning and per-row checks over one Arrow batch, vectorized in numpy.

`map_batch` is stage 2 of `jobs.ingestion.mapping.spark_mapping` (see its module doc) for code that already
holds Arrow batches: the arrow task reader (`jobs.ingestion.source.arrow_reader`) runs it instead of the
Spark expressions, and the mapping tests compare the two row by row, so each is the other's
oracle. Same rules (`MappingRules`), same error texts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.ingestion.mapping.rules import (
    ERROR_COLUMN,
    ERROR_PREFIX,
    MISFIT_COLUMN,
    ORDER_COLUMN,
    PARTITION_IN_COLUMN,
    RECORD_COLUMNS,
    MappingRules,
    TopicRules,
)
from kafkalog_core.errors import InvalidRecordError
from kafkalog_core.partitioner import partition_for_keys
from kafkalog_core.record.batch import INT32_MAX, RECORD_BATCH_OVERHEAD

__all__ = [
    "HEADERS_TYPE",
    "as_bytes",
    "checked",
    "checked_records",
    "headers_column",
    "int32_partitions",
    "map_batch",
    "mapping_input",
    "no_headers",
]

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def as_bytes(column: pa.Array) -> pa.Array:
    """A key or value column as Kafka bytes (strings as their UTF-8)."""
    if pa.types.is_string(column.type):
        return column.cast(pa.binary())
    if pa.types.is_large_string(column.type):
        return column.cast(pa.large_binary())
    return column


def no_headers(n: int) -> pa.Array:
    """`n` empty header lists."""
    return pa.ListArray.from_arrays(
        pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], HEADERS_TYPE.value_type)
    )


def headers_column(column: pa.Array | None, values: Sequence[tuple[str, pa.Array]]) -> pa.Array:
    """The mapping's headers as Spark's stage 1 builds them (`mapping_fields._headers`): each
    row's entries of `column` (map<string, string|binary> or list<struct<key string, value
    string|binary>>; a null column value = no entries, a null entry = null key and value), then
    one entry per (name, values) pair, in order; values as bytes (strings as UTF-8)."""
    n = len(column) if column is not None else len(values[0][1])
    counts = np.zeros(n, dtype=np.int64)
    keys: list[pa.Array] = []
    data: list[pa.Array] = []
    if column is not None:
        if pa.types.is_map(column.type):  # the list functions take its entries as structs
            entry = pa.struct([("key", column.type.key_type), ("value", column.type.item_type)])
            column = column.cast(pa.list_(entry))
        entries = pc.list_flatten(column)  # a null row has none
        counts = pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False)
        counts = counts.astype(np.int64)
        keys.append(pc.struct_field(entries, "key").cast(pa.string()))  # null entry: null
        data.append(pc.struct_field(entries, "value").cast(pa.binary()))
    for name, value in values:
        keys.append(pa.repeat(pa.scalar(name, pa.string()), n))
        data.append(value.cast(pa.binary()))
    k = len(values)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts + k, out=offsets[1:])
    key_array, data_array = pa.concat_arrays(keys), pa.concat_arrays(data)
    if k:  # interleave: row i's column entries, then its k named values
        m = int(counts.sum())
        index = np.empty(int(offsets[-1]), dtype=np.int64)
        if m:
            rows = np.repeat(np.arange(n), counts)
            first = np.cumsum(counts) - counts  # row's first entry in the flat column entries
            index[offsets[:-1][rows] + np.arange(m) - first[rows]] = np.arange(m)
        for j in range(k):
            index[offsets[:-1] + counts + j] = m + j * n + np.arange(n)
        order = pa.array(index)
        key_array, data_array = key_array.take(order), data_array.take(order)
    struct = pa.StructArray.from_arrays(
        [key_array, data_array], fields=list(HEADERS_TYPE.value_type)
    )
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), struct)


def int32_partitions(column: pa.Array) -> pa.Array:
    """The partition column as int (Spark's ANSI cast fails on values outside int); in a task,
    so the error carries `ERROR_PREFIX` as `checked`'s do (the job's one error line)."""
    values = column.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
    outside = np.flatnonzero((values < -(2**31)) | (values >= 2**31))
    if outside.size:
        value = int(values[outside[0]])
        raise InvalidRecordError(f"{ERROR_PREFIX}partition {value} does not fit an int")
    return column.cast(pa.int32())


def mapping_input(columns: dict[str, pa.Array], task_index: int, first_row: int) -> pa.RecordBatch:
    """Stage 2's input from topic/key/value/headers/timestamp (ms)/partition columns (and a
    structured key/value's "misfit": why a row does not fit its schema, or null), with the
    row order Spark's `_prepare` gives: like monotonically_increasing_id, the task in the upper
    31 bits, the row in the lower 33."""
    n = len(columns["topic"])
    positions = (np.int64(task_index) << np.int64(33)) + np.arange(
        first_row, first_row + n, dtype=np.int64
    )
    order = pa.StructArray.from_arrays([pa.array(positions)], names=["pos"])
    names = ["topic", "key", "value", "headers", "timestamp"]
    misfit = columns.get("misfit")
    return pa.RecordBatch.from_arrays(
        [*(columns[name] for name in names), columns["partition"], order]
        + ([] if misfit is None else [misfit]),
        names=[*names, PARTITION_IN_COLUMN, ORDER_COLUMN]
        + ([] if misfit is None else [MISFIT_COLUMN]),
    )


def checked(mapped: pa.RecordBatch) -> pa.RecordBatch:
    """Raise the first row's error, as the mapping's Spark SQL `raise_error` would."""
    errors = mapped.column(ERROR_COLUMN)
    if errors.null_count < len(errors):
        first = int(np.flatnonzero(errors.is_valid().to_numpy(zero_copy_only=False))[0])
        raise InvalidRecordError(f"{ERROR_PREFIX}{errors[first].as_py()}")
    return mapped


def checked_records(
    batches: Iterable[pa.RecordBatch], plan: MappingRules, *, headers: bool
) -> Iterator[pa.RecordBatch]:
    """Stage 2 in a write task: each stage-1 batch (`mapping_input`, or Spark's
    `mapping.prepare_records`) partitioned and checked, the first bad row raising as the
    Spark mapping's `raise_error` does; the columns the writer takes (headers when mapped)."""
    cache: dict[str, Any] = {}
    written = ["topic", "partition", "key", "value", "timestamp", *(["headers"] * headers)]
    for batch in batches:
        if "headers" not in batch.schema.names:
            batch = batch.append_column("headers", no_headers(batch.num_rows))
        yield checked(map_batch(batch, plan, cache)).select(written)


def _varint_size(values: np.ndarray) -> np.ndarray:
    """Bytes of Kafka's zig-zag varint for each int32/int64 value."""
    v = values.astype(np.int64)
    z = ((v << 1) ^ (v >> 63)).view(np.uint64)
    size = np.ones(len(v), dtype=np.int64)
    for bits in range(7, 64, 7):
        size += z >= (np.uint64(1) << np.uint64(bits))
    return size


def _lengths(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(byte length with null as 0, is-null) of a binary/string array."""
    lengths = pc.fill_null(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    nulls = arr.is_null().to_numpy(zero_copy_only=False)
    return lengths, nulls


def _field_size(arr: pa.Array) -> np.ndarray:
    """Size of a length-prefixed field: varint(len) + len, or varint(-1) = 1 byte for null."""
    lengths, nulls = _lengths(arr)
    return np.where(nulls, 1, _varint_size(lengths) + lengths)


def _largest_record_bound(batch: pa.RecordBatch) -> int:
    """An upper bound of `_single_record_batch_size` over the batch, from the longest key and
    value alone (without headers; with headers the exact sizes are computed): when even the
    bound fits max.message.bytes, no record's size needs computing."""
    if len(batch.column("headers").values):
        return INT32_MAX
    longest = 0
    for name in ("key", "value"):
        lengths = pc.binary_length(batch.column(name))
        longest += int(pc.max(lengths).as_py() or 0)
    # batch overhead + varint(body) <= 5 + body: attributes, deltas (3), two length varints
    # (<= 5 each) and the headers count (1)
    return RECORD_BATCH_OVERHEAD + 5 + 3 + 5 + 5 + 1 + longest


def _single_record_batch_size(batch: pa.RecordBatch) -> np.ndarray:
    """Bytes of a v2 batch holding just this record (deltas 0): the smallest it can ever be.

    DefaultRecord: varint(bodySize) + attributes(1) + varlong(tsDelta)(1) + varint(offDelta)(1)
    + key + value + varint(headerCount) + headers(varint len + key, varint len or -1 + value).
    """
    headers = batch.column("headers")
    offsets = headers.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    counts = offsets[1:] - offsets[:-1]
    header_bytes = np.zeros(len(batch), dtype=np.int64)
    if len(headers.values):
        entries = headers.values
        per_entry = _field_size(entries.field("key")) + _field_size(entries.field("value"))
        cumulative = np.concatenate(([0], np.cumsum(per_entry)))
        header_bytes = cumulative[offsets[1:]] - cumulative[offsets[:-1]]
    body = (
        3
        + _field_size(batch.column("key"))
        + _field_size(batch.column("value"))
        + _varint_size(counts)
        + header_bytes
    )
    return RECORD_BATCH_OVERHEAD + _varint_size(body) + body


def _preview(value: Any, limit: int = 40) -> str:
    if value is None:
        return "null"
    if isinstance(value, bytes):
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and text.isprintable():
            shown = repr(text[:limit]) + ("..." if len(text) > limit else "")
        else:
            shown = "0x" + value[:limit].hex() + ("..." if len(value) > limit else "")
        return f"{shown} ({len(value)} bytes)"
    return repr(value)


def _describe_row(batch: pa.RecordBatch, i: int, partition: int) -> str:
    pos = batch.column(ORDER_COLUMN).field("pos")[i].as_py()
    return (
        f"topic={batch.column('topic')[i].as_py()!r} partition={partition} "
        f"key={_preview(batch.column('key')[i].as_py())} "
        f"value={_preview(batch.column('value')[i].as_py())} "
        f"timestamp={batch.column('timestamp')[i].as_py()} source row id={pos}"
    )


def map_batch(
    batch: pa.RecordBatch,
    plan: MappingRules,
    cache: dict[str, Any],
) -> pa.RecordBatch:
    """Partition and check one batch; vectorized over rows, Python only per distinct topic."""
    n = batch.num_rows
    reasons: dict[int, Any] = {}  # row -> why it is invalid: few, usually none
    invalid = np.zeros(n, dtype=bool)  # the rows in `reasons`

    def flag(mask: np.ndarray, reason: Any) -> None:
        """Record `reason` (text, or callable row -> text) for flagged rows not already bad."""
        if not mask.any():  # the common case
            return
        for i in np.flatnonzero(mask & ~invalid).tolist():
            reasons[i] = reason(i) if callable(reason) else reason
        invalid[mask] = True

    # A structured key or value that does not fit its schema: the row has no record to check.
    if MISFIT_COLUMN in batch.schema.names:
        misfits = batch.column(MISFIT_COLUMN)
        if misfits.null_count < n:
            flag(misfits.is_valid().to_numpy(zero_copy_only=False), lambda i: misfits[i].as_py())

    # Topics: look up each distinct value once.
    topics = batch.column("topic")
    encoded = pc.dictionary_encode(topics)
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    names = encoded.dictionary.to_pylist()
    rules: list[TopicRules | str] = []
    for name in names:
        if name not in cache:
            cache[name] = plan.rules_for(name)
        rules.append(cache[name])
    flag(codes < 0, "topic is null")
    for t, r in enumerate(rules):
        if isinstance(r, str):
            flag(codes == t, r)
    good_topics = [t for t, r in enumerate(rules) if not isinstance(r, str)]

    def per_topic(attr: str, default: Any, dtype: Any) -> np.ndarray:
        out = np.full(n, default, dtype=dtype)
        for t in good_topics:
            value = getattr(rules[t], attr)
            out[codes == t] = default if value is None else value
        return out

    nparts = per_topic("partitions", 0, np.int64)
    compact = per_topic("compact", False, bool)
    log_append = per_topic("log_append_time", False, bool)
    max_bytes = per_topic("max_message_bytes", -1, np.int64)
    positions = batch.column(ORDER_COLUMN).field("pos").to_numpy(zero_copy_only=False)

    # Partition.
    keys = batch.column("key")
    key_null = keys.is_null().to_numpy(zero_copy_only=False)
    partition = np.full(n, -1, dtype=np.int64)

    def place_by_key(selected: np.ndarray) -> None:
        """The producer's default partitioner for the selected rows: murmur2 of the key; null
        keys round-robin or by the value's hash."""
        values = batch.column("value")
        for t in good_topics:
            rows = (codes == t) & selected
            if not rows.any():
                continue
            count = int(rules[t].partitions)  # type: ignore[union-attr]
            whole = bool(rows.all())
            partition[rows] = partition_for_keys(keys if whole else keys.filter(rows), count)
            spread = rows & key_null
            if spread.any():
                if plan.null_keys == "round_robin":
                    partition[spread] = positions[spread] % count
                else:
                    chosen = values.filter(pa.array(spread))
                    partition[spread] = partition_for_keys(pc.fill_null(chosen, b""), count)

    if plan.by_key:
        place_by_key(np.ones(n, dtype=bool))
    else:
        given = batch.column(PARTITION_IN_COLUMN)
        missing = given.is_null().to_numpy(zero_copy_only=False)
        partition = given.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        if plan.null_partition_by_key:  # Spark's Kafka sink: a null partition is the producer's
            place_by_key(missing)
        else:
            flag(missing, "partition is null")
        has_topic = codes >= 0
        bad = has_topic & (nparts > 0) & ((partition < 0) | (partition >= nparts)) & ~missing
        flag(
            bad,
            lambda i: (
                f"partition {partition[i]} is out of range for topic "
                f"{names[codes[i]]!r} with {nparts[i]} partitions"
            ),
        )

    # Keys on compacted topics.
    flag(
        compact & key_null,
        lambda i: f"null key on compacted topic {names[codes[i]]!r} (cleanup.policy=compact)",
    )

    # Timestamps: CreateTime needs one >= 0; LogAppendTime ignores it (-1 when absent).
    ts_arr = batch.column("timestamp")
    ts_null = ts_arr.is_null().to_numpy(zero_copy_only=False)
    ts = ts_arr.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    create = (codes >= 0) & ~log_append
    flag(create & ts_null, "timestamp is null (message.timestamp.type=CreateTime)")
    flag(create & ~ts_null & (ts < 0), lambda i: f"negative timestamp {ts[i]}")

    # Size: the record alone in a batch must fit max.message.bytes (uncompressed topics).
    checked = max_bytes >= 0
    if checked.any() and _largest_record_bound(batch) > int(max_bytes[checked].min()):
        size = _single_record_batch_size(batch)
        flag(
            checked & (size > max_bytes),
            lambda i: (
                f"record of {size[i]} bytes (as a single-record batch) exceeds "
                f"max.message.bytes={max_bytes[i]} of topic {names[codes[i]]!r}"
            ),
        )

    text_type = topics.type if pa.types.is_large_string(topics.type) else pa.string()
    errors = pa.nulls(n, text_type)
    if invalid.any():
        messages: list[str | None] = [None] * n
        for i in np.flatnonzero(invalid).tolist():
            messages[i] = f"{reasons[i]}; record: {_describe_row(batch, int(i), int(partition[i]))}"
        errors = pa.array(messages, text_type)
    return pa.RecordBatch.from_arrays(
        [
            topics,
            pa.array(partition.astype(np.int32), pa.int32()),
            keys,
            batch.column("value"),
            batch.column("headers"),
            pa.array(ts, pa.int64()),
            batch.column(ORDER_COLUMN),
            errors,
        ],
        names=[*RECORD_COLUMNS, ORDER_COLUMN, ERROR_COLUMN],
    )
