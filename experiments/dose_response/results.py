"""Typed values of `evprobe dose-response`'s aggregates, passed between stats, null, crossfit, text and
report; each `to_json()` writes the dose_response.json spelling (key order included: the quickstart
digest pins the file byte for byte). Estimates are core.bootstrap.Estimate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evprobe.core.json_types import JsonObject
from evprobe.analysis.specificity import Verdict
from evprobe.core.bootstrap import Estimate

if TYPE_CHECKING:  # meta.py builds on Split here
    from evprobe.experiments.dose_response.meta import ReportMeta


def json_of(x: Any) -> dict[str, Any] | None:
    """A typed value's JSON, None for None."""
    return None if x is None else x.to_json()


@dataclass(frozen=True)
class CurveRow:
    """One point of a curve: a condition's estimate on one group x system x measure and its paired
    change against alpha = 0."""

    readout: str
    layer: int | None
    kind: str  # baseline, probe, ablation
    alpha: float | None
    group: str
    system: str
    measure: str
    estimate: Estimate
    change: Estimate

    def to_json(self) -> JsonObject:
        return {"readout": self.readout, "layer": self.layer, "kind": self.kind, "alpha": self.alpha,
                "group": self.group, "system": self.system, "measure": self.measure, **self.estimate.to_json(),
                "delta_vs_0": self.change.to_json()}


@dataclass(frozen=True)
class Place:
    """Where an effect sits among a null's effects, two-sided (analysis.specificity.null_stats);
    `n_directions` None where the row does not say (a control's place)."""

    percentile: float | None
    z: float | None
    p_null: float | None
    n_directions: int | None = None


@dataclass(frozen=True)
class NullBandRow:
    """The null of one set (random or relabel) at one layer x dose x cell (experiments.dose_response.null)."""

    readout: str
    layer: int
    alpha: float
    group: str
    system: str
    measure: str
    mean: float | None  # the directions' mean value (base + mean effect)
    band_lo: float | None
    band_hi: float | None
    effect_mean: float | None
    effect_sd: float | None
    effect_lo: float | None
    effect_hi: float | None
    probe_effect: float | None
    percentile: float | None
    z: float | None
    p_null: float | None
    n_directions: int
    n: int

    @property
    def place(self) -> Place:
        return Place(self.percentile, self.z, self.p_null, self.n_directions)

    def to_json(self) -> JsonObject:
        return {"readout": self.readout, "layer": self.layer, "alpha": self.alpha, "group": self.group,
                "system": self.system, "measure": self.measure, "mean": self.mean, "band_lo": self.band_lo,
                "band_hi": self.band_hi, "effect_mean": self.effect_mean, "effect_sd": self.effect_sd,
                "effect_lo": self.effect_lo, "effect_hi": self.effect_hi, "probe_effect": self.probe_effect,
                "percentile": self.percentile, "z": self.z, "p_null": self.p_null,
                "n_directions": self.n_directions, "n": self.n}


@dataclass(frozen=True)
class ControlRow:
    """One control direction at one layer x dose x cell (system all), placed in the random null and,
    when run, in the relabelled one."""

    readout: str
    layer: int
    alpha: float
    control: str
    cosine_with_probe: float
    group: str
    system: str
    measure: str
    estimate: Estimate
    change: Estimate
    probe_change: Estimate
    place: Place
    relabel_percentile: float | None
    relabel_p_null: float | None

    def to_json(self) -> JsonObject:
        return {"readout": self.readout, "layer": self.layer, "alpha": self.alpha, "control": self.control,
                "cosine_with_probe": self.cosine_with_probe, "group": self.group, "system": self.system,
                "measure": self.measure, **self.estimate.to_json(), "delta_vs_0": self.change.to_json(),
                "probe_delta_vs_0": self.probe_change.to_json(), "percentile": self.place.percentile,
                "z": self.place.z, "p_null": self.place.p_null, "relabel_percentile": self.relabel_percentile,
                "relabel_p_null": self.relabel_p_null}


@dataclass(frozen=True)
class Ablation:
    """The ablation's paired change at one layer x group (system all), with its sentence (text)."""

    readout: str
    layer: int
    group: str
    stop_rate_at_0: Estimate
    stop_rate: Estimate
    change: Estimate
    log_odds_change: Estimate | None  # None: the readout has no log-odds
    sentence: str

    def to_json(self) -> JsonObject:
        out = {"readout": self.readout, "layer": self.layer, "group": self.group,
               "stop_rate_at_0": self.stop_rate_at_0.to_json(), "stop_rate": self.stop_rate.to_json(),
               "change": self.change.to_json()}
        if self.log_odds_change is not None:
            out["log_odds_change"] = self.log_odds_change.to_json()
        return {**out, "sentence": self.sentence}


@dataclass(frozen=True)
class LogOddsAtExtreme:
    """A by-layer row's log-odds side (readouts with log-odds only)."""

    change: Estimate
    null: NullBandRow | None
    other_change: Estimate
    other_null: NullBandRow | None


@dataclass(frozen=True)
class ByLayer:
    """One layer's grid-extreme dose toward one goal (no choice made on data), against alpha = 0 and
    the random null, on the targeted and the other group."""

    readout: str
    layer: int
    goal: str
    group: str
    alpha: float
    stop_rate_at_0: Estimate
    stop_rate: Estimate
    change: Estimate
    null: NullBandRow | None
    other_group: str
    other_change: Estimate
    other_null: NullBandRow | None
    log_odds: LogOddsAtExtreme | None

    def to_json(self) -> JsonObject:
        out = {"readout": self.readout, "layer": self.layer, "goal": self.goal, "group": self.group,
               "alpha": self.alpha, "stop_rate_at_0": self.stop_rate_at_0.to_json(),
               "stop_rate": self.stop_rate.to_json(), "change": self.change.to_json(),
               "null_band": json_of(self.null), "other_group": self.other_group,
               "other_change": self.other_change.to_json(),
               "other_null": json_of(self.other_null)}
        if self.log_odds is not None:
            lo = self.log_odds
            out.update(log_odds_change=lo.change.to_json(), log_odds_null=json_of(lo.null),
                       other_log_odds_change=lo.other_change.to_json(),
                       other_log_odds_null=json_of(lo.other_null))
        return out


@dataclass(frozen=True)
class Choice:
    """The setting one half chose for the other (experiments.dose_response.crossfit's rule)."""

    chosen_on: str
    layer: int
    alpha: float
    fit_shift_toward_goal: float
    fit_useless_rate: float
    broken: bool  # every setting broke: the furthest-moving one was taken
    fit_n_items: int

    @property
    def scored_on(self) -> str:
        return "B" if self.chosen_on == "A" else "A"

    def to_json(self) -> JsonObject:
        return {"chosen_on": self.chosen_on, "scored_on": self.scored_on, "layer": self.layer, "alpha": self.alpha,
                "fit_shift_toward_goal": self.fit_shift_toward_goal, "fit_useless_rate": self.fit_useless_rate,
                "broken": self.broken, "fit_n_items": self.fit_n_items}


@dataclass(frozen=True)
class GoalTest:
    """The targeted group's one-sided test against a null (analysis.specificity.specificity_stats)."""

    p_goal: float | None
    beaten: int | None
    threshold: float
    specific: bool | None
    margin: float | None
    near_share: float | None


@dataclass(frozen=True)
class NullPlace:
    """The probe's cross-fitted effect among one null's cross-fitted effects on one group and measure:
    two-sided (`place`, the null's spread) and, on the targeted group, the one-sided `goal` test."""

    n_directions: int
    mean: float | None
    sd: float | None
    lo: float | None
    hi: float | None
    probe_effect: float | None
    percentile: float | None
    z: float | None
    p_null: float | None
    effects: tuple[float, ...]
    goal: GoalTest | None

    @classmethod
    def of(cls, stats: Mapping[str, Any], effects: Any) -> NullPlace:
        """From analysis.specificity's null_stats (with `effects`) or specificity_stats."""
        goal = (GoalTest(stats["p_goal"], stats["beaten"], stats["threshold"], stats["specific"], stats["margin"],
                         stats["near_share"]) if "p_goal" in stats else None)
        return cls(stats["n_directions"], stats["mean"], stats["sd"], stats["lo"], stats["hi"], stats["probe_effect"],
                   stats["percentile"], stats["z"], stats["p_null"], tuple(float(x) for x in effects), goal)

    @property
    def place(self) -> Place:
        return Place(self.percentile, self.z, self.p_null, self.n_directions)

    def to_json(self) -> JsonObject:
        out = {"n_directions": self.n_directions, "mean": self.mean, "sd": self.sd, "lo": self.lo, "hi": self.hi,
               "probe_effect": self.probe_effect, "percentile": self.percentile, "z": self.z, "p_null": self.p_null,
               "effects": list(self.effects)}
        if self.goal is not None:
            g = self.goal
            out.update(p_goal=g.p_goal, beaten=g.beaten, threshold=g.threshold, specific=g.specific, margin=g.margin,
                       near_share=g.near_share)
        return out


@dataclass(frozen=True)
class NullOf:
    """One null set's places on one group: stop rate and log-odds (None where not measured)."""

    kind: str  # random, relabel
    stop_rate: NullPlace | None
    log_odds: NullPlace | None

    def at(self, measure: str) -> NullPlace | None:
        return self.log_odds if measure == "log_odds" else self.stop_rate


@dataclass(frozen=True)
class HalfChange:
    """One scored half's own paired change (stop rate; log-odds where read)."""

    half: str
    change: Estimate
    log_odds_change: Estimate | None

    def to_json(self) -> JsonObject:
        out = {"change": self.change.to_json()}
        if self.log_odds_change is not None:
            out["log_odds_change"] = self.log_odds_change.to_json()
        return out


@dataclass(frozen=True)
class GroupBlock:
    """A headline's cross-fitted numbers on one group (the targeted one or the other)."""

    group: str
    stop_rate_at_0: Estimate
    stop_rate: Estimate
    change: Estimate
    useless_rate: Estimate
    by_half: tuple[HalfChange, ...]
    nulls: tuple[NullOf, ...]  # the nulls that ran
    specific: tuple[tuple[str, Verdict], ...] | None  # (measure, verdict): the targeted group only
    log_odds_change: Estimate | None  # None: the readout has no log-odds

    def null(self, kind: str, measure: str) -> NullPlace | None:
        return next((n.at(measure) for n in self.nulls if n.kind == kind), None)

    def verdict(self, measure: str) -> Verdict | None:
        return next((v for m, v in self.specific or () if m == measure), None)

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "group": self.group, "stop_rate_at_0": self.stop_rate_at_0.to_json(),
            "stop_rate": self.stop_rate.to_json(), "change": self.change.to_json(),
            "useless_rate": self.useless_rate.to_json(), "by_half": {h.half: h.to_json() for h in self.by_half},
            "null": {n.kind: {"stop_rate": json_of(n.stop_rate), "log_odds": json_of(n.log_odds)}
                     for n in self.nulls}}
        if self.specific is not None:
            out["specific"] = {m: v.to_json() for m, v in self.specific}
        if self.log_odds_change is not None:
            out["log_odds_change"] = self.log_odds_change.to_json()
        return out


@dataclass(frozen=True)
class Headline:
    """One readout x goal's cross-fitted headline (experiments.dose_response.crossfit)."""

    readout: str
    goal: str
    group: str  # the targeted group
    sign: int  # +1 induce measuring, -1 induce stopping
    choices: tuple[Choice, ...]
    target: GroupBlock
    other: GroupBlock

    def to_json(self) -> JsonObject:
        return {"readout": self.readout, "goal": self.goal, "group": self.group, "sign": "+" if self.sign > 0 else "-",
                "choices": [c.to_json() for c in self.choices], "target": self.target.to_json(),
                "other": self.other.to_json()}


@dataclass(frozen=True)
class Split:
    """How the target families were split into the cross-fit's halves (or why not)."""

    seed: int
    rule: str
    families: tuple[tuple[str, tuple[str, ...]], ...] | None  # (half, its families)
    skipped: str | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {"seed": self.seed, "rule": self.rule}
        if self.skipped is not None:
            out["skipped"] = self.skipped
        if self.families is not None:
            out["families"] = {h: list(f) for h, f in self.families}
        return out


@dataclass(frozen=True)
class DoseResult:
    """Everything dose_response.json holds: curves, nulls, controls, headline, per-layer extremes,
    ablation, the run's meta and the generated paragraphs."""

    rows: tuple[CurveRow, ...]
    null_band: tuple[NullBandRow, ...]
    relabel_band: tuple[NullBandRow, ...]
    controls: tuple[ControlRow, ...]
    headline: tuple[Headline, ...]
    by_layer: tuple[ByLayer, ...]
    ablation: tuple[Ablation, ...]
    meta: ReportMeta
    text: tuple[str, ...]

    def to_json(self) -> JsonObject:
        return {"rows": [r.to_json() for r in self.rows], "null_band": [b.to_json() for b in self.null_band],
                "relabel_band": [b.to_json() for b in self.relabel_band],
                "controls": [c.to_json() for c in self.controls], "headline": [h.to_json() for h in self.headline],
                "by_layer": [b.to_json() for b in self.by_layer], "ablation": [a.to_json() for a in self.ablation],
                "meta": self.meta.to_json(), "text": list(self.text)}


__all__ = ["Ablation", "ByLayer", "Choice", "ControlRow", "CurveRow", "DoseResult", "GoalTest", "GroupBlock",
           "HalfChange", "Headline", "LogOddsAtExtreme", "NullBandRow", "NullOf", "NullPlace", "Place", "Split",
           "json_of"]
