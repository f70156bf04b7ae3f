"""The package's rooms and who may import whom (read from the code with ast, so a wrong import fails
here), no import cycles, and the declarations import no lineage SDK."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "shared" / "nyc_taxi"  # the pipeline, its lineage and its commands
PROVING = ROOT / "shared" / "nyc_taxi_proving" / "nyc_taxi_proving"  # the tools that prove it: they use it
PACKAGES = (PACKAGE, PROVING)

# room -> rooms it must never import (directly or in a function); a room of the proving tools is named
# ``proving.<room>``. No room of the pipeline imports any of them (test_the_pipeline_imports_nothing_of_the_proving_tools).
FORBIDDEN = {
    "core": {"ingest", "forecast", "lineage", "airflow_adapter", "metaflow_adapter", "cli"},
    "ingest": {"forecast", "airflow_adapter", "metaflow_adapter", "cli", "lineage.read"},
    "forecast": {"ingest", "airflow_adapter", "metaflow_adapter", "cli", "lineage.read"},
    "lineage.write": {"lineage.read", "ingest", "forecast", "airflow_adapter", "metaflow_adapter", "cli"},
    "lineage.read": {"ingest", "forecast", "airflow_adapter", "metaflow_adapter", "cli"},
    "airflow_adapter": {"metaflow_adapter", "cli", "lineage.read"},
    "metaflow_adapter": {"airflow_adapter", "cli", "lineage.read"},
    "proving.fixtures": {
        "airflow_adapter",
        "metaflow_adapter",
        "cli",
        "lineage",
        "proving.bench",
        "proving.cli",
        "proving.deployment",
        "proving.chaos",
    },
    # the team deployment runs Airflow's processes with Airflow's configuration; nothing else of the data
    # work, the lineage or the other orchestrator
    "proving.deployment": {
        "ingest",
        "forecast",
        "lineage",
        "metaflow_adapter",
        "cli",
        "proving.fixtures",
        "proving.bench",
        "proving.cli",
        "proving.chaos",
    },
    # the chaos run drives a deployment from outside (REST, supervisord, the process table) and checks it
    # with its own reading of the tables: it runs none of the data work and reads no lineage through the
    # code that wrote it, only the records
    "proving.chaos": {
        "ingest",
        "forecast",
        "metaflow_adapter",
        "cli",
        "lineage.read",
        "proving.bench",
        "proving.cli",
    },
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(path_package(path).parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _parse(source: str, tries: int = 3) -> ast.Module:
    """``ast.parse``, again when CPython 3.11.7's AST builder miscounts its recursion depth while other
    threads of the process build ASTs too (a spurious SystemError, python/cpython#106905, fixed in
    3.11.8): it is the interpreter's count, not the source, that is wrong."""
    for attempt in range(tries):
        try:
            return ast.parse(source)
        except SystemError as error:
            if "AST constructor recursion depth mismatch" not in str(error) or attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def path_package(path: Path) -> Path:
    return next(package for package in PACKAGES if path.is_relative_to(package))


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(imported module of either package, at module level?) for every import in the file."""
    tree = _parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            if name.split(".")[0] in ("nyc_taxi", "nyc_taxi_proving"):
                found.append((name, id(node) in top))
    return found


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in package.rglob("*.py")}


def _room(module: str) -> str:
    top, *parts = module.split(".")
    parts = parts or [""]
    room = (
        ".".join(parts[:2])
        if parts[:1] == ["lineage"] and len(parts) > 1 and parts[1] in ("read", "write")
        else parts[0]
    )
    return f"proving.{room}" if top == "nyc_taxi_proving" else room


def test_every_room_imports_only_what_it_may():
    modules = _modules()
    offences = []
    for module, path in sorted(modules.items()):
        room = _room(module)
        for imported, _ in _imports(path):
            target = _room(imported)
            banned = FORBIDDEN.get(room, set())
            if target in banned or target.split(".")[0] in banned:
                offences.append(f"{module} imports {imported}")
    assert offences == []


SITE = "nyc_taxi.lineage.read.site"


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_lineage_site_only_reads_and_only_the_command_line_uses_it():
    """The site is the read side's last step: it imports the core and lineage.read (nothing that writes
    lineage or runs a pipeline), and only the command line imports it."""
    offences = []
    for module, path in sorted(_modules().items()):
        inside = _within(module, SITE)
        for imported, _ in _imports(path):
            if inside and not (_within(imported, "nyc_taxi.core") or _within(imported, "nyc_taxi.lineage.read")):
                offences.append(f"{module} imports {imported}")
            if _within(imported, SITE) and not inside and _room(module) not in ("cli", "proving.cli"):
                offences.append(f"{module} imports {imported}")
    assert offences == []


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    cycles, state = [], {}

    def visit(node, trail):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(trail[trail.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def _import_graph(keep) -> dict[str, set[str]]:
    """module -> the package's modules it imports, for the imports ``keep(module, target, top_level)`` keeps."""
    modules = _modules()
    graph = defaultdict(set)
    for module, path in modules.items():
        graph[module]  # every module is a node
        for imported, top_level in _imports(path):
            target = imported if imported in modules else imported.rsplit(".", 1)[0]
            if target in modules and target != module and keep(module, target, top_level):
                graph[module].add(target)
    return graph


def test_no_import_cycles_at_module_level():
    assert _cycles(_import_graph(lambda module, target, top_level: top_level)) == []


def test_no_import_cycle_inside_a_room_not_even_through_an_import_in_a_function():
    """A room's modules form layers: an import deferred into a function is still a dependency, and two
    modules that need each other are one idea split in two (or a third module hiding between them)."""
    inside = _import_graph(lambda module, target, top_level: _room(module) == _room(target))
    assert _cycles(inside) == []


@pytest.mark.parametrize(
    "module",
    [
        "nyc_taxi.core.datasets",
        "nyc_taxi.core.naming",
        "nyc_taxi.core.registry",
        "nyc_taxi.core.jobs",
        "nyc_taxi.lineage.write.report",
    ],
)
def test_declarations_and_the_report_contract_load_no_lineage_sdk(module):
    probe = (
        f"import sys, {module}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'datahub', 'openlineage', 'pyspark', 'airflow', 'metaflow'}))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"


def _pipeline_files() -> list[Path]:
    """The pipeline's code: the package, the DAG files and their settings, the flow, Metaflow's extensions."""
    folders = [PACKAGE, ROOT / "airflow", ROOT / "metaflow", ROOT / "shared" / "metaflow_extensions"]
    return sorted(p for folder in folders for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_pipeline_imports_nothing_of_the_proving_tools():
    """The proving tools use the pipeline, never the reverse: no file of the pipeline imports nyc_taxi_proving
    (at module level or in a function) or names it in a string (``python -m …``, a path, a docstring)."""
    files = _pipeline_files()
    assert len(files) >= 100 and any(p.is_relative_to(ROOT / "airflow") for p in files)
    offences = [f"{p.relative_to(ROOT)} imports {name}" for p in files for name, _ in _imports(p)]
    offences = [line for line in offences if " nyc_taxi_proving" in line]
    offences += [
        f"{p.relative_to(ROOT)} names it: {node.value[:60]!r}"
        for p in files
        for node in ast.walk(_parse(p.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "nyc_taxi_proving" in node.value
    ]
    assert offences == []


def _rooms(package: Path) -> list[Path]:
    rooms = [p for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    return sorted(
        rooms + [p for room in rooms if room.name == "lineage" for p in room.iterdir() if (p / "__init__.py").exists()]
    )


def test_the_layout_names_every_room():
    """docs/architecture.md's layout (the README points there) names every room of both packages and every
    top-level folder."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    layout = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rooms = [f"{room.relative_to(ROOT)}/" for package in PACKAGES for room in _rooms(package)]
    assert len(rooms) >= 14
    missing = [room for room in rooms + ["shared/nyc_taxi_proving/"] if f"`{room}`" not in layout]
    assert missing == []
    for top in ("airflow/", "metaflow/", "shared/", "infra/", "tests/", "images/", "run"):
        assert f"`{top}`" in layout, top


# ---- the docs' lists match the tree ------------------------------------------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"
LISTED_ROOMS = (
    *(PACKAGE / room for room in ("core", "ingest", "forecast", "lineage/write", "lineage/read", "lineage/read/site")),
    *(PACKAGE / room for room in ("airflow_adapter", "metaflow_adapter", "cli")),
    *(PROVING / room for room in ("deployment", "chaos", "cli", "bench")),
)


def test_every_module_of_every_room_is_named_in_the_architecture():
    text = ARCHITECTURE.read_text()
    unnamed = [
        f"{room.relative_to(ROOT)}/{path.stem}"
        for room in LISTED_ROOMS
        for path in sorted(room.glob("*.py"))
        if path.stem not in ("__init__",) and f"`{path.stem}`" not in text and f"[`{path.stem}`]" not in text
    ]
    assert unnamed == []


def _guarded_tests() -> set[str]:
    """Every test marked ``guards``: a module's (its pytestmark) or a function's (its decorator)."""
    tests = ROOT / "tests"
    found = set()
    for path in sorted(tests.glob("test_*.py")):
        tree = _parse(path.read_text())
        module = f"tests/{path.name}"
        for node in tree.body:
            marks = isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
            if marks and "guards" in ast.unparse(node.value):
                found.add(module)
            if isinstance(node, ast.FunctionDef) and any("guards" in ast.unparse(d) for d in node.decorator_list):
                found.add(f"{module}::{node.name}")
    return found


def test_the_internals_table_and_the_guards_marks_name_the_same_tests():
    """docs/architecture.md's table of other projects' internals names, for each, the tests that fail when it
    moves: each of those is marked ``guards`` (what `bash run upgrade-check` runs), and no other is."""
    import re

    text = ARCHITECTURE.read_text()
    table = text.split("## Other projects' internals", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| [`")]
    named = {
        ref for row in rows for ref in re.findall(r"`(tests/test_[a-z_]+\.py(?:::[a-z_0-9]+)?)`", row.split("|")[4])
    }
    assert len(rows) >= 10 and all(re.search(r"`tests/test_", row.split("|")[4]) for row in rows), rows
    for row in rows:  # the place it names exists
        where = re.search(r"\]\(\.\./([^)]+)\)", row).group(1)
        assert (ARCHITECTURE.parent / ".." / where).resolve().exists(), where
    assert named == _guarded_tests()


def test_every_module_holds_one_idea_of_at_most_550_lines():
    """A reader takes a file in whole: none of the packages' modules is over 550 lines (split by what it does,
    as docs/architecture.md names each part)."""
    lines = {module: len(path.read_text().splitlines()) for module, path in _modules().items()}
    assert {module: n for module, n in lines.items() if n > 550} == {}


def test_the_metaflow_lineage_package_imports_nothing_of_this_project():
    """metaflow-lineage is anyone's: it names no module of nyc_taxi, anywhere in it (its tests run in an
    environment without nyc_taxi too: bash run test)."""
    package = PACKAGE.parent / "metaflow_lineage"
    files = sorted(package.rglob("*.py"))
    assert len(files) >= 10
    assert [f"{p.relative_to(package)}: {name}" for p in files for name, _ in _imports(p)] == []
    assert [p for p in files if "nyc_taxi" in p.read_text()] == []
