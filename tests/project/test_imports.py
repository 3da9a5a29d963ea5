"""The import graph of ``pytest_qualify`` stays a graph with floors: no circle (a lazy import in a
function or one under ``TYPE_CHECKING`` counts too: it is a circle in the design even when Python
tolerates it), neither between files nor between rooms (the folders and the one-file rooms), and
no import that runs up a floor. The floors are data (``FLOORS``, bottom up, as
docs/architecture.md draws them); a room on no floor fails the test, so a new room is placed on
purpose. Inside the evidence room the writers (which render the gate's decision) stay above the
rest of the room."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest_qualify

PACKAGE = Path(pytest_qualify.__file__).parent

# Bottom up. A room may import its own floor and the floors below it, never one above.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", ("__init__", "datafile", "redaction", "repetition", "properties", "request_key", "stats",
                "bundle_format", "engines")),
    ("promotion", ("promotion",)),
    ("configuration", ("profiles", "settings")),
    ("pure rooms", ("graders", "tasks", "client", "gate")),
    ("engines", ("reference", "server", "run")),
    ("evidence writers", ("evidence",)),
    ("self-test and comparisons", ("selftest", "compare", "fleet")),
    ("pytest side and entry points", ("checks", "hooks", "plugin", "init_profile", "__main__")),
)
FLOOR_OF = {room: i for i, (_, rooms) in enumerate(FLOORS) for room in rooms}
PYTEST_SIDE = ("pytest_qualify.plugin", "pytest_qualify.hooks", "pytest_qualify.checks")
# The evidence writers: they render a decision; nothing below them in their room may import one.
WRITERS = tuple(f"pytest_qualify.evidence.{m}" for m in (
    "summary", "report", "junit", "bundle", "job_summary", "terminal", "provenance", "plot", "end_of_run", "session",
    "html",
))


def module_name(path: Path) -> str:
    parts = ("pytest_qualify", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
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


def room_of(module: str) -> str:
    """``pytest_qualify.gate.decide`` -> ``gate``; the package's own ``__init__`` is ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for name, deps in graph.items():
        rooms.setdefault(room_of(name), set()).update(room_of(d) for d in deps)
    return {room: deps - {room} for room, deps in rooms.items()}


def arrows_up(rooms: dict[str, set[str]], floor_of: dict[str, int]) -> list[str]:
    return [f"{room} -> {dep}" for room, deps in sorted(rooms.items()) for dep in sorted(deps)
            if floor_of[dep] > floor_of[room]]


def test_the_graph_is_read_from_the_files():
    graph = import_graph()
    assert "pytest_qualify.gate.decide" in graph["pytest_qualify.hooks.results"]
    assert "pytest_qualify.evidence.junit" in graph["pytest_qualify.evidence.bundle"]  # from ... import junit


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    assert cycles(import_graph()) == []


def test_every_room_is_on_a_floor():
    rooms = room_graph(import_graph())
    assert sorted(set(rooms) - set(FLOOR_OF)) == []
    assert len(FLOOR_OF) == sum(len(r) for _, r in FLOORS)  # no room on two floors


def test_the_floor_check_finds_an_arrow_up():
    floors = {"low": 0, "high": 1}
    assert arrows_up({"low": {"high"}, "high": set()}, floors) == ["low -> high"]
    assert arrows_up({"low": set(), "high": {"low"}}, floors) == []


def test_no_room_import_circle():
    assert cycles(room_graph(import_graph())) == []


def test_no_room_import_runs_up_a_floor():
    assert arrows_up(room_graph(import_graph()), FLOOR_OF) == []


def test_the_gate_imports_nothing_from_the_writers():
    graph = import_graph()
    assert [f"{n} -> {d}" for n, deps in sorted(graph.items()) if room_of(n) == "gate"
            for d in sorted(deps) if room_of(d) in ("evidence", "selftest", "hooks", "plugin")] == []


def test_no_import_runs_up_a_floor_within_a_room():
    up = []
    for name, deps in import_graph().items():
        if name.startswith(PYTEST_SIDE):
            continue
        for dep in sorted(deps):
            if dep.startswith(PYTEST_SIDE) or (
                    dep.startswith(WRITERS) and room_of(name) == "evidence" and not name.startswith(WRITERS)):
                up.append(f"{name} -> {dep}")
    assert up == []
