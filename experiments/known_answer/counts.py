"""The n each known-answer check expects (experiments.known_answer.checks), counted once here for all of them.

Counted from the benchmark the quickstart generated (OUT/bench) and from what each stage was asked to
do (the capture's request types, a direction's fit items, the patching's limit_pairs), never from the
file the check reads: a shard that was never merged, a run that stopped early or a selection that
lost families then fails the check that reads it, with both numbers, instead of passing on a smaller
sample. On the main set half the families still give the planted row an exact lower bound of 0.950:
a bar on the interval alone does not see the loss.

- `Expectations(out).selections()`: every base selection of the bench (behaviour: minimum-cost
  choice; its denominator is the decisions with a select record); `image_pairs()` likewise;
  `voids()` the void items per type and request (experiments.known_answer.voids).
- `captured()`, `captured_by(key)`: the capture's labelled rows, i.e. the bench items of its request
  types (its meta's requests, injection and limit; never its shard) whose label is known, and the
  families they come from (the sweep, the transfer cells, the planted profile's groups).
- `heldout(fit_items)`: the base items of the fit items' request types whose family the fit never
  saw (a stored direction's held-out rows; the dose-response's steered items).
- `patched(limit_pairs)`: the image pairs the patching was asked for, each way (source into target
  and back), as `experiments.patching.job` deals them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from evprobe.bench.items import Item
from evprobe.core.json_files import optional_json_object
from evprobe.core.json_types import JsonObject

CAPTURED_REQUESTS = ("select", "answer_initial")  # the quickstart's, when the capture's meta is absent


@dataclass(frozen=True)
class Expected:
    """`n` units (rows, items or pairs: `what`) from `families` families."""

    what: str
    n: int
    families: int

    @classmethod
    def of(cls, what: str, items: Iterable[Item]) -> Expected:
        items = list(items)
        return cls(what, len(items), len({it.family_id for it in items}))

    @property
    def text(self) -> str:
        return f"n={self.n} {self.what} of {self.families} families"

    def problem(self, n: int | None, families: int | None = None) -> str | None:
        """None when `n` (and `families`, when given) are the expected ones; else both numbers."""
        if n == self.n and (families is None or families == self.families):
            return None
        got = f"n={n}" + ("" if families is None else f" of {families} families")
        return f"{got} where {self.text} are expected"


def n_problems(pairs: Iterable[tuple[str, Expected | None, int | None, int | None]]) -> list[str]:
    """`name: problem` for each (name, expected, n, families) whose counts are off (no expectation:
    a problem too, since a check that cannot state its n cannot check it)."""
    out = []
    for name, expected, n, families in pairs:
        if expected is None:
            out.append(f"{name}: no expected n (no benchmark, or no record of what the stage was asked for)")
        elif (why := expected.problem(n, families)) is not None:
            out.append(f"{name}: {why}")
    return out


class Expectations:
    """Every check's expected n for the quickstart folder `out`; the bench is read on first use."""

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)

    @cached_property
    def items(self) -> list[Item] | None:
        from evprobe.bench.manifest import META_FILE, read_items

        bench = self.out / "bench"
        return read_items(bench, validate_images=False) if (bench / META_FILE).is_file() else None

    @cached_property
    def _by_id(self) -> dict[str, Item]:
        return {it.item_id: it for it in self.items or ()}

    def _select(self, requests: Sequence[str] | None, limit: int | None = None,
                injection: Sequence[int] | None = None) -> list[Item]:
        from evprobe.bench.runner import select_items

        kwargs = {} if injection is None else {"injection": tuple(injection)}
        return select_items(self.items or [], requests, limit, **kwargs)

    def selections(self) -> Expected | None:
        if self.items is None:
            return None
        return Expected.of("select decisions", self._select(("select",)))

    def voids(self) -> dict[tuple[str, str], Expected]:
        """Per (void type, request) the bench's void items (bench.voids); empty without voids."""
        groups: dict[tuple[str, str], list[Item]] = {}
        for it in self.items or ():
            if it.void is not None:
                groups.setdefault((it.void, it.request), []).append(it)
        return {key: Expected.of(f"{key[0]} voids ({key[1]})", rows) for key, rows in groups.items()}

    def image_pairs(self) -> Expected | None:
        from evprobe.experiments.patching.job import image_pairs

        if self.items is None:
            return None
        pairs = image_pairs(self.items)
        return Expected("image pairs", len(pairs), len({a.family_id for a, _ in pairs}))

    @cached_property
    def _captured(self) -> list[Item]:
        meta_path = self.out / "acts" / "meta.json"
        meta: JsonObject = optional_json_object(meta_path, "move the folder aside and rerun the capture") or {}
        requests = meta.get("requests") or CAPTURED_REQUESTS
        chosen = self._select(requests, meta.get("limit"), meta.get("injection"))
        return [it for it in chosen if it.resolved is not None]  # the `resolved` label's rows

    def captured(self) -> Expected | None:
        if self.items is None:
            return None
        return Expected.of(f"labelled rows ({' + '.join(sorted({it.request for it in self._captured}))})",
                           self._captured)

    def captured_by(self, key: Callable[[Item], str]) -> dict[str, Expected]:
        """The capture's expected labelled rows per value of `key` (empty without a bench)."""
        groups: dict[str, list[Item]] = {}
        for it in self._captured:
            groups.setdefault(key(it), []).append(it)
        return {name: Expected.of("labelled rows", rows) for name, rows in groups.items()}

    def families_of(self, item_ids: Iterable[str]) -> set[str]:
        """The families of `item_ids` (an id the bench does not hold: its family prefix)."""
        return {self._by_id[i].family_id if i in self._by_id else i.split(".", 1)[0] for i in item_ids}

    def requests_of(self, item_ids: Iterable[str]) -> tuple[str, ...]:
        """The request types (base request or variant name) of `item_ids`, as select_items names them."""
        return tuple(sorted({self._by_id[i].variant or self._by_id[i].request for i in item_ids if i in self._by_id}))

    def heldout_items(self, fit_items: Sequence[str], label: str = "resolved") -> list[Item]:
        fit = self.families_of(fit_items)
        return [it for it in self._select(self.requests_of(fit_items))
                if it.family_id not in fit and getattr(it, label, None) is not None]

    def heldout(self, fit_items: Sequence[str], label: str = "resolved") -> dict[str, Expected] | None:
        """The held-out items of a fit (`all`, and per class of `label`: `resolved` / `unresolved`
        for the sufficiency label, the dose-response's groups)."""
        if self.items is None:
            return None
        rows = self.heldout_items(fit_items, label)
        what = f"held-out {'/'.join(self.requests_of(fit_items)) or 'items'}"
        out = {"all": Expected.of(what, rows)}
        if label == "resolved":
            out["resolved"] = Expected.of(f"{what} (resolved)", [it for it in rows if it.resolved])
            out["unresolved"] = Expected.of(f"{what} (unresolved)", [it for it in rows if not it.resolved])
        return out

    def patched(self, limit_pairs: int | None) -> Expected | None:
        from evprobe.experiments.patching.job import jobs_of, select_pairs

        if self.items is None:
            return None
        jobs = jobs_of(select_pairs(self.items, limit_pairs))
        return Expected("patched pair directions", len(jobs), len({a.family_id for a, _ in jobs}))
