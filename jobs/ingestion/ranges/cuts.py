"""Where the range modes cut the sorted keys into write tasks: weighted quantiles, moved to a
partition's end when one is close.

Why: a bound inside a partition splits it between two tasks, and the later task's share of it
continues the earlier one's: it is staged as rows and encoded after the run by the relayout
(`jobs.ingestion.relayout.shares`). A bound between two partitions splits none, so the next task's
first partition starts there and is written in place (`OnePassPlan.partition_starts`). The
output bytes are the same either way; only the relayout's work goes.

Both range modes pick their bounds here, from keys sorted as Spark sorts them: the arrow range
mode from sampled keys weighted by the rows each stands for (`arrow_range.pick_bounds`), the
Spark range mode from a sorted row sample, every row weight 1 (`range_bounds`). A cut is
(index of a sorted key, at_end): the bound is that key itself, or (at_end) the end of that
key's partition, a key between its last row and the next partition's first. Each mode turns a
cut into its own bound key.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["SNAP_FRACTION", "Cut", "partition_ends", "task_cuts"]

Cut = tuple[int, bool]  # (index into the sorted keys, the bound is the end of its partition)

# A quantile moves to a partition end at most 1/SNAP_FRACTION of a task's target rows away.
# A quarter: each of a task's two bounds moves at most a quarter of a task, so every task keeps
# between half and one and a half times its target rows; and bounds one task apart can never
# move to the same end, so snapping removes no task. A partition of more than a task's rows
# has quantiles farther than that from its ends: it is still split inside.
SNAP_FRACTION = 4


def partition_ends(topics: Sequence | np.ndarray, partitions: Sequence | np.ndarray) -> np.ndarray:
    """The indices of the sorted keys that end their (topic, partition), the last key aside
    (nothing follows it to start another partition)."""
    t = np.asarray(topics, dtype=object)
    p = np.asarray(partitions)
    if len(t) < 2:
        return np.zeros(0, np.int64)
    return np.flatnonzero((t[1:] != t[:-1]) | (p[1:] != p[:-1])).astype(np.int64)


def task_cuts(
    weights: Sequence[int] | np.ndarray,
    ends: np.ndarray,
    tasks: int,
    *,
    whole_partitions: bool = False,
) -> list[Cut]:
    """The cuts of `tasks` write tasks over sorted keys of `weights` (rows each key stands for),
    ascending, without repeats (fewer cuts when the keys are few).

    Cut i is the first key whose running rows reach i/tasks of the total, unless one of `ends`
    (from `partition_ends`) has its running rows within 1/SNAP_FRACTION of a task's rows of
    that quantile: then the nearest such end (the lower one on a tie). `whole_partitions`: the
    nearest end however far, so no partition is split (quantiles that meet at one end merge:
    fewer tasks, each a run of whole partitions)."""
    running = np.cumsum(np.asarray(weights, np.int64))
    if tasks <= 1 or not len(running):
        return []
    total = int(running[-1])
    targets = np.arange(1, tasks, dtype=np.int64) * total  # quantile i, scaled by tasks
    keys = np.searchsorted(running * tasks, targets, side="left")
    at_ends = running[ends] * tasks
    nearest = _nearest(at_ends, targets)
    cuts: list[Cut] = []
    for target, key, end in zip(targets.tolist(), keys.tolist(), nearest.tolist(), strict=True):
        if end < 0 and whole_partitions:
            continue  # one partition: nothing to cut between
        near = end >= 0 and SNAP_FRACTION * abs(int(at_ends[end]) - target) <= total
        cut = (int(ends[end]), True) if near or whole_partitions else (key, False)
        if not cuts or cut > cuts[-1]:  # (k, False) < (k, True) < (k + 1, False) as keys
            cuts.append(cut)
    return cuts


def _nearest(points: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The index into ascending `points` nearest to each target (-1 when there are none)."""
    if not len(points):
        return np.full(len(targets), -1, np.int64)
    above = np.searchsorted(points, targets).clip(max=len(points) - 1)
    below = (above - 1).clip(min=0)
    closer_below = np.abs(points[below] - targets) <= np.abs(points[above] - targets)
    return np.where(closer_below, below, above)
