"""The layout's contract: core below everything, every paper's theory and the simulator (sim) as peers, no cycles.

The import graph is read from the source with ``ast`` (every ``import`` and ``from ... import``, at any depth
in a module, resolved to bnsym modules), so an import hidden inside a function counts too.
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


def imports_of(name: str) -> set[str]:
    """The bnsym modules imported by module ``name``."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
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


# every paper's theory, a package or a module
THEORY = ("meanfield", "dilution", "products", "rank", "nngp", "ntk", "ntk_estimators", "arch")


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


def test_import_graph_has_no_cycle():
    """Depth-first search over the module graph; a back edge is a cycle."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(GRAPH[module]):
            if state.get(target) == 1:
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(target):] + [target]))
            if target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)


def test_graph_reader_sees_the_known_edges():
    """The reader must find real imports, or the tests above could not fail."""
    assert "bnsym.core.activations" in GRAPH["bnsym.sim.networks"]
    assert "bnsym.meanfield.forward" in GRAPH["bnsym.api"]
    assert "bnsym.core.geometry" in GRAPH["bnsym.meanfield.laplace"]
    assert "bnsym.core.layers" in GRAPH["bnsym.sim.arch"] and "bnsym.meanfield.laplace" in GRAPH["bnsym.arch.graph"]
    assert {"bnsym.core", "bnsym.meanfield", "bnsym.sim", "bnsym.arch"} <= set(MODULES)
    assert "bnsym.core.estimate" in GRAPH["bnsym.products.lyapunov"]  # a package's relative import
