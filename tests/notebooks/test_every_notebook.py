"""Every notebook under notebooks/ is committed clean and has a test that executes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.notebooks.kernel import NOTEBOOKS, committed_source

HERE = Path(__file__).parent
NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


def test_the_notebooks_are_found() -> None:
    assert {"quickstart.ipynb", "explore.ipynb", "compaction-audit.ipynb"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_committed_clean_and_executed_by_its_test(name: str) -> None:
    source = committed_source(name)
    assert "sys.path" not in source and "PYTHONPATH" not in source  # the venv's install does it
    assert "setLogLevel" not in source  # the session is quiet by itself
    module = HERE / f"test_{Path(name).stem.replace('-', '_')}.py"
    assert module.is_file(), f"{name} needs {module.name}, which executes it"
    text = module.read_text()
    assert f'NOTEBOOK = "{name}"' in text and "execute(NOTEBOOK" in text
