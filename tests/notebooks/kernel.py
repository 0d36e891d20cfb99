"""Run a notebook as a user's Jupyter runs it: nbclient drives an ipykernel kernel of this venv.

The kernel spec points at this interpreter (the venv's) and lives in a temporary JUPYTER_PATH,
never in the user's Jupyter dirs. The kernel starts in a temporary working directory with a
temporary TMPDIR (the notebooks write under tempfile.gettempdir()) and without what the test
runner sets that a user's Jupyter would not have: the repo on PYTHONPATH, the workers' Python,
a matplotlib backend. So a notebook passes only if the venv's install alone makes kafkalog
importable, and it is judged by what Jupyter shows: its outputs.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import re
import sys
import warnings
from pathlib import Path
from unittest import mock

import nbformat
from nbclient import NotebookClient
from nbformat import NotebookNode

__all__ = [
    "NOTEBOOKS",
    "assert_shown_as_a_user_sees_it",
    "cell_with",
    "committed_source",
    "execute",
    "execute_cells",
    "images",
    "kernel_stderr",
    "numbers_in_prose",
    "stdout",
    "value",
]

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
KERNEL = "kafkalog-venv"
KERNEL_STDERR = "kernel.stderr"
CELL_TIMEOUT = 600  # seconds; a cell takes a few (the first Spark job, on a busy machine, more)
# Set by tests/run.sh or a developer's shell, not by a user's Jupyter.
NOT_INHERITED = (
    "PYTHONPATH",
    "PYSPARK_PYTHON",
    "PYSPARK_DRIVER_PYTHON",
    "MPLBACKEND",
    "LOG_DIR",
    "SPARK_CONF_DIR",
    "LOG4J_CONFIGURATION_FILE",
    "KAFKALOG_SPARK_LOG_LEVEL",
    "KAFKALOG_SPARK_DEFAULTS",
)


def execute(name: str, tmp: Path) -> NotebookNode:
    """notebooks/<name> executed top to bottom in a fresh kernel; a cell's error fails it. What
    the kernel process itself writes to stderr (Spark's JVM, up to its shutdown, which a
    user's Jupyter shows in its terminal) goes to `tmp/kernel.stderr` (`kernel_stderr`)."""
    return _run(nbformat.read(NOTEBOOKS / name, as_version=4), tmp)


def execute_cells(sources: list[str], tmp: Path) -> NotebookNode:
    """A notebook of these code cells, executed and shut down as `execute` does."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata.kernelspec = {"name": KERNEL, "display_name": KERNEL, "language": "python"}
    return _run(nb, tmp)


def _run(nb: NotebookNode, tmp: Path) -> NotebookNode:
    jupyter = tmp / "jupyter"
    spec = jupyter / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "kafkalog .venv", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    for folder in ("cwd", "tmp"):
        (tmp / folder).mkdir()
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env.update(
        TMPDIR=str(tmp / "tmp"),
        JUPYTER_PATH=str(jupyter),
        JUPYTER_RUNTIME_DIR=str(jupyter / "runtime"),
        IPYTHONDIR=str(tmp / "ipython"),
    )
    client = NotebookClient(
        nb,
        kernel_name=KERNEL,
        timeout=CELL_TIMEOUT,
        startup_timeout=300,
        resources={"metadata": {"path": str(tmp / "cwd")}},
    )
    with (
        mock.patch.dict(os.environ, {"JUPYTER_PATH": str(jupyter)}),  # where the spec is found
        (tmp / KERNEL_STDERR).open("wb") as stderr,
    ):
        client.execute(env=env, stderr=stderr)
    return nb


def kernel_stderr(tmp: Path) -> list[str]:
    """The lines the kernel of `execute(..., tmp)` wrote to its stderr that a user would take
    for trouble: warnings, errors, stack traces; not ipykernel's own notices (`[IPKernelApp]`,
    as every kernel's Jupyter starts it)."""
    text = (tmp / KERNEL_STDERR).read_text(errors="replace")
    trouble = re.compile(r"WARN|ERROR|Exception|Traceback|^\s+at |Failed to delete")
    return [
        line
        for line in text.splitlines()
        if trouble.search(line) and not line.startswith("[IPKernelApp]")
    ]


def committed_source(name: str) -> str:
    """The code cells' source, after checking the file is valid and committed without outputs."""
    with warnings.catch_warnings():  # a cell without an id is an error in coming nbformats
        warnings.simplefilter("error")
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        nbformat.validate(nb)
    assert nb.metadata.kernelspec.language == "python"
    cells = [c for c in nb.cells if c.cell_type == "code"]
    for cell in cells:  # nothing stale, nothing machine-specific
        assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    return "\n".join(c.source for c in cells)


def assert_shown_as_a_user_sees_it(nb: NotebookNode, tmp: Path) -> None:
    """No red stderr block, no warning or stack trace from the kernel up to its shutdown (run
    by `execute(..., tmp)`), a first cell of imports only, every figure drawn once."""
    trouble = kernel_stderr(tmp)
    assert trouble == [], "\n".join(trouble)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    stderr = [o.text for c in cells for o in c.outputs if o.get("name") == "stderr"]
    assert stderr == [], stderr
    first = ast.parse(cells[0].source).body
    assert first and all(isinstance(s, ast.Import | ast.ImportFrom) for s in first)
    for cell in cells:
        assert len(images(cell)) <= 1, f"a figure drawn twice by {cell.source[:60]!r}"


def cell_with(nb: NotebookNode, snippet: str) -> NotebookNode:
    """The one code cell whose source contains `snippet`."""
    found = [c for c in nb.cells if c.cell_type == "code" and snippet in c.source]
    assert len(found) == 1, (snippet, len(found))
    return found[0]


def value(cell: NotebookNode) -> str:
    """The cell's value as Jupyter shows it in text."""
    results = [o for o in cell.outputs if o.output_type == "execute_result"]
    assert len(results) == 1, cell.source[:60]
    return results[0].data["text/plain"]


_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def numbers_in_prose(nb: NotebookNode, noun: str) -> list[int]:
    """Every count the notebook's text gives for `noun` ("three segments", "2 charts"), in
    order: what a test holds against the cells' outputs, so the prose cannot drift from them."""
    words = "|".join(_NUMBER_WORDS)
    pattern = re.compile(rf"\b(\d+|{words}) {re.escape(noun)}\b", re.IGNORECASE)
    found = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for number in pattern.findall(cell.source):
                low = number.lower()
                found.append(int(low) if low.isdigit() else _NUMBER_WORDS.index(low))
    return found


def stdout(cell: NotebookNode) -> str:
    return "".join(o.text for o in cell.outputs if o.get("name") == "stdout")


def images(cell: NotebookNode) -> list[bytes]:
    """The PNG images the cell shows (as its value or by display)."""
    shown = [o for o in cell.outputs if "image/png" in o.get("data", {})]
    pngs = [base64.b64decode(o.data["image/png"]) for o in shown]
    assert all(p.startswith(b"\x89PNG\r\n\x1a\n") for p in pngs)
    return pngs
