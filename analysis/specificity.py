"""The specificity verdict of a steering effect: the probe's cross-fitted effect against null
directions that went through the same choice, and the sentence that reports it.

Cross-fitting (`crossfit_scores`). The families are split into two halves; on each half, among the
candidate settings (layer x dose), every direction (the probe and each null direction alike) gets its
own best setting by one rule (`choose_settings`: furthest toward the goal, optionally while a guard
rate stays at or below a ceiling; ties to the smaller |alpha|, then the lower layer), and is scored
on the other half. A null direction's cross-fitted effect is then what the probe's would be if the
probe were one more direction of that null: a selected effect compared with selected effects (read
at the probe's own settings, a null direction playing the probe came out "larger" in 8 of 100
verdicts at a nominal 5%).

Rank test (`specificity_stats`), per null set:

    toward = -sign x effect (sign +1: the goal lowers the measure; -1: it raises it);
    p_goal = (1 + #{null directions with toward >= the probe's}) / (K + 1);
    specific = p_goal <= SPECIFIC_P / G, G = the goals a page claims (two goals share the 5%);
    margin = the probe's toward - the largest null direction's toward (> 0: beyond every one).

Two nulls, two named statements: `random` (isotropic unit directions of the same norm: "a push of
this size in any direction does not do this") and `relabel` (analysis.label_null: directions fitted
the same way on label-free rows: "directions these data produce once the label carries nothing do
not do this"). The claim "specific to this direction" needs both (`joint_verdict`): the probe beyond
each null at its threshold. Its size and power are measured by simulation under both hypotheses
(benchmarks/steering_null_power.py), not by leave-one-out among the null directions, which holds by
construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evprobe.core.json_types import JsonObject
from evprobe.core.decimals import fixed

SPECIFIC_P = 0.05
NULL_SETS = ("random", "relabel")
NULL_NAMES = {"random": "random directions of the same norm",
              "relabel": "label-free directions (fitted the same way with the label's line removed and each "
                         "family's labels kept or flipped at random)"}
NULL_SHORT = {"random": "random directions", "relabel": "label-free directions"}
# From 40 directions on, the 2.5 and 97.5 percentiles fall inside the sample (at least one direction
# beyond each edge), so the band is a central 95%; with fewer it is the directions' spread, and is
# named so (a band of 2 directions is not a "2.5-97.5%" band).
FULL_BAND = 40


HALVES = ("A", "B")  # the cross-fit's two halves of the families


def split_halves(families_by_system: dict[str, list[str]], seed: int) -> dict[str, str]:
    """family -> "A" | "B": within each system (sorted), a seeded shuffle dealt alternately; the
    first deal of each system alternates too, so odd counts do not all land in A."""
    rng = np.random.default_rng(seed)
    half: dict[str, str] = {}
    for s, system in enumerate(sorted(families_by_system)):
        fams = sorted(families_by_system[system])
        for i, j in enumerate(rng.permutation(len(fams))):
            half[fams[j]] = HALVES[(i + s) % 2]
    return half


def band_name(k: int, what: str = "directions") -> str:
    """A null band named by how many directions made it: `central 95% of 50 random directions`,
    `spread of 2 random directions (too few for a 95% band)`, `1 random direction (no band)`."""
    if k >= FULL_BAND:
        return f"central 95% of {k} {what}"
    if k >= 2:
        return f"spread of {k} {what} (too few for a 95% band)"
    return f"{k} {what.removesuffix('s')} (no band)"


def choose_settings(cands: Sequence[tuple[int, float]], shift: np.ndarray, useless: np.ndarray,
                    ceiling: float = 0.10) -> tuple[np.ndarray, np.ndarray]:
    """Per direction, the index into `cands` of the setting chosen (module docstring) and whether every
    setting broke. shift, useless: (C, K) per candidate and direction (shift > 0 = toward the goal;
    useless: the guard rate, at most `ceiling` for a setting to count; zeros for no guard); NaN shift
    never wins."""
    order = sorted(range(len(cands)), key=lambda c: (abs(cands[c][1]), cands[c][0]))  # tie-break order
    ok = ~np.isnan(useless) & (useless <= ceiling)  # (C, K)
    broken = ~ok.any(axis=0)  # (K,)
    pool = np.where(broken[None, :], True, ok)
    key = np.where(pool & ~np.isnan(shift), np.round(shift, 9), -np.inf)[order]  # (C, K) in tie-break order
    return np.asarray(order)[np.argmax(key, axis=0)], broken  # argmax: the first of equal maxima


def group_means(V: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Means over mask's items where defined: V (items, K, M) -> (K, M); NaN where none."""
    sub = V[mask]
    defined = ~np.isnan(sub)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(defined.any(0), np.where(defined, sub, 0.0).sum(0) / np.maximum(defined.sum(0), 1), np.nan)


def scored_at(stack: np.ndarray, choices: Mapping[str, np.ndarray], half: np.ndarray, halves: Sequence[str]
              ) -> np.ndarray:
    """(items, K, M): every item read at the setting its direction chose on the *other* half (two halves).
    stack: (C, items, K, M); choices: per half, each direction's candidate index (K,)."""
    K = stack.shape[2]
    out = np.full(stack.shape[1:], np.nan)
    for h in halves:
        other = half != h  # the half scored at this half's choices
        for k in range(K):
            out[other, k] = stack[choices[h][k], other, k]
    return out


def crossfit_scores(cands: Sequence[tuple[int, float]], stack: np.ndarray, base: np.ndarray, half: np.ndarray,
                    halves: Sequence[str], fit: np.ndarray, col: int, toward: int, guard: int | None = None,
                    ceiling: float = 0.10) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every direction's choice on each half and its scores on the other (module docstring).

    cands: the candidate settings (layer, alpha), C of them; stack: (C, items, K, M) each direction's
    per-item values at each candidate; base: (items, M) unsteered; half: (items,) each item's half;
    fit: (items,) the items whose mean decides; col: the measure that must move `toward` (+1 up, -1
    down); guard: a rate measure that must stay <= ceiling (None: no guard).
    Returns (scored (items, K, M), choices {half: (K,)}, broken {half: (K,)})."""
    choices, broken = {}, {}
    for h in halves:
        choices[h], broken[h], _, _ = half_choices(cands, stack, base, fit & (half == h), col, toward, guard, ceiling)
    return scored_at(stack, choices, half, halves), choices, broken


def half_choices(cands: Sequence[tuple[int, float]], stack: np.ndarray, base: np.ndarray, on: np.ndarray, col: int,
                 toward: int, guard: int | None = None, ceiling: float = 0.10
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One half's choice for every direction (crossfit_scores; `on`: that half's fitting items):
    (chosen candidate (K,), every candidate broke (K,), the move toward the goal (C, K) and the guard
    rate (C, K; zeros without a guard)) at each candidate."""
    base_mean = np.nanmean(base[on, col]) if on.any() else np.nan
    per = np.stack([group_means(stack[c], on) for c in range(len(cands))])  # (C, K, M)
    moved = toward * (per[:, :, col] - base_mean)  # (C, K): + = toward the goal
    rates = per[:, :, guard] if guard is not None else np.zeros(per.shape[:2])
    chosen, broken = choose_settings(cands, moved, rates, ceiling)
    return chosen, broken, moved, rates


def null_stats(probe_effect: float | None, effects: np.ndarray) -> dict[str, Any]:
    """The probe's effect among K null effects (K,), NaN dropped: their mean, sd (ddof 1), band
    (2.5-97.5 percentiles), the probe's percentile (100 x (#below + 0.5 #equal) / K), z (None when
    they do not vary) and the two-sided p_null = (1 + #{|null - mean| >= |probe - mean|}) / (K + 1)."""
    e = effects[~np.isnan(effects)]
    k = len(e)
    out: JsonObject = {"n_directions": k, "mean": None, "sd": None, "lo": None, "hi": None,
                           "probe_effect": probe_effect, "percentile": None, "z": None, "p_null": None}
    if not k:
        return out
    mean = float(e.mean())
    sd = float(e.std(ddof=1)) if k > 1 else 0.0
    out.update(mean=mean, sd=sd, lo=float(np.percentile(e, 2.5)), hi=float(np.percentile(e, 97.5)))
    if probe_effect is None:
        return out
    p = probe_effect
    out["percentile"] = float(100.0 * (np.sum(e < p) + 0.5 * np.sum(e == p)) / k)
    out["z"] = float((p - mean) / sd) if sd > 1e-12 else None
    out["p_null"] = float((1 + np.sum(np.abs(e - mean) >= abs(p - mean) - 1e-12)) / (k + 1))
    return out


def specificity_stats(probe_effect: float | None, effects: np.ndarray, sign: int, goals: int = 2,
                      near_share: float | None = None) -> dict[str, Any]:
    """The probe's place among K null effects (K,) on the targeted group: null_stats' percentile, band
    and two-sided p_null, plus the one-sided p_goal, the threshold SPECIFIC_P / goals, the verdict,
    the margin over the nearest null direction (in the effect's units) and, when given, the share of
    the null's directions within |cos| 0.9 of the probe (module docstring)."""
    e = np.asarray(effects, dtype=np.float64)
    e = e[~np.isnan(e)]
    threshold = SPECIFIC_P / max(goals, 1)
    out = {**null_stats(probe_effect, e), "effects": [float(x) for x in e], "p_goal": None, "beaten": None,
           "threshold": threshold, "specific": None, "margin": None, "near_share": near_share}
    if probe_effect is None or not len(e):
        return out
    toward, probe_toward = -sign * e, -sign * probe_effect
    at_least = int(np.sum(toward >= probe_toward - 1e-12))
    out.update(p_goal=(1 + at_least) / (len(e) + 1), beaten=len(e) - at_least,
               margin=float(probe_toward - toward.max()))
    out["specific"] = bool(out["p_goal"] <= threshold)
    return out


@dataclass(frozen=True)
class Verdict:
    """The claim both nulls together allow (joint_verdict): `specific` True ("specific to this
    direction": beyond every null, both having run), False (not beyond a null that ran) or None (no
    verdict: a null did not run, or has too few directions); `against`: the nulls that ran and
    `missing`: the others, by kind (NULL_SETS: "random", "relabel" = the label-free directions)."""

    specific: bool | None
    against: tuple[str, ...]
    missing: tuple[str, ...]

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> Verdict:
        """From its JSON (`to_json`), as a results file holds it."""
        return cls(record.get("specific"), tuple(record.get("against") or ()), tuple(record.get("missing") or ()))

    @property
    def text(self) -> str:
        return joint_text(self)

    def to_json(self) -> JsonObject:
        return {"specific": self.specific, "against": list(self.against), "missing": list(self.missing)}


def joint_verdict(by_kind: Mapping[str, Mapping[str, Any] | None]) -> Verdict:
    """"Specific to this direction" needs every null: True when each null that ran calls it specific
    and both ran; False when any null that ran does not; None (no verdict) when a null is missing
    or has too few directions for its threshold."""
    ran = {k: s for k, s in by_kind.items() if s and s.get("p_goal") is not None}
    missing = tuple(k for k in NULL_SETS if k not in ran)
    if any(s.get("specific") is False for s in ran.values()):
        specific: bool | None = False
    elif missing or any(s.get("specific") is None for s in ran.values()):
        specific = None
    else:
        specific = True
    return Verdict(specific, tuple(k for k in NULL_SETS if k in ran), missing)


def verdict_text(stats: Mapping[str, Any] | None, kind: str, unit: str) -> str:
    """One clause: where the probe's cross-fitted effect sits among a null's cross-fitted effects, its
    margin over the nearest null direction and (for data-derived nulls) how many lie near the probe."""
    name = NULL_NAMES[kind]
    if not stats or stats.get("p_goal") is None:
        return f"no {name} were run"
    k = stats["n_directions"]
    scale = 100.0 if unit == "points" else 1.0
    band = f"theirs {fixed(scale * stats['lo'], 2, sign=True)} to {fixed(scale * stats['hi'], 2, sign=True)} {unit}, {band_name(k)}"
    extra = ""
    if stats.get("margin") is not None:
        extra += f"; margin over the nearest {fixed(scale * stats['margin'], 2, sign=True)} {unit}"
    if stats.get("near_share") is not None:
        extra += f"; {100 * stats['near_share']:.0f}% of them within |cos| 0.9 of the probe"
    head = (f"beyond {stats['beaten']} of {k} {name}, each given its own cross-fitted choice ({band}{extra}; "
            f"p {stats['p_goal']:.3f})")
    threshold = stats.get("threshold", SPECIFIC_P)
    if 1 / (k + 1) > threshold:
        return head + f": too few ({k}) for p <= {threshold:g}, so no verdict"
    if stats["specific"]:
        return head + (": beyond what these data give once the label carries nothing" if kind == "relabel" else
                       ": larger than a push of this size in a random direction")
    return head + (": not more than directions fitted without the label do" if kind == "relabel" else
                   ": not more than a random direction of the same size does")


def joint_text(verdict: Verdict | Mapping[str, Any]) -> str:
    """The claim the two nulls together allow, as one clause (it reads after "so"); `verdict` a
    Verdict or its JSON."""
    v = verdict if isinstance(verdict, Verdict) else Verdict.of(verdict)
    if v.specific is True:
        return "the effect is specific to this direction: beyond both nulls"
    if v.specific is False:
        return "the effect is not shown to be specific to this direction"
    missing = " or ".join(NULL_SHORT[k] for k in v.missing)
    return (f"there is no verdict on specificity ({'no ' + missing + ' were run' if missing else 'too few null directions'})")


__all__ = ["FULL_BAND", "HALVES", "NULL_NAMES", "NULL_SETS", "NULL_SHORT", "SPECIFIC_P", "Verdict", "band_name",
           "choose_settings", "crossfit_scores", "group_means", "half_choices", "joint_text", "joint_verdict",
           "null_stats", "scored_at", "specificity_stats", "split_halves", "verdict_text"]
