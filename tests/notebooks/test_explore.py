"""notebooks/explore.ipynb in a Jupyter kernel: it reads back what it wrote, and its segments
table and plot come from the data source's segments view.

The expected figures are computed here independently: partitions with kafka-python's murmur2,
records on disk with kafka-python's decoder, index entries from the index files' sizes.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2

from tests.datasource.helpers import oracle
from tests.notebooks import kernel

NOTEBOOK = "explore.ipynb"
RECORDS = 20_000  # the notebook's RECORDS, keys user-(i % 50)


def test_uses_the_data_source_only() -> None:
    source = kernel.committed_source(NOTEBOOK)
    for needed in ('write.format("kafkalog")', 'read.format("kafkalog")', "startingTimestamp"):
        assert needed in source
    assert '.option("view", "segments")' in source
    assert "kafkalog_core" not in source  # segment facts come through the data source
    assert f"RECORDS = {RECORDS:_}" in source


@pytest.mark.spark
def test_reads_back_what_it_wrote_and_plots_the_segments_once(tmp_path: Path) -> None:
    nb = kernel.execute(NOTEBOOK, tmp_path)
    kernel.assert_shown_as_a_user_sees_it(nb)

    per_key = Counter(f"user-{i % 50}".encode() for i in range(RECORDS))
    expected = Counter()
    for key, n in per_key.items():
        expected[(murmur2(key) & 0x7FFFFFFF) % 3] += n
    logs = tmp_path / "tmp" / "kafkalog-explore" / "kafka-logs"
    for p in range(3):  # dense offsets from 0
        assert [o for o, _, _, _ in oracle(logs / f"events-{p}")] == list(range(expected[p]))
    whole = ast.literal_eval(kernel.value(kernel.cell_with(nb, "per_partition = ")))
    assert whole == [(p, expected[p], 0, expected[p] - 1) for p in range(3)]
    bounded = ast.literal_eval(kernel.value(kernel.cell_with(nb, "by_offset = ")))
    assert bounded == [(0, 100, 100), (1, 10, 0), (2, expected[2], 0)]
    minute = kernel.stdout(kernel.cell_with(nb, "minute = "))
    assert minute == "tenth minute: 60 records, 2024-05-01 00:09:00 .. 2024-05-01 00:09:59\n"

    plots = [c for c in nb.cells if c.cell_type == "code" and kernel.images(c)]
    assert plots == [kernel.cell_with(nb, "plt.subplots(")]
    logs_on_disk = sorted(logs.glob("events-*/*.log"))
    summary = ast.literal_eval(kernel.value(kernel.cell_with(nb, "summary = {")))
    assert summary == {
        "records": RECORDS,
        "segments": len(logs_on_disk),
        "index entries": sum(p.with_suffix(".index").stat().st_size // 8 for p in logs_on_disk),
    }
    assert summary["segments"] >= 6 and summary["index entries"] > summary["segments"]
