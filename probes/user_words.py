"""The capture's own words, not the benchmark's: whose capture it is, which label `evprobe sweep` /
`evprobe directions` read when none is named, and what an unknown label's message lists.

- A capture of your own: written by `evprobe.write_capture` (meta.json `written_by`; `is_own`). Its
  labels are its index fields but the ids (`row`, `item_id`, `family_id`), in the order its rows
  give them. Pages about it say what a number is, not the benchmark's name for it.
- No label named: `resolved` where the index carries it (the benchmark's captures, whose quickstart
  sweeps it); else, on your capture, its one label; with several, one line lists them and the flag.
- An unknown label: on your capture, one line naming its labels; on the benchmark's, its index
  fields and derived labels, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evprobe.core.errors import InputError
from evprobe.probes.control_tasks import NOT_CELL_FIELDS

if TYPE_CHECKING:
    from evprobe.probes.captures import CaptureSet

BENCHMARK_LABEL = "resolved"  # sufficiency: the label every benchmark capture carries


def is_own(cs: CaptureSet) -> bool:
    """True when every capture was written from your own arrays (evprobe.write_capture)."""
    return all(c.meta.get("written_by") == "evprobe.write_capture" for c in cs.captures)


def own_labels(cs: CaptureSet) -> list[str] | None:
    """Your captures' labels (their index fields but the ids, first-seen order); None for captures
    of the benchmark (not all written by evprobe.write_capture)."""
    if not is_own(cs):
        return None
    out: list[str] = []
    for row in cs.index:
        out += [name for name in row if name not in NOT_CELL_FIELDS and name not in out]
    return out


def default_label(cs: CaptureSet) -> str:
    """The label read when none is named (module docstring); refused in one line with several."""
    if any(BENCHMARK_LABEL in row for row in cs.index):
        return BENCHMARK_LABEL
    names = own_labels(cs)
    if names is None:  # the benchmark's, without its label: name one (labels() lists the fields)
        raise InputError(f"no label named and the capture has no {BENCHMARK_LABEL!r}; choose one with --label NAME "
                           "(Python: label='NAME')")
    if len(names) == 1:
        return names[0]
    if not names:
        raise InputError("no label named and the capture has none; write your label into its rows "
                           "(evprobe.write_capture(..., rows=[{'family_id': ..., 'my_label': ...}]))")
    raise InputError(f"no label named and the capture has {len(names)}: {', '.join(names)}; choose one with "
                       f"--label NAME (Python: label='NAME'), e.g. --label {names[0]}")


def unknown_own_label(cs: CaptureSet, name: str) -> str | None:
    """The one line for a label your captures do not have, naming theirs; None for the benchmark's
    (probes.label_sets.labels lists their index fields and derived labels)."""
    names = own_labels(cs)
    if not names:
        return None
    return (f"unknown label {name!r}; this capture's labels are {', '.join(names)}: choose one with --label NAME "
            "(Python: label='NAME')")


__all__ = ["BENCHMARK_LABEL", "default_label", "is_own", "own_labels", "unknown_own_label"]
