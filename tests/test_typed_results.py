"""Typed results (issue 54 item 4): `dict[str, Any]` in the package under MAX_UNTYPED, no alias of it,
and none in a public signature (every name a facade's `__all__` exports, and the public methods of
the classes among them). JSON wire data (a parsed line, meta.json, a `to_json()` payload) is typed
with core.json_types.JsonObject; results passed between functions are frozen dataclasses.
Each check runs on a toy written to tmp_path to show it can fail."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.test_architecture import PYPROJECT, mapped_packages, module_files

MAX_UNTYPED = 150
UNTYPED = re.compile(r"\b(?:dict|Dict)\[\s*str\s*,\s*(?:typing\.)?Any\s*\]")
ALIAS = re.compile(r"^\s*(\w+)\s*(?::\s*TypeAlias\s*)?=\s*(?:dict|Dict)\[\s*str\s*,\s*(?:typing\.)?Any\s*\]\s*(#.*)?$",
                   re.M)


def untyped_count(files: Iterator[Path]) -> tuple[int, list[str]]:
    """(occurrences of dict[str, Any], the aliases of it as FILE:LINE: NAME)."""
    count, aliases = 0, []
    for path in files:
        text = path.read_text()
        count += len(UNTYPED.findall(text))
        for m in ALIAS.finditer(text):
            aliases.append(f"{path}:{text[:m.start()].count(chr(10)) + 1}: {m.group(1)}")
    return count, aliases


def public_signatures(package: ModuleType) -> Iterator[tuple[str, str]]:
    """(qualified name, its annotations as written) of every function and public method a package's
    `__all__` exports."""
    for name in getattr(package, "__all__", ()):
        value = getattr(package, name)
        owners = [(f"{package.__name__}.{name}", value)]
        if inspect.isclass(value):
            owners = [(f"{package.__name__}.{name}.{attr}", member) for attr, member in vars(value).items()
                      if not attr.startswith("_") or attr == "__init__"]
        for qualified, member in owners:
            member = getattr(member, "__func__", member)  # classmethods and staticmethods
            if isinstance(member, property):
                member = member.fget
            if inspect.isfunction(member):
                yield qualified, " ".join(str(a) for a in member.__annotations__.values())


def facades() -> list[ModuleType]:
    """The installed evprobe facade and every package of it with an `__all__`."""
    out = []
    for name in sorted(mapped_packages(PYPROJECT)):
        module = importlib.import_module(name)
        if hasattr(module, "__all__"):
            out.append(module)
    return out


def test_dict_str_any_is_rare_and_never_aliased() -> None:
    count, aliases = untyped_count(iter(module_files(mapped_packages(PYPROJECT)).values()))
    assert not aliases, f"aliases of dict[str, Any] hide it: {aliases}"
    assert count < MAX_UNTYPED, f"dict[str, Any] appears {count} times in the package (at most {MAX_UNTYPED - 1})"


def test_no_public_signature_carries_dict_str_any() -> None:
    found = [q for package in facades() for q, annotations in public_signatures(package) if UNTYPED.search(annotations)]
    assert not found, f"public signatures with dict[str, Any]: {found}"


def test_the_checks_fail_on_an_alias_a_count_and_a_public_signature(tmp_path: Path) -> None:
    toy = tmp_path / "toy_typed"
    toy.mkdir()
    (toy / "__init__.py").write_text(
        "from __future__ import annotations\nfrom typing import Any\n__all__ = ['f', 'C']\n"
        "Row = dict[str, Any]\n"
        "def f(x: int) -> dict[str, Any]:\n    return {}\n"
        "class C:\n    def to_json(self) -> Dict[str, Any]:\n        return {}\n"
        "    def _private(self) -> dict[str, Any]:\n        return {}\n")
    count, aliases = untyped_count(iter([toy / "__init__.py"]))
    assert count == 4 and aliases == [f"{toy / '__init__.py'}:4: Row"]
    sys.path.insert(0, str(tmp_path))
    try:
        package = importlib.import_module("toy_typed")
        found = [q for q, a in public_signatures(package) if UNTYPED.search(a)]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("toy_typed", None)
    assert found == ["toy_typed.f", "toy_typed.C.to_json"]
