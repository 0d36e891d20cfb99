"""The compaction audit's Spark pipeline: decode, then a shuffle by key, then a small one by batch.

One Spark job, one pass over the records:

1. decode (per work unit, in the task that reads the segments): the core's record facts,
   chunk by chunk. What needs no other record is settled here, vectorized: the partition's
   RecordCounts, tombstone ages, and which records without a key group (null keys, aborted
   data, transaction markers) a cleaning round removes. Out go two kinds of rows: one narrow
   row per keyed record (partition, key, offset, size, batch, flags) and one `info` row per
   chunk carrying that chunk's per-batch sums and counts.
2. shuffle by (partition, key), then the key stage: every record of a key is in one task, so
   the key's latest offset, overall and in the dirty range, is a group-by away; the core's
   `retained_mask` decides each keyed record. Out go per-batch removal sums and per-partition
   key statistics (distinct keys, duplicates, superseded records and bytes).
3. group by (partition, batch) in Spark SQL (sums of small rows), then the freed stage turns
   each batch's sums into bytes with the core's `freed_from_batches`.

Everything that reaches the driver is a handful of JSON partials per partition, merged there.
No key, record or batch list is ever collected.
"""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core.config import LogConfig
from kafkalog_core.log.cleaner_audit import CleaningState, FreedBytes, freed_from_batches
from kafkalog_core.log.cleaner_facts import (
    RecordCounts,
    iter_record_facts,
    record_counts,
    retained_mask,
)

# records per key, for the duplicate-key distribution: [lower, upper] bounds of each bucket
KEY_BUCKETS = ((1, 1), (2, 2), (3, 5), (6, 10), (11, 100), (101, 1 << 62))
# tombstone ages (ms): the upper edge of each bucket
AGE_EDGES = (3_600_000, 86_400_000, 7 * 86_400_000, 30 * 86_400_000, 365 * 86_400_000)
AGE_LABELS = ("< 1 h", "1 h - 1 d", "1 - 7 d", "7 - 30 d", "30 - 365 d", "> 1 y")

# flags of a keyed record row
IN_DIRTY_RANGE = 1
IN_CLEANING_ROUND = 2
TOMBSTONE = 4
PAST_DELETE_HORIZON = 8

RECORD_ROWS = pa.schema(
    [
        ("tp", pa.int32()),  # index of the partition in the run's unit list
        ("key", pa.binary()),  # null on info rows
        ("offset", pa.int64()),
        ("size", pa.int32()),
        ("batch", pa.int64()),
        ("flags", pa.int8()),
        ("info", pa.string()),  # JSON, only on info rows
    ]
)
BATCH_ROWS = pa.schema(
    [
        ("tp", pa.int32()),
        ("batch", pa.int64()),  # null on partial rows
        ("rows", pa.int64()),
        ("decoded", pa.int64()),
        ("on_disk", pa.int64()),
        ("removed_rows", pa.int64()),
        ("removed_bytes", pa.int64()),
        ("partial", pa.string()),  # JSON, only on partial rows
    ]
)
PARTIAL_ROWS = pa.schema([("tp", pa.int32()), ("partial", pa.string())])


def pack_state(state: CleaningState) -> str:
    """A CleaningState for a unit's JSON (the decode tasks reuse the state pass's walk)."""
    return base64.b64encode(pickle.dumps(state)).decode("ascii")


def unpack_state(text: str) -> CleaningState:
    return pickle.loads(base64.b64decode(text))


# ---------------------------------------------------------------------------------------------
# 1. decode
# ---------------------------------------------------------------------------------------------


def decode_stage(log_dir: str, now_ms: int):
    """mapInArrow body over work units: RECORD_ROWS for every unit in the incoming rows."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for text in batch.column(0).to_pylist():
                for unit in json.loads(text):
                    state = unpack_state(unit["state"])
                    config = LogConfig.from_dict(unit["config"])
                    pdir = Path(log_dir) / unit["dir"]
                    only = unit.get("only_segments")
                    for facts in iter_record_facts(pdir, state, only_segments=only):
                        yield from record_rows(unit["tp"], facts, config, now_ms).to_batches()

    return run


def record_rows(tp: int, facts: pa.Table, config: LogConfig, now_ms: int) -> pa.Table:
    """One chunk's RECORD_ROWS: a row per keyed record plus one info row."""
    n = facts.num_rows

    def col(name: str) -> np.ndarray:
        return facts.column(name).to_numpy()

    control, aborted, value_null = col("is_control"), col("is_aborted"), col("value_is_null")
    keyed = ~control & ~aborted & (col("key_size") >= 0)
    # rows without a key group: the core's rule with no later record of the same key
    removed_local = ~retained_mask(facts, np.full(n, -1, np.int64)) & ~keyed
    sizes = col("record_size").astype(np.int64)
    batches, first, inverse = np.unique(col("batch_base_offset"), True, True)
    tomb = value_null & ~control
    ages = now_ms - col("timestamp")[tomb]
    info = {
        "batches": batches.tolist(),
        "rows": np.bincount(inverse).tolist(),
        "decoded": np.bincount(inverse, weights=sizes).astype(np.int64).tolist(),
        "on_disk": col("batch_size")[first].astype(np.int64).tolist(),
        "removed_rows": np.bincount(inverse, weights=removed_local).astype(np.int64).tolist(),
        "removed_bytes": np.bincount(inverse, weights=np.where(removed_local, sizes, 0))
        .astype(np.int64)
        .tolist(),
        "partial": {
            "counts": asdict(record_counts(facts, config, now_ms)),
            "tombstone_ages": np.bincount(
                np.searchsorted(AGE_EDGES, ages, side="right"), minlength=len(AGE_LABELS)
            ).tolist(),
            "tombstones_removable": int((tomb & removed_local).sum()),
        },
    }
    flags = (
        col("in_dirty_range") * IN_DIRTY_RANGE
        + col("in_cleaning_round") * IN_CLEANING_ROUND
        + value_null * TOMBSTONE
        + col("past_delete_horizon") * PAST_DELETE_HORIZON
    ).astype(np.int8)
    rows = pa.Table.from_arrays(
        [
            pa.array(np.full(int(keyed.sum()), tp, np.int32)),
            facts.column("key").filter(pa.array(keyed)),
            pa.array(col("offset")[keyed]),
            pa.array(col("record_size")[keyed]),
            pa.array(col("batch_base_offset")[keyed]),
            pa.array(flags[keyed]),
            pa.nulls(int(keyed.sum()), pa.string()),
        ],
        schema=RECORD_ROWS,
    )
    info_row = pa.Table.from_pylist(
        [{"tp": tp, "key": None, "info": json.dumps(info)}], schema=RECORD_ROWS
    )
    return pa.concat_tables([rows, info_row])


# ---------------------------------------------------------------------------------------------
# 2. per key
# ---------------------------------------------------------------------------------------------


def key_stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body after the shuffle by (tp, key): BATCH_ROWS (per-batch sums, partials)."""
    table = pa.Table.from_batches(list(batches), schema=RECORD_ROWS)
    if table.num_rows == 0:
        return
    is_info = table.column("info").is_valid()
    infos = table.filter(is_info)
    for tp, text in zip(
        infos.column("tp").to_pylist(), infos.column("info").to_pylist(), strict=True
    ):
        yield from _info_rows(tp, json.loads(text)).to_batches()
    keyed = table.filter(pc.invert(is_info))
    if keyed.num_rows:
        yield from _keyed_rows(keyed).to_batches()


def _info_rows(tp: int, info: dict[str, Any]) -> pa.Table:
    """An info row of the decode stage as BATCH_ROWS: its batches' sums and its partial."""
    batches = np.asarray(info["batches"], np.int64)
    return pa.concat_tables(
        [
            _batch_rows(
                np.full(batches.shape[0], tp, np.int32),
                batches,
                np.asarray(info["removed_rows"], np.int64),
                np.asarray(info["removed_bytes"], np.int64),
                rows=np.asarray(info["rows"], np.int64),
                decoded=np.asarray(info["decoded"], np.int64),
                on_disk=np.asarray(info["on_disk"], np.int64),
            ),
            _partial_rows({tp: info["partial"]}),
        ]
    )


def _batch_rows(
    tp: np.ndarray,
    batch: np.ndarray,
    removed_rows: np.ndarray,
    removed_bytes: np.ndarray,
    rows: np.ndarray | None = None,
    decoded: np.ndarray | None = None,
    on_disk: np.ndarray | None = None,
) -> pa.Table:
    zeros = np.zeros(tp.shape[0], np.int64)
    return pa.Table.from_arrays(
        [
            pa.array(tp.astype(np.int32)),
            pa.array(batch.astype(np.int64)),
            pa.array(zeros if rows is None else rows.astype(np.int64)),
            pa.array(zeros if decoded is None else decoded.astype(np.int64)),
            pa.array(zeros if on_disk is None else on_disk.astype(np.int64)),
            pa.array(removed_rows.astype(np.int64)),
            pa.array(removed_bytes.astype(np.int64)),
            pa.nulls(tp.shape[0], pa.string()),
        ],
        schema=BATCH_ROWS,
    )


def _partial_rows(partials: dict[int, dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"tp": tp, "partial": json.dumps(p)} for tp, p in partials.items()], schema=BATCH_ROWS
    )


def _keyed_rows(keyed: pa.Table) -> pa.Table:
    """Decide every keyed record of this task's keys; per-batch removals and key statistics."""
    tp = keyed.column("tp").to_numpy()
    offset = keyed.column("offset").to_numpy()
    size = keyed.column("size").to_numpy().astype(np.int64)
    batch = keyed.column("batch").to_numpy()
    flags = keyed.column("flags").to_numpy()
    # one group per (tp, key): hash-encode the keys, then the (key code, tp) pairs
    codes = pc.dictionary_encode(keyed.column("key").combine_chunks()).indices.to_numpy()
    pair = codes.astype(np.int64) * (int(tp.max()) + 1) + tp
    group = pc.dictionary_encode(pa.array(pair)).indices.to_numpy()
    groups = int(group.max()) + 1
    dirty = (flags & IN_DIRTY_RANGE) != 0
    latest_all = np.full(groups, -1, np.int64)  # (numpy's ufunc.at: ~100x an Arrow group-by)
    np.maximum.at(latest_all, group, offset)
    latest_dirty = np.full(groups, -1, np.int64)  # -1: the key is not in the offset map
    np.maximum.at(latest_dirty, group[dirty], offset[dirty])

    n = keyed.num_rows
    no = np.zeros(n, bool)
    facts = pa.table(
        {
            "offset": offset,
            "key_size": np.zeros(n, np.int32),
            "is_control": no,
            "is_aborted": no,
            "value_is_null": (flags & TOMBSTONE) != 0,
            "in_cleaning_round": (flags & IN_CLEANING_ROUND) != 0,
            "past_delete_horizon": (flags & PAST_DELETE_HORIZON) != 0,
        }
    )
    removed = ~retained_mask(facts, latest_dirty[group])
    superseded = offset < latest_all[group]

    # per-batch removals: runs of equal (tp, batch) after a sort
    gone_tp, gone_batch, gone_size = tp[removed], batch[removed], size[removed]
    order = np.lexsort((gone_batch, gone_tp))
    gone_tp, gone_batch, gone_size = gone_tp[order], gone_batch[order], gone_size[order]
    starts = (
        np.flatnonzero(np.r_[True, (np.diff(gone_tp) != 0) | (np.diff(gone_batch) != 0)])
        if order.shape[0]
        else np.zeros(0, np.int64)
    )
    out = [
        _batch_rows(
            gone_tp[starts],
            gone_batch[starts],
            np.diff(np.r_[starts, order.shape[0]]),
            np.add.reduceat(gone_size, starts) if starts.shape[0] else np.zeros(0, np.int64),
        )
    ]

    # per-partition key statistics
    per_key = np.bincount(group, minlength=groups)
    tp_of_group = np.empty(groups, np.int64)
    tp_of_group[group] = tp
    bucket = np.searchsorted([hi for _lo, hi in KEY_BUCKETS], per_key, side="left")
    width = int(tp.max()) + 1
    max_per_key = np.zeros(width, np.int64)
    np.maximum.at(max_per_key, tp_of_group, per_key)
    distinct = np.bincount(tp_of_group, minlength=width)
    duplicated = np.bincount(tp_of_group, weights=per_key > 1, minlength=width)
    histogram = np.bincount(
        tp_of_group * len(KEY_BUCKETS) + bucket, minlength=width * len(KEY_BUCKETS)
    ).reshape(width, len(KEY_BUCKETS))
    n_superseded = np.bincount(tp, weights=superseded, minlength=width)
    superseded_bytes = np.bincount(tp, weights=np.where(superseded, size, 0), minlength=width)
    tombs_removed = np.bincount(tp, weights=removed & ((flags & TOMBSTONE) != 0), minlength=width)
    partials = {
        int(t): {
            "distinct_keys": int(distinct[t]),
            "duplicated_keys": int(duplicated[t]),
            "max_records_per_key": int(max_per_key[t]),
            "key_histogram": histogram[t].tolist(),
            "superseded": int(n_superseded[t]),
            "superseded_bytes": int(superseded_bytes[t]),
            "tombstones_removable": int(tombs_removed[t]),
        }
        for t in np.flatnonzero(distinct)
    }
    out.append(_partial_rows(partials))
    return pa.concat_tables(out)


# ---------------------------------------------------------------------------------------------
# 3. per batch, after Spark's group-by (tp, batch)
# ---------------------------------------------------------------------------------------------


def group_by_batch(frame):
    """Spark SQL: one row per (tp, batch) with summed counts; partial rows (batch null) are
    grouped per tp with their JSON texts in a list."""
    from pyspark.sql import functions as F

    return frame.groupBy("tp", "batch").agg(
        F.sum("rows").alias("rows"),
        F.sum("decoded").alias("decoded"),
        F.max("on_disk").alias("on_disk"),
        F.sum("removed_rows").alias("removed_rows"),
        F.sum("removed_bytes").alias("removed_bytes"),
        F.collect_list("partial").alias("partials"),
    )


def freed_stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body after `group_by_batch`: PARTIAL_ROWS, the freed bytes of this task's
    batches per tp plus the partials passed through."""
    table = pa.Table.from_batches(list(batches))
    if table.num_rows == 0:
        return
    out: list[dict[str, Any]] = []
    has_batch = table.column("batch").is_valid()
    partials = table.filter(pc.invert(has_batch))
    for tp, texts in zip(
        partials.column("tp").to_pylist(), partials.column("partials").to_pylist(), strict=True
    ):
        out.extend({"tp": tp, "partial": t} for t in texts)
    sums = table.filter(has_batch)
    tps = sums.column("tp").to_numpy()
    for tp in np.unique(tps).tolist():
        sel = tps == tp

        def col(name: str, sel: np.ndarray = sel) -> np.ndarray:
            return sums.column(name).to_numpy()[sel]

        freed = freed_from_batches(
            rows=col("rows"),
            removed_rows=col("removed_rows"),
            decoded_bytes=col("decoded"),
            removed_bytes=col("removed_bytes"),
            on_disk=col("on_disk"),
        )
        out.append({"tp": tp, "partial": json.dumps({"freed": asdict(freed)})})
    yield from pa.Table.from_pylist(out, schema=PARTIAL_ROWS).to_batches()


# ---------------------------------------------------------------------------------------------
# on the driver
# ---------------------------------------------------------------------------------------------

_MAX_FIELDS = ("max_records_per_key",)
_LIST_FIELDS = ("tombstone_ages", "key_histogram")


def merge_partials(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The JSON partials of every stage, merged per tp: RecordCounts and FreedBytes added,
    histograms added bucket by bucket, maxima kept, everything else summed."""
    merged: dict[int, dict[str, Any]] = {}
    for row in rows:
        part = json.loads(row["partial"])
        have = merged.setdefault(row["tp"], empty_partial())
        for name, value in part.items():
            if name == "counts":
                have["counts"] = have["counts"] + RecordCounts(**value)
            elif name == "freed":
                have["freed"] = have["freed"] + FreedBytes(**value)
            elif name in _LIST_FIELDS:
                have[name] = [a + b for a, b in zip(have[name], value, strict=True)]
            elif name in _MAX_FIELDS:
                have[name] = max(have[name], value)
            else:
                have[name] += value
    return merged


def empty_partial() -> dict[str, Any]:
    """What a partition with no record (or no keyed record) contributes."""
    return {
        "counts": RecordCounts(),
        "freed": FreedBytes(0, 0, 0, 0),
        "tombstone_ages": [0] * len(AGE_LABELS),
        "tombstones_removable": 0,
        "distinct_keys": 0,
        "duplicated_keys": 0,
        "max_records_per_key": 0,
        "key_histogram": [0] * len(KEY_BUCKETS),
        "superseded": 0,
        "superseded_bytes": 0,
    }
