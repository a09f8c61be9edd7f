"""Every package's public names: one table per lazy facade, every name resolves, none shadows a module.

A lazy facade (a package `__init__` with a module-level `__getattr__`) keeps one table, name ->
where it lives, and its `__all__` is that table's keys: two lists drift (hooks once had 24 names in
`__all__` and 34 in its table). Every name in a package's `__all__` resolves. And no public name is
also the name of one of the package's own modules unless it is that module: importing
`evprobe.hooks.steer` (a module) used to rebind `evprobe.hooks.steer` (a function) on the package.
Each check runs on a toy package written to tmp_path to show it can fail.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType

import pytest

from tests.test_architecture import PYPROJECT, mapped_packages, module_files


def facade_table(package: ModuleType) -> Mapping[str, object] | None:
    """The table a lazy facade's `__getattr__` reads: the one module-level dict named in its body;
    None for a package without `__getattr__`."""
    tree = ast.parse(Path(package.__file__).read_text())
    getattr_defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"]
    if not getattr_defs:
        return None
    read = {n.id for n in ast.walk(getattr_defs[0]) if isinstance(n, ast.Name)}
    tables = [name for name in sorted(read) if isinstance(vars(package).get(name), dict)]
    if len(tables) != 1:
        raise AssertionError(f"{package.__name__}.__getattr__ reads {len(tables)} module-level dicts "
                             f"({tables}); a facade keeps one table")
    return vars(package)[tables[0]]


def facade_problems(package: ModuleType) -> list[str]:
    """What is wrong with a package's public names (empty: nothing)."""
    name = package.__name__
    public = vars(package).get("__all__")
    if public is None:
        return []
    problems = []
    if len(set(public)) != len(public):
        problems.append(f"{name}.__all__ repeats names: {sorted({n for n in public if public.count(n) > 1})}")
    table = facade_table(package)
    if table is not None and sorted(public) != sorted(table):
        problems.append(f"{name}: __all__ and the lazy table differ: only in __all__ "
                        f"{sorted(set(public) - set(table))}, only in the table {sorted(set(table) - set(public))}"
                        " (derive __all__ from the table: __all__ = sorted(TABLE))")
    submodules = {info.name for info in pkgutil.iter_modules(package.__path__)}
    for public_name in public:
        try:
            value = getattr(package, public_name)
        except AttributeError as err:
            problems.append(f"{name}.{public_name} is in __all__ but does not resolve: {err}")
            continue
        if public_name in submodules and not isinstance(value, ModuleType):
            problems.append(f"{name}.{public_name} ({type(value).__name__}) has the name of the module "
                            f"{name}.{public_name}, which rebinds it when imported: rename the module")
    return problems


def _packages() -> Iterator[str]:
    for module, path in module_files(mapped_packages(PYPROJECT)).items():
        if path.name == "__init__.py":
            yield module


def test_every_facade_has_one_table_and_its_names_resolve() -> None:
    problems, facades = [], []
    for name in _packages():
        package = importlib.import_module(name)
        for info in pkgutil.iter_modules(package.__path__):  # submodules imported: nothing may rebind
            if not info.ispkg and not info.name.startswith("__"):
                importlib.import_module(f"{name}.{info.name}")
        problems += facade_problems(package)
        if facade_table(package) is not None:
            facades.append(name)
    assert {"evprobe", "evprobe.hooks", "evprobe.probes"} <= set(facades), facades
    assert not problems, "\n".join(problems)


# --- the check can fail ---------------------------------------------------------------------------


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[Callable[[Mapping[str, str]], ModuleType]]:
    """Write a package `facadetoy` (files: relative path -> text) and import it."""
    sys.path.insert(0, str(tmp_path))

    def make(files: Mapping[str, str]) -> ModuleType:
        for rel, text in files.items():
            (tmp_path / "facadetoy" / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "facadetoy" / rel).write_text(textwrap.dedent(text))
        return importlib.import_module("facadetoy")

    yield make
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m == "facadetoy" or m.startswith("facadetoy.")]:
        del sys.modules[name]


LAZY_INIT = """
    from importlib import import_module

    _LAZY = {"run": "facadetoy.job", "Config": "facadetoy.job"}
    __all__ = ALL

    def __getattr__(name):
        if name in _LAZY:
            return getattr(import_module(_LAZY[name]), name)
        raise AttributeError(name)
"""


def test_check_refuses_a_table_and_all_that_differ(toy) -> None:
    package = toy({"__init__.py": LAZY_INIT.replace("ALL", '["run"]'),
                   "job.py": "def run(): pass\nclass Config: pass\n"})
    assert facade_problems(package) == [
        "facadetoy: __all__ and the lazy table differ: only in __all__ [], only in the table ['Config'] "
        "(derive __all__ from the table: __all__ = sorted(TABLE))"]


def test_check_refuses_a_name_that_does_not_resolve(toy) -> None:
    package = toy({"__init__.py": LAZY_INIT.replace("ALL", "sorted(_LAZY)"), "job.py": "def run(): pass\n"})
    (problem,) = facade_problems(package)
    assert problem.startswith("facadetoy.Config is in __all__ but does not resolve")


def test_check_refuses_a_function_named_like_its_module(toy) -> None:
    package = toy({"__init__.py": "from facadetoy.steer import steer\n__all__ = ['steer']\n",
                   "steer.py": "def steer(): pass\n"})
    assert facade_problems(package) == [
        "facadetoy.steer (function) has the name of the module facadetoy.steer, which rebinds it when "
        "imported: rename the module"]


def test_check_refuses_a_facade_reading_two_tables(toy) -> None:
    package = toy({"__init__.py": """
        _A = {"x": 1}
        _B = {"y": 2}
        __all__ = ["x"]

        def __getattr__(name):
            return _A.get(name, _B.get(name))
    """})
    with pytest.raises(AssertionError, match="reads 2 module-level dicts"):
        facade_problems(package)
