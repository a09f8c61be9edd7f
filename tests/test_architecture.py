"""The shape of evprobe's imports: contracts between its parts, no cycles, no private names.

Three checks, each with a test that shows it can fail (run on a tiny package written to tmp_path):

- the import-linter contracts in pyproject.toml ([tool.importlinter]): which part may import which;
- no import cycle between modules (files) anywhere in evprobe;
- no module uses another module's private name (`from evprobe.x import _name`, `x._name`);

and one the contracts cannot say: evprobe.bench imports evprobe.hooks only inside functions.

Function-level imports count everywhere: they are real dependencies, only deferred. Imports under
`if TYPE_CHECKING:` count for the contracts (a type from another part is knowledge of it) but not
for cycles (annotations only: they never run).

`lint-imports` alone cannot check the contracts: grimp finds `evprobe` with importlib, which
places it in evprobe/ only, while its parts are mapped folders (bench/ -> evprobe.bench, ...). So
the graph is built here, from [tool.setuptools.package-dir]. `python tests/test_architecture.py`
prints all the checks' reports (what `lint-imports` would print, and more).
"""

from __future__ import annotations

import ast
import sys
import textwrap
import tomllib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import grimp
import pytest
from grimp.application.config import settings as grimp_settings
from importlinter import configuration as importlinter_configuration
from importlinter.application import output as importlinter_output
from importlinter.application import use_cases as importlinter_use_cases
from importlinter.application.app_config import settings as importlinter_settings
from importlinter.application.ports.building import GraphBuilder

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = REPO / "pyproject.toml"


# --- where the packages are ---------------------------------------------------------------------


def mapped_packages(pyproject: Path) -> dict[str, Path]:
    """Each package of [tool.setuptools.package-dir] that has an __init__.py: name -> folder."""
    package_dir = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-dir"]
    root = pyproject.parent
    return {
        name: (root / folder).resolve()
        for name, folder in package_dir.items()
        if (root / folder / "__init__.py").is_file()
    }


def module_files(packages: Mapping[str, Path]) -> dict[str, Path]:
    """Every module (file) of the packages: dotted name -> path; subfolders without __init__.py
    are not packages and are skipped, as grimp skips them."""
    found: dict[str, Path] = {}
    for name, folder in packages.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if not all(part.isidentifier() for part in parts):
                continue
            if not all((folder.joinpath(*parts[:k]) / "__init__.py").is_file()
                       for k in range(1, len(parts))):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((name, *parts))] = path
    return found


class _MappedPackageFinder:
    """grimp's package finder, answering from a name -> folder map instead of importlib."""

    def __init__(self, packages: Mapping[str, Path]) -> None:
        self.packages = packages

    def determine_package_directories(self, package_name: str, file_system: object) -> set[str]:
        return {str(self.packages[package_name])}


def build_graph(
    packages: Mapping[str, Path],
    include_external_packages: bool = False,
    exclude_type_checking_imports: bool = False,
) -> grimp.ImportGraph:
    """The import graph of the packages; function-level imports are in it."""
    previous = grimp_settings.PACKAGE_FINDER
    grimp_settings.configure(PACKAGE_FINDER=_MappedPackageFinder(packages))
    try:
        return grimp.build_graph(
            *packages,
            include_external_packages=include_external_packages,
            exclude_type_checking_imports=exclude_type_checking_imports,
            cache_dir=None,
        )
    finally:
        grimp_settings.configure(PACKAGE_FINDER=previous)


# --- (a) import-linter contracts ----------------------------------------------------------------


class MappedGraphBuilder(GraphBuilder):
    """import-linter's graph builder for mapped folders: a root package brings its mapped parts."""

    def __init__(self, packages: Mapping[str, Path]) -> None:
        self.packages = packages

    def build(
        self,
        root_package_names: list[str],
        cache_dir: str | None,
        include_external_packages: bool = False,
        exclude_type_checking_imports: bool = False,
    ) -> grimp.ImportGraph:
        wanted = {
            name: folder
            for name, folder in self.packages.items()
            if any(name == root or name.startswith(root + ".") for root in root_package_names)
        }
        missing = [root for root in root_package_names if root not in wanted]
        if missing:
            raise ValueError(f"root packages not in the package map: {missing}")
        return build_graph(
            wanted,
            include_external_packages=bool(include_external_packages),
            exclude_type_checking_imports=exclude_type_checking_imports,
        )


def lint_contracts(config: Path, packages: Mapping[str, Path]) -> tuple[bool, str]:
    """Run the import-linter contracts of `config` on the packages: (all kept, the report)."""
    importlinter_configuration.configure()
    previous = importlinter_settings.GRAPH_BUILDER
    importlinter_settings.configure(GRAPH_BUILDER=MappedGraphBuilder(packages))
    try:
        with importlinter_output.console.capture() as captured:
            kept = importlinter_use_cases.lint_imports(
                config_filename=str(config), cache_dir=None, no_logo=True
            )
    finally:
        importlinter_settings.configure(GRAPH_BUILDER=previous)
    return kept == importlinter_use_cases.SUCCESS, captured.get()


# --- (b) import cycles --------------------------------------------------------------------------


def import_edges(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """importer -> the package's modules it imports directly, for every module of the package."""
    internal = {module for module in graph.modules if not graph.is_module_squashed(module)}
    return {
        module: graph.find_modules_directly_imported_by(module) & internal for module in internal
    }


def strongly_connected_components(edges: Mapping[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(edges.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    components.append(component)
    return components


def _shortest_path(edges: Mapping[str, set[str]], start: str, end: str, within: set[str]) -> list[str]:
    previous: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == end:
            path = [node]
            while previous[path[-1]] is not None:
                path.append(previous[path[-1]])  # type: ignore[arg-type]
            return path[::-1]
        for successor in sorted(edges.get(node, set()) & within):
            if successor not in previous:
                previous[successor] = node
                queue.append(successor)
    raise AssertionError(f"{end} is not reachable from {start} inside its component")


def find_cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The import cycles, each as a chain [a, b, ..., a]: for every import a -> b that lies on a
    cycle, the shortest cycle through it (so every import to break shows up), without repeats."""
    cycles: set[tuple[str, ...]] = set()
    for component in strongly_connected_components(edges):
        for importer in component:
            for imported in edges[importer] & component:
                loop = [importer, *_shortest_path(edges, imported, importer, component)][:-1]
                first = loop.index(min(loop))
                cycles.add(tuple(loop[first:] + loop[:first]))
    return sorted([*cycle, cycle[0]] for cycle in cycles)


# --- (c) private names, and imports at module level ---------------------------------------------


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@dataclass(frozen=True)
class ImportSite:
    importer: str
    path: Path
    line: int
    targets: tuple[str, ...]  # the modules this statement imports (a from-import: its module and
    # those of its names that are modules)
    names: tuple[str, ...]  # a from-import's names ("*" included); () for `import x`
    source: str  # the module a from-import names; "" for `import x`
    in_function: bool


def _resolve_relative(importer: str, is_package: bool, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


class _ModuleVisitor(ast.NodeVisitor):
    """Collects a module's import statements and the modules its names are bound to."""

    def __init__(self, importer: str, path: Path, modules: Mapping[str, Path]) -> None:
        self.importer = importer
        self.path = path
        self.modules = modules
        self.is_package = path.name == "__init__.py"
        self.depth = 0  # function nesting
        self.imports: list[ImportSite] = []
        self.bound: dict[str, str] = {}  # local name -> module (file-wide: scopes are not tracked)
        self.attributes: list[ast.Attribute] = []

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.bound[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                self.bound[top] = top
            self.imports.append(
                ImportSite(self.importer, self.path, node.lineno, (alias.name,), (), "", self.depth > 0)
            )

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        source = _resolve_relative(self.importer, self.is_package, node.module, node.level)
        targets = [source]
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            if submodule in self.modules:
                targets.append(submodule)
                self.bound[alias.asname or alias.name] = submodule
        names = tuple(alias.name for alias in node.names)
        self.imports.append(
            ImportSite(
                self.importer, self.path, node.lineno, tuple(targets), names, source, self.depth > 0
            )
        )

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.attributes.append(node)
        self.generic_visit(node)

    def dotted_module(self, node: ast.expr) -> str | None:
        """The module an expression such as `capture` or `evprobe.bench.items` names, if any."""
        if isinstance(node, ast.Name):
            return self.bound.get(node.id)
        if isinstance(node, ast.Attribute):
            parent = self.dotted_module(node.value)
            if parent is not None and f"{parent}.{node.attr}" in self.modules:
                return f"{parent}.{node.attr}"
        return None


def scan_modules(modules: Mapping[str, Path], within: str = "") -> list[_ModuleVisitor]:
    """Parse every module (only those inside package `within`, if given)."""
    visitors = []
    for importer, path in sorted(modules.items()):
        if within and not _within(importer, within):
            continue
        visitor = _ModuleVisitor(importer, path, modules)
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        visitors.append(visitor)
    return visitors


def _private_owner(module: str) -> str | None:
    """For a module with a private part (`a.b._c.d`), the package owning that part (`a.b`)."""
    parts = module.split(".")
    for k, part in enumerate(parts):
        if _is_private(part):
            return ".".join(parts[:k])
    return None


def _where(path: Path, line: int, root: Path) -> str:
    try:
        shown = path.relative_to(root)
    except ValueError:
        shown = path
    return f"{shown}:{line}"


def find_private_imports(modules: Mapping[str, Path], root: Path) -> list[str]:
    """Every use of another module's private name, as 'file:line: importer uses module._name'.

    Looks at `from m import _name`, imports of private modules (`m._impl`) from outside the
    package that owns them, and `m._name` where `m` is bound to one of the packages' modules.
    """
    found: list[str] = []

    def report(importer: str, path: Path, line: int, owner: str, name: str) -> None:
        owned = f"{owner}.{name}"
        private_module_owner = _private_owner(owned) if owned in modules else None
        if private_module_owner is not None and _within(importer, private_module_owner):
            return  # a package's own private submodule
        if owner == importer:
            return  # its own name
        found.append(f"{_where(path, line, root)}: {importer} uses {owned}")

    for visitor in scan_modules(modules):
        importer, path = visitor.importer, visitor.path
        for site in visitor.imports:
            for target in site.targets:  # a private module, from outside its package
                owner = _private_owner(target) if target in modules else None
                if owner is not None and not _within(importer, owner):
                    found.append(f"{_where(path, site.line, root)}: {importer} uses {target}")
            if site.source in modules:
                for name in site.names:
                    if _is_private(name):
                        report(importer, path, site.line, site.source, name)
        for node in visitor.attributes:
            owner = visitor.dotted_module(node.value)
            if owner is not None and owner in modules and _is_private(node.attr):
                report(importer, path, node.lineno, owner, node.attr)
    return sorted(set(found), key=_site_order)


def _site_order(entry: str) -> tuple[str, int, str]:
    file, line, rest = entry.split(":", 2)
    return file, int(line), rest


def find_module_level_imports(
    modules: Mapping[str, Path], importer: str, imported: str, root: Path
) -> list[str]:
    """Imports of `imported` (or its submodules) by `importer`'s modules outside any function."""
    found = []
    for visitor in scan_modules(modules, within=importer):
        for site in visitor.imports:
            hits = [t for t in site.targets if _within(t, imported)]
            if hits and not site.in_function:
                where = _where(site.path, site.line, root)
                found.append(f"{where}: {site.importer} imports {', '.join(hits)}")
    return found


# --- the checks on evprobe ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def packages() -> dict[str, Path]:
    return mapped_packages(PYPROJECT)


@pytest.fixture(scope="module")
def modules(packages: dict[str, Path]) -> dict[str, Path]:
    return module_files(packages)


def test_graph_holds_every_part(packages: dict[str, Path], modules: dict[str, Path]) -> None:
    """The graph is built from the mapped folders, not only from evprobe/ (what importlib finds)."""
    assert {"evprobe", "evprobe.core", "evprobe.bench", "evprobe.hooks", "evprobe.probes",
            "evprobe.experiments", "evprobe.organism"} <= set(packages)
    graph = build_graph(packages)
    assert set(modules) <= graph.modules, sorted(set(modules) - graph.modules)
    # imports between mapped folders resolve (probes/ -> core/)
    assert graph.direct_import_exists(importer="evprobe.probes", imported="evprobe.core", as_packages=True)


def test_import_contracts(packages: dict[str, Path]) -> None:
    kept, report = lint_contracts(PYPROJECT, packages)
    assert kept, report


def test_no_import_cycles(packages: dict[str, Path]) -> None:
    """Function-level imports count; `if TYPE_CHECKING:` ones (annotations only, never run) do not."""
    cycles = find_cycles(import_edges(build_graph(packages, exclude_type_checking_imports=True)))
    assert not cycles, f"{len(cycles)} import cycle(s):\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_private_name_imports(modules: dict[str, Path]) -> None:
    found = find_private_imports(modules, REPO)
    assert not found, f"{len(found)} use(s) of another module's private name:\n" + "\n".join(found)


def test_bench_imports_hooks_only_inside_functions(modules: dict[str, Path]) -> None:
    """The runner drives models through hooks; `import evprobe.bench` must not load them."""
    found = find_module_level_imports(modules, "evprobe.bench", "evprobe.hooks", REPO)
    assert not found, "\n".join(found)


# --- each check can fail ------------------------------------------------------------------------


def write_toy(root: Path, files: Mapping[str, str]) -> dict[str, Path]:
    """A package `archtoy` laid out like evprobe: archtoy/ plus mapped folders low/ and high/."""
    folders = {"archtoy": root / "archtoy", "archtoy.low": root / "low", "archtoy.high": root / "high"}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    return folders


def test_contract_check_fails_on_a_forbidden_import(tmp_path: Path) -> None:
    packages = write_toy(tmp_path / "src", {
        "low/a.py": """
            def helper():
                from archtoy.high import b  # function-level: still a dependency
                return b
            """,
        "high/b.py": "from archtoy.low import a\n",
    })
    config = tmp_path / "contracts.toml"
    config.write_text(textwrap.dedent("""
        [tool.importlinter]
        root_package = "archtoy"

        [[tool.importlinter.contracts]]
        name = "low never imports high"
        type = "forbidden"
        source_modules = ["archtoy.low"]
        forbidden_modules = ["archtoy.high"]
        """))
    kept, report = lint_contracts(config, packages)
    assert not kept
    assert "BROKEN" in report and "archtoy.low.a -> archtoy.high.b" in report, report

    # a contract naming a module the graph lacks fails too (it does not pass for want of modules)
    config.write_text(config.read_text().replace('["archtoy.high"]', '["archtoy.nowhere"]'))
    kept, report = lint_contracts(config, packages)
    assert not kept and "archtoy.nowhere" in report, report


def test_cycle_check_reports_each_cycle(tmp_path: Path) -> None:
    packages = write_toy(tmp_path, {
        "low/a.py": "from archtoy.low import b\n",
        "low/b.py": "def f():\n    from archtoy.low import c\n",  # function-level closes the loop
        "low/c.py": "import archtoy.low.a\nfrom archtoy.high import d\n",
        "high/d.py": "from . import e\n",
        "high/e.py": "from .d import x\n",
        "high/f.py": "from archtoy.low import a\n",  # imports into a cycle, is on none
        "high/g.py": "from archtoy.high import h\n",
        "high/h.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .g import G\n",
    })
    cycles = find_cycles(import_edges(build_graph(packages, exclude_type_checking_imports=True)))
    assert cycles == [
        ["archtoy.high.d", "archtoy.high.e", "archtoy.high.d"],
        ["archtoy.low.a", "archtoy.low.b", "archtoy.low.c", "archtoy.low.a"],
    ]
    with_annotations = find_cycles(import_edges(build_graph(packages)))
    assert ["archtoy.high.g", "archtoy.high.h", "archtoy.high.g"] in with_annotations
    assert find_cycles({"x": {"x"}, "y": set()}) == [["x", "x"]]


def test_private_name_check_reports_file_and_line(tmp_path: Path) -> None:
    packages = write_toy(tmp_path, {
        "low/a.py": "_hidden = 1\npublic = 2\n\n\ndef _f():\n    return _hidden\n",
        "low/_impl.py": "x = 1\n",
        "low/ok.py": textwrap.dedent("""
            from archtoy.low import a, _impl
            from archtoy.low.a import public
            from ._impl import x
            print(a.public, a.__name__, a.__file__, public, x, _impl.x)
            """),
        "high/bad.py": textwrap.dedent("""
            import archtoy.low.a
            import archtoy.low.a as alias
            from archtoy.low import a
            from archtoy.low.a import _hidden, public
            from archtoy.low._impl import x


            def g():
                from archtoy.low import a as late
                return late._f(), alias._hidden, archtoy.low.a._f, a.public, a.__doc__
            """),
        "high/rel.py": "from ..low.a import _f\n",
    })
    found = find_private_imports(module_files(packages), tmp_path)
    assert found == [
        "high/bad.py:5: archtoy.high.bad uses archtoy.low.a._hidden",
        "high/bad.py:6: archtoy.high.bad uses archtoy.low._impl",
        "high/bad.py:11: archtoy.high.bad uses archtoy.low.a._f",
        "high/bad.py:11: archtoy.high.bad uses archtoy.low.a._hidden",
        "high/rel.py:1: archtoy.high.rel uses archtoy.low.a._f",
    ], found


def test_module_level_import_check_fails(tmp_path: Path) -> None:
    packages = write_toy(tmp_path, {
        "low/a.py": "from archtoy import high\n\n\ndef f():\n    from archtoy.high import b\n",
        "low/c.py": "import archtoy.high.b as b\n",
        "high/b.py": "",
    })
    found = find_module_level_imports(module_files(packages), "archtoy.low", "archtoy.high", tmp_path)
    assert found == [
        "low/a.py:1: archtoy.low.a imports archtoy.high",
        "low/c.py:1: archtoy.low.c imports archtoy.high.b",
    ]


if __name__ == "__main__":
    _packages = mapped_packages(PYPROJECT)
    _modules = module_files(_packages)
    _kept, _report = lint_contracts(PYPROJECT, _packages)
    print(_report)
    _cycles = find_cycles(import_edges(build_graph(_packages, exclude_type_checking_imports=True)))
    print(f"import cycles: {len(_cycles)}")
    print("\n".join(" -> ".join(c) for c in _cycles))
    _private = find_private_imports(_modules, REPO)
    print(f"\nprivate names used from another module: {len(_private)}")
    print("\n".join(_private))
    _early = find_module_level_imports(_modules, "evprobe.bench", "evprobe.hooks", REPO)
    print(f"\nevprobe.bench importing evprobe.hooks outside functions: {len(_early)}")
    print("\n".join(_early))
    sys.exit(0 if _kept and not (_cycles or _private or _early) else 1)


# --- shape: file sizes and the experiments layer's breadth ----------------------------------------

MAX_LINES = 500  # a package file longer than this holds more than one concept (issue 54)
MAX_EXPERIMENT_MODULES = 12  # experiments/'s top-level modules besides __init__ and __main__


def long_files(modules: Mapping[str, Path], limit: int = MAX_LINES) -> list[str]:
    """'path: N lines' of every module longer than `limit` lines."""
    out = []
    for path in sorted(set(modules.values())):
        n = len(path.read_text().splitlines())
        if n > limit:
            out.append(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}: {n} lines")
    return out


def top_level_modules(folder: Path) -> list[str]:
    """The .py modules directly in `folder`, dunder files aside (subpackages are not counted)."""
    return sorted(p.name for p in folder.glob("*.py") if not p.name.startswith("__"))


def test_no_package_file_is_over_500_lines(modules: dict[str, Path]) -> None:
    assert not long_files(modules), long_files(modules)


def test_experiments_has_at_most_12_top_level_modules() -> None:
    names = top_level_modules(REPO / "experiments")
    assert len(names) <= MAX_EXPERIMENT_MODULES, names


def test_the_shape_checks_fail_on_a_long_file_and_a_wide_folder(tmp_path: Path) -> None:
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (MAX_LINES + 1))
    short = tmp_path / "short.py"
    short.write_text("x = 1\n" * MAX_LINES)
    assert long_files({"a.long": long, "a.short": short}) == [f"{long}: {MAX_LINES + 1} lines"]
    for i in range(MAX_EXPERIMENT_MODULES + 1):
        (tmp_path / f"m{i}.py").write_text("")
    (tmp_path / "__init__.py").write_text("")
    assert len(top_level_modules(tmp_path)) == MAX_EXPERIMENT_MODULES + 3  # m0..m12, long, short
