"""The machine-scaling calibration that `bench/ingest.py --scaling` prints beside its figures."""

from __future__ import annotations

import pytest

from bench.machine import KINDS, speedup


@pytest.mark.parametrize("kind", KINDS)
def test_one_worker_is_its_own_baseline_and_two_never_beat_double(kind):
    # one process against itself: the same work twice, about x1 (loose: a shared machine)
    assert 0.3 < speedup(kind, 3, workers=1) < 3.0
    assert 0.0 < speedup(kind, 3, workers=2) < 2.6
