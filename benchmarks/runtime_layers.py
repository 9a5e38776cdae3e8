"""The shape of ``profdsl/_runtime/``: import circles, imports that run back up a floor, and the
lines of ``profdsl/`` (docs/architecture.md, "Measures"); and the import circles of the whole
package (:func:`package_imports`).

    python benchmarks/runtime_layers.py

Every import counts: at module level, under ``if TYPE_CHECKING:`` and inside a function (each is
a dependency a reader follows, and a circle closed by a late import is still a circle). A *unit*
is a module at the root of ``_runtime/`` or one of its packages (``slot/``, ``writer/``). The
runtime's floors are :data:`FLOORS`, from the bottom up: a unit imports only units on floors
below its own, and an import of a unit on a higher floor *runs back up*. Circles are counted
between modules (a package's modules included): each group of modules that reach one another
through their imports is one circle. ``tests/test_runtime_layers.py`` keeps the circles at 0,
inside ``_runtime/`` and in the whole package (its modules reached by dotted name: ``from
profdsl.metrics import _tree`` imports ``profdsl.metrics._tree``, and a package's ``__init__`` is
the package's name).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = "profdsl._runtime"

#: The runtime's floors, from the bottom up (the layers of docs/architecture.md's runtime
#: section): the writer thread, the capture slot, the inputs a role is resolved from, the DSL's
#: entries and what a profiled step hands them, the registry the DSL reads, the process state
#: holding it, a role's parts, its lifecycle table, and the profiler on top.
FLOORS = (
    "writer",
    "slot",
    "request_files",
    "inbox",
    "plan",
    "metrics_log",
    "context",
    "handles",
    "step_report",
    "stage_captures",
    "recorder",
    "step",
    "registry",
    "process",
    "meter",
    "role_capture",
    "demand",
    "step_events",
    "lifecycle",
    "profiler",
)


def imports(root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of ``_runtime/`` (dotted, below ``profdsl._runtime``) and the runtime modules
    it imports, anywhere in its text."""
    graph: dict[str, set[str]] = {}
    base = root / "profdsl" / "_runtime"
    for path in sorted(base.rglob("*.py")):
        module = ".".join(path.relative_to(base).with_suffix("").parts).removesuffix("__init__").rstrip(".")
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(RUNTIME):
                inner = node.module[len(RUNTIME) :].lstrip(".")
                if inner in ("", "slot", "writer"):  # `from profdsl._runtime import context`
                    found.update(f"{inner}.{alias.name}".lstrip(".") for alias in node.names)
                else:
                    found.add(inner)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(RUNTIME + "."):
                        found.add(alias.name[len(RUNTIME) + 1 :])
        graph[module] = {name for name in found if name and name != module}
    return graph


def package_imports(root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of ``profdsl/`` (dotted: ``profdsl.metrics._tree``; a package's
    ``__init__`` by the package's name) and the package's modules it imports, anywhere in its
    text (relative imports resolved)."""
    paths = {
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): path
        for path in sorted((root / "profdsl").rglob("*.py"))
    }
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:  # `from profdsl.metrics import _tree` imports that module
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        graph[name] = {target for target in found if target in paths and target != name}
    return graph


def unit(module: str) -> str:
    """The unit of a runtime module: its package, or itself at the root."""
    return module.split(".")[0]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach one another (strongly connected, two or more), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def arrows(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The imports between units (one arrow per pair)."""
    return {(unit(a), unit(b)) for a, targets in graph.items() for b in targets if unit(a) != unit(b) and a and b}


def back_up(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The arrows from a unit to one on a higher floor (a unit not in :data:`FLOORS` is a fault
    of this script: it says so)."""
    units = {unit(m) for m in graph if m}
    missing = units - set(FLOORS)
    if missing:
        raise SystemExit(f"runtime units without a floor: {sorted(missing)} (add them to FLOORS)")
    floor = {name: i for i, name in enumerate(FLOORS)}
    return sorted((a, b) for a, b in arrows(graph) if floor[a] < floor[b])


def lines(root: Path = ROOT) -> int:
    """The lines of ``profdsl/`` (``find profdsl -name '*.py' | xargs wc -l``)."""
    return sum(len(path.read_bytes().splitlines()) for path in (root / "profdsl").rglob("*.py"))


def main() -> int:
    graph = imports()
    found = circles(graph)
    up = back_up(graph)
    print(f"runtime units: {len({unit(m) for m in graph if m})}, arrows between them: {len(arrows(graph))}")
    print(f"import circles inside _runtime/: {len(found)}")
    for group in found:
        print(f"  {len(group)} modules: {', '.join(group)}")
    print(f"imports in _runtime/ that run back up: {len(up)}")
    for a, b in up:
        print(f"  {a} -> {b}")
    whole = [group for group in circles(package_imports()) if not all(m.startswith(RUNTIME + ".") for m in group)]
    print(f"import circles in profdsl/ outside _runtime/: {len(whole)}")
    for group in whole:
        print(f"  {len(group)} modules: {', '.join(group)}")
    print(f"lines of profdsl/: {lines()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
