"""Finding intervals that are points: in a JSON tree (`zero_width`) and in printed text (`POINT`).
A value fixed by design or identical in every unit (core.bootstrap) is printed without an interval
and carries its flag; every other [lo, hi] must have width."""

from __future__ import annotations

POINT = r"\[([-+]?\d+(?:\.\d+)?), \1\]"  # an interval printed as `[x, x]`
NEGATIVE_ZERO = r"(?<![\w.])-0(?:\.0+)?(?![\d.])"  # `-0.00`, `-0.0`, `-0`: a zero printed with a sign (core.decimals)
MARKED = ("fixed_by_design", "identical_units")


def zero_width(tree: object, path: str = "") -> list[str]:
    """Paths of every [lo, hi] pair with lo == hi in a JSON tree, but those of a marked estimate."""
    out: list[str] = []
    if isinstance(tree, dict):
        if any(tree.get(flag) for flag in MARKED):
            return out
        for k, v in tree.items():
            if (k == "ci" or k.endswith("_ci")) and isinstance(v, list) and len(v) == 2 and v[0] is not None:
                if v[0] == v[1]:
                    out.append(f"{path}/{k}")
            else:
                out += zero_width(v, f"{path}/{k}")
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += zero_width(v, f"{path}[{i}]")
    return out
