"""notebooks/compaction-audit.ipynb: valid, committed without outputs, and its cells run in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.jobs.test_notebook import clean_code_source, run_notebook

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOK = ROOT / "notebooks" / "compaction-audit.ipynb"


def test_notebook_is_committed_clean() -> None:
    source = clean_code_source(NOTEBOOK)
    assert "compaction_audit.run(" in source and "audit_figures(" in source


@pytest.mark.spark
def test_notebook_cells_run_and_show_the_charts(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = run_notebook(NOTEBOOK, tmp, tmp_path)
    # 300 records over keys i % 40, a tombstone when i % 17 == 0
    assert "300 records, 40 distinct keys, 260 superseded, 18 tombstones" in out
    assert "customers-0: would be cleaned now (dirty ratio 1.00 > 0.5)" in out
    assert "['Dirty ratio', 'Duplicate keys', 'Tombstone age']" in out
    assert out.count("<Figure size") == 3  # each chart cell's value is a matplotlib figure
    page = (tmp / "kafkalog-compaction-audit" / "audit.html").read_text()
    assert page.count("data:image/png;base64,") == 3
