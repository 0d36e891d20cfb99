"""The host facts and the machine-scaling calibration that `bench/ingest.py --scaling` prints
beside its figures.

No timing is asserted (the suite shares its cores): the ratio's arithmetic, that each kind
of work runs, and that the facts are this host's.
"""

from __future__ import annotations

import os
from importlib import metadata

import pytest

from bench.machine import KINDS, _work, host_facts, throughput_ratio


def test_the_ratio_is_throughput_against_one_process():
    assert throughput_ratio(1.0, 1.0, 2) == 2.0  # two runs in the time of one: ideal
    assert throughput_ratio(1.0, 2.0, 2) == 1.0  # two runs take twice as long: no gain
    assert throughput_ratio(1.0, 1.5, 2) == pytest.approx(4 / 3)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_work_runs(kind):
    assert _work(kind, 1) > 0.0


def test_host_facts_are_this_hosts():
    facts = host_facts()
    assert facts["vCPUs"] == str(os.cpu_count())
    assert facts["pyarrow"] == metadata.version("pyarrow")
    assert float(facts["memory"].removesuffix(" GiB")) > 0  # the tests run on Linux
    assert facts["java"].startswith(("openjdk", "java"))  # Java 17+ is required
