"""Pair patching on your own pairs: the pipeline's measures and intervals for any aligned pairs.

    result = pair_patching(handle, pairs, families=families, candidates=["A", "B"], answers=answers,
                           sites=handle.sites.all("attn_head", [2, 3]), position_sets={"last": [-1]})
    result.frame         # DataFrame: site, position_set, measure, value, lo, hi, n, n_families, identical
    result.plot("heatmap.png")

A pair is two inputs whose tokens align (the same prompt with two images of the same size, or
two prompts of the same token count): (prompt, images) each. Each pair is patched both ways
(`both_ways`): the source member's value of every site at every position set is put into the
target's forward, one (site, set) per batch row (hooks.patching.patch_sites). With a_s and a_t
the two members' answers (`answers`, one (first, second) per pair; None: each member's own top
candidate unpatched; a pair whose two answers are the same is refused: LD is 0 however it is
patched), LD = log p(a_s) - log p(a_t) at the answer position, and per site x set:

- mean_change: the mean of LD_patched - LD_target, in nats;
- share_of_gap: (LD_patched - LD_target) / (LD_source - LD_target), over pairs with a gap of at
  least MIN_GAP nats (pairs the model barely separates give no share);
- decoded_flip: how often the top candidate becomes the source's, over pairs whose top
  candidates differ (interchange-intervention accuracy),

each with a family bootstrap (whole families resampled; a share whose every pair lies in [0, 1]
and the flips get the cluster Clopper-Pearson hull, never a point; a mean change equal in every
pair is marked identical, with no interval). `evprobe patching` computes its rows (`patch_row`)
and its tables (`aggregate`) with these same functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from evprobe.core.json_types import JsonObject
from evprobe.analysis.effects import estimate_columns
from evprobe.core.bootstrap import Estimate, FamilyBootstrap
from evprobe.core.errors import InputError, shown
from evprobe.analysis.patching_figures import MIN_GAP  # the figures name it too: one home, below both

if TYPE_CHECKING:
    import pandas as pd

MEASURES = ("mean_change", "share_of_gap", "decoded_flip")


def patch_row(handle: Any, source: tuple[str, Sequence[Any]], target: tuple[str, Sequence[Any]], *,
              answers: tuple[int, int], sites: Sequence[Any], position_sets: Mapping[str, Any],
              candidates: Sequence[str], shape: tuple[int, ...] | None = None) -> dict[str, Any]:
    """One pair direction patched at every site x position set: LD of the source, the target and
    every patch, and the top candidates (the row `aggregate` reads).

    answers: (source's answer, target's answer) as candidate indices. shape: how to lay out the
    (sites, sets) grid in the row (e.g. (layers, heads x sets)); None: (sites, sets)."""
    from evprobe.hooks import patching

    result = patching.patch_sites(handle, source, target, sites=list(sites), position_sets=position_sets,
                                  candidates=list(candidates))
    a_s, a_t = answers

    def ld(logp: np.ndarray) -> np.ndarray:
        return logp[..., a_s] - logp[..., a_t]

    grid = shape or result.patched.shape[:2]
    return {
        "ld_source": float(ld(result.source)),
        "ld_target": float(ld(result.target)),
        "ld_patched": ld(result.patched).reshape(grid).tolist(),
        "top_source": int(result.source.argmax()),
        "top_target": int(result.target.argmax()),
        "top_patched": result.top().reshape(grid).tolist(),
    }


Grid = tuple[tuple[Estimate, ...], ...]  # (rows: layers or sites, position sets)


@dataclass(frozen=True)
class PatchingSummary:
    """`aggregate`'s tables: per row label (a layer or a site) x position set, each measure's Estimate
    (mean_change, share_of_gap, decoded_flip: module docstring), with the counts, the mean gap and
    how the intervals were made. `to_json()` is patching.json's core (the command adds its run's fields)."""

    layers: tuple[Any, ...]
    positions: tuple[str, ...]
    n_rows: int
    n_families: int
    mean_change: Grid
    share_of_gap: Grid
    decoded_flip: Grid
    mean_gap: float | None
    interval: str

    def grid(self, measure: str) -> Grid:
        if measure not in MEASURES:
            raise InputError(f"measure {measure!r} is not one of pair patching's: {', '.join(MEASURES)}")
        return getattr(self, measure)

    def to_json(self) -> JsonObject:
        def cells(g: Grid) -> list[list[JsonObject]]:
            return [[e.to_json() for e in row] for row in g]

        return {"layers": list(self.layers), "positions": list(self.positions), "n_rows": self.n_rows,
                "n_families": self.n_families, "mean_change": cells(self.mean_change),
                "share_of_gap": cells(self.share_of_gap), "decoded_flip": cells(self.decoded_flip),
                "mean_gap": self.mean_gap, "interval": self.interval}


def aggregate(rows: list[dict[str, Any]], layers: list[Any], positions: list[str], *, n_boot: int,
              seed: int) -> PatchingSummary:
    """Per layer (or site) x position set: mean LD change, share of the gap, decoded flips (module
    docstring); `layers` and `positions` label the rows' (L, P) grids."""
    families = sorted({r["family_id"] for r in rows})
    boot = FamilyBootstrap(families, n_boot, seed)
    index = {f: i for i, f in enumerate(families)}
    F, L, P = len(families), len(layers), len(positions)
    change = np.zeros((F, L, P))
    change_lo, change_hi = np.full((L, P), np.inf), np.full((L, P), -np.inf)  # the units' range per cell
    n_rows = np.zeros(F)
    share_num, share_den = np.zeros((F, L, P)), np.zeros(F)
    share_bounded = np.ones((L, P), bool)  # every pair's share of the gap inside [0, 1] in this cell
    flip_num, flip_den = np.zeros((F, L, P)), np.zeros(F)
    for r in rows:
        f = index[r["family_id"]]
        patched = np.asarray(r["ld_patched"])  # (L, P)
        delta = patched - r["ld_target"]
        change[f] += delta
        change_lo, change_hi = np.minimum(change_lo, delta), np.maximum(change_hi, delta)
        n_rows[f] += 1
        gap = r["ld_source"] - r["ld_target"]
        if abs(gap) >= MIN_GAP:
            share = delta / gap  # (L, P)
            share_num[f] += share
            share_den[f] += 1
            share_bounded &= (share >= 0.0) & (share <= 1.0)
        if r["top_source"] != r["top_target"]:
            flip_num[f] += np.asarray(r["top_patched"]) == r["top_source"]
            flip_den[f] += 1

    def grid(num: np.ndarray, den: np.ndarray, binary: bool | np.ndarray = False) -> Grid:
        flags = np.broadcast_to(np.asarray(binary, dtype=bool), (L, P)).reshape(-1)
        flat = boot.rates(num.reshape(F, -1), np.repeat(den[:, None], L * P, axis=1), binary=flags)
        held = int((den > 0).sum())  # the families holding a pair of the measure: its interval's effective n
        return tuple(tuple(flat[i * P + j].in_families(held) for j in range(P)) for i in range(L))

    return PatchingSummary(
        layers=tuple(layers),
        positions=tuple(positions),
        n_rows=int(n_rows.sum()),
        n_families=F,
        # a cell where every pair moved by exactly the same amount (a position no later computation
        # reads: exactly 0) has nothing to resample: printed as identical, not as [0, 0] (core.bootstrap)
        mean_change=tuple(tuple(Estimate.identical_units(float(change_lo[i, j]), int(n_rows.sum())).in_families(F)
                                if rows and change_lo[i, j] == change_hi[i, j] else e for j, e in enumerate(row))
                          for i, row in enumerate(grid(change, n_rows))),
        # a cell whose every pair recovers between none and all of the gap is a mean of [0, 1] units:
        # its interval is also the cluster Clopper-Pearson one (core.proportion; conservative for
        # bounded units), so a deterministic model's 1.00 is not printed as [1.00, 1.00]
        share_of_gap=grid(share_num, share_den, binary=share_bounded),
        decoded_flip=grid(flip_num, flip_den, binary=True),  # a share of rows: never a zero-width interval
        mean_gap=float(np.mean([r["ld_source"] - r["ld_target"] for r in rows])) if rows else None,
        interval=(f"family bootstrap, {n_boot} resamples, seed {seed}, pointwise 95% percentile; decoded flips, "
                  "and shares of the gap where every pair's share lies in [0, 1], hulled with the cluster "
                  "Clopper-Pearson interval (never zero width); a mean change equal in every pair is printed as "
                  "identical, with no interval"),
    )




@dataclass(frozen=True)
class PairPatchingResult:
    """What `pair_patching` measured: `rows` (one per pair direction, `patch_row`'s fields plus
    pair, family_id and direction), `summary` (aggregate's estimates per site x set) and `frame`
    (the same, tidy: site, position_set, measure, value, lo, hi, n, n_families, identical)."""

    rows: list[dict[str, Any]]
    summary: PatchingSummary
    frame: pd.DataFrame

    def plot(self, path: str | Path) -> Path:
        """The pipeline's heatmaps, site x position set: the mean change of the log-odds, the share
        of the gap and the decoded flips, each cell with its 95% interval, as one PNG."""
        from evprobe.analysis.patching_figures import heatmap_png

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        heatmap_png(self.summary.to_json(), path, measures=MEASURES, row_label="site",
                    decoded="candidate")
        return path

    def to_dataframe(self, table: str = "frame") -> pd.DataFrame:
        """`frame` (the estimates, tidy) or `rows` (one per pair direction, its grids as lists)."""
        import pandas as pd

        if table == "frame":
            return self.frame.copy()
        if table == "rows":
            return pd.DataFrame(self.rows)
        raise InputError(f"table {table!r} is not one of PairPatchingResult's: frame, rows")


def pair_patching(
    handle: Any,
    pairs: Sequence[tuple[tuple[str, Sequence[Any] | None], tuple[str, Sequence[Any] | None]]],
    *,
    families: Sequence[str],
    candidates: Sequence[str],
    answers: Sequence[tuple[str, str]] | None = None,
    sites: Sequence[Any] | None = None,
    position_sets: Mapping[str, Any] | None = None,
    both_ways: bool = True,
    n_boot: int = 2000,
    seed: int = 20260905,
) -> PairPatchingResult:
    """Patch each pair's members into each other (module docstring).

    pairs: ((prompt, images), (prompt, images)) per pair, images None or a list per member.
    families: one id per pair, kept whole by every resample.
    sites: hooks.sites spellings (default: the residual stream after every layer).
    position_sets: name -> token indices of the input row (negative from its end) or "all";
        default {"last": [-1]}, the answer position.
    """
    import pandas as pd

    from evprobe.analysis.inputs import MAX_BOOT, identifiers, integer, prompt_lengths, texts

    n_boot = integer("n_boot", n_boot, 1, MAX_BOOT, "the number of family resamples, e.g. 2000")
    seed = integer("seed", seed, 0, fix="a non-negative integer seeds the resamples")
    if isinstance(pairs, str) or not isinstance(pairs, Sequence) or isinstance(families, str) or not isinstance(
            families, Sequence):
        raise InputError(f"pairs {shown(pairs, 30)} and families {shown(families, 30)}: give a list of pairs and one "
                         "family id per pair")
    if len(families) != len(pairs):
        raise InputError(f"{len(pairs)} pairs but {len(families)} family ids; give one family id per pair")
    if not pairs:
        raise InputError("no pairs given")
    identifiers("families", list(families), "pair", "give every pair a family id (a string or number)")
    for p, pair in enumerate(pairs):
        ok = isinstance(pair, Sequence) and len(pair) == 2 and all(
            isinstance(m, Sequence) and not isinstance(m, str) and len(m) == 2 and isinstance(m[0], str)
            and (m[1] is None or isinstance(m[1], list | tuple)) for m in pair)
        if not ok:
            raise InputError(f"pairs[{p}] is {shown(pair, 40)}; give ((prompt, images), (prompt, images)), images a "
                             "list or None")
    texts("candidates", candidates, "A", empty=False)
    prompt_lengths(handle, [m[0] for pair in pairs for m in pair], [list(m[1] or []) for pair in pairs for m in pair],
                   2, 2)
    if answers is not None and len(answers) != len(pairs):
        raise InputError(f"{len(pairs)} pairs but {len(answers)} answer pairs; give one (first, second) per pair")
    cands = list(candidates)
    for pair_answers in answers or ():
        bad = next((a for a in pair_answers if a not in cands), None)
        if bad is not None:
            raise InputError(f"answer {bad!r} is not a candidate; choose from {', '.join(cands)}")
    chosen = [handle.sites.check(s) for s in (sites or handle.sites.all("resid_post"))]
    sets = dict(position_sets or {"last": [-1]})
    from evprobe.hooks.generation import next_token_logprobs

    members_of = [[(first[0], list(first[1] or [])), (second[0], list(second[1] or []))] for first, second in pairs]
    if answers is None:  # each member's own top candidate, unpatched: (pairs, 2) candidate indices
        owns = [tuple(int(i) for i in next_token_logprobs(handle, [m[0] for m in members], [m[1] for m in members],
                                                          cands).argmax(axis=1)) for members in members_of]
    else:
        owns = [(cands.index(a), cands.index(b)) for a, b in answers]
    shared = [p for p, (a, b) in enumerate(owns) if a == b]
    if shared:  # LD = log p(a) - log p(a) = 0 whatever is patched: every measure would read 0 (or nothing)
        where = "answers" if answers is not None else "top candidates (unpatched)"
        raise InputError(f"{len(shared)} of {len(pairs)} pairs have members with the same {where}: pair"
                         f"{'s' if len(shared) > 1 else ''} {', '.join(map(str, shared[:8]))}"
                         f"{', ...' if len(shared) > 8 else ''} ({cands[owns[shared[0]][0]]!r} for both), so patching "
                         "cannot move log p(source's answer) - log p(target's); give answers=[(first, second), ...] "
                         "that differ within each pair, or leave those pairs out")
    rows = []
    for p, (members, own, family) in enumerate(zip(members_of, owns, families, strict=True)):
        for direction in ((0, 1), (1, 0)) if both_ways else ((0, 1),):
            s, t = direction
            row = patch_row(handle, members[s], members[t], answers=(own[s], own[t]), sites=chosen,
                            position_sets=sets, candidates=cands)
            rows.append({"pair": p, "family_id": str(family), "direction": f"{s}>{t}", **row})
    labels = [str(s) for s in chosen]
    summary = aggregate(rows, labels, list(sets), n_boot=n_boot, seed=seed)
    frame = [{"site": labels[i], "position_set": name, "measure": measure,
              **estimate_columns(summary.grid(measure)[i][j])}
             for measure in MEASURES for i in range(len(labels)) for j, name in enumerate(sets)]
    return PairPatchingResult(rows=rows, summary=summary, frame=pd.DataFrame(frame))
