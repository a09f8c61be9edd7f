"""`evprobe dose-response` (this subpackage): steer a model along a probe direction on held-out families, layer x dose.

    evprobe dose-response --config dose_response_tiny [--limit 8] [--alphas=-1,0,1] ...

A direction written by `evprobe directions` (fitted on some families, e.g. one system or one kind
of pair) is added at one decoder layer, at every token position and on every generated token, to
the `select` prompts of the families it was NOT fitted on, over a grid of layers x doses; beside
it run n_random (default 50) seeded random unit directions of the same raw norm (the null), a few
specificity controls (directions of other features: history, threshold level, a shuffled label;
experiments.dose_response.controls) and the projection of the direction out of that layer (ablation). Readouts per item and condition: the option letters' next-token log-probs
(default; the argmax letter is the choice) and/or the greedy direct-protocol reply read by the
runner's parser. Outputs per system and per resolved / unresolved group: stop rate, rate of
choosing the missing property's test, minimum-cost accuracy, mean log-odds of stop against the
best other letter, and the rate of useless tests (free fall, or repeating the initial test: no
belief justifies them), each with a family-bootstrap interval and its n.

Conventions (the report repeats them):

- **Sign.** Doses are stated toward *measuring*: positive alpha moves the residual toward
  "the evidence is not enough" (unresolved), negative alpha toward "enough, stop". A stored
  direction points toward its positive class (probes.directions): `resolved=True` (and
  `stopped=True`, `committed=True`) point toward stopping and are negated here;
  `resolved=False` (TRAPS's void - control) is used as stored. Other labels are refused. So the
  issue's "+alpha on resolved items to induce measuring, -alpha on unresolved items to induce
  stopping" are the two halves of one grid: every dose runs on every item and the report reads
  the resolved group at +alpha and the unresolved group at -alpha.
- **Units.** alpha is in multiples of the layer's mean residual norm *over the positions the vector
  is added at* (`positions: all` = every real prompt token; `last` = the last one), unsteered, on
  up to `norm_items` select prompts of the items the direction was fitted on
  (experiments.dose_response.units; recorded in meta.json `alpha_units`, beside directions.json's
  `mean_norm`, which is read at the capture position only). The raw vector added is alpha x
  unit_norm x unit direction; random and control directions get the same raw size.
- **Layers.** Each steered layer uses the direction fitted *at that layer* with the same model,
  label, probe, position, condition, regimes and restriction as the named one (`evprobe
  directions ... --layer 8,16` writes such a set); `layers: from-direction` means every layer the
  folder has such a direction for. A layer with none is an error naming the layers there are.
- **Held-out families.** The families of every item id in the used directions' provenance
  (`items`) are excluded from the target set (`heldout: true`, the default); `systems` and
  `families` filter what remains, then `limit` keeps the first N items in manifest order.
  `heldout: false` steers in-sample and the report says so.
- **alpha = 0** is the unsteered model: computed once per item (no hooks at all) and shared by
  every layer and direction kind; adding 0 * v is exact, so this is what a zero-dose hook gives.
- **Null.** n_random seeded Gaussian unit directions (hooks.direction_vectors.random_directions, the same
  vectors at every layer) at the same raw doses, read as one *set* condition per layer x dose (one
  row per item holding every direction's choice and log-odds; K x items rows per forward).
  Effect = paired change vs alpha = 0, per item, averaged over a group; the primary measure is the
  stop log-odds (nats; unsaturated), the stop rate beside it. Per (layer, dose, group, system,
  measure): the probe's percentile, z-score and p_null among the K random effects, on the
  targeted and on the non-targeted group; the band drawn is their 2.5-97.5 percentiles
  (experiments.dose_response.null).
- **Headline (cross-fitted).** Layer and dose are chosen on one half of the target families and
  scored on the other, then the halves swap (whole families, seeded by `split_seed`, stratified by
  system; experiments.dose_response.crossfit); the report says which half chose what. `by_layer` keeps the
  fixed grid extremes per layer (chosen on no data).
- **Ablation** projects the direction out of that one layer's output (hooks.ablation), every
  position and step; it has no dose and is drawn as a horizontal line with its interval; one
  generated sentence per layer and group reads its change and interval (experiments.dose_response.text:
  "not necessary at this layer" when the stop-rate and log-odds intervals include 0).
- **Choices from log-probs.** The choice is the argmax over the item's option letters (ties go
  to the earlier letter); `stop` = that letter's action is stop; `missing test` = it is the test
  of the property the initial test did not measure (undefined on `no_initial_test` variants,
  which leave both unknown; those items are out of that denominator); `minimum-cost` = it equals
  the item's reference action. Log-odds = log p(stop letter) - max log p(other letters), in nats.
  With `readout: generate` the direct-protocol reply (greedy, the model config's direct token
  limit) is parsed by bench.parse.parse_reply; invalid replies stay in every denominator (never
  stop, never correct) and their share is reported.
- **Intervals.** core.bootstrap.FamilyBootstrap over the families of the selected items (one
  resample matrix for every number of a run, so differences to alpha = 0 are paired); per-system
  rows use the same resamples. Every curve number comes from analysis.effects, the
  estimator of `steering_dose_response` and `evprobe.paired_effects` (rates hulled with a cluster
  interval, changes of rates widened where a rate saturates, a cell whose units all equal marked
  identical). Every number is printed with its interval and n (items).

Sharding: `--shard K/N` steers only the target items of shard K's families (core.shard; after
the held-out filter and `limit`, so the N shards together hold exactly the unsharded selection);
`evprobe merge OUT SHARD_DIR...` writes results.jsonl in a single run's order, meta.json and every
report of the whole experiment.

Files in `out`: `meta.json` (what the run is, the alpha units; a rerun with other pinned settings
is refused), `results.jsonl` (one row per item x condition, set conditions holding `lp_set` / `gen_set`, appended with an fsync per batch and condition; a
rerun skips finished rows and cuts a torn last line), `dose_response.json` (all aggregates),
`dose_response.md` (tables and generated paragraphs saying what the numbers show and do not show), and curves `<measure>.png` (plus `<measure>.<system>.png` with
several systems; `generate.` prefix for the generated-reply readout).

The subpackage, one concept per module: `config` (the typed config, the dose key), `plan` (what a
run steers: directions per layer, target items, conditions), `units` (alpha's unit), `readouts`
(one forward per batch and condition), `controls` and `relabel` (the specificity controls and the
relabelled null), `null` and `crossfit` (the null band from the set rows; the cross-fitted headline:
the benchmark's readout and choice rule handed to the analysis layer's one cross-fit,
analysis.dose_grid, which `steering_dose_response` runs on a user's prompts), `stats` (aggregates), `formatting`, `text` and `report` (how numbers print, the generated sentences, the
files), `job` (the job and the command).
"""

from __future__ import annotations

from typing import Any

_PUBLIC = {
    "DoseResponseConfig": "config",
    "DoseResponseJob": "job",
    "DoseResponseReport": "job",
    "add_dose_response_parser": "job",
    "config_from_args": "job",
    "dose_response": "job",
    "load_results": "job",
    "run_dose_response": "job",
}


def __getattr__(name: str) -> Any:
    # Lazy: the statistics modules (null, crossfit, specificity) import without the job's model side.
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{_PUBLIC[name]}"), name)


__all__ = sorted(_PUBLIC)
