"""`evprobe void-transfer`: probes and steering across void types (seed 002, sections 5.4-5.5, Tables
3 and 22-24): a direction fitted on one void type, read and steered on the other.

    evprobe void-transfer --config void_transfer_tiny [--layers 1,2] [--alphas=-1,0,1] ...

Needs a benchmark generated with `--voids occluded,unstated` (bench.voids): every void is matched with
its sufficient twin, so a type's pairs differ only in that kind of void (visual: the sheet occluded;
textual: the threshold unstated). Steps:

1. capture the answer requests and the voids at every layer, position `last`
   (`evprobe capture --requests answer_initial,voids`) into `out/acts`;
2. probes: a `resolved` sweep with the transfer matrix by void type (probes.transfer, kind `void`:
   each type's voids with their twins; cells over the family folds, the layer and position chosen
   on the training type only) into `out/sweep`;
3. split the families (per system, half fitting, half held out: experiments.gating.plan.split_families)
   and fit one mass-mean `resolved` direction per void type and steered layer on the fitting
   families' pairs (probes.directions, `--by void`) into `out/directions`;
4. steering, every source -> target path (4 with two void types, the diagonal included): the
   source type's direction, negated to point toward abstaining (experiments.steering_conventions),
   added at every prompt position of the held-out families' target voids over the dose grid, with
   `n_random` random directions of the same raw norm as the null; the readout is the log-odds of the
   "undetermined" letter against the best other answer, and the abstention rate; the layer and dose
   are cross-fitted to *suppress* abstention on the voids (goal: lower those log-odds), with the rank
   test against the null (analysis.dose_response.steering_dose_response: the own-data
   function, so the statistics are the dose-response pipeline's). The twins are shared by the void
   types, so *inducing* abstention on them (the seed's "control abstention") is one run per source;
5. `void_transfer.json` and `void_transfer.md`: one table, a row per path: the probe's transfer AUROC
   (nested, interval, n) and the suppression effect (abstention in points, log-odds in nats, each with
   its interval and n; the setting each half chose; the null's p and verdict), and one row per source
   for inducing abstention on the twins.

Readout (`readout`): `letters` (the default, above: the menu's log-probs, direct protocol), or `free`:
seed 002's (section 5.5, appendix I): the same items in the free protocol (no menu), a greedy reply of up
to the model config's `max_new_tokens_free` tokens generated under the steering (every position and
generated token), read by the rule reader (bench.parse, letters off, seed002 rubric): `abstained` =
answer "undetermined", `invalid` = no readable answer (kept in every denominator). The paths, both nulls,
the cross-fit (moving the abstention rate, where the rank test and verdict are read) and intervals are
the same. Every steered reply (the nulls' too) goes to `replies.jsonl` for a panel (`evprobe judge`).
A folder keeps one readout (void_transfer.json's config names `readout: free`; letters leave it out,
so a letters run's files are as before): a rerun with the other is refused.

Doses are multiples of the layer's mean residual norm over the steered prompts' positions, unsteered
(`alpha_units: norm`), or, with `alpha_units: raw`, multiples of the unit direction itself (seed 002's
alpha in {0, 2, 5, 10}; experiments.steering_conventions)
(+ = toward abstaining). Every interval is a family bootstrap over the held-out families.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evprobe.analysis.dose_response import setting_text
from evprobe.analysis.generated_readout import GeneratedReadout
from evprobe.core.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED, Estimate
from evprobe.core.errors import ConfigError, InputError
from evprobe.core.estimate_text import estimate_text
from evprobe.core.files import atomic_write_bytes, atomic_write_json, atomic_write_jsonl
from evprobe.core.flags import setting
from evprobe.core.json_types import JsonObject
from evprobe.core.lock import folder_lock
from evprobe.experiments.config import (
    ModelConfig,
    add_experiment_parser,
    as_dict,
    check_tiny_layers,
    experiment_config,
    load_config,
    load_model_config,
    resolve_config,
)
from evprobe.experiments.steering_conventions import ALPHA_UNITS_HELP, AlphaUnits, check_alpha_units, free_readout

POSITION = "last"
JSON_FILE = "void_transfer.json"
MD_FILE = "void_transfer.md"
REPLIES_FILE = "replies.jsonl"
READOUTS = ("letters", "free")
FREE_MEASURES = ("abstained", "invalid")
FREE_REGIME = "standard"  # the letters readout's regime too (build_prompt's default)
FORMAT = "evprobe-void-transfer/1"
GROUPS = ("twin", "void")


@dataclass(frozen=True)
class VoidTransferConfig:
    """One cross-void experiment (configs/experiments/void_transfer*.yaml); every field is also a flag."""

    model: str | ModelConfig = setting(help="model config name or YAML, tiny:<arch> or hub id (or an inline mapping)")
    bench: str = setting(help="benchmark folder generated with --voids occluded,unstated")
    out: str = setting(help="output folder")
    layers: tuple[int, ...] = setting((1, 2), "decoder layers steered (each its own direction per void type)")
    alphas: tuple[float, ...] = setting((-1.0, -0.5, 0.0, 0.5, 1.0), "doses in multiples of the layer's mean residual "
                                        "norm (+ = toward abstaining); write --alphas=-1,0,1 when the first is negative")
    alpha_units: AlphaUnits = setting("norm", ALPHA_UNITS_HELP + "; norm is measured at the steered positions")
    readout: str = setting("letters", "letters: the menu's log-probs (direct protocol); free: greedy free-form replies "
                           "(free protocol, max_new_tokens_free tokens) read by the rule reader, seed 002's readout")
    n_random: int = setting(50, "random directions of the null, per path")
    n_relabel: int = setting(50, "label-free null directions per path (analysis.label_null: fitted like the source's "
                             "direction on its fit rows once the label carries nothing); 0 = none, and no verdict")
    split_seed: int = setting(0, "seed of the family split (half fitting, half held out, per system)")
    folds: int = setting(5, "folds of the probe sweep and transfer matrix (capped at the families)")
    batch_size: int = setting(8, "prompts per forward")
    n_boot: int = setting(DEFAULT_N_BOOT, "family bootstrap resamples")
    seed: int = setting(DEFAULT_SEED, "bootstrap, fold and null seed")

    def __post_init__(self) -> None:
        if not self.layers or any(isinstance(x, bool) or x < 0 for x in self.layers):
            raise ValueError(f"key 'layers' must hold decoder layers >= 0, e.g. [1, 2], got {list(self.layers)}")
        if not any(a != 0 for a in self.alphas) or not all(np.isfinite(self.alphas)):
            raise ValueError(f"key 'alphas' must hold finite doses with a nonzero one, e.g. [-1, 0, 1], got "
                             f"{list(self.alphas)}")
        check_alpha_units(self.alpha_units)
        if self.readout not in READOUTS:
            raise ValueError(f"key 'readout' must be one of {', '.join(READOUTS)}, got {self.readout!r}")
        for key in ("n_random", "n_relabel", "folds", "batch_size", "n_boot"):
            low = {"n_random": 0, "n_relabel": 0, "folds": 2}.get(key, 1)
            if getattr(self, key) < low:
                raise ValueError(f"key {key!r} must be {low} or more, got {getattr(self, key)}")


def load_void_transfer_config(ref: str | Path, overrides: dict[str, Any] | None = None) -> VoidTransferConfig:
    return load_config(VoidTransferConfig, resolve_config(ref, "experiments"), overrides)


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

    def to_json(self) -> JsonObject:
        return {"format": FORMAT, "config": self.config, "fit_families": list(self.fit_families),
                "heldout_families": list(self.heldout_families), "n_random": self.n_random,
                "n_relabel": self.n_relabel, "position": self.position}


@dataclass(frozen=True)
class VoidTransferReport:
    """What a finished run wrote: one row per source -> target path (void_transfer.json's `paths`)."""

    paths: tuple[VoidPath, ...]
    files: tuple[str, ...]


def _pairs(items: list[Any]) -> dict[str, list[tuple[Any, Any]]]:
    """Void type -> (void, twin) answer-request pairs of the benchmark."""
    by_id = {it.item_id: it for it in items}
    out: dict[str, list[tuple[Any, Any]]] = {}
    for it in items:
        if it.void is not None and it.request == "answer_initial":
            out.setdefault(it.void, []).append((it, by_id[it.twin_id]))
    return out


def _check(config: VoidTransferConfig) -> tuple[ModelConfig, Path, dict[str, list[tuple[Any, Any]]], list[str], list[str]]:
    """Everything checkable before a model loads: the model config, the benchmark, its voids, the layers, the split."""
    from evprobe.bench.manifest import META_FILE, read_items
    from evprobe.experiments.gating.plan import split_families

    model = load_model_config(config.model)
    bench = Path(config.bench)
    if not (bench / META_FILE).is_file():
        raise ConfigError(f"benchmark {bench} not found (no {META_FILE}); generate it with `evprobe generate --out "
                          f"{bench} --voids occluded,unstated`")
    items = read_items(bench)
    pairs = _pairs(items)
    if len(pairs) < 2:
        raise ConfigError(f"{bench} holds {len(pairs)} void type(s) with answer requests; regenerate it with "
                          "`evprobe generate --voids occluded,unstated`")
    check_tiny_layers(model, config.layers)
    fit, held = split_families([v for p in pairs.values() for v, _ in p], config.split_seed)
    if len(fit) < 2 or len(held) < 2:
        raise ConfigError(f"{bench} has too few families to split (fitting {len(fit)}, held out {len(held)}); "
                          "generate at least 2 families per system")
    return model, bench, pairs, fit, held


def void_transfer(config: VoidTransferConfig, *, progress: bool = True) -> VoidTransferReport:
    """Run the experiment (module docstring) and write its files; returns the path table."""
    model, bench, pairs, fit, held = _check(config)
    out = Path(config.out)
    _check_readout(out, config.readout)
    with folder_lock(out, "evprobe void-transfer"):
        _check_readout(out, config.readout)  # again under the lock: a run that finished meanwhile
        return _run(config, model, bench, pairs, fit, held, out, progress)


def _check_readout(out: Path, readout: str) -> None:
    """A folder keeps one readout (module docstring): a finished run's void_transfer.json names it
    (`readout` in its config; absent = letters, every run before the key existed)."""
    try:
        done = json.loads((out / JSON_FILE).read_text())
    except (OSError, ValueError):
        return  # nothing finished here (or unreadable: the run rewrites it)
    before = (done.get("config") or {}).get("readout", "letters") if isinstance(done, dict) else "letters"
    if before != readout:
        raise ConfigError(f"{out} holds a void-transfer run read with readout {before!r}, not {readout!r}; give "
                          f"another --out (a folder keeps one readout) or --readout {before}")


def _run(config: VoidTransferConfig, model: ModelConfig, bench: Path, pairs: dict[str, list[tuple[Any, Any]]],
         fit: list[str], held: list[str], out: Path, progress: bool) -> VoidTransferReport:
    from evprobe.bench.manifest import load_item_images
    from evprobe.bench.protocols import build_prompt
    from evprobe.experiments.capture.config import CaptureConfig
    from evprobe.experiments.capture.job import capture
    from evprobe.experiments.config import load_model
    from evprobe.analysis.dose_response import steering_dose_response
    from evprobe.analysis.label_null import direction_rows
    from evprobe.experiments.steering_conventions import measure_sign
    from evprobe.probes.captures import load_captures
    from evprobe.probes.label_sets import labels
    from evprobe.probes.directions import fit_directions, write_directions
    from evprobe.probes.runs import sweep_to_folder
    from evprobe.probes.sweep import SweepConfig
    from evprobe.probes.transfer import conditions

    acts = out / "acts"
    capture(CaptureConfig(model=model, bench=str(bench), out=str(acts), requests=("answer_initial", "voids"),
                          layers="all", positions=(POSITION,), batch_size=config.batch_size), progress=progress)
    cs = load_captures([acts])
    sweep_config = SweepConfig(folds=config.folds, n_boot=config.n_boot, seed=config.seed)
    run = sweep_to_folder(cs, "resolved", out / "sweep", sweep_config, transfer=("void",),
                          progress="void sweep" if progress else None)
    transfer = run.transfers["void"]
    ls = labels(cs, "resolved")
    fitting = ls.subset(np.isin(ls.families.astype(str), fit), reason="held-out family (void-transfer split)")
    directions = fit_directions(cs, fitting, list(config.layers), POSITION, "massmean",
                                conditions=[(f"void={c.name}", c.mask) for c in conditions(cs, fitting, "void")])
    write_directions(out / "directions", directions)
    toward_abstain = {(d.provenance["condition"].removeprefix("void="), d.provenance["layer"]):
                      measure_sign(d.provenance, d.name) * d.vector.astype(np.float64) for d in directions}
    # the rows each direction was fitted on (its void type's pairs in the fitting families): the label-free null's
    fit_rows = {(d.provenance["condition"].removeprefix("void="), d.provenance["layer"]): direction_rows(d)
                for d in directions} if config.n_relabel else {}
    handle = load_model(model)

    replies: list[JsonObject] = []  # the free readout's every reply, for replies.jsonl

    def steer(pairs_of: list[tuple[Any, Any]], group: str, source: str, goal: int, run: str) -> Any:
        """The source direction over the doses on the held-out pairs' `group` members (own-data dose-response)."""
        chosen = [v if group == "void" else t for v, t in pairs_of if v.family_id in held]
        vectors = {layer: toward_abstain[(source, layer)] for layer in config.layers if (source, layer) in toward_abstain}
        if not vectors:
            raise InputError(f"no {source} direction at layers {list(config.layers)} (identical class means)")
        free = _free_readout(chosen, model.max_new_tokens_free) if config.readout == "free" else None
        result = steering_dose_response(
            handle, [build_prompt(it, "direct" if free is None else "free") for it in chosen],
            [load_item_images(bench, it.images) for it in chosen], direction=vectors, readout=free,
            candidates=sorted(chosen[0].options) if free is None else None,
            target=[next(k for k, a in it.options.items() if a == "undetermined") for it in chosen]
            if free is None else None,
            families=[it.family_id for it in chosen], alphas=config.alphas, goal=goal, units=config.alpha_units,
            n_random=config.n_random,
            n_relabel=config.n_relabel, fit_rows={layer: fit_rows[(source, layer)] for layer in vectors} or None,
            n_boot=config.n_boot, seed=config.seed, split_seed=config.split_seed, batch_size=config.batch_size)
        if free is not None:
            replies.extend(_reply_rows(result.replies, chosen, run, source, group))
        return result

    # the twins are shared by the void types: inducing abstention on them depends on the source alone
    any_pairs = next(iter(pairs.values()))
    induce = {source: _effect(steer(any_pairs, "twin", source, +1, "induce")) for source in sorted(pairs)}
    rows = []
    for target, target_pairs in sorted(pairs.items()):
        for source in sorted(pairs):
            cell = transfer.cell(source, target)
            probe = (cell.best.auroc if cell.best is not None else Estimate.empty(cell.reason or "no probe fit"))
            rows.append(VoidPath(source, target, probe, _effect(steer(target_pairs, "void", source, -1, "suppress")),
                                 induce[source]))
    meta = VoidTransferMeta(_jsonable(config), tuple(fit), tuple(held), config.n_random, config.n_relabel)
    written = (JSON_FILE, MD_FILE)
    if config.readout == "free":
        atomic_write_jsonl(out / REPLIES_FILE, replies)
        written += (REPLIES_FILE,)
    atomic_write_json(out / JSON_FILE, {**meta.to_json(), "paths": [r.to_json() for r in rows]})
    atomic_write_bytes(out / MD_FILE, markdown(rows, meta).encode("utf-8"))
    return VoidTransferReport(paths=tuple(rows), files=(*written, "sweep/", "directions/", "acts/"))


def _free_readout(items: Sequence[Any], max_new_tokens: int) -> GeneratedReadout:
    """Seed 002's readout (module docstring): item i's free-form reply read by the rule reader (bench.parse,
    letters off: the free protocol's seed002 rubric): abstained = answer undetermined, invalid = no readable
    answer (it abstains on nothing and stays in every denominator)."""
    def read(i: int, reply: str) -> tuple[float, float]:
        got = free_readout(items[i], reply, FREE_REGIME)
        return float(got.abstain), float(not got.valid)

    return GeneratedReadout(FREE_MEASURES, read=read, max_new_tokens=max_new_tokens, rates=FREE_MEASURES)


def _reply_rows(frame: Any, items: Sequence[Any], run: str, source: str, group: str) -> list[JsonObject]:
    """replies.jsonl's rows of one steering run (the dose-response's `replies` frame): the run (suppress on a
    target's voids, induce on the twins), source, item, direction (index within a null), layer, alpha, and the
    reply and the rule reader's reading of it (valid, route, answer, abstain)."""
    def number(x: Any, kind: type) -> Any:
        return None if x is None or x != x else kind(x)  # a frame's missing cell (None / NaN) as null

    rows = []
    for r in frame.itertuples(index=False):
        it = items[r.item]
        rows.append({"run": run, "source": source, "group": group, "item_id": it.item_id, "family_id": it.family_id,
                     "void": it.void, "protocol": "free", "regime": FREE_REGIME, "direction": r.direction,
                     "index": int(r.index), "layer": number(r.layer, int), "alpha": number(r.alpha, float),
                     **free_readout(it, r.reply, FREE_REGIME).to_json()})  # reply, valid, route, answer, abstain
    return rows


def _jsonable(config: VoidTransferConfig) -> JsonObject:
    """The config as JSON; the letters readout, the default, is left out (a letters run's files are as
    before the key existed; _check_readout reads its absence as letters)."""
    out = json.loads(json.dumps(as_dict(config), default=str))
    if out.get("readout") == "letters":
        del out["readout"]
    return out


def _est(row: Any) -> Estimate:
    """A crossfit frame row's estimate as JSON (core.bootstrap's: an identical one has no interval),
    with the held-out families its interval rests on (the frame's n_families; a frame holding a None
    there reads it as NaN)."""
    families = row.get("n_families")
    count = None if families is None or families != families else int(families)
    if bool(row["identical"]):
        return Estimate.identical_units(float(row["value"]), int(row["n"])).in_families(count)
    return Estimate(float(row["value"]), (float(row["lo"]), float(row["hi"])), int(row["n"])).in_families(count)


def _effect(result: Any) -> SteeringEffect:
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
        abstention_change=_est(cf[cf["measure"] == ("abstained_change" if free else "chose_change")].iloc[0]),
        log_odds_change=None if free else _est(first),
        invalid_change=_est(cf[cf["measure"] == "invalid_change"].iloc[0]) if free else None,
        chosen=tuple(setting_text(first[f"chosen_on_{h}_layer"], first[f"chosen_on_{h}_alpha"]) for h in "AB"),
        nulls=nulls, specific=result.verdict.specific, verdict=result.verdict.text,
        n_random=nulls["random"].n if "random" in nulls else 0,
        n_relabel=nulls["label-free"].n if "label-free" in nulls else 0)


def _cell(effect: SteeringEffect) -> list[str]:
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
                "position and generated token) read by the rule reader (seed002 rubric): abstained = answer "
                "\"undetermined\", invalid replies counted in every denominator; every reply in replies.jsonl, for a "
                "panel to judge"] if free else []),
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
                     + " | ".join(_cell(r.suppress_on_voids)) + " |")
    lines += ["", f"| source -> twins | induce: abstention (points) | {second} | chosen | p vs random | "
              "p vs label-free | verdict |", "|---|---|---|---|---|---|---|"]
    induce: dict[tuple[str, str], SteeringEffect] = {}  # a row per source and distinct effect, in the paths' order
    for r in rows:
        induce.setdefault((r.source, json.dumps(r.induce_on_twins.to_json())), r.induce_on_twins)
    for (source, _), effect in induce.items():
        lines.append(f"| {source} | " + " | ".join(_cell(effect)) + " |")
    return "\n".join(lines) + "\n"


def add_void_transfer_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    return add_experiment_parser(
        sub, "void-transfer", VoidTransferConfig, run_void_transfer, example="void_transfer_tiny",
        help="probes and steering across void types: directions fitted on one void type, read and steered on the other",
        description="Capture the answer requests and the voids (a benchmark generated with --voids), sweep resolved "
        "with the transfer matrix by void type, fit one direction per void type on half the families and steer the "
        "other half's pairs of every void type with it, beside random and label-free null directions: void_transfer.json, "
        "void_transfer.md. Flags override the config.",
    )


def run_void_transfer(args: argparse.Namespace) -> int:
    config = experiment_config(VoidTransferConfig, args)
    report = void_transfer(config, progress=not args.quiet)
    for r in report.paths:
        e = r.suppress_on_voids
        print(f"{r.source} -> {r.target}: probe AUROC {estimate_text(r.probe_auroc, 3)}; on the voids' "
              f"abstention {estimate_text(e.abstention_change, 1, scale=100.0, sign=True)} points; {e.verdict}")
    print(f"wrote {', '.join(report.files)} in {config.out}")
    return 0


__all__ = ["VoidTransferConfig", "VoidTransferReport", "add_void_transfer_parser", "load_void_transfer_config",
           "markdown", "void_transfer"]
