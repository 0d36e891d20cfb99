"""Per-record facts of a partition for the compaction audit, one Arrow table per chunk (§8.4-§8.6).

Which records compaction removes depends on keys across the whole partition (a record is
superseded by a later one with the same key), so that part is a shuffle by key in Spark. What
needs no key grouping is decided here, vectorized, batch group by batch group: each record's
offset, key, size, producer, whether its transaction was aborted, whether it is in the range
the cleaner maps or rewrites, and whether a tombstone or marker is past its delete horizon.
Memory is bounded by one chunk of batches (`chunk_bytes`), never by the partition.

`retained_mask` turns each row's key's latest mapped offset (a shuffle by key in Spark) into
what survives a cleaning round; `kafka_retained` is its single-process reference (a group-by)
for small partitions and tests.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core.config import LogConfig
from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.log.mapped import mapped_file
from kafkalog_core.maintenance.cleaner_audit import (
    CleaningState,
    RecordCounts,
    partition_cleaning_state,
    segment_path,
)
from kafkalog_core.record.batch import (
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    MAGIC_V2,
    TRANSACTIONAL_MASK,
    BatchHeader,
    iter_batch_headers,
)
from kafkalog_core.record.control import ControlRecordType, parse_control_record_key
from kafkalog_core.record.decoder import decode_records

__all__ = [
    "FACTS_SCHEMA",
    "RecordCounts",
    "iter_record_facts",
    "kafka_retained",
    "offset_map_mask",
    "partition_record_facts",
    "record_counts",
    "retained_mask",
]

NO_CONTROL_TYPE = -1
DEFAULT_CHUNK_BYTES = 64 << 20  # bytes of batches decoded at once

FACTS_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64()),
        pa.field("key", pa.binary()),  # null for null keys and for control records
        pa.field("key_size", pa.int32()),  # -1 = null
        pa.field("value_is_null", pa.bool_()),  # a tombstone when not is_control
        pa.field("timestamp", pa.int64()),
        pa.field("record_size", pa.int32()),  # encoded bytes inside the (decompressed) batch
        pa.field("batch_base_offset", pa.int64()),
        pa.field("batch_size", pa.int32()),  # on-disk bytes of the whole batch
        pa.field("segment_base_offset", pa.int64()),
        pa.field("producer_id", pa.int64()),
        pa.field("is_transactional", pa.bool_()),
        pa.field("is_control", pa.bool_()),  # a transaction marker row, not data
        pa.field("control_type", pa.int8()),  # 0 ABORT, 1 COMMIT, ... ; -1 for data
        pa.field("is_aborted", pa.bool_()),  # data of a transaction that ended with ABORT
        pa.field("in_dirty_range", pa.bool_()),  # first dirty <= offset < cleaning round end
        pa.field("in_cleaning_round", pa.bool_()),  # offset < cleaning round end: rewritten
        pa.field("in_active_segment", pa.bool_()),  # the cleaner never reads it
        pa.field("past_delete_horizon", pa.bool_()),  # tombstone/marker Kafka may remove now
    ]
)


def _batch_columns(headers: list[BatchHeader]) -> dict[str, np.ndarray]:
    """Header fields of a chunk's batches as numpy arrays (one Python pass over headers)."""
    rows = [
        (
            h.base_offset,
            h.last_offset,
            h.size,
            h.producer_id,
            h.attributes,
            h.magic,
            h.base_timestamp,
        )
        for h in headers
    ]
    arr = np.array(rows, np.int64).reshape(-1, 7)
    return {
        "base": arr[:, 0],
        "last": arr[:, 1],
        "size": arr[:, 2],
        "pid": arr[:, 3],
        "attributes": arr[:, 4],
        "magic": arr[:, 5],
        "base_timestamp": arr[:, 6],
    }


def _chunks(headers: list[BatchHeader], chunk_bytes: int) -> Iterator[list[BatchHeader]]:
    group: list[BatchHeader] = []
    size = 0
    for h in headers:
        if group and size + h.size > chunk_bytes:
            yield group
            group, size = [], 0
        group.append(h)
        size += h.size
    if group:
        yield group


def _aborted_batches(state: CleaningState, b: dict[str, np.ndarray]) -> np.ndarray:
    """Transactional data batches inside an aborted transaction's [first, last] of their producer."""
    data = ((b["attributes"] & TRANSACTIONAL_MASK) != 0) & ((b["attributes"] & CONTROL_MASK) == 0)
    aborted = np.zeros(b["base"].shape[0], bool)
    if not data.any() or not state.aborted_txns:
        return aborted
    txns = np.array(
        [(t.producer_id, t.first_offset, t.last_offset) for t in state.aborted_txns], np.int64
    )
    overlapping = (txns[:, 2] >= b["base"].min()) & (txns[:, 1] <= b["last"].max())
    for pid, first, last in txns[overlapping].tolist():  # only this chunk's transactions
        aborted |= data & (b["pid"] == pid) & (b["base"] >= first) & (b["base"] <= last)
    return aborted


def _control_types(keys: pa.Array, is_control: np.ndarray) -> np.ndarray:
    """The control record type of each control row (UNKNOWN = -1), -1 on data rows too."""
    types = np.full(is_control.shape[0], NO_CONTROL_TYPE, np.int8)
    for row in np.flatnonzero(is_control):  # one marker per control batch: few rows
        types[row] = int(parse_control_record_key(keys[int(row)].as_py()))
    return types


def _chunk_facts(
    view: memoryview,
    headers: list[BatchHeader],
    segment_base: int,
    segment_mtime_ms: int,
    state: CleaningState,
    verify: bool,
) -> pa.Table:
    b = _batch_columns(headers)
    records = decode_records(
        view,
        start=headers[0].position,
        end=headers[-1].position + headers[-1].size,
        verify=verify,
        include_control=True,
        with_sizes=True,
        values=False,
        headers=headers,
    )
    offsets = records.column("offset").to_numpy()
    # records and batches are both in offset order: a record belongs to the first batch
    # whose last offset reaches it (empty batches own no record, legacy wrappers many)
    batch = np.searchsorted(b["last"], offsets, side="left")
    if batch.shape[0] and int(batch.max()) >= b["last"].shape[0]:
        raise CorruptRecordError(f"segment {segment_base}: a record offset lies past its batch")
    attrs = b["attributes"][batch]
    v2 = b["magic"][batch] >= MAGIC_V2
    is_control = v2 & ((attrs & CONTROL_MASK) != 0)
    is_txn = v2 & ((attrs & TRANSACTIONAL_MASK) != 0)
    aborted = _aborted_batches(state, b)[batch]
    key = records.column("key").combine_chunks()
    control_types = _control_types(key, is_control)
    if is_control.any():
        key = pc.if_else(pa.array(is_control), pa.nulls(len(key), pa.binary()), key)
    key_size = pc.fill_null(pc.binary_length(key), -1).cast(pa.int32())
    value_null = records.column("value_size").to_numpy() < 0

    # tombstones and markers Kafka may remove now (§8.4, §8.5): a v2 batch once its delete
    # horizon has passed; a legacy batch when its segment is older than the legacy horizon
    has_horizon = v2 & ((attrs & DELETE_HORIZON_MASK) != 0)
    horizon_passed = has_horizon & (state.now_ms >= b["base_timestamp"][batch])
    legacy_passed = ~v2 & (segment_mtime_ms <= state.delete_horizon_legacy_ms)
    past_horizon = (value_null | is_control) & (horizon_passed | legacy_passed)

    end = state.cleaning_round_end
    return pa.Table.from_arrays(
        [
            pa.array(offsets),
            key,
            key_size,
            pa.array(value_null & ~is_control),
            records.column("timestamp").combine_chunks(),
            records.column("record_size").combine_chunks(),
            pa.array(b["base"][batch]),
            pa.array(b["size"][batch].astype(np.int32)),
            pa.array(np.full(offsets.shape[0], segment_base, np.int64)),
            pa.array(b["pid"][batch]),
            pa.array(is_txn),
            pa.array(is_control),
            pa.array(control_types),
            pa.array(aborted),
            pa.array((offsets >= state.first_dirty_offset) & (offsets < end)),
            pa.array(offsets < end),
            pa.array(offsets >= state.active_segment_base_offset),
            pa.array(past_horizon),
        ],
        schema=FACTS_SCHEMA,
    )


def iter_record_facts(
    partition_dir: str | os.PathLike[str],
    state: CleaningState,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    verify: bool = False,
    only_segments: Collection[int] | None = None,
) -> Iterator[pa.Table]:
    """FACTS_SCHEMA tables, one per chunk of about `chunk_bytes` of batches, in offset order.

    Records below the log start offset (a segment's head before retention advanced it) are
    left out, as a consumer and the cleaner never see them. `verify` CRC-checks every batch.
    `only_segments` (base offsets) reads a slice of a big partition; the state, and so every
    per-record flag, is the whole partition's.
    """
    for segment in state.segments:
        if only_segments is not None and segment.base_offset not in only_segments:
            continue
        path = segment_path(partition_dir, segment.base_offset)
        with mapped_file(path) as view:
            try:
                headers = list(iter_batch_headers(view, verify=verify))
                for group in _chunks(headers, chunk_bytes):
                    if group[-1].last_offset < state.log_start_offset:
                        continue
                    table = _chunk_facts(
                        view, group, segment.base_offset, segment.last_modified_ms, state, verify
                    )
                    if group[0].base_offset < state.log_start_offset:
                        table = table.filter(
                            pc.greater_equal(table.column("offset"), state.log_start_offset)
                        )
                    yield table
            except CorruptRecordError as error:
                raise CorruptRecordError(f"{path}: {error}") from None


# ---------------------------------------------------------------------------------------------
# counts that need no key grouping
# ---------------------------------------------------------------------------------------------


def _true(mask: np.ndarray) -> int:
    return int(np.count_nonzero(mask))


def record_counts(facts: pa.Table, config: LogConfig, now_ms: int) -> RecordCounts:
    """Count a FACTS_SCHEMA table (a chunk or a whole partition), vectorized."""
    if facts.num_rows == 0:
        return RecordCounts()

    def col(name: str) -> np.ndarray:
        return facts.column(name).to_numpy()

    control = col("is_control")
    data = ~control
    kinds = col("control_type")
    sizes = col("record_size").astype(np.int64)
    tomb = data & col("value_is_null")
    ts = col("timestamp")
    stamped = tomb & (ts >= 0)
    aborted = data & col("is_aborted")
    return RecordCounts(
        records=_true(data),
        record_bytes=int(sizes[data].sum()),
        batches=int(np.unique(col("batch_base_offset")).shape[0]),
        null_key_records=_true(data & (col("key_size") < 0)),
        tombstones=_true(tomb),
        tombstones_past_retention=_true(stamped & (now_ms - ts > config.delete_retention_ms)),
        tombstones_past_horizon=_true(tomb & col("past_delete_horizon")),
        oldest_tombstone_timestamp=int(ts[stamped].min()) if stamped.any() else -1,
        transaction_markers=_true(control),
        commit_markers=_true(control & (kinds == ControlRecordType.COMMIT)),
        abort_markers=_true(control & (kinds == ControlRecordType.ABORT)),
        aborted_records=_true(aborted),
        aborted_bytes=int(sizes[aborted].sum()),
        transactional_records=_true(data & col("is_transactional")),
        dirty_records=_true(data & col("in_dirty_range")),
        cleaning_round_records=_true(data & col("in_cleaning_round")),
    )


def partition_record_facts(
    partition_dir: str | os.PathLike[str],
    config: LogConfig,
    now_ms: int,
    *,
    cleaner_checkpoint: int | None = None,
    state: CleaningState | None = None,
    verify: bool = False,
) -> tuple[pa.Table, RecordCounts]:
    """The whole partition's facts as one table plus its counts (small partitions, tests).

    A Spark task should loop over `iter_record_facts` instead and hand on each chunk.
    """
    if state is None:
        state = partition_cleaning_state(partition_dir, config, cleaner_checkpoint, now_ms)
    tables = list(iter_record_facts(partition_dir, state, verify=verify))
    counts = RecordCounts()
    for table in tables:
        counts = counts + record_counts(table, config, now_ms)
    return (pa.concat_tables(tables) if tables else FACTS_SCHEMA.empty_table()), counts


# ---------------------------------------------------------------------------------------------
# the single-process reference of a cleaning round
# ---------------------------------------------------------------------------------------------


def offset_map_mask(facts: pa.Table) -> np.ndarray:
    """Rows that enter the cleaner's offset map (§8.2): keyed, non-aborted data in the dirty range.

    The latest offset per key among these rows is what supersedes older records. In Spark SQL:
    `in_dirty_range AND NOT is_control AND NOT is_aborted AND key IS NOT NULL`.
    """
    if facts.num_rows == 0:
        return np.zeros(0, bool)
    return (
        facts.column("in_dirty_range").to_numpy()
        & ~facts.column("is_control").to_numpy()
        & ~facts.column("is_aborted").to_numpy()
        & (facts.column("key_size").to_numpy() >= 0)
    )


def retained_mask(
    facts: pa.Table, latest_offset: pa.Array | pa.ChunkedArray | np.ndarray
) -> np.ndarray:
    """Which rows survive one cleaning round, given each row's key's latest mapped offset.

    `latest_offset[i]` is the max offset among `offset_map_mask` rows with row i's key (null or
    -1 when the key is not mapped): the Spark job gets it from a shuffle by key, `kafka_retained`
    from a group-by. Rules (Cleaner.shouldRetainRecord and the batch rules, §8.4-§8.6): outside
    the round everything survives; inside it aborted data goes, a null key goes, a keyed record
    goes when its key was mapped at a later offset, a tombstone or marker goes once past its
    delete horizon.
    """
    if isinstance(latest_offset, pa.Array | pa.ChunkedArray):
        latest_offset = pc.fill_null(latest_offset, -1).to_numpy()
    latest = np.asarray(latest_offset, np.int64)
    if latest.shape[0] != facts.num_rows:
        raise ValueError(f"latest offsets have {latest.shape[0]} rows, facts {facts.num_rows}")

    def col(name: str) -> np.ndarray:
        return facts.column(name).to_numpy()

    past_horizon = col("past_delete_horizon")
    data_kept = (
        ~col("is_aborted")
        & (col("key_size") >= 0)
        & (col("offset") >= latest)
        & ~(col("value_is_null") & past_horizon)
    )
    kept = np.where(col("is_control"), ~past_horizon, data_kept)
    return np.where(col("in_cleaning_round"), kept, True)


def kafka_retained(facts: pa.Table) -> np.ndarray:
    """`retained_mask` with the latest offsets from an in-memory group-by (one partition).

    The single-process reference of what the Spark job computes with a shuffle by key: it
    holds every key of the partition, so it is for small partitions and tests.
    """
    n = facts.num_rows
    if n == 0:
        return np.zeros(0, bool)
    keyed = facts.select(["key", "offset"]).append_column(
        "row", pa.array(np.arange(n, dtype=np.int64))
    )
    latest = (
        keyed.filter(pa.array(offset_map_mask(facts)))
        .group_by("key")
        .aggregate([("offset", "max")])
        .rename_columns(["key", "latest_offset"])
    )
    joined = keyed.filter(pc.is_valid(keyed.column("key"))).join(latest, "key")
    latest_by_row = np.full(n, -1, np.int64)
    if joined.num_rows:
        rows = joined.column("row").to_numpy()
        latest_by_row[rows] = pc.fill_null(joined.column("latest_offset"), -1).to_numpy()
    return retained_mask(facts, latest_by_row)
