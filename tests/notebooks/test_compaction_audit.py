"""notebooks/compaction-audit.ipynb in a Jupyter kernel: the report and its charts, once each."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.notebooks import kernel

NOTEBOOK = "compaction-audit.ipynb"
CHARTS = ["Dirty ratio", "Duplicate keys", "Tombstone age"]


def test_runs_the_audit_and_shows_its_figures() -> None:
    source = kernel.committed_source(NOTEBOOK)
    assert "compaction_audit.run(" in source and "audit_figures(" in source
    assert "compact.run(" in source


@pytest.mark.spark
def test_audits_the_demo_log_and_draws_each_chart_once(tmp_path: Path) -> None:
    nb = kernel.execute(NOTEBOOK, tmp_path)
    kernel.assert_shown_as_a_user_sees_it(nb, tmp_path)

    # the text's counts are the outputs' counts
    listing = ast.literal_eval(kernel.value(kernel.cell_with(nb, "sorted(p.name for p in")))
    assert kernel.numbers_in_prose(nb, "segments") == [
        sum(name.endswith(".log") for name in listing)
    ]
    assert kernel.numbers_in_prose(nb, "charts") == [len(CHARTS)]
    run = kernel.stdout(kernel.cell_with(nb, "result = compaction_audit.run("))
    # 300 records over keys i % 40, a tombstone when i % 17 == 0
    assert "300 records, 40 distinct keys, 260 superseded, 18 tombstones" in run
    assert "customers-0: would be cleaned now (dirty ratio 1.00 > 0.5)" in run
    made = kernel.cell_with(nb, "figures = audit_figures(")
    assert kernel.value(made) == repr(CHARTS) and kernel.images(made) == []  # made, not drawn
    for chart in CHARTS:
        assert len(kernel.images(kernel.cell_with(nb, f'figures["{chart}"]'))) == 1
    # then compacted (the demo dir: apply) and audited again, with compact's before and after
    assert "cleaned 1 partitions" in kernel.stdout(kernel.cell_with(nb, "compact.run("))
    after = kernel.cell_with(nb, '["Before and after compaction"]')
    assert len(kernel.images(after)) == 1
    page = (tmp_path / "tmp" / "kafkalog-compaction-audit" / "audit.html").read_text()
    assert page.count('<figure class="chart') == 4 and "Compact run compact-" in page
