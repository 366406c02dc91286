"""The packages' layers hold: imports only point down, no module imports itself round a cycle
(not even inside a function), and no module reaches for another's private names.

The import graph is read from the source (every ``import`` and ``from … import`` anywhere in
a module, functions included, except under ``if TYPE_CHECKING:``, which never runs), so a
late import cannot hide a cycle. docs/architecture.md describes the layers listed here.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = {"chorus_shared": ROOT / "shared", "chorus_client": ROOT / "client",
                "chorus_collector": ROOT / "collector"}

#: Lowest first. A module may import its own layer and the layers below, never one above.
#: Names are module prefixes: "chorus_collector.storage" covers the package and its modules.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("protocol", ("chorus_shared",)),
    ("client library", ("chorus_client",)),
    ("foundations", ("chorus_collector", "chorus_collector.compat",
                               "chorus_collector.settings", "chorus_collector.version",
                               "chorus_collector.extras", "chorus_collector.problems")),
    ("answers", ("chorus_collector.results",)),
    ("estimators", ("chorus_collector.estimators",)),
    ("estimate kinds", ("chorus_collector.kinds",)),
    ("storage", ("chorus_collector.storage",)),
    ("ingest, jobs", ("chorus_collector.ingest", "chorus_collector.jobs")),
    ("analysis, design", ("chorus_collector.analysis", "chorus_collector.design")),
    ("alerts", ("chorus_collector.alerts",)),
    ("HTTP API", ("chorus_collector.http",)),
    ("dashboard", ("chorus_collector.dashboard",)),
    ("app", ("chorus_collector.app",)),
    ("servers", ("chorus_collector.server", "chorus_collector.wsgi")),
    ("shuffler", ("chorus_collector.shuffler",)),
    ("command line", ("chorus_collector.cli", "chorus_collector.entry")),
    ("notebooks", ("chorus_collector.frames",)),
)


@cache
def modules() -> dict[str, Path]:
    """Every module of the three packages, by dotted name (a package by its own name)."""
    found = {}
    for package, root in SOURCE_ROOTS.items():
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def owner(name: str) -> str:
    """The module an imported name lives in (``a.b.c`` is module ``a.b``'s name ``c``)."""
    while name not in modules():
        name = name.rpartition(".")[0]
    return name


def runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, inside functions too, except those under TYPE_CHECKING."""
    skipped = {id(node) for stmt in ast.walk(tree) if isinstance(stmt, ast.If)
               and ast.unparse(stmt.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
               for child in stmt.body for node in ast.walk(child)}
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
            and id(node) not in skipped]


@cache
def graph() -> dict[str, dict[str, set[str]]]:
    """module → {imported module → the names taken from it (empty for ``import m``)}."""
    edges: dict[str, dict[str, set[str]]] = {}
    for module, path in modules().items():
        targets = edges.setdefault(module, {})
        for node in runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in SOURCE_ROOTS:
                        targets.setdefault(owner(alias.name), set())
            elif node.module and node.level == 0 and node.module.split(".")[0] in SOURCE_ROOTS:
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    if submodule in modules():
                        targets.setdefault(submodule, set())
                    else:
                        targets.setdefault(owner(node.module), set()).add(alias.name)
    return edges


def layer_of(module: str) -> int:
    matches = [(len(prefix), index) for index, (_, prefixes) in enumerate(LAYERS)
               for prefix in prefixes if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is in no layer: place it in LAYERS and docs/architecture.md"
    return max(matches)[1]


def test_every_module_has_a_layer() -> None:
    for module in modules():
        layer_of(module)


def test_imports_point_down_the_layers() -> None:
    upward = [f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} "
              f"({LAYERS[layer_of(target)][0]})"
              for module, targets in graph().items() for target in targets
              if layer_of(target) > layer_of(module)]
    assert upward == []


def test_no_import_cycles_even_inside_functions() -> None:
    cycles = []
    state: dict[str, str] = {}  # "open" while on the path, "done" after

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in graph()[module]:
            if target == module:
                continue
            if state.get(target) == "open":
                cycles.append(" → ".join([*path[path.index(target):], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(modules()):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_no_private_names_across_modules() -> None:
    private = [f"{module} takes {name} from {target}"
               for module, targets in graph().items() for target, names in targets.items()
               for name in names if name.startswith("_") and target != module
               and not (name.startswith("__") and name.endswith("__"))]
    assert private == []


def test_the_checks_see_late_imports_and_skip_type_checking_ones() -> None:
    """The guards above read imports inside functions and skip TYPE_CHECKING blocks."""
    tree = ast.parse("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from chorus_collector.app import create_app\n"
                     "def late() -> None:\n    from chorus_collector.storage import open_storage\n")
    imported = [node.module for node in runtime_imports(tree) if isinstance(node, ast.ImportFrom)]
    assert imported == ["typing", "chorus_collector.storage"]
    assert layer_of("chorus_collector.storage.sqlite") < layer_of("chorus_collector.http.api")
    assert layer_of("chorus_collector.app") > layer_of("chorus_collector.dashboard.views")


def test_the_architecture_page_shows_these_layers_and_every_package() -> None:
    """docs/architecture.md's table lists the collector's layers in this order, and names
    every package and top-level module in the row of its layer."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("## The collector's packages", 1)[1].split("\n## ", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    table = {layer: where for layer, where, _ in rows[1:]}  # the first row is the header
    collector_layers = [(name, prefixes) for name, prefixes in LAYERS
                        if all(p.startswith("chorus_collector") for p in prefixes)]
    assert list(table) == [name for name, _ in collector_layers]
    package = SOURCE_ROOTS["chorus_collector"] / "chorus_collector"
    for path in sorted(package.iterdir()):
        if path.name == "__init__.py" or not (path.suffix == ".py" or (path / "__init__.py")
                                               .exists()):
            continue
        shown = f"`{path.name}`" if path.suffix == ".py" else f"`{path.name}/`"
        layer = LAYERS[layer_of(f"chorus_collector.{path.stem}")][0]
        assert shown in table[layer], f"{shown} is not in the row of {layer!r}"
