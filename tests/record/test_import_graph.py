"""The core's module-level imports form no cycle, and every record module imports on its own.

Why: a cycle (once decoder.py <-> legacy.py) makes the import order decide whether a name
exists yet, so a Spark worker importing one module first can fail where the tests pass.
Function-level and TYPE_CHECKING imports are left out: they run later, or never.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import kafkalog_core

ROOT = Path(kafkalog_core.__file__).parent
PACKAGE = "kafkalog_core"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported (module body, try/if blocks)."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                stack.extend(handler.body)
    return found


def _imported_with(target: str, importer: str) -> set[str]:
    """`target` and the packages above it that importing it runs first, except the importer's
    own ancestors (Python has started those before the importer's first line)."""
    parts = target.split(".")
    chain = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    ancestors = {importer.rsplit(".", k)[0] for k in range(1, importer.count(".") + 1)}
    return {m for m in chain if m in MODULES and m != importer and m not in ancestors}


def import_graph() -> dict[str, set[str]]:
    """module -> the kafkalog_core modules it imports at import time."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges: set[str] = set()
        for node in _top_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif node.level == 0 and node.module:
                # `from pkg import sub` imports the submodule when there is one
                targets = [
                    f"{node.module}.{a.name}"
                    if f"{node.module}.{a.name}" in MODULES
                    else node.module
                    for a in node.names
                ]
            else:
                targets = []
            for target in targets:
                edges.update(_imported_with(target, name))
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_find_cycle_sees_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_the_decoder_package() -> None:
    graph = import_graph()
    assert "kafkalog_core.record.legacy" in graph["kafkalog_core.record.decoder.decode"]
    assert "kafkalog_core.record.decoder.walk" in graph["kafkalog_core.record.decoder.decode"]


def test_core_imports_have_no_cycle() -> None:
    assert find_cycle(import_graph()) is None


RECORD_MODULES = sorted(m for m in MODULES if m.startswith("kafkalog_core.record"))


@pytest.mark.parametrize("module", RECORD_MODULES)
def test_record_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        cwd=ROOT.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
