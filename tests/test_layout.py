"""The layout the code promises: packages import in one direction, without circles, through each
other's public surface; modules stay small; docs/design.md's map names every package there is."""

from __future__ import annotations

import ast
import re
import subprocess
import tomllib
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VIRTUAL_RUNNERS = ("experiments/moflux/virtual.py", "experiments/modelclaim/virtual.py")
GATE_ANSWER_STRINGS = {"retry-after", "x-restorelens-retry-after-ms"}
SHELL = "restorelens"
MAX_MODULE_LINES = 400

#: Which packages each package may import: the data flow, read upwards. The shared shell
#: (``restorelens/``) is below everything; the store is shared by the collector (which writes) and
#: the analysis (which reads, and maintains the derived tables the collector asks for); the client,
#: the gate and the engine know nothing of each other; experiments compose them all.
MAY_IMPORT: dict[str, set[str]] = {
    SHELL: set(),
    "store": {SHELL},
    "analysis": {SHELL, "store"},
    "collector": {SHELL, "store", "analysis"},
    "dashboard": {SHELL, "store", "analysis", "collector"},
    "loadgen": {SHELL},
    "gate": {SHELL},
    "sim": {SHELL},
    "experiments": {SHELL, "store", "analysis", "collector", "loadgen", "gate", "sim"},
}


@cache
def _package_dirs() -> dict[str, Path]:
    """``restorelens.gate`` -> ``gate/``: the distribution's packages as pyproject.toml maps them."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = {name: ROOT / folder for name, folder in setuptools["package-dir"].items()}
    found = {}
    for package in setuptools["packages"]:
        top = ".".join(package.split(".")[:2])
        found[package] = roots[top].joinpath(*package.split(".")[2:])
    return found


@cache
def _modules() -> dict[str, Path]:
    """Every product module by its import name (a package by its ``__init__``), pages included."""
    found = {}
    for package, folder in _package_dirs().items():
        for path in folder.glob("*.py"):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    for path in (ROOT / "dashboard" / "pages").glob("*.py"):  # Streamlit's pages: scripts, not a package
        found[f"restorelens.dashboard.pages.{path.stem}"] = path
    return found


def _top(module: str) -> str:
    """The package a module belongs to: ``gate`` for ``restorelens.gate.modelclaim.core``."""
    parts = module.split(".")
    is_shell_module = len(parts) == 2 and _modules()[module].parent == ROOT / SHELL
    return SHELL if len(parts) == 1 or is_shell_module else parts[1]


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    return skipped


@cache
def _import_statements(module: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(target module, imported names)`` for every import of ``module`` that runs (anywhere in the
    file: a function's import counts, an ``if TYPE_CHECKING:`` one does not); relative imports resolved."""
    path = _modules()[module]
    package = module if path.stem == "__init__" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skipped = _type_checking_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.append((base, tuple(alias.name for alias in node.names)))
    return tuple(found)


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports (its statements' targets)."""
    module = next(name for name, known in _modules().items() if known == path)
    return [target for target, _ in _import_statements(module)]


@cache
def _edges(module: str) -> frozenset[str]:
    """The product modules ``module`` imports; ``from package import submodule`` reaches the submodule."""
    modules = _modules()
    found = set()
    for target, names in _import_statements(module):
        reached = [f"{target}.{name}" for name in names if f"{target}.{name}" in modules]
        if len(reached) < len(names) or not names:
            reached.append(target)
        for candidate in reached:
            while candidate and candidate not in modules:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != module:
                found.add(candidate)
    return frozenset(found)


def _own_member(importer: str, imported: str) -> bool:
    # A package's __init__ may import its own members.
    return _modules()[importer].stem == "__init__" and imported.startswith(importer + ".")


def _cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _graph() -> dict[str, frozenset[str]]:
    return {module: frozenset(m for m in _edges(module) if not _own_member(module, m)) for module in _modules()}


@cache
def _exports(package: str) -> frozenset[str]:
    """The names a package's ``__init__`` offers: its ``_EXPORTS`` keys or its ``__all__``."""
    tree = ast.parse(_modules()[package].read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id in ("_EXPORTS", "__all__") and node.value is not None:
                value = node.value
                if isinstance(value, ast.Dict):
                    names |= {key.value for key in value.keys if isinstance(key, ast.Constant)}
                elif isinstance(value, (ast.List, ast.Tuple)):
                    names |= {item.value for item in value.elts if isinstance(item, ast.Constant)}
    return frozenset(names)


def _gate_exports() -> dict[str, str]:
    tree = ast.parse(_modules()["restorelens.gate"].read_text())
    exports = next(node.value for node in ast.walk(tree) if isinstance(node, ast.AnnAssign)
                   and isinstance(node.target, ast.Name) and node.target.id == "_EXPORTS")
    return ast.literal_eval(exports)


def test_no_package_exports_a_name_its_own_submodule_has() -> None:
    # Once the submodule is imported, the import system binds its name on the package, so the
    # exported name would mean the module or the value depending on what ran first.
    shadowed = [f"{package}.{name}" for package, path in _modules().items() if path.stem == "__init__"
                for name in _exports(package) if f"{package}.{name}" in _modules()]
    assert shadowed == []


def test_the_package_list_is_every_folder_with_an_init() -> None:
    # A package missing from pyproject.toml is left out of the wheel and out of every check here.
    listed = {folder.resolve() for folder in _package_dirs().values()}
    on_disk = {init.parent.resolve() for top in {d.relative_to(ROOT).parts[0] for d in listed}
               for init in (ROOT / top).rglob("__init__.py")}
    assert on_disk == listed


def test_no_import_circle_among_the_products_modules() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_check_finds_a_circle_through_a_functions_import() -> None:
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}
    assert _cycles(graph) == [["a", "b", "c"]]
    source = "def f():\n    from restorelens.gate import x\nif TYPE_CHECKING:\n    from restorelens.sim import y\n"
    tree = ast.parse(source)
    skipped = _type_checking_nodes(tree)
    kept = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and id(n) not in skipped]
    assert kept == ["restorelens.gate"]


def test_the_packages_import_in_one_direction() -> None:
    assert set(MAY_IMPORT) == {_top(module) for module in _modules()}
    offending = sorted(
        f"{module} -> {imported}"
        for module in _modules()
        for imported in _edges(module)
        if _top(imported) != _top(module) and _top(imported) not in MAY_IMPORT[_top(module)]
    )
    assert offending == []


def test_no_product_module_imports_the_benchmarks_or_the_tests() -> None:
    offending = [f"{module}: {target}" for module in _modules() for target, _ in _import_statements(module)
                 if target.split(".")[0] in ("benchmarks", "tests")]
    assert offending == []


def test_other_packages_are_reached_through_their_public_surface() -> None:
    # From another package, import what its __init__ exports (a subpackage counts as a package);
    # the shell's modules are each public unless their name starts with an underscore.
    modules = _modules()
    offending = []
    for module in modules:
        for target, names in _import_statements(module):
            if target not in modules or _top(target) == _top(module):
                continue
            if _top(target) == SHELL:
                offending += [f"{module}: {target}"] if target.rpartition(".")[2].startswith("_") else []
            elif modules[target].stem != "__init__":
                offending.append(f"{module}: {target}")
            else:
                offending += [f"{module}: {target}.{name}" for name in names
                              if name not in _exports(target) and f"{target}.{name}" not in modules]
    assert offending == []


def test_no_product_module_is_over_400_lines() -> None:
    long = {name: lines for name, path in _modules().items()
            if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_the_design_map_names_every_package_and_only_packages() -> None:
    design = (ROOT / "docs" / "design.md").read_text()
    architecture = design.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    table = [line for line in architecture.splitlines() if line.startswith("| `")]
    named = {re.match(r"\| `([\w/]+)/`", line).group(1) for line in table if re.match(r"\| `([\w/]+)/`", line)}
    packages = {folder.relative_to(ROOT).as_posix() for folder in _package_dirs().values()}
    assert named == packages


def test_the_client_side_imports_nothing_of_the_gate_or_the_engine() -> None:
    offending = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in (ROOT / "loadgen").rglob("*.py")
        for module in _imports(path)
        if module.startswith(("restorelens.gate", "restorelens.sim"))
    }
    assert not offending


def test_the_lifecycle_is_a_package_without_prefixed_modules() -> None:
    assert not list((ROOT / "gate").glob("modelclaim_*.py"))
    assert (ROOT / "gate" / "modelclaim" / "__init__.py").exists()


@pytest.mark.parametrize("runner", VIRTUAL_RUNNERS)
def test_the_virtual_runners_take_the_gates_answers_from_decide(runner: str) -> None:
    path = ROOT / runner
    module = next(name for name, known in _modules().items() if known == path)
    from_gate = {name for target, names in _import_statements(module) if target == "restorelens.gate" for name in names}
    assert "decide" in from_gate and _gate_exports()["decide"] == "decision"
    constants = [node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)]
    statuses = [value for value in constants if type(value) is int and 100 <= value <= 599]
    headers = [value for value in constants if isinstance(value, str) and value.lower() in GATE_ANSWER_STRINGS]
    assert statuses == [] and headers == []


def test_the_wire_answers_only_for_the_engine() -> None:
    # The virtual wire plays the engine's acceptance; every answer of the gate's comes from decide.
    path = ROOT / "experiments" / "wire.py"
    constants = [node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)]
    assert [v for v in constants if type(v) is int and 100 <= v <= 599] == []
    assert [v for v in constants if isinstance(v, str) and v.lower() in GATE_ANSWER_STRINGS] == []


def test_the_repository_stands_alone() -> None:
    # Users clone the repository alone: nothing it ships may send them to files outside it.
    tracked = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.toml", "*.sql", "Makefile", ".ci/*"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    outside = re.compile(r"DESIGN\.md|\.\./shared|shared/reference|\breference/[\w-]+\.md")
    this_test = Path(__file__).relative_to(ROOT).as_posix()
    offending = [name for name in tracked
                 if name != this_test and outside.search((ROOT / name).read_text(errors="replace"))]
    assert offending == []
