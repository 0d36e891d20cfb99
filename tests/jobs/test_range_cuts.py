"""Task bounds that snap to partition ends (`jobs.ingestion.ranges.cuts`, the arrow range mode's
`pick_bounds` / `pick_ranges`, `OnePassPlan.partition_starts`): no Spark."""

from __future__ import annotations

import math
import random

import numpy as np
import pyarrow as pa
import pytest

from jobs.ingestion.ranges.cuts import SNAP_FRACTION, partition_ends, task_cuts
from jobs.ingestion.tasks import arrow_range as ar
from jobs.ingestion.tasks import arrow_range_keys as rk
from jobs.ingestion.tasks.planner import OnePassPlan


def _samples(sizes: dict[tuple[str, int], int], ordering: int = 1) -> list[tuple[rk.Key, int]]:
    """Every row's key (weight 1), `sizes` rows per (topic, partition), shuffled: ordering
    values 0.. (`ordering` columns), pos unique."""
    samples, pos = [], 0
    for (topic, partition), n in sizes.items():
        for i in range(n):
            samples.append(((topic, partition, *[(1, i)] * ordering, pos), 1))
            pos += 1
    random.Random(len(samples)).shuffle(samples)
    return samples


def _shares(samples, bounds) -> list[int]:
    """Rows of each task between `bounds` (a key equal to a bound goes to the lower task)."""
    edges = [None, *bounds, None]
    return [
        sum(w for k, w in samples if (lower is None or k > lower) and (upper is None or k <= upper))
        for lower, upper in zip(edges, edges[1:], strict=False)
    ]


def _partitions_split(samples, bounds) -> set[tuple[str, int]]:
    """The (topic, partition)s whose rows fall on both sides of a bound."""
    return {
        k[:2]
        for b in bounds
        for k, _ in samples
        if k[:2] == b[:2] and k > b and any(j[:2] == k[:2] and j <= b for j, _ in samples)
    }


# ---------------------------------------------------------------------------------------------
# task_cuts: the arithmetic both range modes use


@pytest.mark.parametrize("sampled, tasks", [(10, 4), (1000, 7), (12, 12), (4000, 3), (97, 10)])
def test_unit_weights_without_ends_give_equal_shares(sampled, tasks):
    cuts = task_cuts(np.ones(sampled, np.int64), np.zeros(0, np.int64), tasks)
    picks = [i for i, at_end in cuts]
    assert not any(at_end for _, at_end in cuts)
    assert len(picks) == tasks - 1 and picks == sorted(set(picks))
    edges = [-1, *picks, sampled - 1]  # task i holds keys (picks[i-1], picks[i]]
    shares = [b - a for a, b in zip(edges, edges[1:], strict=False)]
    assert sum(shares) == sampled and max(shares) - min(shares) <= 1


def test_fewer_keys_than_tasks():
    none = np.zeros(0, np.int64)
    assert task_cuts(np.ones(0, np.int64), none, 5) == []
    assert task_cuts(np.ones(1, np.int64), none, 5) == [(0, False)]
    picks = [i for i, _ in task_cuts(np.ones(3, np.int64), none, 8)]
    assert picks == sorted(set(picks)) and all(0 <= i < 3 for i in picks)
    assert task_cuts(np.ones(100, np.int64), none, 1) == []


def test_partition_ends_skip_the_last_key():
    topics = ["a", "a", "a", "b", "b", "c"]
    parts = [0, 0, 1, 1, 1, 0]
    assert partition_ends(topics, parts).tolist() == [1, 2, 4]
    assert partition_ends(["a"], [0]).tolist() == []


def test_the_tolerance_edge_is_a_quarter_task():
    """Two tasks of 200 rows: an end 50 rows (a quarter task) from the median is taken, 51 not."""
    assert SNAP_FRACTION == 4
    ones = np.ones(400, np.int64)
    assert task_cuts(ones, partition_ends([0] * 150 + [1] * 250, [0] * 400), 2) == [(149, True)]
    assert task_cuts(ones, partition_ends([0] * 250 + [1] * 150, [0] * 400), 2) == [(249, True)]
    assert task_cuts(ones, partition_ends([0] * 149 + [1] * 251, [0] * 400), 2) == [(199, False)]


def test_a_heavy_key_and_an_end_keep_cuts_strictly_increasing():
    # quantile 1 snaps to the end after key 0; quantiles 2..4 all fall on the heavy key 1
    cuts = task_cuts(np.array([300, 1000, 1]), np.array([0]), 5)
    assert cuts == sorted(set(cuts)) and cuts[0] == (0, True)


def test_whole_partitions_take_the_nearest_end_however_far():
    ones = np.ones(400, np.int64)
    ends = partition_ends([0] * 100 + [1] * 300, [0] * 400)  # one end, 100 rows from the median
    assert task_cuts(ones, ends, 2) == [(199, False)]  # too far to snap
    assert task_cuts(ones, ends, 2, whole_partitions=True) == [(99, True)]
    # 8 quantiles over 3 partitions: they merge at the 2 ends, 3 tasks of whole partitions
    ends = partition_ends([0] * 100 + [1] * 200 + [2] * 100, [0] * 400)
    assert task_cuts(ones, ends, 8, whole_partitions=True) == [(99, True), (299, True)]
    # no end at all (one partition): nothing to cut at
    assert task_cuts(ones, np.zeros(0, np.int64), 4, whole_partitions=True) == []


# ---------------------------------------------------------------------------------------------
# pick_bounds / pick_ranges: the arrow range mode's keys


def test_tasks_equal_to_partitions_end_exactly_at_partition_ends():
    samples = _samples({("t", p): 100 for p in range(4)}, ordering=2)
    bounds = ar.pick_bounds(samples, 4)
    assert bounds == [("t", p + 1, (0,), (0,), rk.PARTITION_END_POS) for p in range(3)]
    assert all(rk.is_partition_end(b) for b in bounds)
    assert _shares(samples, bounds) == [100] * 4
    assert _partitions_split(samples, bounds) == set()


def test_fewer_tasks_than_partitions_cut_between_partitions():
    samples = _samples({("t", p): 50 for p in range(8)})
    bounds = ar.pick_bounds(samples, 4)
    assert [b[1] for b in bounds] == [2, 4, 6] and all(map(rk.is_partition_end, bounds))
    assert _shares(samples, bounds) == [100] * 4
    # 3 partitions over 2 tasks: the ends are a third of a task from the median, too far
    samples = _samples({("t", p): 60 for p in range(3)})
    (bound,) = ar.pick_bounds(samples, 2)
    assert not rk.is_partition_end(bound) and bound[1] == 1
    assert _shares(samples, [bound]) == [90, 90]


def test_a_hot_partition_is_still_split_inside():
    samples = _samples({("t", 0): 150, ("t", 1): 300, ("t", 2): 150})
    bounds = ar.pick_bounds(samples, 4)
    assert [rk.is_partition_end(b) for b in bounds] == [True, False, True]
    assert bounds[1][1] == 1  # inside the hot partition
    assert _shares(samples, bounds) == [150] * 4
    assert _partitions_split(samples, bounds) == {("t", 1)}
    hot = _samples({("t", 0): 50, ("t", 1): 500, ("t", 2): 50})
    bounds = ar.pick_bounds(hot, 4)
    assert [b[1] for b in bounds] == [1, 1, 1] and not any(map(rk.is_partition_end, bounds))


def test_several_topics():
    samples = _samples({("a", 0): 80, ("a", 1): 80, ("b", 0): 80, ("b", 1): 80})
    bounds = ar.pick_bounds(samples, 4)
    assert [b[:2] for b in bounds] == [("a", 1), ("a", 2), ("b", 1)]
    assert _shares(samples, bounds) == [80] * 4
    assert bounds[1] < min(k for k, _ in samples if k[0] == "b")  # ("a", 2): below topic b


def test_no_bound_at_or_after_the_greatest_key():
    """No end follows the last partition, and the greatest key is no bound: no empty task."""
    samples = _samples({("t", 0): 3})
    bounds = ar.pick_bounds(samples, 5)
    assert [b[-1] for b in bounds] == [0, 1] and _shares(samples, bounds) == [1, 1, 1]
    samples = _samples({("t", 0): 100, ("t", 1): 5})  # the end is far from the median
    (bound,) = ar.pick_bounds(samples, 2)
    assert bound[1] == 0 and not rk.is_partition_end(bound)
    assert _shares(samples, [bound]) == [53, 52]


def test_partition_ends_with_nulls_and_nan_are_found_by_both_searches():
    """Ordering values with nulls (sort first), NaN and -0.0: a partition's end is above every
    row of it and below every row of the next, in Python's comparison, the vectorized search
    and the row-by-row one."""
    rng = random.Random(7)
    values = [None, math.nan, -0.0, 0.0, 1.5, -2.0]
    n = 240
    table = pa.table(
        {
            "topic": ["t"] * n,
            "partition": pa.array([i % 4 for i in range(n)], pa.int32()),
            "_kl_o0": pa.array([rng.choice(values) for _ in range(n)], pa.float64()),
            "_kl_o1": pa.array([rng.choice([None, "", "a", "é"]) for _ in range(n)]),
            rk.POS: pa.array(rng.sample(range(10 * n), n), pa.int64()),
        }
    )
    plan = ar.ArrowRangePlan(None, ("x", "y"), (True, False))  # type: ignore[arg-type]
    run = table.take(rk.sort_order(table, plan))
    keys = rk.keys_at(run, np.arange(n), plan)
    bounds = ar.pick_bounds([(k, 1) for k in keys], 4)
    assert all(map(rk.is_partition_end, bounds)) and len(bounds) == 3
    per_partition = np.bincount(run.column("partition").to_numpy(), minlength=4)
    expected = np.cumsum(per_partition)[:3].tolist()
    assert rk.counts_at_most(run, bounds, plan).tolist() == expected
    assert [rk.count_at_most(run, b, plan) for b in bounds] == expected
    assert [sum(k <= b for k in keys) for b in bounds] == expected


def test_sub_ranges_nest_inside_snapped_task_ranges():
    samples = _samples({("t", 0): 150, ("t", 1): 300, ("t", 2): 150})
    ranges = ar.pick_ranges(samples, 4, chunk_rows=40)
    assert [r.upper for r in ranges[:-1]] == ar.pick_bounds(samples, 4)
    assert [r.lower for r in ranges[1:]] == [r.upper for r in ranges[:-1]]
    for r in ranges:
        edges = [r.lower, *r.inner, r.upper]
        inner = [e for e in edges if e is not None]
        assert inner == sorted(set(inner))  # strictly inside, ascending
        assert len(r.inner) >= 2
    inners = [k for r in ranges for k in (r.lower, *r.inner) if k is not None]
    assert max(_shares(samples, inners)) <= 40 * (1 + 2 / SNAP_FRACTION)  # about chunk_rows


# ---------------------------------------------------------------------------------------------
# OnePassPlan: a task that starts its partitions writes its first one in place


def test_a_task_starting_at_a_partition_end_writes_its_first_partition_in_place():
    plan = OnePassPlan({("t", 1): 7}, partition_starts=frozenset({2}))
    started = plan.assignment(2, "t", 1, first_in_task=True)
    assert (started.provisional, started.range_index, started.first_offset) == (False, 0, 7)
    assert not started.continues_share
    continued = plan.assignment(3, "t", 1, first_in_task=True)
    assert continued.continues_share
    assert plan.may_be_continued(0) and not plan.may_be_continued(1)
    assert OnePassPlan({}).may_be_continued(1)


def test_whole_partitions_when_partitions_are_at_least_the_cores():
    """More tasks than partitions: quantiles split every partition, unless the partitions are
    enough to keep the cores busy; then each task holds whole partitions, and its sub-ranges
    still bound its memory."""
    samples = _samples({("t", p): 600 for p in range(4)})
    split = ar.pick_bounds(samples, 12)
    assert _partitions_split(samples, split) == {("t", p) for p in range(4)}
    assert ar.splits_gain_nothing(samples, cores=4)
    assert not ar.splits_gain_nothing(samples, cores=5)
    ranges = ar.pick_ranges(samples, 12, chunk_rows=100, whole_partitions=True)
    bounds = [r.upper for r in ranges[:-1]]
    assert bounds == [("t", p + 1, (0,), rk.PARTITION_END_POS) for p in range(3)]
    assert _partitions_split(samples, bounds) == set()
    assert all(len(r.inner) >= 4 for r in ranges)  # ~600 rows each, read 100 at a time
