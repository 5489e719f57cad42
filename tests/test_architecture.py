"""The layout's contract: core below everything, every paper's theory and the simulator (sim) as peers, the rooms
on floors that import only downwards, no cycles.

The import graph is read from the source with ``ast`` (every ``import`` and ``from ... import``, and every
``import_module("...")`` or ``__import__("...")`` of a literal name, at any depth in a module, resolved to bnsym
modules), so an import hidden inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bnsym"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _resolve(target: str) -> str | None:
    """The bnsym module that ``target`` (a module, or a name inside a module) refers to."""
    while target:
        if target in MODULES:
            return target
        target = target.rpartition(".")[0]
    return None


def _dynamic_import(node: ast.AST) -> str | None:
    """The literal module name of an ``import_module("...")`` or ``__import__("...")`` call, else None."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    function = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
    name = node.args[0]
    if function in ("import_module", "__import__") and isinstance(name, ast.Constant) and isinstance(name.value, str):
        return name.value
    return None


def imports_of(name: str) -> set[str]:
    """The bnsym modules imported by module ``name``."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if _dynamic_import(node):
            targets = [_dynamic_import(node)]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            stem = f"{base}.{node.module}" if node.level and node.module else base if node.level else node.module
            targets = [f"{stem}.{alias.name}" for alias in node.names] + [stem]
        else:
            continue
        found |= {module for module in map(_resolve, targets) if module and module != name}
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


# every paper's theory
THEORY = ("meanfield", "dilution", "products", "rank", "nngp", "arch")
# what builds, trains or runs networks, and the faces above it: no theory imports these
ABOVE_THEORY = ("sim", "train", "sweep", "api", "cli")
# the rooms by floor, from the ground up ("" is the package's face, bnsym/__init__.py): a room imports only rooms
# on its own floor or below, and the rooms of one floor import each other in no circle
FLOORS = (
    ("core",),
    ("", "scale", "report", "sim", *THEORY),
    ("api",),
    ("train", "reliability"),
    ("sweep",),
    ("cli", "generate"),
)
FLOOR = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}
ROOMS = {_room(module) for module in MODULES}
ROOM_GRAPH = {room: {_room(target) for module, targets in GRAPH.items() if _room(module) == room
                     for target in targets} - {room} for room in ROOMS}


def test_core_imports_nothing_but_core():
    """core holds the premises that theory and simulator share, so it imports nothing else of bnsym."""
    offending = sorted((module, target) for module, targets in GRAPH.items() if _room(module) == "core"
                       for target in targets if _room(target) != "core")
    assert offending == [], f"bnsym.core must import only bnsym.core: {offending}"


@pytest.mark.parametrize("theory", THEORY)
@pytest.mark.parametrize("importer, imported", [("theory", "sim"), ("sim", "theory")])
def test_theory_and_simulator_never_import_each_other(theory, importer, imported):
    """A paper's theory and the simulator are peers: a simulator gets every theoretical quantity from its caller."""
    rooms = {"theory": theory, "sim": "sim"}
    lower, upper = rooms[importer], rooms[imported]
    assert any(_room(module) == theory for module in MODULES), f"bnsym.{theory} does not exist"
    offending = sorted((module, target) for module, targets in GRAPH.items() if _room(module) == lower
                       for target in targets if _room(target) == upper)
    assert offending == [], f"bnsym.{lower} must not import bnsym.{upper}: {offending}"


@pytest.mark.parametrize("theory", THEORY)
@pytest.mark.parametrize("above", ABOVE_THEORY)
def test_theory_never_imports_what_builds_trains_or_runs_networks(theory, above):
    """A theory derives; it never reaches up into the simulator, the trainer, the sweeps, the public face or the
    command (the run store and the cluster connection it may need live in core)."""
    offending = sorted((module, target) for module, targets in GRAPH.items() if _room(module) == theory
                       for target in targets if _room(target) == above)
    assert offending == [], f"bnsym.{theory} must not import bnsym.{above}: {offending}"


def test_every_room_is_on_a_floor():
    """A new room is placed on a floor on purpose (FLOORS above), not found there."""
    assert ROOMS - set(FLOOR) == set(), f"rooms on no floor: {sorted(ROOMS - set(FLOOR))}"


def test_no_room_imports_upwards():
    offending = sorted((room, target) for room, targets in ROOM_GRAPH.items() for target in targets
                       if room in FLOOR and target in FLOOR and FLOOR[target] > FLOOR[room])
    assert offending == [], f"imports from a lower floor to a higher one: {offending}"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """Depth-first search; a back edge closes a cycle, returned as its path (None where there is none)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_import_graph_has_no_cycle():
    cycle = _cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_rooms_import_each_other_in_no_cycle():
    """Between rooms too (a module-level graph without cycles can still tie two rooms both ways)."""
    cycle = _cycle(ROOM_GRAPH)
    names = [f"bnsym.{room}" if room else "bnsym" for room in cycle or []]
    assert cycle is None, "rooms in a cycle: " + " -> ".join(names)


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_graph_reader_sees_the_known_edges():
    """The reader must find real imports, or the tests above could not fail."""
    assert "bnsym.core.activations" in GRAPH["bnsym.sim.networks"]
    assert "bnsym.meanfield.forward" in GRAPH["bnsym.api"]
    assert "bnsym.core.geometry" in GRAPH["bnsym.meanfield.laplace"]
    assert "bnsym.core.layers" in GRAPH["bnsym.sim.arch"] and "bnsym.meanfield.laplace" in GRAPH["bnsym.arch.graph"]
    assert {"bnsym.core", "bnsym.meanfield", "bnsym.sim", "bnsym.arch"} <= set(MODULES)
    assert "bnsym.core.estimate" in GRAPH["bnsym.products.lyapunov"]  # a package's relative import
    assert "bnsym.core.cluster" in GRAPH["bnsym.nngp.tasks"]  # an import inside a function


def test_graph_reader_sees_imports_by_name():
    """An ``import_module("...")`` of a literal name is an import like any other: the kernel generator's
    ``import_module("bnsym")``, its walk over the whole package, once hid in core, which then imported everything
    above it (the generator is now bnsym.generate, on the top floor, importing the package by name)."""
    assert "bnsym" in GRAPH["bnsym.generate"]
    assert _dynamic_import(ast.parse('importlib.import_module("bnsym.sim")').body[0].value) == "bnsym.sim"
    assert _dynamic_import(ast.parse('__import__("bnsym.nngp")').body[0].value) == "bnsym.nngp"
    assert _dynamic_import(ast.parse("import_module(name)").body[0].value) is None
