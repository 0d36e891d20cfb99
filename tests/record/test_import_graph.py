"""The code's imports form no cycle, the ingest stages import one way, and every record module
imports on its own.

Why: a cycle (once decoder.py <-> legacy.py) makes the import order decide whether a name
exists yet, so a Spark worker importing one module first can fail where the tests pass. A
type-only cycle is a cycle of ideas all the same, so TYPE_CHECKING imports count here;
function-level imports run later, or never, and are left out of the cycle check. The stage
order (`jobs/ingestion/__init__.py`) counts every import, function-level ones included: a later
stage may import an earlier one, never the reverse.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import kafkalog_core

REPO = Path(kafkalog_core.__file__).parent.parent
PACKAGES = ("kafkalog_core", "jobs", "pyspark_kafkalog")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported or type-checked (module body, if/try
    blocks, TYPE_CHECKING blocks included)."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                stack.extend(handler.body)
    return found


def _all_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def _imported_with(target: str, importer: str) -> set[str]:
    """`target` and the packages above it that importing it runs first, except the importer's
    own ancestors (Python has started those before the importer's first line)."""
    parts = target.split(".")
    chain = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    ancestors = {importer.rsplit(".", k)[0] for k in range(1, importer.count(".") + 1)}
    return {m for m in chain if m in MODULES and m != importer and m not in ancestors}


def _targets(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level == 0 and node.module:
        # `from pkg import sub` imports the submodule when there is one
        return [
            f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
            for a in node.names
        ]
    return []


def import_graph(every_import: bool = False) -> dict[str, set[str]]:
    """module -> the project modules it imports (at import time, or anywhere)."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = _all_imports(tree) if every_import else _top_level_imports(tree)
        edges: set[str] = set()
        for node in nodes:
            for target in _targets(node):
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


def test_the_graph_sees_packages_and_type_only_imports() -> None:
    graph = import_graph()
    assert "kafkalog_core.record.legacy" in graph["kafkalog_core.record.decoder.decode"]
    assert "kafkalog_core.record.decoder.walk" in graph["kafkalog_core.record.decoder.decode"]
    assert "jobs.ingestion.config.ingest_config" in graph["jobs.ingestion.mapping.rules"]
    code = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\ndef f():\n    import b\n"
    tree = ast.parse(code)
    assert sorted(_targets(n) for n in _top_level_imports(tree)) == [["a"], ["typing"]]
    assert ["b"] in [_targets(n) for n in _all_imports(tree)]


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_have_no_cycle(package: str) -> None:
    graph = import_graph()
    assert find_cycle({m: e for m, e in graph.items() if m.startswith(package)}) is None


# Each package may import only the packages listed before it (and the modules outside these
# lists: `kafkalog_core`'s top modules such as errors and config).
INGEST_STAGES = ("run", "config", "mapping", "source", "ranges", "staging", "tasks", "relayout")
INGEST_STAGES += ("commit",)
CORE_LAYERS = ("record", "log", "root", "maintenance", "tools")


def _layer_violations(prefix: str, layers: tuple[str, ...]) -> list[str]:
    rank = {f"{prefix}.{name}": i for i, name in enumerate(layers)}

    def layer(module: str) -> int | None:
        for pkg, i in rank.items():
            if module == pkg or module.startswith(pkg + "."):
                return i
        return None

    bad = []
    for module, edges in import_graph(every_import=True).items():
        mine = layer(module)
        if mine is None:
            continue
        for target in edges:
            theirs = layer(target)
            if theirs is not None and theirs > mine:
                bad.append(f"{module} -> {target}")
    return sorted(bad)


def test_layer_check_sees_a_backward_import() -> None:
    assert _layer_violations("jobs.ingestion", tuple(reversed(INGEST_STAGES)))


def test_ingest_stages_import_one_way() -> None:
    assert _layer_violations("jobs.ingestion", INGEST_STAGES) == []


def test_core_layers_import_one_way() -> None:
    assert _layer_violations("kafkalog_core", CORE_LAYERS) == []


RECORD_MODULES = sorted(m for m in MODULES if m.startswith("kafkalog_core.record"))


@pytest.mark.parametrize("module", RECORD_MODULES)
def test_record_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
