"""The house's one direction of imports: every module imports only what is to its left.

Parsed from the source (imports inside functions included), so a circle held open by a
function-level import fails here just as a module-level one does.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from layout import CLI_SHARED, LAYERS, ROOMS, source_modules

PACKAGE = Path(__file__).resolve().parents[1] / "pipeline"
MODULES = source_modules()


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


@pytest.mark.parametrize("package", sorted(ROOMS))
def test_rooms_import_only_to_the_left(package):
    """A room that is itself a package (``report.sections``) is checked as one room here, with its
    own order in its own ``ROOMS`` entry."""
    order = ROOMS[package]
    prefix = f"pipeline.{package}."
    inside = sorted(m for m in MODULES if m.startswith(prefix))
    rooms = sorted({m[len(prefix) :].split(".")[0] for m in inside})
    assert rooms == sorted(order), f"pipeline/{package.replace('.', '/')}/: list every module in ROOMS (found {rooms})"
    for module in inside:
        room = module[len(prefix) :].split(".")[0]
        for target in sorted(imported_modules(module)):
            assert target != f"pipeline.{package}", f"{module} imports its package's facade"
            if target.startswith(prefix):
                other = target[len(prefix) :].split(".")[0]
                if other != room:
                    assert order.index(other) < order.index(room), f"{module} imports {target}, to its right"


# The longest function each package allows, in lines from ``def`` to its last line: a longer one is
# split into its parts (a report section into its charts and tables).
MAX_FUNCTION_LINES = {"reports": 80}


def long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """Every function (methods and nested ones included) longer than ``limit`` lines, with its length."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append((node.name, lines))
    return found


@pytest.mark.parametrize("package", sorted(MAX_FUNCTION_LINES))
def test_functions_are_short(package):
    limit = MAX_FUNCTION_LINES[package]
    inside = {m: p for m, p in MODULES.items() if m == f"pipeline.{package}" or m.startswith(f"pipeline.{package}.")}
    long = [
        f"{m}.{name}: {n} lines" for m, path in inside.items() for name, n in long_functions(path.read_text(), limit)
    ]
    assert not long, f"functions over {limit} lines in pipeline/{package}/: {long}"


def test_long_functions_counts_from_def_to_the_last_line():
    body = "".join(f"x{i} = {i}\n" for i in range(78))
    f = "def f():\n" + textwrap.indent(body + "return 0\n", " " * 4)
    g = "class C:\n    async def g(self):\n" + textwrap.indent(body + "return 1\n", " " * 8)
    assert long_functions(f + g, 80) == []  # each: def, 78 lines, return: 80 lines
    assert long_functions(f + g, 79) == [("f", 80), ("g", 80)]
    assert long_functions(f + g.replace("g(self):\n", "g(self):\n        pass\n"), 80) == [("g", 81)]


def cli_commands() -> dict[str, str]:
    """``COMMANDS`` of ``pipeline/cli/__init__.py``, read from its source: command name -> ``module:function``."""
    tree = ast.parse((PACKAGE / "cli" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "COMMANDS":
            return {elt.elts[0].value: elt.elts[1].value for elt in node.value.elts}
    raise AssertionError("pipeline/cli/__init__.py has no COMMANDS")


def test_each_command_lives_in_the_module_of_its_name():
    commands = cli_commands()
    assert {name: target for name, target in commands.items() if target != f"{name}:{name}_cmd"} == {}
    shared = {m.removeprefix("pipeline.cli.") for m in MODULES if m.startswith("pipeline.cli.")} - {"commands"}
    own = {m.removeprefix("pipeline.cli.commands.") for m in MODULES if m.startswith("pipeline.cli.commands.")}
    assert own == set(commands), "cli/commands/ holds one module per command, named for it"
    assert {m for m in shared if not m.startswith("commands.")} == set(CLI_SHARED), (
        "a module of cli/ is listed in CLI_SHARED"
    )
    assert not set(commands) & set(CLI_SHARED)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("pipeline.cli.")))
def test_cli_modules_import_no_command_module(module):
    """Commands are peers: a command module imports shared modules only, and so does a shared module."""
    commands = {f"pipeline.cli.commands.{name}" for name in cli_commands()}
    sideways = sorted(imported_modules(module) & commands)
    assert sideways == [], f"{module} imports another command's module: {sideways}; move what they share"
