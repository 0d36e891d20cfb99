"""The compaction audit's Spark pipeline: decode, then a shuffle by key.

One Spark job (two mapInArrow stages, `jobs.spark.tasks`), one pass over the records:

1. decode (per work unit, in the task that reads the segments): the core's record facts,
   chunk by chunk. What needs no other record is settled here, vectorized: the partition's
   RecordCounts, tombstone ages. Out go narrow keyed records (partition, key, offset, size,
   flags) and one `info` JSON per chunk carrying that chunk's partial.
2. shuffle by a bucket hashed from (partition, key), then the key stage: every record of a key is in one
   task, so the key's latest offset, overall and in the range the cleaning round maps, is a
   group-by away; the core's `retained_mask` decides each keyed record. Out go per-partition
   key statistics: distinct keys, duplicates, superseded records and bytes, and which
   superseded records the round leaves (in the active segment, or superseded only by records
   the round does not map).

What a cleaning round removes and frees is not estimated here: the state pass runs the round
itself (compact's dry run), so the audit's figures are compact's.

Everything that reaches the driver is a handful of JSON partials per partition, merged there.
No key or record list is ever collected.

Records cross the shuffle as Arrow IPC blobs, one per (chunk, key bucket), placed by bucket
number (a task may get several buckets): Spark moves a few large byte strings, where a Spark row per record cost more in Arrow
<-> JVM row conversions than the audit's own work.
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

from jobs.maintenance.common import ipc_bytes, ipc_table
from kafkalog_core.config import LogConfig
from kafkalog_core.maintenance.cleaner_audit import CleaningState
from kafkalog_core.maintenance.cleaner_facts import (
    RecordCounts,
    iter_record_facts,
    record_counts,
    retained_mask,
)
from kafkalog_core.partitioner import murmur2_array

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
IN_ACTIVE_SEGMENT = 16

KEYED_RECORDS = pa.schema(
    [
        ("tp", pa.int32()),  # index of the partition in the run's unit list
        ("key", pa.binary()),
        ("offset", pa.int64()),
        ("size", pa.int32()),
        ("flags", pa.int8()),
    ]
)
_BLOB_ROWS = 1 << 18  # records per blob at most (bounds one shuffled value to ~10 MB)
KEYED, INFO = "keyed", "info"  # what a shuffled value holds


def pack_state(state: CleaningState) -> str:
    """A CleaningState for a unit's JSON (the decode tasks reuse the state pass's walk)."""
    return base64.b64encode(pickle.dumps(state)).decode("ascii")


def unpack_state(text: str) -> CleaningState:
    return pickle.loads(base64.b64decode(text))


# ---------------------------------------------------------------------------------------------
# 1. decode
# ---------------------------------------------------------------------------------------------

Shuffled = tuple[int, tuple[str, bytes]]  # (bucket, (KEYED | INFO, payload))


def decode_task(log_dir: str, now_ms: int, buckets: int):
    """A stage body over JSON lists of work units: keyed-record blobs by key bucket
    (a hash of tp and key, so every record of a key meets in one task) and info blobs."""

    def run(texts: Iterator[str]) -> Iterator[Shuffled]:
        for text in texts:
            for unit in json.loads(text):
                state = unpack_state(unit["state"])
                config = LogConfig.from_dict(unit["config"])
                pdir = Path(log_dir) / unit["dir"]
                only = unit.get("only_segments")
                for facts in iter_record_facts(pdir, state, only_segments=only):
                    keyed, info = record_rows(unit["tp"], facts, config, now_ms)
                    yield from _by_bucket(keyed, buckets)
                    yield unit["tp"] % buckets, (INFO, json.dumps(info).encode())

    return run


def record_rows(
    tp: int, facts: pa.Table, config: LogConfig, now_ms: int
) -> tuple[pa.Table, dict[str, Any]]:
    """One chunk's keyed records (KEYED_RECORDS) and its info: the chunk's partial."""

    def col(name: str) -> np.ndarray:
        return facts.column(name).to_numpy()

    control, aborted, value_null = col("is_control"), col("is_aborted"), col("value_is_null")
    keyed = ~control & ~aborted & (col("key_size") >= 0)
    tomb = value_null & ~control
    ages = now_ms - col("timestamp")[tomb]
    # tombstones without a key group that the round removes: the core's rule, no later record
    removed_local = ~retained_mask(facts, np.full(facts.num_rows, -1, np.int64)) & ~keyed
    info = {
        "counts": asdict(record_counts(facts, config, now_ms)),
        "tombstone_ages": np.bincount(
            np.searchsorted(AGE_EDGES, ages, side="right"), minlength=len(AGE_LABELS)
        ).tolist(),
        "tombstones_removable": int((tomb & removed_local).sum()),
    }
    flags = (
        col("in_dirty_range") * IN_DIRTY_RANGE
        + col("in_cleaning_round") * IN_CLEANING_ROUND
        + value_null * TOMBSTONE
        + col("past_delete_horizon") * PAST_DELETE_HORIZON
        + col("in_active_segment") * IN_ACTIVE_SEGMENT
    ).astype(np.int8)
    rows = pa.Table.from_arrays(
        [
            pa.array(np.full(int(keyed.sum()), tp, np.int32)),
            facts.column("key").filter(pa.array(keyed)),
            pa.array(col("offset")[keyed]),
            pa.array(col("record_size")[keyed]),
            pa.array(flags[keyed]),
        ],
        schema=KEYED_RECORDS,
    )
    return rows, {"tp": tp, "partial": info}


def _by_bucket(keyed: pa.Table, buckets: int) -> Iterator[Shuffled]:
    if keyed.num_rows == 0:
        return
    hashes = murmur2_array(keyed.column("key")).astype(np.int64) & 0x7FFFFFFF
    bucket = (hashes + keyed.column("tp").to_numpy().astype(np.int64) * 40503) % buckets
    order = np.argsort(bucket, kind="stable")
    ordered = bucket[order]
    starts = np.flatnonzero(np.r_[True, np.diff(ordered) != 0])
    ends = np.r_[starts[1:], order.shape[0]]
    grouped = keyed.take(pa.array(order))
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        for lo in range(start, end, _BLOB_ROWS):
            piece = grouped.slice(lo, min(end, lo + _BLOB_ROWS) - lo)
            yield int(ordered[start]), (KEYED, ipc_bytes(piece))


# ---------------------------------------------------------------------------------------------
# 2. per key
# ---------------------------------------------------------------------------------------------


def key_task(pairs: Iterator[Shuffled]) -> Iterator[tuple[int, str]]:
    """A stage body after the shuffle by bucket: (tp, JSON partial) - the info blobs'
    partials passed on, and per tp the key statistics of the keys this task holds."""
    keyed: list[pa.Table] = []
    for _bucket, (kind, blob) in pairs:
        if kind == INFO:
            info = json.loads(blob)
            yield info["tp"], json.dumps(info["partial"])
        else:
            keyed.append(ipc_table(blob))
    if keyed:
        for tp, partial in _keyed_rows(pa.concat_tables(keyed)).items():
            yield tp, json.dumps(partial)


def _keyed_rows(keyed: pa.Table) -> dict[int, dict[str, Any]]:
    """Decide every keyed record of this task's keys: per tp, the key statistics."""
    tp = keyed.column("tp").to_numpy()
    offset = keyed.column("offset").to_numpy()
    size = keyed.column("size").to_numpy().astype(np.int64)
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
    in_round = (flags & IN_CLEANING_ROUND) != 0
    facts = pa.table(
        {
            "offset": offset,
            "key_size": np.zeros(n, np.int32),
            "is_control": no,
            "is_aborted": no,
            "value_is_null": (flags & TOMBSTONE) != 0,
            "in_cleaning_round": in_round,
            "past_delete_horizon": (flags & PAST_DELETE_HORIZON) != 0,
        }
    )
    removed = ~retained_mask(facts, latest_dirty[group])
    superseded = offset < latest_all[group]
    # what the round leaves of the superseded records: those in the active segment (never
    # read), and the others (superseded only by records the round does not map, or beyond it)
    active = (flags & IN_ACTIVE_SEGMENT) != 0
    left = superseded & ~(in_round & (offset < latest_dirty[group]))

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

    def per_tp(mask: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        w = mask if weights is None else np.where(mask, weights, 0)
        return np.bincount(tp, weights=w, minlength=width).astype(np.int64)

    n_superseded = per_tp(superseded)
    superseded_bytes = per_tp(superseded, size)
    tombs_removed = per_tp(removed & ((flags & TOMBSTONE) != 0))
    left_active = per_tp(left & active)
    left_other = per_tp(left & ~active)
    return {
        int(t): {
            "distinct_keys": int(distinct[t]),
            "duplicated_keys": int(duplicated[t]),
            "max_records_per_key": int(max_per_key[t]),
            "key_histogram": histogram[t].tolist(),
            "superseded": int(n_superseded[t]),
            "superseded_bytes": int(superseded_bytes[t]),
            "tombstones_removable": int(tombs_removed[t]),
            "superseded_in_active_segment": int(left_active[t]),
            "superseded_left_by_round": int(left_other[t]),
        }
        for t in np.flatnonzero(distinct)
    }


# ---------------------------------------------------------------------------------------------
# on the driver
# ---------------------------------------------------------------------------------------------

_MAX_FIELDS = ("max_records_per_key",)
_LIST_FIELDS = ("tombstone_ages", "key_histogram")


def merge_partials(rows: list[tuple[int, str]]) -> dict[int, dict[str, Any]]:
    """The (tp, JSON partial) pairs of every stage, merged per tp: RecordCounts added,
    histograms added bucket by bucket, maxima kept, everything else summed."""
    merged: dict[int, dict[str, Any]] = {}
    for tp, text in rows:
        part = json.loads(text)
        have = merged.setdefault(tp, empty_partial())
        for name, value in part.items():
            if name == "counts":
                have["counts"] = have["counts"] + RecordCounts(**value)
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
        "tombstone_ages": [0] * len(AGE_LABELS),
        "tombstones_removable": 0,
        "distinct_keys": 0,
        "duplicated_keys": 0,
        "max_records_per_key": 0,
        "key_histogram": [0] * len(KEY_BUCKETS),
        "superseded": 0,
        "superseded_bytes": 0,
        "superseded_in_active_segment": 0,
        "superseded_left_by_round": 0,
    }
