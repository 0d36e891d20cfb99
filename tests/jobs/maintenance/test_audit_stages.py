"""The compaction audit's stages without Spark: the shuffles simulated in-process.

However the keyed records are cut into buckets and blobs, the merged partials must be the
same, and must equal the core's single-process reference of a cleaning round.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from jobs.maintenance import audit_stages
from kafkalog_core.maintenance.cleaner_audit import partition_cleaning_state
from kafkalog_core.maintenance.cleaner_facts import kafka_retained, partition_record_facts
from tests.log.test_cleaner_audit import COMPACT, NOW, transactions_partition


def _shuffle(pairs, partitions: int) -> list[list]:
    """What partitionBy(partitions, identity) does: value with key k to partition k % n."""
    out: list[list] = [[] for _ in range(partitions)]
    for key, value in pairs:
        out[key % partitions].append((key, value))
    return out


def _audit(root: Path, dirs: list[str], buckets: int, units_per_task: int):
    units = []
    for tp, name in enumerate(dirs):
        state = partition_cleaning_state(root / name, COMPACT, None, NOW)
        units.append(
            {
                "dir": name,
                "tp": tp,
                "config": COMPACT.to_dict(non_default=True),
                "state": audit_stages.pack_state(state),
            }
        )
    texts = [
        json.dumps(units[i : i + units_per_task]) for i in range(0, len(units), units_per_task)
    ]
    decode = audit_stages.decode_task(str(root), NOW, buckets)
    pairs = [pair for text in texts for pair in decode(iter([text]))]
    keyed = [p for part in _shuffle(pairs, buckets) for p in audit_stages.key_task(iter(part))]
    return audit_stages.merge_partials(keyed)


@pytest.fixture(scope="module")
def two_partitions(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stages")
    transactions_partition(root / "t-0")
    transactions_partition(root / "t-1")
    return root


def test_buckets_and_blob_sizes_do_not_change_the_answer(two_partitions, monkeypatch) -> None:
    dirs = ["t-0", "t-1"]
    reference = _audit(two_partitions, dirs, buckets=1, units_per_task=2)
    monkeypatch.setattr(audit_stages, "_BLOB_ROWS", 2)  # every bucket split into many blobs
    for buckets in (2, 3, 7):
        assert _audit(two_partitions, dirs, buckets, units_per_task=1) == reference


def test_merged_partials_match_the_single_process_reference(two_partitions) -> None:
    merged = _audit(two_partitions, ["t-0"], buckets=3, units_per_task=1)[0]
    state = partition_cleaning_state(two_partitions / "t-0", COMPACT, None, NOW)
    facts, counts = partition_record_facts(two_partitions / "t-0", COMPACT, NOW, state=state)
    keep = kafka_retained(facts)
    assert merged["counts"] == counts
    tombstones = facts.column("value_is_null").to_numpy() & ~facts.column("is_control").to_numpy()
    assert merged["tombstones_removable"] == int((tombstones & ~keep).sum()) > 0
    # keyed, non-aborted data: the latest record per key survives supersession
    latest: dict[bytes, int] = defaultdict(int)
    rows = facts.to_pylist()
    for r in rows:
        if r["key"] is not None and not r["is_aborted"] and not r["is_control"]:
            latest[r["key"]] = max(latest[r["key"]], r["offset"])
    superseded = [
        r
        for r in rows
        if r["key"] is not None
        and not r["is_aborted"]
        and not r["is_control"]
        and r["offset"] < latest[r["key"]]
    ]
    assert merged["distinct_keys"] == len(latest)
    assert merged["superseded"] == len(superseded) > 0
    # what the round leaves of them: in the active segment, or superseded only from there
    active = state.active_segment_base_offset
    removed = {r["offset"] for r, k in zip(rows, keep, strict=True) if not k}
    in_active = [r for r in superseded if r["offset"] >= active]
    left = [r for r in superseded if r["offset"] < active and r["offset"] not in removed]
    assert merged["superseded_in_active_segment"] == len(in_active)
    assert merged["superseded_left_by_round"] == len(left)
    assert len(in_active) + len(left) > 0
    assert merged["superseded_bytes"] == sum(r["record_size"] for r in superseded)
