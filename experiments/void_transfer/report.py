"""What `evprobe void-transfer` reports: the steering effects, the paths, void_transfer.json's meta and
void_transfer.md (experiments.void_transfer)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evprobe.analysis.dose_response import setting_text
from evprobe.core.bootstrap import Estimate
from evprobe.core.estimate_text import estimate_text
from evprobe.core.json_types import JsonObject
from evprobe.experiments.void_transfer.config import FORMAT, POSITION

@dataclass(frozen=True)
class NullTest:
    """A steering effect's one-sided rank test against one null's directions: p, the margin in nats
    over the nearest null direction, and the null's directions."""

    p: float
    margin: float
    n: int

    def to_json(self) -> JsonObject:
        return {"p": self.p, "margin": self.margin, "n": self.n}


@dataclass(frozen=True)
class SteeringEffect:
    """The cross-fitted effect of one steering run: abstention rate and log-odds changes (the free
    readout: abstention and invalid-reply rate changes, no log-odds), the setting each half chose, the
    rank test against each null run (keyed random / label-free) with the joint verdict, and the
    directions of each null (0: not run)."""

    abstention_change: Estimate
    log_odds_change: Estimate | None
    chosen: tuple[str, ...]
    nulls: dict[str, NullTest]
    specific: bool
    verdict: str
    n_random: int
    n_relabel: int
    invalid_change: Estimate | None = None

    def to_json(self) -> JsonObject:
        second: JsonObject = ({"log_odds_change": self.log_odds_change.to_json()} if self.log_odds_change is not None
                              else {"invalid_change": self.invalid_change.to_json() if self.invalid_change else None})
        return {"abstention_change": self.abstention_change.to_json(), **second, "chosen": list(self.chosen),
                "nulls": {k: t.to_json() for k, t in self.nulls.items()}, "specific": self.specific,
                "verdict": self.verdict, "n_random": self.n_random, "n_relabel": self.n_relabel}


@dataclass(frozen=True)
class VoidPath:
    """One source -> target path: the probe's transfer AUROC, the source direction suppressing
    abstention on the target's voids, and inducing it on the twins (the source's alone)."""

    source: str
    target: str
    probe_auroc: Estimate
    suppress_on_voids: SteeringEffect
    induce_on_twins: SteeringEffect

    def to_json(self) -> JsonObject:
        return {"source": self.source, "target": self.target, "probe_auroc": self.probe_auroc.to_json(),
                "suppress_on_voids": self.suppress_on_voids.to_json(),
                "induce_on_twins": self.induce_on_twins.to_json()}


@dataclass(frozen=True)
class VoidTransferMeta:
    """void_transfer.json's settings: the config, the family split, the nulls' sizes, the position."""

    config: JsonObject
    fit_families: tuple[str, ...]
    heldout_families: tuple[str, ...]
    n_random: int
    n_relabel: int
    position: str = POSITION
    reader: str | None = None  # None: the run's own reader (the rule's or the letters); else the panel (--judged)

    def to_json(self) -> JsonObject:
        return {"format": FORMAT, "config": self.config, "fit_families": list(self.fit_families),
                "heldout_families": list(self.heldout_families), "n_random": self.n_random,
                "n_relabel": self.n_relabel, "position": self.position,
                **({"reader": self.reader} if self.reader else {})}


@dataclass(frozen=True)
class VoidTransferReport:
    """What a finished run wrote: one row per source -> target path (void_transfer.json's `paths`)."""

    paths: tuple[VoidPath, ...]
    files: tuple[str, ...]


def crossfit_estimate(row: Any) -> Estimate:
    """A crossfit frame row's estimate as JSON (core.bootstrap's: an identical one has no interval),
    with the held-out families its interval rests on (the frame's n_families; a frame holding a None
    there reads it as NaN)."""
    families = row.get("n_families")
    count = None if families is None or families != families else int(families)
    if bool(row["identical"]):
        return Estimate.identical_units(float(row["value"]), int(row["n"])).in_families(count)
    return Estimate(float(row["value"]), (float(row["lo"]), float(row["hi"])), int(row["n"])).in_families(count)


def steering_effect(result: Any) -> SteeringEffect:
    """The cross-fitted effect of one steering run (its `all` group): abstention rate and log-odds
    changes, the setting each half chose, and the rank test against each null on the log-odds (p,
    margin over the nearest null direction) with the joint verdict (analysis.specificity)."""
    cf = result.crossfit[result.crossfit["group"] == "all"]
    free = "abstained" in result.measures  # the free readout: the rule reader's rates (module docstring)
    goal = cf[cf["measure"] == ("abstained_change" if free else "log_odds_change")]
    first = goal.iloc[0]
    nulls = {str(r["null"]): NullTest(float(r["p_goal"]), float(r["margin"]), int(r["null_n_directions"]))
             for _, r in goal.iterrows() if r["null"] is not None and r["p_goal"] == r["p_goal"]}
    return SteeringEffect(
        abstention_change=crossfit_estimate(cf[cf["measure"] == ("abstained_change" if free else "chose_change")].iloc[0]),
        log_odds_change=None if free else crossfit_estimate(first),
        invalid_change=crossfit_estimate(cf[cf["measure"] == "invalid_change"].iloc[0]) if free else None,
        chosen=tuple(setting_text(first[f"chosen_on_{h}_layer"], first[f"chosen_on_{h}_alpha"]) for h in "AB"),
        nulls=nulls, specific=result.verdict.specific, verdict=result.verdict.text,
        n_random=nulls["random"].n if "random" in nulls else 0,
        n_relabel=nulls["label-free"].n if "label-free" in nulls else 0)


def effect_cells(effect: SteeringEffect) -> list[str]:
    def place(kind: str) -> str:
        n = effect.nulls.get(kind)
        return "not run" if n is None else f"{n.p:.3f} (margin {n.margin:+.2f})"

    second = (estimate_text(effect.log_odds_change, 2, sign=True) if effect.log_odds_change is not None
              else estimate_text(effect.invalid_change or Estimate.empty("not read"), 1, scale=100.0, sign=True))
    return [estimate_text(effect.abstention_change, 1, scale=100.0, sign=True), second, "; ".join(effect.chosen),
            place("random"), place("label-free"), effect.verdict]


def markdown(rows: Sequence[VoidPath], meta: VoidTransferMeta) -> str:
    free = meta.config.get("readout") == "free"
    # the letters readout's lines as they always were; the free readout's say what it read
    second, goal, unit = (("invalid (points)", "abstention rate", "abstention rate") if free else
                          ("log-odds (nats)", "\"undetermined\" log-odds", "nats"))
    lines = ["# Probes and steering across void types (seed 002, Tables 3 and 22-24)", "",
             *(["- readout: free-form greedy replies (free protocol, up to max_new_tokens_free tokens, steered at every "
                "position and generated token) read by " + (f"{meta.reader} (evprobe judge): abstained = the panel's "
                "answer \"undetermined\", undecided replies invalid, counted in every denominator" if meta.reader else
                "the rule reader (seed002 rubric): abstained = answer \"undetermined\", invalid replies counted in every "
                "denominator; every reply in replies.jsonl, for a panel to judge")] if free else []),
             f"- directions: mass-mean `resolved` at position {meta.position}, one per void type and layer, fitted "
             f"on {len(meta.fit_families)} families; steered on the other {len(meta.heldout_families)}",
             "- doses: " + ("raw (alpha = 1 adds the unit direction, a vector of norm 1)"
                            if meta.config.get("alpha_units") == "raw" else
                            "multiples of the layer's mean residual norm over the steered positions, unsteered"),
             "- probe AUROC: trained on the source type's pairs, tested on the target type's (the layer chosen on the "
             "source only; family folds)",
             "- suppress: the source direction toward answering on the target's voids (goal: lower the "
             f"{goal}); induce: toward abstaining on the twins (shared by both void types, so it "
             "depends on the source alone). Each effect is taken at the layer and dose one half of the families "
             "chose, scored on the other (both halves shown), against alpha = 0, beside "
             f"{meta.n_random} random directions of the same norm and {meta.n_relabel} label-free directions "
             "(fitted like the source's direction on its fit rows once the label carries nothing), each given the same "
             f"choice (one-sided rank test, p and the margin in {unit} over the nearest null direction; specific to the "
             "direction when p <= 0.05 against both)",
             "", f"| source -> target | probe AUROC | suppress on voids: abstention (points) | {second} | chosen | "
             "p vs random | p vs label-free | verdict |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.source} -> {r.target} | {estimate_text(r.probe_auroc, 3)} | "
                     + " | ".join(effect_cells(r.suppress_on_voids)) + " |")
    lines += ["", f"| source -> twins | induce: abstention (points) | {second} | chosen | p vs random | "
              "p vs label-free | verdict |", "|---|---|---|---|---|---|---|"]
    induce: dict[tuple[str, str], SteeringEffect] = {}  # a row per source and distinct effect, in the paths' order
    for r in rows:
        induce.setdefault((r.source, json.dumps(r.induce_on_twins.to_json())), r.induce_on_twins)
    for (source, _), effect in induce.items():
        lines.append(f"| {source} | " + " | ".join(effect_cells(effect)) + " |")
    return "\n".join(lines) + "\n"


