"""notebooks/quickstart.ipynb: valid nbformat 4, and its code cells run in order without Jupyter.

The cells run in a subprocess (the notebook starts its own SparkSession, which a test process
must not do next to the shared one) with the venv's python, a temporary TMPDIR (the notebook
writes under tempfile.gettempdir()) and a temporary working directory. Like IPython, the value
of a cell's last expression is printed.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"

# Runs argv[1]'s code cells in one namespace; prints "== cell N ==" before each.
RUNNER = r"""
import ast, json, sys

cells = [c for c in json.load(open(sys.argv[1]))["cells"] if c["cell_type"] == "code"]
namespace = {"__name__": "__main__"}
for number, cell in enumerate(cells, start=1):
    print(f"== cell {number} ==", flush=True)
    tree = ast.parse("".join(cell["source"]), f"<cell {number}>")
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, f"<cell {number}>", "exec"), namespace)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), f"<cell {number}>", "eval"), namespace)
        if value is not None:
            print(repr(value))
    sys.stdout.flush()
print("== done ==")
"""


def load_notebook() -> dict:
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))


def test_notebook_is_valid_nbformat4():
    nb = load_notebook()
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 4
    assert nb["metadata"]["kernelspec"]["language"] == "python"
    kinds = [c["cell_type"] for c in nb["cells"]]
    assert set(kinds) == {"markdown", "code"} and kinds.count("code") >= 6
    for cell in nb["cells"]:
        assert isinstance(cell["metadata"], dict)
        assert isinstance(cell["source"], list) and all(isinstance(s, str) for s in cell["source"])
        if cell["cell_type"] == "code":
            # committed without outputs: nothing stale, nothing machine-specific
            assert cell["outputs"] == [] and cell["execution_count"] is None
    source = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    for needed in ("IngestConfig.from_dict(", "ingest.run(spark, config", "PartitionLog.open("):
        assert needed in source
    assert ".read_records()" in source and '"dump-log"' in source


def clean_code_source(notebook: Path) -> str:
    """The code cells' source, after checking nbformat 4 and that no outputs were committed."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
    return "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


def run_notebook(notebook: Path, tmp: Path, cwd: Path) -> str:
    """Run `notebook`'s code cells in a subprocess (TMPDIR=tmp, Agg plots); its stdout."""
    env = {
        **os.environ,
        "TMPDIR": str(tmp),
        "PYTHONPATH": str(ROOT),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "MPLBACKEND": "Agg",
    }
    env.pop("LOG_DIR", None)
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, str(notebook)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert result.stdout.rstrip().endswith("== done ==")
    return result.stdout


@pytest.mark.spark
def test_notebook_code_cells_run_in_order(tmp_path):
    tmp = tmp_path / "tmp"
    work = tmp_path / "cwd"
    tmp.mkdir()
    work.mkdir()
    out = run_notebook(NOTEBOOK, tmp, work)

    logs = tmp / "kafkalog-quickstart" / "kafka-logs"
    entries = {p.name for p in logs.iterdir()}
    assert {"orders-0", "orders-1", "orders-2"} <= entries
    assert "recovery-point-offset-checkpoint" in entries
    assert all(not (logs / e).is_dir() or e.startswith("orders-") for e in entries)
    assert list(work.iterdir()) == []  # nothing written in the working directory

    assert "run quickstart-1: committed, 200 records" in out
    assert "('committed', 200)" in out
    assert "'no-op'" in out  # the re-run of the same run id
    sizes = ast.literal_eval(next(line for line in out.splitlines() if line.startswith("{0: ")))
    assert sum(sizes.values()) == 200 and len(sizes) == 3
    assert "| offset: 0 CreateTime:" in out and "headerKeys: [channel]" in out
    assert "compresscodec: lz4" in out
