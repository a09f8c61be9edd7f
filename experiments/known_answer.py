"""Known-answer checks: does the toolkit find what a model is known to compute?

The model organism (`organism`) is trained to decide sufficiency, so its answer is known before
the toolkit looks: it must choose well, its sufficiency must be decodable (and not from the
prompt's surface), a direction must steer it, and patching must find where it reads the sheet.
`known_answer_checks(OUT)` reads what `evprobe quickstart` wrote under OUT and checks each target
(the issue's targets; thresholds below), writing OUT/known_answer.json and OUT/known_answer.md.
Every number comes with its interval and n from the file it was read from; nothing is re-fitted.

Targets and the choices made where the wording leaves room:
- behaviour: minimum-cost choice >= 0.90 and both-correct image pairs >= 0.80 (scores.json);
- probe: some layer/position has grouped-CV AUROC >= 0.90 for `resolved` (sweep.json), and the
  nested best (selected without test labels) is reported beside it;
- input baselines at chance: no input-only baseline (history, threshold, both one-hot) is above
  chance: each is <= 0.55 or its interval reaches 0.5 (sufficiency is their exclusive or, which
  no linear read of the inputs gets). Below 0.5 passes: grouped CV on a design balanced within
  families pushes an uninformative baseline below 0.5 (the fold's training rows hold the other
  class's surplus), which is no information a reader could use;
- within-family variance: no probed row is degenerate (identical states within families);
- steering, per layer: on resolved items at +alpha and unresolved items at -alpha the stop rate
  moves >= 0.40 toward the predicted side at some dose before the model breaks, with random
  directions of the same raw norm moving it at most a quarter as far at that dose ("far less"),
  and monotonically up to that dose (each dose at least as far as the one before, slack 0.02);
  the first such dose is reported (else the one that moves it most). The model *breaks* at the
  first dose where more than 10% of the group choose a useless test (free fall, or repeating the
  test already done: no belief about the evidence justifies either; the combined report does
  resolve, so choosing it is costly, not incoherent), or where the stop rate falls back from an
  earlier dose's shift by more than 0.02 and more than its own 95% interval reaches (the push no
  longer pushes); the reason is reported. The share choosing stop or the missing test is
  reported beside it. One layer meeting all on both sides passes.
- patching: the two members of an image pair differ only in the sheet value token, so at the
  first layer the gap must sit in the image position (>= 0.3: the value itself) and the fact
  tokens after it that have read it (image + text >= 0.9); by the last layer it must have left
  the image position (<= 0.05) for the last position (>= 0.8). The first layer where the last
  position carries half the gap is reported as where the decision is made.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evprobe.core.files import atomic_write_bytes, atomic_write_json

USELESS_CEILING = 0.10  # above this share of useless tests, the model is broken
MONOTONE_SLACK = 0.02
NULL_FRACTION = 0.25
STEER_TARGET = 0.40


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _est(e: dict[str, Any] | None) -> str:
    if not e or e.get("value") is None:
        return "n/a"
    lo, hi = e.get("ci", [None, None])
    ci = "" if lo is None else f" [{lo:.3f}, {hi:.3f}]"
    return f"{e['value']:.3f}{ci} (n={e.get('n')})"


def _check(name: str, passed: bool | None, measured: str, target: str) -> dict[str, Any]:
    return {"check": name, "passed": passed, "measured": measured, "target": target}


def behaviour_checks(scores: dict[str, Any] | None) -> list[dict[str, Any]]:
    if scores is None:
        return [_check("behaviour", None, "no scores.json", "run and score the model")]
    out = []
    for key, floor, title in (("min_cost_choice", 0.90, "minimum-cost choice"),
                              ("both_correct_image_pairs", 0.80, "both-correct image pairs")):
        e = scores[key]
        out.append(_check(title, e["value"] is not None and e["value"] >= floor, _est(e), f">= {floor:.2f}"))
    return out


def probe_checks(sweep: dict[str, Any] | None) -> list[dict[str, Any]]:
    if sweep is None:
        return [_check("probe", None, "no sweep.json", "sweep probes for resolved")]
    rows = [r for r in sweep["rows"] if r.get("auroc") is not None]
    out = []
    if rows:
        top = max(rows, key=lambda r: r["auroc"])
        best = sweep.get("best") or {}
        nested = ""
        if best.get("layer") is not None:
            e = {"value": best.get("auroc"), "ci": best.get("ci", [None, None]), "n": best.get("n")}
            nested = f"; nested best L{best['layer']}/{best['position']} {_est(e)}"
        by_layer = ", ".join(f"L{r['layer']} {r['auroc']:.3f}" for r in rows if r["position"] == top["position"])
        out.append(_check(
            "sufficiency decodable", top["auroc"] >= 0.90,
            f"best L{top['layer']}/{top['position']} {top['auroc']:.3f} [{top['ci'][0]:.3f}, {top['ci'][1]:.3f}] "
            f"(n={top['n']}){nested}; by layer at {top['position']}: {by_layer}",
            ">= 0.90 at some layer",
        ))
    else:
        out.append(_check("sufficiency decodable", False, "no row could be scored", ">= 0.90 at some layer"))
    base = sweep.get("baselines", {})
    far = {k: e["value"] for k, e in base.items() if not _at_chance(e)}
    shown = "; ".join(f"{k} {_est(e)}" for k, e in base.items()) or "none computed"
    out.append(_check("input baselines at chance", bool(base) and not far, shown,
                      "none above chance (each <= 0.55 or its interval reaches 0.5)"))
    degenerate = [f"L{r['layer']}/{r['position']}" for r in sweep["rows"] if r.get("degenerate")]
    ratios = [r["within_family_variance"] for r in sweep["rows"] if r.get("within_family_variance") is not None]
    out.append(_check(
        "states vary within families", not degenerate,
        (f"degenerate at {', '.join(degenerate)}" if degenerate else "no degenerate row")
        + (f"; smallest within-family variance ratio {min(ratios):.3g}" if ratios else ""),
        "no layer/position identical within families",
    ))
    return out


def _at_chance(e: dict[str, Any]) -> bool:
    """Not above chance: within 0.05 of 0.5, or below it, or its interval reaches 0.5."""
    v, (lo, _) = e.get("value"), e.get("ci", [None, None])
    if v is None:
        return False
    return v <= 0.55 or (lo is not None and lo <= 0.5)


def _series(rows: list[dict], layer: int, kind: str, group: str, measure: str) -> dict[float, dict]:
    return {r["alpha"]: r for r in rows if r["layer"] == layer and r["kind"] == kind and r["group"] == group
            and r["system"] == "all" and r["measure"] == measure and r["readout"] == "logprobs"}


def steering_layer(result: dict[str, Any], layer: int) -> dict[str, Any]:
    """The steering check at one layer (see the module docstring)."""
    rows = result["rows"]
    band = {(b["layer"], b["alpha"], b["group"]): b for b in result["null_band"]
            if b["system"] == "all" and b["measure"] == "stop_rate" and b["readout"] == "logprobs"}
    out: dict[str, Any] = {"layer": layer}
    ok = True
    for group, sign in (("resolved", +1), ("unresolved", -1)):
        stop = _series(rows, layer, "probe", group, "stop_rate")
        missing = _series(rows, layer, "probe", group, "missing_test_rate")
        useless = _series(rows, layer, "probe", group, "useless_test_rate")
        doses = sorted((a for a in stop if a * sign > 0), key=abs)
        s0 = stop[0.0]["value"] if stop.get(0.0) else None
        if s0 is None or not doses:
            out[group] = {"reason": "no doses on this side"}
            ok = False
            continue
        if any(a not in useless or useless[a]["value"] is None for a in doses):
            out[group] = {"reason": "no useless_test_rate in dose_response.json (rerun dose-response)"}
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
                broke_at, why = a, f"falls back to a shift of {shift:+.3f}"
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
        out[group] = {
            "stop_rate_at_0": s0, "doses": valid, "shifts": shifts, "best_shift": best, "best_dose": dose,
            "best": stop[dose] if dose is not None else None, "monotone": monotone, "breaks_at": broke_at,
            "breaks_because": why,
            "stop_or_missing_at_best": sensible[best_i] if best_i is not None else None,
            "null_shift": null_shift(dose) if dose is not None else None, "passed": passed,
        }
    out["passed"] = ok
    return out


def steering_checks(result: dict[str, Any] | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if result is None:
        return [_check("steering", None, "no dose_response.json", "run dose-response")], []
    layers = sorted({r["layer"] for r in result["rows"] if r.get("layer") is not None})
    per_layer = [steering_layer(result, layer) for layer in layers]
    good = [p for p in per_layer if p["passed"]]
    pick = good[0] if good else max(per_layer, key=lambda p: min(
        p.get("resolved", {}).get("best_shift", 0.0), p.get("unresolved", {}).get("best_shift", 0.0)), default=None)
    if pick is None:
        return [_check("steering", False, "no steered layer", "")], per_layer

    def side(p: dict, g: str) -> str:
        s = p.get(g, {})
        if "best_shift" not in s:
            return f"{g}: {s.get('reason', 'n/a')}"
        brk = (f"breaks at alpha {s['breaks_at']:+g}: {s['breaks_because']}" if s["breaks_at"] is not None
               else "no break in the grid")
        null = "n/a" if s["null_shift"] is None else f"{s['null_shift']:+.3f}"
        if s["best_dose"] is None:
            return f"{g}: breaks at the first dose ({brk})"
        return (f"{g}: stop {s['stop_rate_at_0']:.3f} -> {_est(s['best'])} at alpha {s['best_dose']:+g} "
                f"(shift {s['best_shift']:+.3f}, random {null}, {'monotone' if s['monotone'] else 'NOT monotone'}, "
                f"stop or missing test {s['stop_or_missing_at_best']:.2f}, {brk})")

    measured = f"L{pick['layer']}: " + "; ".join(side(pick, g) for g in ("resolved", "unresolved"))
    passing = ", ".join("L" + str(p["layer"]) for p in good) or "none"
    target = (f">= {STEER_TARGET:.2f} both sides, monotone before the break, random <= {NULL_FRACTION:g} of it "
              f"(layers passing: {passing})")
    return [_check("steering shifts stopping", bool(good), measured, target)], per_layer


def patching_checks(summary: dict[str, Any] | None) -> list[dict[str, Any]]:
    if summary is None:
        return [_check("patching", None, "no patching.json", "run pair patching")]
    layers, positions = summary["layers"], summary["positions"]
    if not {"image", "last", "text"} <= set(positions):
        return [_check("patching localises the measurement", None, "image, text and last not all patched", "")]
    share = summary["share_of_gap"]  # (layers, positions) of estimates

    def curve(name: str) -> list[float | None]:
        return [share[i][positions.index(name)]["value"] for i in range(len(layers))]

    img, text, last = curve("image"), curve("text"), curve("last")
    if any(v is None for v in img + text + last):
        return [_check("patching localises the measurement", None, "shares undefined (no pair with a gap)", "")]
    decides = next((layers[i] for i in range(len(layers)) if last[i] >= 0.5), None)
    passed = img[0] >= 0.3 and img[0] + text[0] >= 0.9 and img[-1] <= 0.05 and last[-1] >= 0.8
    rows = ", ".join(f"L{layer} {a:.2f}/{t:.2f}/{b:.2f}" for layer, a, t, b in zip(layers, img, text, last))
    return [_check(
        "patching localises the measurement", passed,
        f"share of the gap, image/text/last: {rows}; the last position carries it from "
        f"{'L' + str(decides) if decides is not None else 'no layer'} (n={summary['n_rows']} patched pairs)",
        "first layer: image >= 0.3 and image + text >= 0.9; last layer: image <= 0.05, last >= 0.8",
    )]


def known_answer_checks(out: Path) -> dict[str, Any]:
    """Check every target against the quickstart folder `out`; writes known_answer.json/.md."""
    out = Path(out)
    scores = _load(out / "run" / "scores.json")
    sweep = _load(out / "acts" / "probes" / "resolved" / "sweep.json")
    dose = _load(out / "dose_response" / "dose_response.json")
    patch = _load(out / "patching" / "patching.json")
    steer, per_layer = steering_checks(dose)
    checks = behaviour_checks(scores) + probe_checks(sweep) + steer + patching_checks(patch)
    result = {"checks": checks, "steering_by_layer": per_layer,
              "passed": all(c["passed"] for c in checks)}
    atomic_write_json(out / "known_answer.json", result)
    atomic_write_bytes(out / "known_answer.md", markdown(result).encode("utf-8"))
    return result


def markdown(result: dict[str, Any]) -> str:
    mark = {True: "pass", False: "**FAIL**", None: "not run"}
    lines = ["# Known-answer checks", "",
             "Targets for a model whose answer is known (experiments/known_answer.py says how each is read).", "",
             "| check | result | measured | target |", "|---|---|---|---|"]
    for c in result["checks"]:
        lines.append(f"| {c['check']} | {mark[c['passed']]} | {c['measured']} | {c['target']} |")
    lines.append("")
    return "\n".join(lines)
