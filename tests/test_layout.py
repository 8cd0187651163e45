"""The package's import graph: no circle, and no module importing from a later stage of the pipeline.

The stages are those of docs/DESIGN.md's module table. Imports inside functions
(lazy ones) count too; relative imports are not used in the package.
"""

from __future__ import annotations

import ast
import functools
import pathlib

#: The pipeline's stages, in order; a module may import from its own stage or an earlier one.
STAGE = {
    "registry": 0,
    "record": 0,
    "records_file": 0,
    "bootstrap": 0,
    "exits": 0,
    "timeline": 0,
    "jsonl": 0,
    "settings": 0,
    "user_cache": 0,
    "data": 1,
    "synthetic": 2,
    "memory": 3,
    "models": 4,
    "libraries": 5,
    "audit": 6,
    "stats": 7,
    "report": 8,
    "compare": 9,
    "run": 10,
    "plugin": 11,
    "cli": 12,
    "__main__": 12,
}


@functools.cache
def parsed(source: str) -> ast.Module:
    """``source``'s syntax tree, parsed once in a session: the checks below walk the package's modules
    (each one only reads the tree), several of them the same ones."""
    return ast.parse(source)


def modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for path in (root / "pytest_restore").rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def import_graph(mods: dict[str, pathlib.Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from a import b`` counts ``a.b`` when it is a module)."""
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(parsed(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            deps.update(t for t in targets if t in mods and t != name)
        graph[name] = deps
    return graph


def stage(module: str) -> int:
    parts = module.split(".")
    return STAGE.get(parts[1], -1) if len(parts) > 1 else -1


def problems(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a later stage, and every import circle."""
    found = []
    for module, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if dep != "pytest_restore" and stage(dep) > stage(module):
                found.append(f"later stage: {module} imports {dep}")
    color: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        color[module] = 1
        stack.append(module)
        for dep in sorted(graph[module]):
            if color.get(dep) == 1:
                found.append("circle: " + " -> ".join(stack[stack.index(dep) :] + [dep]))
            elif not color.get(dep):
                visit(dep)
        stack.pop()
        color[module] = 2

    for module in sorted(graph):
        if not color.get(module):
            visit(module)
    return found


ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_package_has_no_import_circle_and_no_import_from_a_later_stage() -> None:
    graph = import_graph(modules(ROOT))
    assert len(graph) > 40  # the walk found the package
    assert problems(graph) == []


def test_the_check_finds_a_circle_and_a_backward_import() -> None:
    graph = {
        "pytest_restore.data.units": {"pytest_restore.audit.run"},
        "pytest_restore.audit.run": {"pytest_restore.data.units"},
    }
    found = problems(graph)
    assert "later stage: pytest_restore.data.units imports pytest_restore.audit.run" in found
    assert any(line.startswith("circle: ") for line in found)


#: What ``plugin/`` may import at run time: the run core, the record types, the exit codes, the timeline, itself.
#: (Type-only imports, under ``if TYPE_CHECKING:``, may name a stage's types: a hook's registry, a cell's run.)
PLUGIN_IMPORTS = (
    "pytest_restore.run", "pytest_restore.record", "pytest_restore.exits", "pytest_restore.timeline", "pytest_restore.plugin"
)
#: Where the plugin may read xdist's ``workerinput``: the one decision of a process's role
#: (session.py), the worker's own input (worker.py) and the controller's hook handing it out (__init__.py).
READS_WORKERINPUT = {"session.py", "worker.py", "__init__.py"}


def runtime_imports(source: str) -> list[str]:
    """The package modules a module imports, outside ``if TYPE_CHECKING:`` blocks (lazy imports included)."""
    tree = parsed(source)
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pytest_restore"):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("pytest_restore")]
    return found


def role_problems(sources: dict[str, str]) -> list[str]:
    """Plugin modules (file name -> text) that reach below the run core or ask which process they run in."""
    found = []
    for name, text in sorted(sources.items()):
        for module in runtime_imports(text):
            if module != "pytest_restore" and not module.startswith(tuple(f"{m}." for m in PLUGIN_IMPORTS) + PLUGIN_IMPORTS):
                found.append(f"{name}: imports {module} (the plugin imports the run core and the record types only)")
        if "is_controller" in text:
            found.append(f"{name}: branches on is_controller (each role is its own object)")
        if "workerinput" in text and name not in READS_WORKERINPUT:
            found.append(f"{name}: reads workerinput (the role is decided once, in session.py)")
        if name != "session.py" and 'hasattr(config, "workerinput")' in text:
            found.append(f"{name}: decides the process's role (session.py's activate does, once)")
    return found


def test_the_plugin_imports_the_run_core_and_plays_one_role_per_module() -> None:
    sources = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "pytest_restore" / "plugin").glob("*.py")}
    assert {"controller.py", "worker.py", "runner.py", "session.py"} <= set(sources)
    assert 'hasattr(config, "workerinput")' in sources["session.py"]
    assert role_problems(sources) == []


def test_the_role_check_finds_a_branch_and_an_import_below_the_run_core() -> None:
    branchy = "if self.is_controller:\n    pass\n"
    asks = 'where = getattr(config, "workerinput", {})\n'
    below = (
        "from typing import TYPE_CHECKING\n"
        "from pytest_restore.run.plan import Plan\n"
        "from pytest_restore.record import Record\n"
        "if TYPE_CHECKING:\n    from pytest_restore.audit.run import CellRun\n"
        "def f():\n    from pytest_restore.models.fake import FakeReader\n"
    )
    found = role_problems({"runner.py": branchy, "controller.py": asks, "finish.py": below})
    assert found == [
        "controller.py: reads workerinput (the role is decided once, in session.py)",
        "finish.py: imports pytest_restore.models.fake (the plugin imports the run core and the record types only)",
        "runner.py: branches on is_controller (each role is its own object)",
    ]


#: What only the statistics build: a tally of records, the engine, the bootstrap's resampling.
COUNTING = frozenset({"CellTally", "tally", "tally_by", "tally_cells", "Engine", "Resampler", "Statistic"})
#: The modules that hold them.
COUNTING_MODULES = ("pytest_restore.stats.tally", "pytest_restore.stats.engine", "pytest_restore.bootstrap")
#: The packages that render and run (and ``compare``'s command): they read an ``Analysis``
#: (or ``stats.comparison``) and count nothing themselves.
READERS = ("report", "run", "plugin", "compare")


def counting(module: str, source: str) -> list[str]:
    """Where a module of report/ or plugin/ builds a tally or calls the bootstrap (its defaults are fine)."""
    found = []
    for node in ast.walk(parsed(source)):
        if isinstance(node, ast.ImportFrom) and node.module in COUNTING_MODULES:
            found += [
                f"{module} imports {node.module}.{a.name}" for a in node.names if not a.name.startswith("DEFAULT_")
            ]
        elif isinstance(node, ast.ImportFrom) and node.module == "pytest_restore.stats.analysis":
            found += [f"{module} imports the counting stage {a.name}" for a in node.names if a.name == "count"]
        elif isinstance(node, ast.Import):
            found += [f"{module} imports {a.name}" for a in node.names if a.name in COUNTING_MODULES]
        elif isinstance(node, ast.Name) and node.id in COUNTING:
            found.append(f"{module} line {node.lineno}: {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in COUNTING and not isinstance(node.ctx, ast.Store):
            found.append(f"{module} line {node.lineno}: .{node.attr}")
    return found


def test_report_and_plugin_never_count_records_or_resample() -> None:
    """Every figure, order and decision comes from the one analysis: report/, plugin/ and compare read it."""
    found = []
    for module, path in sorted(modules(ROOT).items()):
        if module.split(".")[1:2] and module.split(".")[1] in READERS:
            found += counting(module, path.read_text(encoding="utf-8"))
    assert found == []


def test_the_counting_check_finds_a_tally_and_a_resample() -> None:
    source = (
        "from pytest_restore.stats.tally import tally_cells\n"
        "from pytest_restore.bootstrap import DEFAULT_SEED, Resampler\n"
        "cells = tally_cells(records)\n"
    )
    assert counting("m", source) == [
        "m imports pytest_restore.stats.tally.tally_cells",
        "m imports pytest_restore.bootstrap.Resampler",
        "m line 3: tally_cells",
    ]


#: The settings a run is asked and its report shows are declared once, below every stage that reads them
#: (``pytest_restore/settings.py``'s ``AuditSettings``): ``run/settings.py``'s ``RestoreSettings`` derives
#: from it (a subclass adding only the run's own fields) and ``report/``'s ``run.settings`` is its JSON form.
#: A class that annotates more than a quarter of those names again repeats the declaration.
SETTINGS_MODULE = "pytest_restore/settings.py"


def settings_declarations(sources: dict[str, str]) -> tuple[set[str], list[str]]:
    """The declared settings' names, and every class (path: name) outside the declaration that repeats them."""
    def annotated(node: ast.ClassDef) -> set[str]:
        return {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}

    classes = {
        (path, node.name): node
        for path, text in sources.items()
        for node in ast.walk(parsed(text))
        if isinstance(node, ast.ClassDef)
    }
    names = annotated(classes[(SETTINGS_MODULE, "AuditSettings")])
    repeats = [
        f"{path}: {name} declares {len(annotated(node) & names)} of the {len(names)} settings again"
        for (path, name), node in sorted(classes.items())
        if path != SETTINGS_MODULE and len(annotated(node) & names) * 4 > len(names)
    ]
    return names, repeats


def test_the_settings_are_declared_once_below_the_report_and_the_run_core() -> None:
    sources = {
        str(path.relative_to(ROOT)): path.read_text(encoding="utf-8") for path in (ROOT / "pytest_restore").rglob("*.py")
    }
    names, repeats = settings_declarations(sources)
    assert len(names) > 30 and repeats == []
    run_settings = next(
        node for node in ast.walk(parsed(sources["pytest_restore/run/settings.py"]))
        if isinstance(node, ast.ClassDef) and node.name == "RestoreSettings"
    )
    assert [ast.unparse(base) for base in run_settings.bases] == ["AuditSettings"]
    assert stage("pytest_restore.settings") < stage("pytest_restore.report.inputs") < stage("pytest_restore.run.settings")
    # the check finds a repeat: a report-side TypedDict spelling the settings out again
    copy = "class Shown(TypedDict):\n" + "".join(f"    {name}: int\n" for name in sorted(names))
    assert settings_declarations({**sources, "pytest_restore/report/x.py": copy})[1] == [
        f"pytest_restore/report/x.py: Shown declares {len(names)} of the {len(names)} settings again"
    ]
