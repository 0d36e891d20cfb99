"""The machine-scaling calibration that `bench/ingest.py --scaling` prints beside its figures.

No timing is asserted (the suite shares its cores): the ratio's arithmetic, and that each kind
of work runs.
"""

from __future__ import annotations

import pytest

from bench.machine import KINDS, _work, throughput_ratio


def test_the_ratio_is_throughput_against_one_process():
    assert throughput_ratio(1.0, 1.0, 2) == 2.0  # two runs in the time of one: ideal
    assert throughput_ratio(1.0, 2.0, 2) == 1.0  # two runs take twice as long: no gain
    assert throughput_ratio(1.0, 1.5, 2) == pytest.approx(4 / 3)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_work_runs(kind):
    assert _work(kind, 1) > 0.0
