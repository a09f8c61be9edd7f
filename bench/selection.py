"""Which items a run (or a capture) selects: request types, variant and void names, injection levels."""

from __future__ import annotations

from collections.abc import Sequence

from evprobe.bench.items import NUMERIC_REQUESTS, REQUESTS, VARIANTS, Item
from evprobe.bench.voids import VOID_TYPES
from evprobe.core.errors import InputError

# Information-injection levels selected (`bench.injection`). `evprobe run` selects every level the
# benchmark holds by default, as it selects every request type (its behaviour before the flag);
# `select_items`' own default and `evprobe capture`'s is level 0 only, since activations of several
# levels pooled in one sweep or steering fit would mix prompts that differ by design.
INJECTION_DEFAULT: tuple[int, ...] = (0,)


def select_items(items: Sequence[Item], requests: Sequence[str] | None, limit: int | None,
                 injection: Sequence[int] | None = INJECTION_DEFAULT) -> list[Item]:
    """Items whose request type (base items) or variant name is in `requests` and whose injection
    level is in `injection` (None: every level), in manifest order; `limit` keeps the first N.

    `select` means the base selections; name a variant (or `variants`) to include variants, and a
    void type (`void-occluded`, `void-unstated`, or `voids` for every type; `bench.voids`) to include
    void items, which are selected by no request name of the main set's. `requests=None` selects
    every item, voids included.
    Injection levels (`bench.injection`): the default, level 0, is every item of a benchmark
    generated without `--injection` (variants and numeric items are level 0); naming a level the
    benchmark does not hold is an error, not an empty selection.
    """
    if injection is not None:
        levels = check_injection(injection)
        present = {it.injection for it in items}
        missing = [lv for lv in levels if lv not in present and lv != 0]
        if missing:
            wanted = ",".join(map(str, sorted(set(missing) | (present - {0}))))
            raise InputError(f"the benchmark has no injection level {missing[0]} items; regenerate it with "
                             f"`evprobe generate --injection {wanted}` or choose other --injection levels")
        items = [it for it in items if it.injection in levels]
    if requests is not None:
        void_names = {f"void-{v}" for v in VOID_TYPES}
        known = set(REQUESTS) | set(NUMERIC_REQUESTS) | set(VARIANTS) | {"variants"} | void_names | {"voids"}
        bad = [r for r in requests if r not in known]
        if bad:
            raise InputError(f"unknown request type {bad[0]!r}; choose from {', '.join(sorted(known))}")
        wanted = (set(requests) | (set(VARIANTS) if "variants" in requests else set())
                  | (void_names if "voids" in requests else set()))
        items = [it for it in items if selection_name(it) in wanted]
    if limit is not None:
        if limit <= 0:
            raise InputError(f"--limit must be a positive integer, got {limit}")
        items = list(items)[:limit]
    return list(items)


def selection_name(item: Item) -> str:
    """The name `--requests` selects an item by: its variant, `void-<type>` for a void item, else its request."""
    return item.variant or (f"void-{item.void}" if item.void else item.request)


def check_injection(levels: Sequence[int]) -> tuple[int, ...]:
    """`--injection`'s levels, validated: distinct, each a level of bench.injection, at least one."""
    from evprobe.bench.injection import INJECTION_LEVELS  # here: bench.injection imports the renderer (PIL)

    out = tuple(levels)
    if not out or len(set(out)) != len(out) or any(type(x) is not int or x not in INJECTION_LEVELS for x in out):
        raise InputError(f"--injection takes distinct levels among {', '.join(map(str, INJECTION_LEVELS))}, got "
                         f"{','.join(map(str, out)) or 'none'}")
    return out
