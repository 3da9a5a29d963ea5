"""The import graph of ``pytest_qualify`` stays a graph with floors: no circle (a lazy import in a
function or one under ``TYPE_CHECKING`` counts too: it is a circle in the design even when Python
tolerates it), and no import that runs up a floor. The floors, bottom up: the pure rooms (profiles,
graders, the gate and what it reads: ``evidence/slo``, ``waivers``, ``baseline``, ``stats``,
``schema``, ``manifest``, ``metrics``); the evidence writers, which render the gate's decision;
the pytest side (``plugin.py``, ``hooks/``, ``checks.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_qualify

PACKAGE = Path(pytest_qualify.__file__).parent
PYTEST_SIDE = ("pytest_qualify.plugin", "pytest_qualify.hooks", "pytest_qualify.checks")
# The command line (``python -m pytest_qualify init`` / ``report``): a top floor like the pytest side.
COMMAND_LINE = ("pytest_qualify.__main__",)
# The evidence writers: they render a decision; nothing below them may import one.
WRITERS = tuple(f"pytest_qualify.evidence.{m}" for m in (
    "summary", "report", "junit", "bundle", "job_summary", "terminal", "provenance", "plot", "verdict", "session",
    "html")) + ("pytest_qualify.selftest",)


def module_name(path: Path) -> str:
    parts = ("pytest_qualify", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports anywhere in its file."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                deps |= {f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names}
        graph[name] = {d for d in deps if d in paths and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read_from_the_files():
    graph = import_graph()
    assert "pytest_qualify.gate.decide" in graph["pytest_qualify.hooks.results"]
    assert "pytest_qualify.evidence.junit" in graph["pytest_qualify.evidence.bundle"]  # from ... import junit


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    assert cycles(import_graph()) == []


def test_no_import_runs_up_a_floor():
    up = []
    for name, deps in import_graph().items():
        if name.startswith(PYTEST_SIDE + COMMAND_LINE):
            continue
        for dep in sorted(deps):
            if dep.startswith(PYTEST_SIDE) or (dep.startswith(WRITERS) and not name.startswith(WRITERS)):
                up.append(f"{name} -> {dep}")
    assert up == []
