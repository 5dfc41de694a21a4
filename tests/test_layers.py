"""The house's one direction of imports: every module imports only what is to its left.

Parsed from the source (imports inside functions included), so a circle held open by a
function-level import fails here just as a module-level one does.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pipeline"

# Left to right: a module may import its own layer's package and anything to its left.
LAYERS = (
    "errors",
    "checks",
    "paths",
    "specs",
    "schema",
    "grade",
    "datasets",
    "sample",
    "store",
    "sql",
    "api",
    "stats",
    "estimators",
    "prior",
    "analyze",
    "allocate",
    "adaptive",
    "calibrate",
    "export",
    "observe",
    "curriculum",
    "report",
    "run",
    "history",
    "ingest",
    "regrade",
    "integrations",
    "flows",
    "cli",
    "__main__",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> str:
    """The top-level name under ``pipeline`` (``pipeline.sample.vllm`` -> ``sample``)."""
    return module.split(".")[1] if module.count(".") else ""


def imported_modules(module: str) -> set[str]:
    """Every ``pipeline`` module that ``module`` imports, anywhere in its source."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("pipeline.")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            if base != "pipeline" and not base.startswith("pipeline."):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != module and m != "pipeline"}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer(m)))
def test_imports_only_to_the_left(module):
    own = layer(module)
    assert own in LAYERS, f"{module}: add its layer to LAYERS in tests/test_layers.py"
    for target in sorted(imported_modules(module)):
        other = layer(target)
        assert other in LAYERS, f"{target}: add its layer to LAYERS"
        assert LAYERS.index(other) <= LAYERS.index(own), f"{module} imports {target}, which is to its right"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph, as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycle():
    graph = {m: imported_modules(m) for m in MODULES}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_finder_finds_a_function_level_circle():
    """The check would catch the old ``flows.profile`` <-> ``flows.prefect_flows`` circle."""
    graph = {
        "pipeline.flows.profile": {"pipeline.flows.prefect_flows"},  # imported inside a function
        "pipeline.flows.prefect_flows": {"pipeline.flows.profile", "pipeline.store"},
        "pipeline.store": set(),
    }
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1]
    assert set(cycle) == {"pipeline.flows.profile", "pipeline.flows.prefect_flows"}
    assert find_cycle({"a": {"b"}, "b": set()}) is None


# Inside a package that holds a stage's rooms, the rooms form their own order, left to right: a room
# imports only rooms to its left (and never its package's facade, which imports the rooms).
ROOMS = {
    "run": ("progress", "config", "plan", "shards", "rounds", "driver"),
    "store": ("fs", "files", "registry", "query"),
    "observe": ("record", "match", "sources", "track", "current", "snapshot"),
}


@pytest.mark.parametrize("package", sorted(ROOMS))
def test_rooms_import_only_to_the_left(package):
    order = ROOMS[package]
    prefix = f"pipeline.{package}."
    rooms = sorted(m[len(prefix) :] for m in MODULES if m.startswith(prefix))
    assert rooms == sorted(order), f"pipeline/{package}/: list every module in ROOMS (found {rooms})"
    for room in order:
        for target in sorted(imported_modules(prefix + room)):
            assert target != f"pipeline.{package}", f"{prefix}{room} imports its package's facade"
            if target.startswith(prefix):
                other = target[len(prefix) :].split(".")[0]
                assert order.index(other) < order.index(room), f"{prefix}{room} imports {target}, to its right"
