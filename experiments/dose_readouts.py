"""Dose-response readouts: what one item's option log-probs or greedy reply say (stop, missing-property
test, useless test, minimum cost, log-odds), the hooks of one condition, and the rows of one batch."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from evprobe.bench.items import Item
from evprobe.bench.protocols import build_prompt
from evprobe.experiments.dose_config import LETTERS
from evprobe.experiments.dose_plan import Condition, Plan


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


def logprob_readout(item: Item, logp: np.ndarray) -> dict[str, Any]:
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


def generate_readout(item: Item, text: str, regime: str, n_new: int) -> dict[str, Any]:
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


@contextmanager
def _intervention(handle: Any, plan: Plan, cond: Condition) -> Iterator[None]:
    """The hooks of one condition around the readout calls (nothing for the baseline)."""
    from evprobe.hooks.ablate import ablate
    from evprobe.hooks.steer import Steering, steer

    if cond.kind == "baseline":
        yield
        return
    assert cond.layer is not None
    d = plan.directions[cond.layer]
    if cond.kind == "ablation":
        with ablate(handle, d.vector, layers=[cond.layer]):
            yield
        return
    vector = d.vector if cond.kind == "probe" else plan.random[cond.index - 1]  # type: ignore[operator]
    spec = Steering.from_norm_units(vector, cond.layer, cond.alpha, d.mean_norm,  # type: ignore[arg-type]
                                    positions=plan.config.positions, schedule="every-step")
    with steer(handle, spec):
        yield


def rows_for(handle: Any, plan: Plan, cond: Condition, batch: list[Item], images: list[list[Any]]) -> list[dict]:
    from evprobe import hooks

    config = plan.config
    prompts = [build_prompt(it, "direct", config.regime) for it in batch]
    logp = gens = None
    with _intervention(handle, plan, cond):
        if "logprobs" in config.readouts:
            logp = hooks.next_token_logprobs(handle, prompts, images, list(LETTERS), batch_size=len(batch))  # (rows, 5)
        if "generate" in config.readouts:
            gens = hooks.generate(handle, prompts, images, max_new_tokens=plan.model.max_new_tokens_direct,
                                  batch_size=len(batch))
    rows = []
    for r, it in enumerate(batch):
        row: dict[str, Any] = {
            "item_id": it.item_id, "family_id": it.family_id, "system": it.system, "resolved": it.resolved,
            "variant": it.variant, "condition": cond.key, "kind": cond.kind, "layer": cond.layer,
            "alpha": cond.alpha, "direction_index": cond.index,
        }
        if logp is not None:
            row["logprobs"] = {letter: float(logp[r, i]) for i, letter in enumerate(LETTERS)}
            row["lp"] = logprob_readout(it, logp[r])
        if gens is not None:
            row["gen"] = generate_readout(it, gens[r].text, config.regime, gens[r].n_new_tokens)
        rows.append(row)
    return rows


__all__ = [
    "generate_readout",
    "logprob_readout",
    "missing_test",
    "rows_for",
    "useless_test",
]
