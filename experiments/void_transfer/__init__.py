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

The package: `config` (the settings and files), `run` (the run, `--judged`'s re-score and the command),
`report` (the effects, the table and void_transfer.md), `judged` (the re-score's checks).

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

from evprobe.experiments.void_transfer.config import (FREE_MEASURES, JSON_FILE, MD_FILE, REPLIES_FILE, VoidTransferConfig,
                                                     load_void_transfer_config)
from evprobe.experiments.void_transfer.report import (NullTest, SteeringEffect, VoidPath, VoidTransferMeta,
                                                     VoidTransferReport, crossfit_estimate, markdown)
from evprobe.experiments.void_transfer.run import add_void_transfer_parser, rescore, run_void_transfer, void_transfer

__all__ = ["FREE_MEASURES", "JSON_FILE", "MD_FILE", "REPLIES_FILE", "NullTest", "SteeringEffect", "VoidPath", "VoidTransferConfig", "VoidTransferMeta", "VoidTransferReport",
           "add_void_transfer_parser", "crossfit_estimate", "load_void_transfer_config", "markdown", "rescore",
           "run_void_transfer", "void_transfer"]
