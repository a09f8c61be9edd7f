"""Plugins found through installed packages' entry points (`evprobe.probes`, `evprobe.backends`).

A registry reads its group once, when a name is looked up that is not loaded or when every name is
listed, and imports an entry point's object only when it is used, so an installed plugin costs
nothing until chosen.
"""

from __future__ import annotations

from collections.abc import Collection


def entry_point_refs(group: str, taken: Collection[str], what: str) -> dict[str, str]:
    """name -> "module[:object]" of every entry point in `group`; a name already in `taken` (a
    built-in or one registered in this process) is refused in one line naming the entry point."""
    from importlib.metadata import entry_points

    refs: dict[str, str] = {}
    for ep in entry_points(group=group):
        if ep.name in taken or ep.name in refs:
            raise ValueError(f"entry point {ep.name} = {ep.value!r} (group {group}): {what} {ep.name!r} is already "
                             f"registered (registered: {', '.join([*taken, *refs])}); rename it")
        refs[ep.name] = ep.value
    return refs
