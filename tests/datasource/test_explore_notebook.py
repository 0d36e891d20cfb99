"""notebooks/explore.ipynb: committed clean, and its cells run top to bottom with the right numbers.

The expected figures are computed here independently: partitions with kafka-python's murmur2,
records on disk with kafka-python's decoder.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2

from tests.datasource.helpers import oracle
from tests.jobs.test_notebook import clean_code_source, run_notebook

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "explore.ipynb"
RECORDS = 20_000  # the notebook's RECORDS, keys user-(i % 50)


def test_notebook_is_committed_clean() -> None:
    source = clean_code_source(NOTEBOOK)
    for needed in ('write.format("kafkalog")', 'read.format("kafkalog")', "startingTimestamp"):
        assert needed in source
    assert f"RECORDS = {RECORDS:_}" in source


def _value_after(out: str, cell: int) -> str:
    return out.split(f"== cell {cell} ==\n", 1)[1].split("\n== ", 1)[0].strip().splitlines()[-1]


@pytest.mark.spark
def test_notebook_runs_and_reads_back_what_it_wrote(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = run_notebook(NOTEBOOK, tmp, tmp_path)

    per_key = Counter(f"user-{i % 50}".encode() for i in range(RECORDS))
    expected = Counter()
    for key, n in per_key.items():
        expected[(murmur2(key) & 0x7FFFFFFF) % 3] += n
    logs = tmp / "kafkalog-explore" / "kafka-logs"
    on_disk = {p: [o for o, _, _, _ in oracle(logs / f"events-{p}")] for p in range(3)}
    for p in range(3):
        assert on_disk[p] == list(range(expected[p]))  # dense offsets from 0
    whole = ast.literal_eval(_value_after(out, 4))
    assert whole == [(p, expected[p], 0, expected[p] - 1) for p in range(3)]
    bounded = ast.literal_eval(_value_after(out, 5))
    assert bounded == [(0, 100, 100), (1, 10, 0), (2, expected[2], 0)]
    assert "tenth minute: 60 records, 2024-05-01 00:09:00 .. 2024-05-01 00:09:59" in out
    assert "<Figure size 1100x350 with 2 Axes>" in out
    summary = ast.literal_eval(_value_after(out, 9))
    assert summary["records"] == RECORDS
    assert summary["segments"] == sum(
        len(list((logs / f"events-{p}").glob("*.log"))) for p in range(3)
    )
    assert summary["segments"] >= 6 and summary["index entries"] > summary["segments"]
