"""The steering checks of the known-answer suite (experiments.known_answer.checks lists every check and the
fault each catches): steering at the planted layer, and the generated reply following it.

Both read dose_response.json's per-condition rows at the planted layer m (the organism's `aux_layer`),
system `all`, for the probe direction: the log-prob readout's stop, missing-test and useless-test
rates, the random directions' band, and (readout both) the generated reply's stop and invalid rates.
Both expect every held-out item steered (`steered_expected`): the base selections of every family of
the bench that the steered direction was not fitted on (its provenance's items), per group.
"""

from __future__ import annotations

from evprobe.core.decimals import fixed
from dataclasses import dataclass, field
from pathlib import Path

from evprobe.experiments.dose_response.crossfit import USELESS_CEILING  # above it, a setting (the model) is broken
from evprobe.experiments.known_answer.counts import Expectations, Expected, n_problems
from evprobe.core.estimate_text import estimate_text, missing_text
from evprobe.core.json_types import JsonObject
from evprobe.experiments.known_answer.rows import CheckRow, check_row

MONOTONE_SLACK = 0.02
NULL_FRACTION = 0.25
STEER_TARGET = 0.40
# Generated vs log-prob stop rate: at most this far apart, or two items' worth in a small group. Near
# the switch dose some items sit at a near-tie between two letters, and the cached decode step and the
# one teacher-forced forward differ in float rounding: one such item is 1/24 = 0.042 on the mutation
# test's reduced run. Steering that skips decode steps leaves gaps of 0.46-1.00 there.
GENERATED_GAP = 0.05
GAP_ITEMS = 2
INVALID_CEILING = 0.05  # generated replies that parse to no option, before the break


def _series(rows: list[dict], layer: int, kind: str, group: str, measure: str,
            readout: str = "logprobs") -> dict[float, dict]:
    return {r["alpha"]: r for r in rows if r["layer"] == layer and r["kind"] == kind and r["group"] == group
            and r["system"] == "all" and r["measure"] == measure and r["readout"] == readout}


@dataclass(frozen=True)
class SteeringSide:
    """The steering check of one group (resolved: +alpha, unresolved: -alpha) at one layer, or why
    there is none (`reason`)."""

    stop_rate_at_0: float | None = None
    doses: list[float] = field(default_factory=list)  # before the break
    shifts: list[float] = field(default_factory=list)  # toward the predicted side, per dose
    best_shift: float = 0.0
    best_dose: float | None = None
    best: JsonObject | None = None  # dose_response.json's stop-rate row at best_dose
    monotone: bool = False
    breaks_at: float | None = None
    breaks_because: str | None = None
    stop_or_missing_at_best: float | None = None
    null_shift: float | None = None
    passed: bool = False
    reason: str | None = None

    def to_json(self) -> JsonObject:
        if self.reason is not None:
            return {"reason": self.reason}
        return {"stop_rate_at_0": self.stop_rate_at_0, "doses": self.doses, "shifts": self.shifts,
                "best_shift": self.best_shift, "best_dose": self.best_dose, "best": self.best,
                "monotone": self.monotone, "breaks_at": self.breaks_at, "breaks_because": self.breaks_because,
                "stop_or_missing_at_best": self.stop_or_missing_at_best, "null_shift": self.null_shift,
                "passed": self.passed}


@dataclass(frozen=True)
class SteeringLayer:
    """The steering check at one layer: both groups, and whether both passed."""

    layer: int
    resolved: SteeringSide
    unresolved: SteeringSide
    passed: bool

    def side(self, group: str) -> SteeringSide:
        return self.resolved if group == "resolved" else self.unresolved

    def to_json(self) -> JsonObject:
        return {"layer": self.layer, "resolved": self.resolved.to_json(), "unresolved": self.unresolved.to_json(),
                "passed": self.passed}


def steered_expected(result: JsonObject | None, plant: dict[str, int], directions: Path,
                     expect: Expectations) -> dict[str, Expected] | None:
    """The held-out items the dose-response should steer at layer m (`all`, `resolved`, `unresolved`),
    from the bench and the steered direction's provenance (OUT/directions); None without them."""
    name = (((result or {}).get("meta") or {}).get("layers") or {}).get(str(plant["aux_layer"]), {}).get("name")
    if name is None or not (directions / "directions.json").is_file():
        return None
    from evprobe.probes.directions import read_directions

    d = read_directions(directions).get(name)
    return None if d is None else expect.heldout(list(d.provenance.get("items") or []), d.provenance["label"])


def steered_n(result: JsonObject, layer: int, expected: dict[str, Expected] | None,
              readout: str = "logprobs") -> list[str]:
    """Problems with the steered items' counts: the dose-response's own (meta) and each group's stop
    rate at every dose of the probe direction (the readout's rows) against `expected`."""
    if expected is None:
        return ["steered items: no direction's provenance to count the held-out items from"]
    counts = ((result.get("meta") or {}).get("scope_counts") or {}).get("all") or {}
    checks = [("steered items", expected["all"], counts.get("n_items"), counts.get("n_families"))]
    for group in ("resolved", "unresolved"):
        ns = [r.get("n") for r in _series(result["rows"], layer, "probe", group, "stop_rate", readout).values()]
        off = [n for n in ns if n != expected[group].n]
        checks.append((f"{group} ({readout})", expected[group], off[0] if off else (ns[0] if ns else None), None))
    return n_problems(checks)


def steering_layer(result: JsonObject, layer: int) -> SteeringLayer:
    """The steering check at one layer (see the module docstring)."""
    rows = result["rows"]
    band = {(b["layer"], b["alpha"], b["group"]): b for b in result["null_band"]
            if b["system"] == "all" and b["measure"] == "stop_rate" and b["readout"] == "logprobs"}
    sides: dict[str, SteeringSide] = {}
    ok = True
    for group, sign in (("resolved", +1), ("unresolved", -1)):
        stop = _series(rows, layer, "probe", group, "stop_rate")
        missing = _series(rows, layer, "probe", group, "missing_test_rate")
        useless = _series(rows, layer, "probe", group, "useless_test_rate")
        doses = sorted((a for a in stop if a * sign > 0), key=abs)
        s0 = stop[0.0]["value"] if stop.get(0.0) else None
        if s0 is None or not doses:
            sides[group] = SteeringSide(reason="no doses on this side")
            ok = False
            continue
        if any(a not in useless or useless[a]["value"] is None for a in doses):
            sides[group] = SteeringSide(reason="no useless_test_rate in dose_response.json (rerun dose-response)")
            ok = False
            continue
        expected = -1 if group == "resolved" else +1  # +alpha lowers stopping; -alpha raises it
        valid, shifts, sensible = [], [], []
        broke_at, why = None, None
        for a in doses:
            shift = expected * (stop[a]["value"] - s0)
            lo, hi = stop[a]["ci"]
            reach = max(abs(stop[a]["value"] - lo), abs(hi - stop[a]["value"]))
            if useless[a]["value"] > USELESS_CEILING:
                broke_at, why = a, f"useless tests {useless[a]['value']:.2f}"
                break
            if shifts and shift < max(shifts) - max(MONOTONE_SLACK, reach):
                broke_at, why = a, f"falls back to a shift of {fixed(shift, 3, sign=True)}"
                break
            valid.append(a)
            shifts.append(shift)
            sensible.append(stop[a]["value"] + missing[a]["value"])

        def null_shift(a: float, group: str = group, expected: int = expected, s0: float = s0) -> float | None:
            b = band.get((layer, a, group))
            return None if b is None or b["mean"] is None else expected * (b["mean"] - s0)

        # The first dose that reaches the target with the random directions far behind; else the
        # dose that moves it most (reported, failing).
        qualifying = [i for i, a in enumerate(valid) if shifts[i] >= STEER_TARGET and null_shift(a) is not None
                      and abs(null_shift(a)) <= NULL_FRACTION * shifts[i]]
        best_i = qualifying[0] if qualifying else (max(range(len(shifts)), key=lambda i: shifts[i]) if shifts else None)
        best = shifts[best_i] if best_i is not None else 0.0
        dose = valid[best_i] if best_i is not None else None
        # Monotone up to that dose: each dose moves it at least as far as the one before (slack 0.02).
        upto = shifts[: best_i + 1] if best_i is not None else []
        monotone = all(b >= prev - MONOTONE_SLACK for prev, b in zip(upto, upto[1:]))
        passed = bool(qualifying) and monotone
        ok = ok and passed
        sides[group] = SteeringSide(
            stop_rate_at_0=s0, doses=valid, shifts=shifts, best_shift=best, best_dose=dose,
            best=stop[dose] if dose is not None else None, monotone=monotone, breaks_at=broke_at,
            breaks_because=why,
            stop_or_missing_at_best=sensible[best_i] if best_i is not None else None,
            null_shift=null_shift(dose) if dose is not None else None, passed=passed,
        )
    return SteeringLayer(layer, sides["resolved"], sides["unresolved"], ok)


def steering_checks(result: JsonObject | None, plant: dict[str, int],
                    expected: dict[str, Expected] | None) -> tuple[list[CheckRow], list[SteeringLayer]]:
    """The steering check at the planted layer m, on every held-out item (`expected`, steered_expected);
    every steered layer's numbers are kept beside it."""
    m = plant["aux_layer"]
    title = f"steering at the planted layer (L{m})"
    if result is None:
        return [check_row(title, None, "no dose_response.json", "run dose-response")], []
    layers = sorted({r["layer"] for r in result["rows"] if r.get("layer") is not None})
    per_layer = [steering_layer(result, layer) for layer in layers]
    pick = next((p for p in per_layer if p.layer == m), None)
    if pick is None:
        return [check_row(title, None, f"L{m} was not steered", "")], per_layer

    def side(p: SteeringLayer, g: str) -> str:
        s = p.side(g)
        if s.reason is not None:
            return f"{g}: {missing_text(s.reason)}"
        brk = (f"breaks at alpha {s.breaks_at:+g}: {s.breaks_because}" if s.breaks_at is not None
               else "no break in the grid")
        null = missing_text("no null") if s.null_shift is None else fixed(s.null_shift, 3, sign=True)
        if s.best_dose is None:
            return f"{g}: breaks at the first dose ({brk})"
        return (f"{g}: stop {s.stop_rate_at_0:.3f} -> {estimate_text(s.best)} at alpha {s.best_dose:+g} "
                f"(shift {fixed(s.best_shift, 3, sign=True)}, random {null}, {'monotone' if s.monotone else 'NOT monotone'}, "
                f"stop or missing test {s.stop_or_missing_at_best:.2f}, {brk})")

    off = steered_n(result, m, expected)
    measured = (f"L{m}: " + "; ".join(side(pick, g) for g in ("resolved", "unresolved"))
                + (f"; FAILS: {', '.join(off)}" if off else ""))
    others = ", ".join(f"L{p.layer} {'passes' if p.passed else 'fails'}" for p in per_layer if p.layer != m)
    target = (f">= {STEER_TARGET:.2f} both sides, monotone before the break, random <= {NULL_FRACTION:g} of it, on "
              + (", ".join(expected[g].text for g in ("resolved", "unresolved")) if expected else "every held-out item")
              + (f" (other layers, not checked: {others})" if others else ""))
    return [check_row(title, pick.passed and not off, measured, target)], per_layer


def generated_check(result: JsonObject | None, plant: dict[str, int], per_layer: list[SteeringLayer],
                    expected: dict[str, Expected] | None) -> CheckRow:
    """The generated reply follows the steering at the planted layer: at alpha 0 and every dose before
    the break (the steering check's), both groups, the greedy reply's stop rate is within
    max(GENERATED_GAP, GAP_ITEMS / n) of the log-prob readout's and at most INVALID_CEILING of the
    replies are invalid.
    The organism writes `ANSWER:` first and the letter at the next step, from the state of that
    generated position; the log-prob readout teacher-forces `ANSWER:` (hooks' answer prefix) and reads
    the same state in one forward. So steering that skips generated tokens moves the log-probs and not
    the reply. Every held-out item (`expected`) is generated."""
    m = plant["aux_layer"]
    title = "generated replies follow the steering"
    target = (f"L{m}, alpha 0 and every dose before the break, both groups: generated stop rate within "
              f"{GENERATED_GAP:g} (or {GAP_ITEMS} items of n) of the log-prob readout's, invalid replies <= "
              f"{INVALID_CEILING:g}; on "
              + (", ".join(expected[g].text for g in ("resolved", "unresolved")) if expected else "every held-out item"))
    if result is None:
        return check_row(title, None, "no dose_response.json", target)
    if "generate" not in (result.get("meta") or {}).get("readouts", []):
        return check_row(title, None, "dose-response ran without the generated readout (readout: both)", target)
    pick = next((p for p in per_layer if p.layer == m), None)
    if pick is None:
        return check_row(title, None, f"L{m} was not steered", target)
    rows, problems, parts = result["rows"], [], []
    for group in ("resolved", "unresolved"):
        lp = _series(rows, m, "probe", group, "stop_rate")
        gen = _series(rows, m, "probe", group, "stop_rate", "generate")
        invalid = _series(rows, m, "probe", group, "invalid_rate", "generate")
        doses = [0.0, *pick.side(group).doses]
        if any(a not in gen or a not in lp or a not in invalid or gen[a]["value"] is None for a in doses):
            problems.append(f"{group}: a dose without both readouts")
            continue
        gaps = {a: gen[a]["value"] - lp[a]["value"] for a in doses}
        worst = max(doses, key=lambda a: abs(gaps[a]))
        bad_invalid = max(invalid[a]["value"] for a in doses)
        parts.append(f"{group}: largest gap {fixed(gaps[worst], 3, sign=True)} at alpha {worst:+g} (generated {estimate_text(gen[worst])}, "
                     f"log-probs {lp[worst]['value']:.3f}); invalid at most {bad_invalid:.3f}")
        allowed = max(GENERATED_GAP, GAP_ITEMS / max(1, int(gen[worst].get("n") or 1)))
        if abs(gaps[worst]) > allowed + 1e-12:
            problems.append(f"{group} gap {fixed(gaps[worst], 3, sign=True)} at {worst:+g}")
        if bad_invalid > INVALID_CEILING:
            problems.append(f"{group} invalid {bad_invalid:.3f}")
    problems += steered_n(result, m, expected, "generate")
    measured = f"L{m}: " + "; ".join(parts) + (f"; FAILS: {', '.join(problems)}" if problems else "")
    return check_row(title, not problems, measured, target)
