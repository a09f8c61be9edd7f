"""Dose-response readouts: what one item's option log-probs or greedy reply say (stop, missing-property
test, useless test, minimum cost, log-odds), the hooks of one condition, and the rows of one batch.

A single-direction condition (baseline, probe, ablation) writes the full readout per item (`logprobs`,
`lp`, `gen`). A direction set (the random null, the controls) writes one row per item with the
compact readout of every direction (`lp_set`, `gen_set`): K directions x n items are read in
forwards of up to `null_batch_rows` rows (hooks.steer_rows.option_logprobs_rows), so 50 random
directions cost a handful of large forwards per batch instead of 50 small ones, and
results.jsonl grows by one row per item and dose instead of 50. The log-probs and the greedy replies
come from a forward (experiments.dose_response.forward: the hf model with hooks, or a vLLM engine's
per-request edits)."""

from __future__ import annotations

from typing import Any

import numpy as np

from evprobe.core.json_types import JsonObject
from evprobe.bench.items import Item
from evprobe.bench.protocols import build_prompt
from evprobe.experiments.dose_response.config import LETTERS
from evprobe.experiments.dose_response.plan import Condition, Plan
from evprobe.experiments.dose_response.forward import condition_deltas
from evprobe.experiments.dose_response.units import AlphaUnits, unit_of
from evprobe.hooks.dose import Dose


def missing_test(item: Item) -> str | None:
    """The test of the property the initial test did not measure (None: no initial test shown)."""
    if item.variant == "no_initial_test":
        return None
    return "test_other" if item.initial_property == "mass" else "test_mass"


def useless_test(item: Item, action: str | None) -> bool:
    """A test whose result is already known or tells nothing: free fall, or repeating the initial test.

    No state of belief justifies it (unlike the combined report, which resolves but costs more),
    so a steered model choosing it has stopped reasoning about the evidence: the known-answer
    checks call a dose where this passes 10% of a group the point where the model breaks."""
    if action == "free_fall":
        return True
    if item.variant == "no_initial_test" or action is None:
        return False
    return action == ("test_mass" if item.initial_property == "mass" else "test_other")


def logprob_readout(item: Item, logp: np.ndarray) -> JsonObject:
    """Choice and measures from one row of option log-probs, logp: (len(LETTERS),) float64."""
    assert item.options is not None
    letters = sorted(item.options)
    values = [float(logp[LETTERS.index(letter)]) for letter in letters]
    choice = letters[int(np.argmax(values))]  # argmax: first maximum, so ties go to the earlier letter
    action = item.options[choice]
    stop_letter = next(letter for letter in letters if item.options[letter] == "stop")
    best_other = max(v for letter, v in zip(letters, values) if letter != stop_letter)
    missing = missing_test(item)
    return {
        "choice": choice,
        "action": action,
        "stop": action == "stop",
        "missing": None if missing is None else action == missing,
        "useless": useless_test(item, action),
        "min_cost": action == item.reference_action,
        "log_odds": values[letters.index(stop_letter)] - best_other,
    }


def generate_readout(item: Item, text: str, regime: str, n_new: int) -> JsonObject:
    """The parsed greedy reply; invalid replies stop nothing and choose nothing (they stay counted)."""
    from evprobe.bench.parse import parse_reply

    parsed = parse_reply(item, text, regime)
    missing = missing_test(item)
    return {
        "reply": text,
        "valid": parsed.valid,
        "route": parsed.route,
        "choice": parsed.choice,
        "action": parsed.action,
        "stop": parsed.action == "stop",
        "missing": None if missing is None else parsed.action == missing,
        "useless": useless_test(item, parsed.action),
        "min_cost": parsed.valid and parsed.action == item.reference_action,
        "n_new_tokens": n_new,
    }


def dose_of(cond: Condition, units: AlphaUnits) -> Dose:
    """The condition's Dose: alpha x the layer's unit (experiments.dose_response.units), which knows the
    positions its norm was read at."""
    assert cond.layer is not None and cond.alpha is not None
    return unit_of(units, cond.layer).dose(cond.alpha)


def _base_row(it: Item, cond: Condition) -> JsonObject:
    return {"item_id": it.item_id, "family_id": it.family_id, "system": it.system, "resolved": it.resolved,
            "variant": it.variant, "condition": cond.key, "kind": cond.kind, "layer": cond.layer,
            "alpha": cond.alpha, "direction_index": cond.index}


def _set_rows(forward: Any, plan: Plan, cond: Condition, batch: list[Item], images: list[list[Any]],
              prompts: list[str], units: AlphaUnits) -> list[dict]:
    """One row per item holding every direction of the set: `lp_set` {choice: K letters, log_odds: K
    floats} and/or `gen_set` {action: K actions or null, valid: K 0/1}, direction order as the plan's.
    Everything else (stop, missing, useless, min cost) follows from the choice and the item."""
    config = plan.config
    deltas = condition_deltas(plan, cond, units)  # (K, d_model)
    assert deltas is not None
    K = deltas.shape[0]
    rows = [_base_row(it, cond) for it in batch]
    if "logprobs" in config.readouts:
        logp = forward.logprobs(plan, cond, batch, images, prompts, units)  # (K, n, 5)
        for i, it in enumerate(batch):
            reads = [logprob_readout(it, logp[k, i]) for k in range(K)]
            rows[i]["lp_set"] = {"choice": "".join(r["choice"] for r in reads),
                                 "log_odds": [r["log_odds"] for r in reads]}
    if config.reads_sets("generate"):
        gens = forward.generations(plan, cond, batch, images, prompts, units)  # (K, n) Generations
        actions: list[list[Any]] = [[] for _ in batch]
        valid: list[list[int]] = [[] for _ in batch]
        for k in range(K):
            for i, g in enumerate(gens[k]):
                r = generate_readout(batch[i], g.text, config.regime, g.n_new_tokens)
                actions[i].append(r["action"] if r["valid"] else None)
                valid[i].append(int(bool(r["valid"])))
        for i in range(len(batch)):
            rows[i]["gen_set"] = {"action": actions[i], "valid": valid[i]}
    return rows


def rows_for(forward: Any, plan: Plan, cond: Condition, batch: list[Item], images: list[list[Any]],
             units: AlphaUnits) -> list[dict]:
    """The rows of one condition for one batch of items. forward: experiments.dose_response.forward's
    HFForward or EngineForward (the option log-probs); units: experiments.dose_response.units.units_for."""
    config = plan.config
    prompts = [build_prompt(it, "direct", config.regime) for it in batch]
    if cond.is_set:
        return _set_rows(forward, plan, cond, batch, images, prompts, units)
    logp = gens = None
    if "logprobs" in config.readouts:
        # one readout for every condition (hooks.generation.answer_logprobs, or the engine's): the baseline
        # is that readout with no edit (alpha 0: no hook at all), a dose the same readout under the core's Add
        logp = forward.logprobs(plan, cond, batch, images, prompts, units)[0]  # (n, 5)
    if "generate" in config.readouts:
        gens = forward.generations(plan, cond, batch, images, prompts, units)[0]  # (n,) Generations
    rows = []
    for r, it in enumerate(batch):
        row = _base_row(it, cond)
        if logp is not None:
            row["logprobs"] = {letter: float(logp[r, i]) for i, letter in enumerate(LETTERS)}
            row["lp"] = logprob_readout(it, logp[r])
        if gens is not None:
            row["gen"] = generate_readout(it, gens[r].text, config.regime, gens[r].n_new_tokens)
        rows.append(row)
    return rows


__all__ = [
    "generate_readout",
    "dose_of",
    "logprob_readout",
    "missing_test",
    "rows_for",
    "useless_test",
]
