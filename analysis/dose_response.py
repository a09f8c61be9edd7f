"""Dose-response on your own prompts: steer along a direction at a layer over a grid of doses,
beside random directions of the same norm and label-free directions (the nulls), with
family-bootstrap intervals, a cross-fitted choice of layer and dose, and a verdict on specificity.

    result = steering_dose_response(handle, prompts, images, direction=d, candidates=["A", "B"], target="A",
                                    families=families, groups=groups, alphas=(-1.0, -0.5, 0.0, 0.5, 1.0),
                                    goal=+1, n_random=50, n_relabel=50, fit_rows=(acts, labels, fit_families))
    result.effects      # DataFrame: direction, layer, alpha, group, measure, value, lo, hi, n, n_families
    result.null         # DataFrame: null, layer, alpha, group, measure, n_directions, lo, hi, percentile, z, p_null
    result.crossfit     # DataFrame: the cross-fitted effect and its rank among each null's
    result.verdict      # Verdict: .specific True | False | None (beyond both nulls?), .text
    result.plot("curve.png")

Readout: the next-token log-probabilities of `candidates` at the answer position (after the
handle's answer prefix). Per item, `log_odds` = log p(target) - max log p(other candidates) (nats;
unsaturated), and `chose` = 1 when the target ranks first (ties to the earlier candidate). Effects
are paired changes against alpha = 0 (the unsteered model, no hooks at all), averaged per group
(`all`, and each label of `groups`), with a family bootstrap (core.bootstrap: whole families
resampled, one resample matrix for every number, so changes are paired). Every estimate and
interval comes from analysis.effects, the estimator `evprobe dose-response` builds
its curves with: the choice's rate is a proportion (hulled with a cluster interval, never a
point; its change widened where a rate saturates), and a cell whose units all moved alike is
marked identical. On the same items, direction, doses and seeds the two give the same effects,
null places and intervals, number for number (tests/experiments/test_own_dose_response.py).

Generated readout (`readout=GeneratedReadout(measures, read, max_new_tokens, rates)`, no candidates
or target): greedy free-form replies instead of letter log-probs, at alpha = 0 with no hook and under
every direction x dose (the vector added at every position and every generated token, seed 002's
section 5.5), each reply turned into one number per measure by your `read(item, reply)`
(analysis.generated_readout; e.g. abstained and invalid, both rates, an invalid reply kept in every
denominator). The same estimates, nulls, cross-fit and intervals then run on those measures; the
cross-fit's default rule moves the first measure toward `goal` and the verdict is read on the rule's
measure; `items` holds each reply beside its numbers and `replies` every reply generated (the null
directions' too), for a panel of judges to read later.

Doses: alpha in multiples of the mean residual norm at the layer over the positions the vector is
added at (`units="norm"`, the pipeline's unit), measured unsteered on these prompts
(hooks.steer_rows.residual_norms_at) unless `mean_norm` is given; or raw units (`units="raw"`).
Nulls, each read at the same raw doses: `n_random` seeded Gaussian unit directions
(hooks.direction_vectors.random_directions), and `n_relabel` label-free directions (analysis.label_null: fitted
like the direction on the rows it was fitted on, `fit_rows` or the capture a fitted Direction names,
once the label carries nothing); per setting, the probe's percentile, z and two-sided p among each
null's effects (analysis.specificity.null_stats; the band is their central 95% from 40 directions on).
Ablation (`ablation=True`): the direction projected out of each layer's output (hooks.ablation), no
dose, read and estimated like a dose (direction "ablation"), as `evprobe dose-response` reads it.
Cross-fitted (analysis.dose_grid, the analysis `evprobe dose-response` runs with its own readout and
choice rule): the families are split into two seeded halves; on each half the layer x dose that
moves the `goal_group`'s log-odds (or `choice`'s measure) furthest toward `goal` (+1 raises the
target's log-odds, -1 lowers it; ties to the smaller |alpha|, then the lower layer) is chosen and
the other half is read there, so every item is scored once at a setting chosen without it; every null direction goes
through the same choice, and the verdict is the pipeline's rank test against each null
(analysis.specificity: p = (1 + #{null directions at least as far toward the goal}) / (K + 1), beyond
a null when p <= 0.05, with the margin over its nearest direction); "specific to this direction" only
beyond both (`verdict`; benchmarks/steering_null_power.py measures its size and power).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from evprobe.analysis.dose_crossfit import crossfit_rows
from evprobe.analysis.dose_grid import TARGET_CHOICE, TARGET_READOUT, ChoiceRule, GridEstimator
from evprobe.analysis.effects import estimate_columns
from evprobe.analysis.generated_readout import GeneratedReadout, ablated, reply_frame
from evprobe.analysis.inputs import MAX_BOOT, MAX_NULL, dose_arguments, integer, prompt_lengths, unit_norms
from evprobe.analysis.dose_nulls import label_free_nulls, near_free, near_random
from evprobe.analysis.label_null import LabelFreeNull
from evprobe.analysis.specificity import Verdict, null_stats
from evprobe.core.bootstrap import Estimate, FamilyBootstrap
from evprobe.hooks.dose import DoseUnit
from evprobe.core.errors import InputError, shown

if TYPE_CHECKING:
    import pandas as pd

MEASURES = ("log_odds", "chose")


@dataclass(frozen=True)
class DoseResponseResult:
    """What `steering_dose_response` measured (module docstring). Frames are tidy: one row per number.

    effects: per direction ("unsteered"; "probe" and each control at each dose; "ablation", alpha
        NaN, when asked), layer, alpha, group and measure (`log_odds`, `chose`, and their paired
        changes `log_odds_change`, `chose_change`): value, lo, hi, n, identical.
    null: per null ("random", "label-free"), layer, alpha (not 0), group and change measure: the null
        directions' effects (n_directions, mean, sd, lo, hi: their central 95%) and the probe's place
        among them.
    crossfit: per group, change measure and null, the cross-fitted effect (value, lo, hi, n), each
        half's chosen setting (chosen_on_A_layer, chosen_on_A_alpha, and B's: numbers; `setting_text`
        prints one), the null directions' cross-fitted effects after the same choice
        (null_lo, null_hi: their central 95%; null_mean, null_sd, null_n_directions) and the probe's
        place among them (percentile, z, p_null; on the goal group's log-odds the one-sided rank
        test: p_goal, beaten, threshold, specific, margin over the nearest null direction, and
        near_share: the share of the null's directions within |cos| 0.9 of the probe).
    verdict: on the goal group's log-odds, "specific to this direction" = beyond both nulls
        (analysis.specificity.Verdict): .specific (True, False or None: no verdict), .against and
        .missing (the nulls that ran and did not: "random", "relabel" = label-free), .text.
    notes: what was not run and why (e.g. no label-free null for a bare vector without fit_rows).
    items: per item, direction ("unsteered", "probe", controls, "ablation"), layer and alpha: log_odds
        and chose, or a generated readout's measures and the reply (a table `evprobe.paired_effects` reads).
    measures: the readout's measures (log_odds, chose for the letters).
    replies: a generated readout's every reply (analysis.generated_readout.reply_frame); None for letters.
    units: per layer, the raw size of alpha = 1 and how it was measured (hooks.dose.DoseUnit).
    """

    effects: pd.DataFrame
    null: pd.DataFrame
    crossfit: pd.DataFrame
    items: pd.DataFrame
    units: dict[int, DoseUnit]
    goal: int
    goal_group: str
    verdict: Verdict | None = None
    label_free: dict[int, LabelFreeNull] = field(default_factory=dict, repr=False)
    notes: tuple[str, ...] = ()
    measures: tuple[str, ...] = MEASURES
    replies: pd.DataFrame | None = None

    def to_dataframe(self, table: str = "effects") -> pd.DataFrame:
        """One of the result's tables (a copy): effects (default), null, crossfit, items or (generated
        readouts) replies."""
        frames = {"effects": self.effects, "null": self.null, "crossfit": self.crossfit, "items": self.items}
        if self.replies is not None:
            frames["replies"] = self.replies
        if table not in frames:
            raise InputError(f"table {table!r} is not one of the dose-response's: {', '.join(frames)}")
        return frames[table].copy()

    def plot(self, path: str | Path, measure: str | None = None) -> Path:
        """One panel per group: the probe's (and controls') change against alpha (of `measure`, by
        default the first measure's change: log_odds_change), one line per layer with its 95% interval,
        over the null band; written as a PNG. Returns the path."""
        from evprobe.analysis.dose_plots import dose_curves

        return dose_curves(self, Path(path), measure or f"{self.measures[0]}_change")


def setting_text(layer: int, alpha: float) -> str:
    """A cross-fit's chosen setting as printed: `L3 alpha -0.5`."""
    return f"L{int(layer)} alpha {float(alpha):+g}"


def _readouts(logp: np.ndarray, target: np.ndarray) -> np.ndarray:
    """(..., n, candidates) log-probs and each item's target index (n,) -> (..., n, 2): log-odds of
    the target vs the best other candidate, and 1.0 when the target ranks first (argmax: ties go to
    the earlier candidate)."""
    picked = np.take_along_axis(logp, np.broadcast_to(target[:, None], logp.shape[:-1] + (1,)), axis=-1)[..., 0]
    others = np.where(np.arange(logp.shape[-1]) == target[:, None], -np.inf, logp)
    log_odds = picked - others.max(axis=-1)
    chose = (logp.argmax(axis=-1) == target).astype(float)
    return np.stack([log_odds, chose], axis=-1)


def _directions(direction: Any, layer: int | Sequence[int] | None) -> dict[int, Any]:
    """{layer: direction} from a Direction (its layer), a {layer: direction} mapping, or a vector with `layer`."""
    if isinstance(direction, Mapping):
        if layer is not None:
            raise InputError("give the layers as the mapping's keys or as layer=, not both")
        return {integer("direction's key", k, 0, fix="{layer: vector}"): v for k, v in direction.items()}
    prov = getattr(direction, "provenance", None)
    if isinstance(prov, Mapping) and "layer" in prov:
        if layer is not None and int(layer) != int(prov["layer"]):
            raise InputError(f"direction {getattr(direction, 'name', '')} was fitted at layer {prov['layer']}, not "
                             f"{layer}; pass {{layer: direction}} per layer to steer a direction elsewhere")
        return {int(prov["layer"]): direction}
    if layer is None:
        raise InputError("a bare vector needs layer= (the decoder layer to steer), or pass {layer: vector}")
    layers = list(layer) if isinstance(layer, Sequence) else [layer]
    return {integer("layer", i, 0, fix="the decoder layer to steer"): direction for i in layers}


def _unit(vector: Any, d_model: int, what: str) -> np.ndarray:
    """hooks.direction_vectors.unit_direction, its refusals (and numpy's, for a vector of text) as InputError."""
    from evprobe.hooks.direction_vectors import unit_direction

    try:
        return unit_direction(vector, d_model=d_model, what=what)
    except (ValueError, TypeError) as e:
        raise InputError(f"{what}: {e}" if not str(e).startswith(what) else str(e)) from None


def steering_dose_response(
    handle: Any,
    prompts: Sequence[str],
    images: Sequence[Sequence[Any]] | None = None,
    *,
    direction: Any,
    candidates: Sequence[str] | None = None,
    target: str | Sequence[str] | None = None,
    families: Sequence[str],
    groups: Sequence[str] | None = None,
    layer: int | Sequence[int] | None = None,
    alphas: Sequence[float] = (-1.0, -0.5, 0.0, 0.5, 1.0),
    goal: int = 1,
    goal_group: str = "all",
    units: str = "norm",
    mean_norm: float | Mapping[int, float] | None = None,
    positions: Any = "all",
    n_random: int = 50,
    n_relabel: int = 50,
    fit_rows: Any = None,
    controls: Mapping[str, Any] | None = None,
    ablation: bool = False,
    n_boot: int = 2000,
    seed: int = 20260905,
    random_seed: int | None = None,
    split_seed: int = 0,
    choice: ChoiceRule | None = None,
    readout: GeneratedReadout | None = None,
    backend: str = "hf",
    batch_size: int = 8,
    max_rows: int = 256,
    allow_other_model: bool = False,
) -> DoseResponseResult:
    """Steer `prompts` along `direction` over `alphas` (module docstring); one forward of up to
    `max_rows` rows reads many directions at once (hooks.steer_rows.option_logprobs_rows).

    direction: a fitted Direction (its layer; refused on another model than it was fitted on
        unless allow_other_model), a {layer: direction} mapping, or a vector with `layer=`.
    candidates, target: the letter readout's (needed unless `readout` is given, refused with it): the
        candidates read at the answer position, and the one whose log-odds are read, one for every
        prompt or one per prompt (a menu whose options are shuffled per item).
    readout: None (the letters' log-probs) or a GeneratedReadout: greedy replies read by its `read`
        (module docstring), generated in forwards of up to `max_rows` rows.
    backend: "hf" (the handle's model with hooks) or "vllm": the handle is a started engine
        (analysis.engine_model.open_engine) and every direction x dose of a layer is one engine
        call of per-request edits (analysis.dose_forward); text prompts, no ablation. Log-probs equal
        hf's within float32 rounding, greedy replies hf's (tests/experiments/test_dose_response_vllm.py).
    families: one id per prompt, the unit every resample and the cross-fit halves keep whole.
    groups: one label per prompt (e.g. "enough" / "not enough"), each read on its own beside "all".
    n_relabel, fit_rows: the label-free null (analysis.label_null): n_relabel directions fitted the
        same way as the direction on the rows it was fitted on, once the label carries nothing.
        Those rows come from `fit_rows` (a FitRows, or (acts, labels, families): acts (rows, d_model)
        at the steered layer and the direction's position, 0/1 labels, family ids; a {layer: ...}
        mapping for several layers), or else from the capture a fitted Direction names in its
        provenance. Without either there is no label-free null and no specificity verdict
        (`notes` says so); the random null still runs.
    controls: {name: vector} other directions read like the probe at every layer (e.g. a
        direction of another feature), at the same raw doses.
    ablation: also read each layer with the direction projected out of its output (hooks.ablation.ablate:
        every position and step), which has no dose: direction "ablation", alpha NaN, its readouts
        and paired changes against the unsteered model (is the direction used at that layer?).
    choice: how each cross-fit half picks the layer x dose (analysis.dose_grid.ChoiceRule): by default
        the goal group's log-odds (a generated readout's first measure) moved furthest toward `goal`; ChoiceRule("chose") moves the rate of
        choosing the target instead, and a `guard` rate caps a setting (the benchmark's rule: the stop
        rate, while at most 10% choose a useless test). The letters' verdict is read on the log-odds
        either way; a generated readout's on the rule's measure.
    seed: the family bootstrap's, and the random directions' unless `random_seed` is given (the
        pipeline seeds them apart: its `seed` and `random_seed`).
    """
    import pandas as pd

    from evprobe.analysis.dose_forward import (check_backend, steered_logprobs, steered_replies, unit_norm,
                                               unsteered_logprobs, unsteered_replies)
    from evprobe.hooks.ablation import ablate
    from evprobe.hooks.generation import candidate_notes, next_token_logprobs
    from evprobe.hooks.inputs import image_rows
    from evprobe.hooks.direction_vectors import check_direction_model, random_directions

    counts = {"n_random": (n_random, 0, MAX_NULL), "n_relabel": (n_relabel, 0, MAX_NULL), "n_boot": (n_boot, 1, MAX_BOOT),
              "seed": (seed, 0, None), "random_seed": (random_seed, 0, None), "split_seed": (split_seed, 0, None),
              "batch_size": (batch_size, 1, None), "max_rows": (max_rows, 1, None)}
    if readout is not None and not isinstance(readout, GeneratedReadout):
        raise InputError(f"readout must be None (letter log-probs) or an evprobe GeneratedReadout, got {shown(readout, 40)}")
    if readout is not None and (candidates is not None or target is not None):
        raise InputError("candidates and target are the letter readout's; a generated readout reads each reply with its "
                         "`read`: drop candidates= and target=")
    if readout is None and (candidates is None or target is None):
        raise InputError("give candidates= and target= (the letters whose log-probs are read), or "
                         "readout=GeneratedReadout(...) to read generated replies")
    rd = TARGET_READOUT if readout is None else readout.readout
    measures, n_m = rd.measures, len(rd.measures)
    fam, steps = dose_arguments(prompts, families, groups, alphas, candidates, target, goal, units, counts, n_m)
    images = image_rows(prompts, images)
    if isinstance(images, str) or not isinstance(images, Sequence) or len(images) != len(prompts) or not all(
            isinstance(row, list | tuple) for row in images):
        raise InputError(f"images must hold one list of images per prompt ({len(prompts)} lists; [] for none), or be "
                         f"None, got {shown(images, 40)}")
    check_backend(handle, backend, ablation=ablation, images=images)
    by_layer = _directions(direction, layer)
    unit_norms(mean_norm, list(by_layer))
    for layer_, d in by_layer.items():
        if not 0 <= layer_ < handle.n_layers:
            raise InputError(f"layer {layer_} is out of range: {handle.model_id} has layers 0..{handle.n_layers - 1}")
        try:
            check_direction_model(handle, d, allow_other_model=allow_other_model)
        except ValueError as e:  # hooks' one line, as the own-data functions' error
            raise InputError(str(e)) from None
    if controls is not None and not isinstance(controls, Mapping):
        raise InputError(f"controls must be {{name: vector}}, got {shown(controls, 40)}")
    vectors = {layer_: _unit(getattr(d, "vector", d), handle.d_model, f"direction at layer {layer_}")
               for layer_, d in by_layer.items()}
    extra = {name: _unit(v, handle.d_model, f"control {name!r}") for name, v in (controls or {}).items()}
    group_of = np.array(["all"] * len(prompts) if groups is None else [str(g) for g in groups], dtype=object)
    group_names = ["all"] + ([] if groups is None else sorted(set(group_of)))
    masks = {g: np.ones(len(prompts), bool) if g == "all" else group_of == g for g in group_names}
    if not isinstance(goal_group, str) or goal_group not in masks:
        raise InputError(f"goal_group {goal_group!r} is not a group; choose from {', '.join(group_names)}")
    if choice is None:  # the first measure of a generated readout; the target's log-odds of the letters'
        choice = TARGET_CHOICE if readout is None else readout.choice
    if not isinstance(choice, ChoiceRule):
        raise InputError(f"choice must be an evprobe ChoiceRule (analysis.dose_grid), got {shown(choice, 40)}")
    choice.columns(rd)  # a measure this readout lacks: one line before any forward
    if readout is not None:  # a reader that cannot read an empty reply (a model's possible one) fails here, not later
        readout.values([0], [""])
    n_directions = len(steps) * (1 + len(extra) + n_random + n_relabel)  # a forward's rows: directions x prompts
    if backend == "hf":  # an engine schedules its own memory
        prompt_lengths(handle, list(prompts), list(images), batch_size,
                       min(max(max_rows, batch_size), n_directions * min(batch_size, len(prompts))))
    t = None if readout is not None else np.array(
        [list(candidates).index(x) for x in ([target] * len(prompts) if isinstance(target, str) else target)])

    # -- the unit of alpha, per layer
    unit: dict[int, DoseUnit] = {}
    for layer_ in sorted(vectors):
        if units == "raw":
            unit[layer_] = DoseUnit.raw(layer_)
            continue
        given = mean_norm.get(layer_) if isinstance(mean_norm, Mapping) else mean_norm
        if given is None:
            norm, count = unit_norm(handle, backend, prompts, images, layer_, positions, batch_size)
            if not (np.isfinite(norm) and norm > 0):  # a dose of alpha x 0 or x NaN reads nothing
                raise InputError(f"the mean residual norm at layer {layer_} over these prompts is {norm!r}; give "
                                 "mean_norm= (the unit of alpha) or units='raw'")
            unit[layer_] = DoseUnit(layer_, float(norm), positions, f"mean residual norm over {count} edited positions "
                                    "of these prompts, unsteered")
        else:
            unit[layer_] = DoseUnit(layer_, float(given), None, "given")

    # -- readouts, each through hooks.generation.answer_logprobs (the one readout; evprobe dose-response reads
    # with it too): alpha = 0 once (no edit), then every direction x dose in large forwards
    texts: dict[tuple[str, int | None, float | None], np.ndarray] = {}  # generated: (kind, layer, alpha) -> replies
    if readout is None:
        base = _readouts(unsteered_logprobs(handle, backend, prompts, images, candidates, batch_size), t)  # (n, 2)
    else:
        first = unsteered_replies(handle, backend, prompts, images, readout, batch_size)
        base, texts[("unsteered", None, 0.0)] = first.values, first.texts[None]  # (n, M)
    rand_seed = seed if random_seed is None else random_seed
    rand = random_directions(handle.d_model, n_random, rand_seed) if n_random else np.zeros((0, handle.d_model))
    label_free, notes = label_free_nulls(by_layer, vectors, fit_rows, n_relabel, rand_seed, handle.d_model)
    if readout is None:
        notes = [*candidate_notes(handle, candidates), *notes]  # a candidate of several tokens is read by its first
    names = ["probe", *extra]
    values: dict[int, np.ndarray] = {}   # layer -> (A, D, n, M): the named directions
    nulls: dict[str, dict[int, np.ndarray]] = {"random": {}, "label-free": {}}  # kind -> layer -> (A, K, n, M)
    for layer_, v in vectors.items():
        raw = np.array([unit[layer_].dose(alpha).raw for alpha in steps])  # (A,) raw sizes of the doses
        named = np.stack([v, *extra.values()])  # (D, d)
        free = label_free[layer_].vectors if layer_ in label_free else np.zeros((0, handle.d_model))
        deltas = np.concatenate([(raw[:, None, None] * named[None]).reshape(-1, handle.d_model),
                                 (raw[:, None, None] * rand[None]).reshape(-1, handle.d_model),
                                 (raw[:, None, None] * free[None]).reshape(-1, handle.d_model)])  # (A*(D+K+K2), d)
        if readout is not None:  # greedy replies under every direction x dose, read (analysis.generated_readout)
            got = steered_replies(handle, backend, prompts, images, readout, layer_, deltas, positions=positions,
                                  max_rows=max_rows, batch_size=batch_size)
            out = got.values  # (rows, n, M)
            texts.update(got.split(layer_, steps, {"named": len(named), "random": len(rand), "label-free": len(free)}))
        else:
            out = _readouts(steered_logprobs(handle, backend, prompts, images, candidates, layer_, deltas, positions,
                                             max_rows, batch_size, float(np.abs(raw).max())), t)  # (rows, n, 2)
        a, d_, k, k2 = len(steps), len(named), len(rand), len(free)
        values[layer_] = out[: a * d_].reshape(a, d_, len(prompts), n_m)
        nulls["random"][layer_] = out[a * d_: a * (d_ + k)].reshape(a, k, len(prompts), n_m)
        nulls["label-free"][layer_] = out[a * (d_ + k):].reshape(a, k2, len(prompts), n_m)

    boot = FamilyBootstrap(sorted(set(fam)), n_boot, seed)
    # every estimate, change and null effect over the groups on one bootstrap (analysis.dose_grid: the command's too)
    grid = GridEstimator.of(rd, base, masks, boot, boot.family_index(list(fam)))
    effects, null_rows, item_rows = [], [], []
    cell_of = [(g, measure) for g in masks for measure in measures]  # the cells' order (analysis.effects)

    def item_row(i: int, name: str, layer_: int | None, alpha: float | None, vals: np.ndarray,
                 said: np.ndarray | None) -> None:
        item_rows.append({"item": i, "family": fam[i], "group": group_of[i], "direction": name, "layer": layer_,
                          "alpha": alpha, **{m: vals[i, c] for c, m in enumerate(measures)},
                          **({} if said is None else {"reply": said[i]})})

    def add(name: str, layer_: int | None, alpha: float | None, group: str, measure: str, e: Estimate) -> None:
        effects.append({"direction": name, "layer": layer_, "alpha": alpha, "group": group, "measure": measure,
                        **estimate_columns(e)})

    for (g, measure), e in zip(cell_of, grid.estimates(base)[0], strict=True):
        add("unsteered", None, 0.0, g, measure, e)
    for layer_ in sorted(vectors):
        for ai, alpha in enumerate(steps):
            probe_changes: list[Estimate] = []  # the probe's (names[0]) paired changes, placed among each null's
            for di, name in enumerate(names):
                vals = values[layer_][ai, di]  # (n, M)
                said = texts[("named", layer_, alpha)][di] if readout is not None else None
                for i in range(len(prompts)):
                    item_row(i, name, layer_, alpha, vals, said)
                steered, changes = grid.estimates(vals)
                if di == 0:
                    probe_changes = changes
                for c, (g, measure) in enumerate(cell_of):
                    add(name, layer_, alpha, g, measure, steered[c])
                    add(name, layer_, alpha, g, f"{measure}_change", changes[c])
            for kind, by in nulls.items():
                k_effects = grid.null_effects(by[layer_][ai].transpose(1, 0, 2))  # (K, cells)
                for c, (g, measure) in enumerate(cell_of):
                    null_rows.append({"null": kind, "layer": layer_, "alpha": alpha, "group": g,
                                      "measure": f"{measure}_change",
                                      **null_stats(probe_changes[c].value, k_effects[:, c])})
    for layer_, v in sorted(vectors.items()) if ablation else ():
        said = None
        if readout is not None:
            got = ablated(handle, prompts, images, readout, v, layer_, batch_size)
            kept, said = got.values, got.texts
            texts[("ablation", layer_, None)] = said[None]
        else:
            with ablate(handle, v, layers=[layer_]):
                kept = _readouts(next_token_logprobs(handle, prompts, images, list(candidates), batch_size=batch_size),
                                 t)  # (n, 2)
        for i in range(len(prompts)):
            item_row(i, "ablation", layer_, None, kept, said)
        values_at, changes = grid.estimates(kept)
        for c, (g, measure) in enumerate(cell_of):
            add("ablation", layer_, None, g, measure, values_at[c])
            add("ablation", layer_, None, g, f"{measure}_change", changes[c])
    for i in range(len(prompts)):
        item_row(i, "unsteered", None, 0.0, base, texts[("unsteered", None, 0.0)][0] if readout is not None else None)
    near = {"random": near_random(rand, vectors), "label-free": near_free(label_free)}
    # the verdict's measure: the letters' log-odds whatever the rule (as ever); a generated readout's rule's measure
    crossfit, verdict = crossfit_rows(values, nulls, base, steps, fam, masks, goal, goal_group, split_seed, choice,
                                      lambda scored: grid.estimates(scored)[1], near, rd,
                                      "log_odds" if readout is None else choice.measure)
    return DoseResponseResult(effects=pd.DataFrame(effects), null=pd.DataFrame(null_rows),
                              crossfit=pd.DataFrame(crossfit), items=pd.DataFrame(item_rows), units=unit, goal=goal,
                              goal_group=goal_group, verdict=verdict, label_free=label_free, notes=tuple(notes),
                              measures=measures, replies=None if readout is None else reply_frame(
                                  texts, names, fam, group_of))
