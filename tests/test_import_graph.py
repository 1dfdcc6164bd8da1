"""rtp_ref's modules import each other without a cycle, counting every import: top-level, inside a function
(a lazy import hides a cycle, it does not remove it) and under TYPE_CHECKING.

On the code before the fix this finds exactly the two cycles a review named: kv/flags <-> platform and
kernels/contract <-> kernels/protocol.

Its packages stand on floors (``FLOORS``): every import between two packages goes down, so no two packages import
each other, even through modules that do not form a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

PACKAGE = Path(__file__).resolve().parents[1] / "rtp_ref"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the rtp_ref modules it imports anywhere in its source."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
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


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_scan_finds_a_cycle_and_sees_lazy_imports() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = import_graph()
    assert "rtp_ref.kv.flags" in graph["rtp_ref.platform"]
    assert len(graph) > 50


class Floor(NamedTuple):
    """Packages on one floor, and the floors right below it."""

    packages: frozenset[str]
    stands_on: tuple[str, ...]


def _floor(*packages: str, on: tuple[str, ...] = ()) -> Floor:
    return Floor(frozenset(packages), on)


#: rtp_ref's floors, lowest first in each column. A package is a top-level module (``platform``:
#: rtp_ref/platform.py) or subpackage (``kv``) of rtp_ref; ``__init__`` is rtp_ref/__init__.py. A package may import
#: packages on its own floor or on a floor below it (one it stands on, or one that floor stands on, and so on): never
#: one above it or beside it.
#: An op's module (``ops``) holds its record and its cases, so the cases and their grading (``cases``) and the
#: platform's write contract they build under (``contract``) stand below it, and the kernels above it.
#: Two columns share the ground floor: the KV-cache kit (``fp8`` up to ``certify``) and the server plumbing
#: (``args``, ``plugins``), which knows nothing of caches. ``suites`` runs the plumbing's behaviour suites in pytest
#: with rtp-ref's pytest plugin active (its conftest imports it), so it stands on ``pytest_plugin`` as well, and so on
#: what the plugin imports. ``pytest_plugin`` runs certify's cases in pytest, as ``bench`` times them and ``memcheck``
#: runs them under compute-sanitizer: it imports nothing above ``certify`` and ``commands`` imports it (which GPUs a
#: certify run may use), so it stands beside those two, not at the top.
FLOORS: dict[str, Floor] = {
    "ground": _floor("__init__", "errors", "_lazy", "grades"),
    "fp8": _floor("fp8", on=("ground",)),
    "fp4": _floor("fp4", on=("fp8",)),
    "kv": _floor("kv", on=("fp4",)),
    "platform": _floor("platform", on=("kv",)),
    # a platform's write contract, then the conformance cases and their grading, which every op's module assembles
    "contract": _floor("contract", on=("platform",)),
    "cases": _floor("cases", on=("contract",)),
    "ops": _floor("ops", on=("cases",)),
    "kernels": _floor("kernels", on=("ops",)),
    "certify": _floor("certify", on=("kernels",)),
    "measure": _floor("bench", "memcheck", on=("certify",)),
    "pytest_plugin": _floor("pytest_plugin", on=("certify",)),
    "args": _floor("args", on=("ground",)),
    "plugins": _floor("plugins", on=("args",)),
    "suites": _floor("suites", on=("plugins", "pytest_plugin")),
    "commands": _floor("commands", on=("measure", "pytest_plugin", "suites")),
    "cli": _floor("cli", on=("commands",)),
}


def package_of(module: str) -> str:
    """``rtp_ref.kv.cache`` -> ``kv``; ``rtp_ref.platform`` -> ``platform``; ``rtp_ref`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Package -> the other packages its modules import (the module graph with each package's modules merged)."""
    packages: dict[str, set[str]] = {package_of(m): set() for m in graph}
    for module, targets in graph.items():
        packages[package_of(module)] |= {package_of(t) for t in targets} - {package_of(module)}
    return packages


def floor_of(floors: dict[str, Floor]) -> dict[str, str]:
    """Package -> the name of its floor."""
    return {package: name for name, floor in floors.items() for package in floor.packages}


def at_or_below(floors: dict[str, Floor], name: str) -> set[str]:
    """The floor ``name`` and every floor under it."""
    found = {name}
    for lower in floors[name].stands_on:
        found |= at_or_below(floors, lower)
    return found


def upward_edges(graph: dict[str, set[str]], floors: dict[str, Floor]) -> list[str]:
    """Each import between packages that does not go down, as ``module -> module (floor X; floor Y is not below
    it)``, sorted. Packages on no floor are skipped here: ``floor_problems`` names them."""
    floor = floor_of(floors)
    found = []
    for module, targets in graph.items():
        source = floor.get(package_of(module))
        for target in targets:
            to = floor.get(package_of(target))
            if source and to and to not in at_or_below(floors, source):
                found.append(f"{module} -> {target} (floor {source}; floor {to} is not below it)")
    return sorted(found)


def floor_problems(packages: set[str], floors: dict[str, Floor]) -> list[str]:
    """What is wrong with ``floors`` as the floors of ``packages``: a package on two floors or on none, a floor's
    package that does not exist, a floor standing on an unknown floor or (through others) on itself."""
    placed = [package for floor in floors.values() for package in floor.packages]
    problems = [f"{p} is on two floors" for p in sorted({p for p in placed if placed.count(p) > 1})]
    problems += [f"{p} is on no floor" for p in sorted(packages - set(placed))]
    problems += [f"{p} has a floor but no module" for p in sorted(set(placed) - packages)]
    problems += [f"floor {name} stands on unknown floor {lower}" for name, floor in floors.items()
                 for lower in floor.stands_on if lower not in floors]
    known = {name: set(floor.stands_on) & set(floors) for name, floor in floors.items()}
    problems += [f"floors {', '.join(c)} stand on each other" for c in cycles(known)]
    return problems


def test_the_floors_place_every_package_once() -> None:
    assert floor_problems(set(package_graph(import_graph())), FLOORS) == []


def test_imports_only_go_down_the_floors() -> None:
    edges = upward_edges(import_graph(), FLOORS)
    assert not edges, "imports that do not go down the floors:\n" + "\n".join(edges)


def test_no_package_imports_itself_through_another() -> None:
    found = cycles(package_graph(import_graph()))
    assert not found, "packages that import each other, directly or round a cycle: " + "; ".join(
        ", ".join(c) for c in found)


def test_the_floor_check_catches_an_upward_or_sideways_edge() -> None:
    graph = {
        "rtp_ref.kv.cache": {"rtp_ref.platform", "rtp_ref.kv.flags", "rtp_ref.errors"},  # up, own package, down
        "rtp_ref.kv.flags": set(),
        "rtp_ref.platform": {"rtp_ref.kv.flags"},  # down
        "rtp_ref.bench.run": {"rtp_ref.memcheck.plan", "rtp_ref.kv.flags"},  # its own floor, far down
        "rtp_ref.memcheck.plan": set(),
        "rtp_ref.args.parser": {"rtp_ref.kv.flags"},  # sideways: the plumbing's column has no KV cache
        "rtp_ref.suites.conftest": {"rtp_ref.pytest_plugin", "rtp_ref.certify.tiers", "rtp_ref.bench.run"},
        "rtp_ref.errors": set(),
    }
    assert upward_edges(graph, FLOORS) == [
        "rtp_ref.args.parser -> rtp_ref.kv.flags (floor args; floor kv is not below it)",
        "rtp_ref.kv.cache -> rtp_ref.platform (floor kv; floor platform is not below it)",
        "rtp_ref.suites.conftest -> rtp_ref.bench.run (floor suites; floor measure is not below it)",
    ]


def test_the_floor_data_check_catches_a_misplaced_package() -> None:
    floors = {
        "ground": _floor("errors", "kv"),
        "kv": _floor("kv", "gone", on=("ground", "attic")),
        "a": _floor("x", on=("b",)),
        "b": _floor("y", on=("a",)),
    }
    assert floor_problems({"errors", "kv", "x", "y", "new"}, floors) == [
        "kv is on two floors",
        "new is on no floor",
        "gone has a floor but no module",
        "floor kv stands on unknown floor attic",
        "floors a, b stand on each other",
    ]


def test_a_package_cycle_needs_no_module_cycle() -> None:
    graph = {"rtp_ref.kv.cache": {"rtp_ref.platform"}, "rtp_ref.platform": {"rtp_ref.kv.flags"},
             "rtp_ref.kv.flags": set()}
    assert cycles(graph) == []
    assert cycles(package_graph(graph)) == [["kv", "platform"]]
