"""`evprobe gating`: the TRAPS prompt-gating experiment (seed 002, section 5.5 and appendix I.2,
Table 4) on the answer requests and the selection requests.

    evprobe gating --config gating_tiny [--layer 2] [--alphas=-1,0,1] ...

A 2 x 2 matrix: direction regime (the prompt regime the direction was fitted under: standard /
guided) x inference regime (the prompt regime the steered model reads: standard / guided). Per
cell, answerable items (controls, `resolved`) get +alpha (toward abstaining) and unanswerable
items (voids) get -alpha (toward answering); the readout is the top option letter.

Steps (resumable; a rerun reuses finished work):

1. capture the chosen requests at every layer, position `last`, under `standard` and under
   `guided` into `out/acts/standard` and `out/acts/guided` (experiments.capture.capture);
2. split families: per system (sorted ids), a permutation from default_rng([split_seed, k]) for
   the k-th system; its first floor(n/2) families are the *fitting* families, the rest are
   *held out*. Directions (and the layer choice) see only fitting families; steering and every
   reported number only held-out ones;
3. `layer: best` = the nested best layer of a logistic sweep of `resolved` on the standard
   capture's fitting families at position `last` (folds = min(folds, fitting families)), written
   to `out/layer_sweep/`; or a given layer number;
4. one mass-mean `resolved` direction per regime at that layer, position `last`, on the fitting
   families (probes.directions.fit_directions; written to `out/directions/<regime>/`);
5. per held-out item, inference regime and condition: the option letters' next-token log-probs
   (hooks.next_token_logprobs, direct protocol, bench.protocols.build_prompt(item, "direct",
   regime)) with the direction added at that layer at every prompt position (hooks.steering);
   appended to `out/results.jsonl` by the job runner (`GatingJob` on core.jobs);
6. `gating.json`, `gating.md` (Table-4-style 2 x 2 tables per request kind and dose) and
   `gating.png` (rate vs dose per cell).

Sharding: `--shard K/N` steers only the held-out items of shard K's families (the held-out
families sorted, round robin). Steps 1-4 (`prepare`) are deterministic, so every shard runs them
itself into its own out (acts/, layer_sweep/, directions/), and its meta.json records what step 6
needs of them (the layer and its choice; the directions' names, sha256, mean norms, fitted items
and cosine). `evprobe merge OUT SHARD_DIR...` writes what one run writes from the shards' rows and
metas alone (no model, no preparation: OUT gets no acts/, layer_sweep/ or directions/); under
`torchrun --nproc_per_node N -m evprobe gating ...` each process runs OUT/.shards/shard-K-of-N and
rank 0 merges.

Conventions:

- **Sign** as dose-response: + = toward abstaining / measuring. Stored directions point toward
  resolved=True and are negated (experiments.steering_conventions.measure_sign).
- **Units**: alpha in multiples of the layer's mean residual norm at `last` over the fitting
  items *of the direction's own regime* (mean_norm in directions.json): raw vector added =
  alpha * mean_norm * unit direction.
- **alpha = 0** is the unsteered model (no hooks), computed once per item and inference regime
  and shared by both direction regimes.
- **Readout**: choice = argmax over the item's option letters (ties: the earlier letter).
  Answer requests: *abstain* = the choice is the `undetermined` option. Select requests: the
  analogue is *measure* = the choice is a test (not stop); 100 - measure is the stop rate.
- **Intervals**: one FamilyBootstrap over the held-out families (B = n_boot, seed) for every
  number, so steered - base changes are paired; n = items in the denominator.

The subpackage: `config` (GatingConfig, files, groups and measures), `plan` (the held-out split,
the conditions, the capture, the layer and the directions), `job` (the steered readout, the job
and the command), `report` (the aggregates, gating.md and the figure).
"""

from __future__ import annotations

from typing import Any

_PUBLIC = {
    "GatingConfig": "config", "load_gating_config": "config", "ROW_TYPES": "config", "REGIMES": "config",
    "Plan": "plan", "split_families": "plan", "conditions_for": "plan", "make_plan": "plan", "prepare": "plan",
    "GateDirection": "plan",
    "GatingJob": "job", "GatingReport": "job", "gating": "job", "readout": "job", "add_gating_parser": "job",
    "config_from_args": "job", "run_gating": "job",
    "aggregate": "report", "markdown": "report", "plot": "report",
}


def __getattr__(name: str) -> Any:
    # Lazy: `evprobe gating --help` and the config import no job or model side.
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{_PUBLIC[name]}"), name)


__all__ = sorted(_PUBLIC)
