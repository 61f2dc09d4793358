"""The import graph of `incsched`: no circles, and back ends that never call up.

Every ``import`` statement counts, module level or inside a function (a circle hidden by a
function-level import is still a circle for the reader). Importing ``a.b.c`` also runs the
``__init__`` of ``a`` and ``a.b``, so those packages are edges too, except a module's own
enclosing packages (already being imported when it runs). Imports under ``if TYPE_CHECKING:`` name
a type for annotations only and never run, so they are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import layout

PACKAGES = ("incsched",)

#: What a module under ``solvers/`` may import from ``incsched``: problem and answer types, plain data.
SOLVERS_MAY_IMPORT = ("incsched.problems", "incsched.result", "incsched.errors", "incsched.graph", "incsched.graph.dag")

def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (``solvers/`` and ``data/`` included)."""
    return layout.modules()


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree``, at any depth, except the bodies of ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Modules of the two packages that ``name`` names in an import statement, resolved."""
    package = name if _is_package(name, modules) else name.rpartition(".")[0]
    found: set[str] = set()

    def resolve(target: str) -> None:
        # The deepest module the dotted name reaches (``from pkg import name`` names a module or an attribute).
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target:
            found.add(target)

    for node in _runtime_nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                resolve(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            if stem.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                resolve(f"{stem}.{alias.name}")
    return found


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(explicit imports, imports with the packages they run) per module."""
    modules = _modules()
    explicit = {name: _imports(name, path, modules) for name, path in modules.items()}
    executed: dict[str, set[str]] = {}
    for name, targets in explicit.items():
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}
        edges = set()
        for t in targets:
            parts = t.split(".")
            edges |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} - own
        executed[name] = edges
    return explicit, executed


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (a closed path of modules) per strongly connected component with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    counter = 0

    def visit(root: str) -> None:
        # Iterative Tarjan: the graph is a few hundred modules, but recursion depth is not the point to test.
        nonlocal counter
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    components.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for comp in components:
        if len(comp) < 2:
            continue
        out.append(_cycle_in(graph, comp))
    return out


def _cycle_in(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """A shortest closed path through the smallest name of a strongly connected component."""
    start = min(comp)
    parent = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return path[::-1] + [start]
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in its component")


@pytest.mark.slow
def test_every_module_is_parsed():
    modules = _modules()
    assert "incsched.problems" in modules and "incsched.solvers.cpsat.placement" in modules
    explicit, _ = import_graph()
    assert "incsched.problems.placement" in explicit["incsched.solvers.cpsat.placement"] or "incsched.problems" in explicit["incsched.solvers.cpsat.placement"]


def test_no_import_circles():
    _, executed = import_graph()
    found = circles(executed)
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


@pytest.mark.slow
def test_solvers_import_only_problem_and_answer_types_from_incsched():
    explicit, _ = import_graph()
    bad = {
        (name, target)
        for name, targets in explicit.items() if name.startswith("incsched.solvers.") or name == "incsched.solvers"
        for target in targets
        if not target.startswith("incsched.solvers") and not any(target == ok or target.startswith(ok + ".") for ok in SOLVERS_MAY_IMPORT)
    }
    assert not bad, "solvers importing upward: " + ", ".join(f"{a} -> {b}" for a, b in sorted(bad))


def test_circles_finds_a_planted_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert circles(graph) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []
