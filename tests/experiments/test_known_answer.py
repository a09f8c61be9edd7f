"""Known-answer checks read from synthetic result files: break detection, monotonicity, null."""

from __future__ import annotations

from dataclasses import replace

from evprobe.experiments.known_answer.capture import GroupReading
from evprobe.experiments.known_answer.checks import interchange_check, leakage_check, profile_check
from evprobe.experiments.known_answer.counts import Expected
from evprobe.experiments.known_answer.span import SpanOutcomes
from evprobe.experiments.known_answer.steering import generated_check, steering_layer

ROWS = Expected("labelled rows", 800, 100)  # the synthetic sweeps' rows
PAIRS = Expected("patched pair directions", 64, 8)
SPAN = Expected("patched pair directions", 32, 8)


def _steered(n: int = 100) -> dict[str, Expected]:
    return {"all": Expected("held-out select", 2 * n, 20), "resolved": Expected("held-out select (resolved)", n, 20),
            "unresolved": Expected("held-out select (unresolved)", n, 20)}


def _dose(stop: dict[str, dict[float, float]], missing: dict[str, dict[float, float]], null: dict[str, dict[float, float]]):
    """Dose-response rows; whatever is neither stop nor the missing test is a useless test here."""
    rows, band = [], []
    for group in ("resolved", "unresolved"):
        for alpha, s in stop[group].items():
            m = missing[group][alpha]
            for measure, v in (("stop_rate", s), ("missing_test_rate", m), ("useless_test_rate", 1.0 - s - m)):
                rows.append({"readout": "logprobs", "layer": 2, "kind": "probe", "alpha": alpha, "group": group,
                             "system": "all", "measure": measure, "value": v, "ci": [v - 0.05, v + 0.05], "n": 100})
        for alpha, s in null[group].items():
            band.append({"readout": "logprobs", "layer": 2, "alpha": alpha, "group": group, "system": "all",
                         "measure": "stop_rate", "mean": s, "min": s, "max": s, "n_directions": 3, "n": 100})
    return {"rows": rows, "null_band": band}


def test_steering_passes_before_the_break_and_reports_it() -> None:
    stop = {"resolved": {0.0: 0.95, 0.25: 0.6, 0.5: 0.3, 1.0: 0.0},
            "unresolved": {0.0: 0.05, -0.25: 0.5, -0.5: 0.8, -1.0: 0.2}}
    # At +1 resolved items choose neither stop nor the missing test: broken. Same at -1.
    missing = {"resolved": {0.0: 0.05, 0.25: 0.4, 0.5: 0.7, 1.0: 0.3},
               "unresolved": {0.0: 0.95, -0.25: 0.5, -0.5: 0.2, -1.0: 0.1}}
    null = {"resolved": {0.25: 0.94, 0.5: 0.9, 1.0: 0.9}, "unresolved": {-0.25: 0.06, -0.5: 0.1, -1.0: 0.1}}
    out = steering_layer(_dose(stop, missing, null), 2)
    assert out.passed
    assert out.resolved.breaks_at == 1.0 and out.resolved.best_dose == 0.5
    assert abs(out.resolved.best_shift - 0.65) < 1e-9
    # The first dose that reaches 0.40 with the null far behind is reported, not the largest shift.
    assert out.unresolved.breaks_at == -1.0 and out.unresolved.best_dose == -0.25
    assert abs(out.unresolved.best_shift - 0.45) < 1e-9 and out.unresolved.shifts[-1] > 0.7


def test_steering_fails_when_random_directions_move_it_as_much_or_it_is_not_monotone() -> None:
    stop = {"resolved": {0.0: 0.95, 0.25: 0.6, 0.5: 0.3}, "unresolved": {0.0: 0.05, -0.25: 0.5, -0.5: 0.8}}
    missing = {"resolved": {0.0: 0.05, 0.25: 0.4, 0.5: 0.7}, "unresolved": {0.0: 0.95, -0.25: 0.5, -0.5: 0.2}}
    generic = {"resolved": {0.25: 0.7, 0.5: 0.4}, "unresolved": {-0.25: 0.4, -0.5: 0.7}}
    assert not steering_layer(_dose(stop, missing, generic), 2).passed
    # A dip before the target is reached: not monotone (the dip is within its interval, so no break).
    wobbly = {"resolved": {0.0: 0.95, 0.25: 0.8, 0.5: 0.83, 0.75: 0.45}, "unresolved": stop["unresolved"]}
    sensible = {"resolved": {0.0: 0.05, 0.25: 0.2, 0.5: 0.17, 0.75: 0.55}, "unresolved": missing["unresolved"]}
    calm = {"resolved": {0.25: 0.95, 0.5: 0.95, 0.75: 0.95}, "unresolved": {-0.25: 0.05, -0.5: 0.05}}
    out = steering_layer(_dose(wobbly, sensible, calm), 2)
    assert not out.resolved.monotone and not out.passed and out.resolved.breaks_at is None
    # Falling back beyond its interval after the target is reached is where the model breaks.
    back = {"resolved": {0.0: 0.95, 0.25: 0.5, 0.5: 0.3, 0.75: 0.6}, "unresolved": stop["unresolved"]}
    sensible = {"resolved": {0.0: 0.05, 0.25: 0.5, 0.5: 0.7, 0.75: 0.4}, "unresolved": missing["unresolved"]}
    out = steering_layer(_dose(back, sensible, calm), 2)
    assert out.resolved.breaks_at == 0.75 and "falls back" in out.resolved.breaks_because
    assert out.resolved.best_dose == 0.25 and out.passed


PLANT = {"n_layers": 5, "attention_free_layers": 1, "aux_layer": 3}


def _with_generated(dose: dict, gen_stop: dict[str, dict[float, float]], invalid: float = 0.0, n: int = 100) -> dict:
    """`dose` plus generated-reply rows (stop rate and invalid rate) at the same layer and doses."""
    rows = list(dose["rows"])
    for group, series in gen_stop.items():
        for alpha, v in series.items():
            for measure, x in (("stop_rate", v), ("invalid_rate", invalid)):
                rows.append({"readout": "generate", "layer": 2, "kind": "probe", "alpha": alpha, "group": group,
                             "system": "all", "measure": measure, "value": x, "ci": [max(0.0, x - 0.05), x + 0.05],
                             "n": n})
    meta = {"readouts": ["logprobs", "generate"], "scope_counts": {"all": {"n_items": 2 * n, "n_families": 20}}}
    return {**dose, "rows": rows, "meta": meta}


def test_generated_check_passes_when_the_reply_follows_and_fails_when_decode_steps_are_not_steered() -> None:
    stop = {"resolved": {0.0: 0.95, 0.25: 0.6, 0.5: 0.3, 1.0: 0.0},
            "unresolved": {0.0: 0.05, -0.25: 0.5, -0.5: 0.8, -1.0: 0.2}}
    missing = {"resolved": {0.0: 0.05, 0.25: 0.4, 0.5: 0.7, 1.0: 0.3},
               "unresolved": {0.0: 0.95, -0.25: 0.5, -0.5: 0.2, -1.0: 0.1}}
    null = {"resolved": {0.25: 0.94, 0.5: 0.9, 1.0: 0.9}, "unresolved": {-0.25: 0.06, -0.5: 0.1, -1.0: 0.1}}
    dose = _dose(stop, missing, null)
    plant = {"aux_layer": 2}
    per_layer = [steering_layer(dose, 2)]
    # the reply follows the log-probs (within 0.05) up to the break; past it (+1, -1) it may differ
    follows = {g: {a: v + (0.03 if abs(a) < 1 else 0.5) for a, v in s.items()} for g, s in stop.items()}
    follows = {g: {a: min(v, 1.0) for a, v in s.items()} for g, s in follows.items()}
    ok = generated_check(_with_generated(dose, follows), plant, per_layer, _steered())
    assert ok.passed, ok.measured
    # prompt-only steering: the log-probs move, the generated reply stays at the unsteered rate
    unmoved = {g: {a: s[0.0] for a in s} for g, s in stop.items()}
    bad = generated_check(_with_generated(dose, unmoved), plant, per_layer, _steered())
    assert bad.passed is False and "FAILS" in bad.measured and "resolved gap" in bad.measured
    # replies that parse to no option
    assert generated_check(_with_generated(dose, follows, invalid=0.2), plant, per_layer, _steered()).passed is False
    # a small group allows two items' worth (near-ties flip in float rounding), not three
    two = {g: {a: min(1.0, v + 2 / 24) if a == 0.5 else v for a, v in s.items()} for g, s in stop.items()}
    three = {g: {a: min(1.0, v + 3 / 24) if a == 0.5 else v for a, v in s.items()} for g, s in stop.items()}
    assert generated_check(_with_generated(dose, two, n=24), plant, per_layer, _steered(24)).passed is True
    assert generated_check(_with_generated(dose, three, n=24), plant, per_layer, _steered(24)).passed is False
    assert generated_check(_with_generated(dose, two, n=100), plant, per_layer, _steered()).passed is False
    # fewer replies than held-out items (a shard of the dose-response never merged)
    short = generated_check(_with_generated(dose, follows, n=50), plant, per_layer, _steered())
    assert short.passed is False and "resolved (generate): n=50 where n=100" in short.measured
    # not run without the generated readout
    assert generated_check(dose, plant, per_layer, _steered()).passed is None


def _row(layer: int, position: str, auroc: float | None, same: int = 0, **extra) -> dict:
    """same: how many of the 96 image pairs and of the 96 threshold pairs have identical states."""
    return {"layer": layer, "position": position, "auroc": auroc,
            "ci": None if auroc is None else [auroc - 0.04, auroc + 0.04], "n": 800,
            "identical_pairs": {"image_pair_id": [same, 96], "threshold_pair_id": [same, 96]},
            "leakage_auroc": 0.5, "leakage_z": 0.1, "leakage_fires": False, **extra}


def _sweep() -> dict:
    rows = [_row(0, "last", 0.5, 96), _row(0, "text_mean", 0.51), _row(0, "image_mean", 0.49)]
    rows += [_row(layer, pos, 0.7 + 0.07 * layer) for layer in range(1, 5) for pos in ("last", "text_mean", "image_mean")]
    return {"rows": rows, "best": {"layer": 3, "position": "last", "auroc": 0.96, "ci": [0.94, 0.98], "n": 800},
            "leakage_check": {"fires_at_z": 3.1}, "n": 800, "n_families": 100}


def test_sweep_aurocs_print_the_families_the_sweep_gives() -> None:
    """The profile check prints a sweep row's AUROC with the families its interval rests on where the
    sweep says them (issue 52), and n alone where it does not (a count is never invented)."""
    plain = profile_check(_sweep(), PLANT, ROWS, _groups()).measured
    assert "(n=800)" in plain and " families)" not in plain.split("sweep n=")[0]
    counted = _sweep()
    for r in [*counted["rows"], counted["best"]]:
        r["n_families"] = 100
    measured = profile_check(counted, PLANT, ROWS, _groups()).measured
    assert "L3/last 0.910 [0.870, 0.950] (n=800 in 100 families)" in measured  # the planted row
    assert "L3/last 0.960 [0.940, 0.980] (n=800 in 100 families)" in measured  # the nested estimate


def _groups(flip: tuple[str, ...] = ()) -> list[GroupReading]:
    """group_readings' shape: six groups agreeing with the others (cosine 0.95, AUROC 1.0), but `flip`."""
    out = []
    for g in ("bouncing/mass", "bouncing/other", "sliding/mass", "sliding/other", "spring/mass", "spring/other"):
        c, a = (-0.9, 0.05) if g in flip else (0.95, 1.0)
        out.append(GroupReading(g, 800 // 6, 100 // 6, Expected("rows", 800 // 6, 100 // 6),
                                {"value": c, "ci": [c - 0.02, c + 0.02], "n": 800 // 6},
                                {"value": a, "ci": [max(0.0, a - 0.05), a], "n": 800 // 6}))
    return out


def test_profile_check_passes_the_planted_profile_and_fails_each_break() -> None:
    sweep = _sweep()
    check = profile_check(sweep, PLANT, ROWS, _groups())
    assert check.passed, check.measured
    assert "L0/last identical in 192 of 192" in check.measured and "nested estimate" in check.measured
    # A capture off by one: layer 0's last position varies (it holds a later layer's state).
    shifted = _sweep()
    shifted["rows"][0] = _row(0, "last", 0.62)
    assert not profile_check(shifted, PLANT, ROWS, _groups()).passed
    # A layer before the plant decodes: something reads across positions there.
    early = _sweep()
    early["rows"][1] = _row(0, "text_mean", 0.71)
    check = profile_check(early, PLANT, ROWS, _groups())
    assert "L0/text_mean" in check.measured and not check.passed
    # Far below chance before the plant is a fault's signature too (folds that split families), not "no information".
    below = _sweep()
    below["rows"][1] = _row(0, "text_mean", 0.14)
    assert not profile_check(below, PLANT, ROWS, _groups()).passed
    # The last position identical after the plant (a stalled model, or states read a layer early).
    flat = _sweep()
    flat["rows"][3] = _row(1, "last", 0.5, 96)
    assert not profile_check(flat, PLANT, ROWS, _groups()).passed
    # Not decodable where it is planted (a wrong or shuffled label): fails, even with the nested row high.
    weak = _sweep()
    weak["rows"][3 + 3 * 2] = _row(3, "last", 0.72)
    assert not profile_check(weak, PLANT, ROWS, _groups()).passed


def test_profile_check_fails_a_group_against_the_others_and_a_sweep_short_of_rows() -> None:
    """Pooled, a label flipped for whole groups still decodes; per group it points the other way."""
    check = profile_check(_sweep(), PLANT, ROWS, _groups(flip=("sliding/mass",)))
    assert not check.passed and "sliding/mass (cosine -0.900" in check.measured
    assert "sliding/mass (AUROC 0.050 [" in check.measured and "bouncing/mass (" not in check.measured
    # a group the bench holds and the capture lacks
    missing = [g if g.group != "spring/other" else replace(g, n=0, families=0, cosine=None, auroc=None)
               for g in _groups()]
    check = profile_check(_sweep(), PLANT, ROWS, missing)
    assert not check.passed and "spring/other: n=0 of 0 families where n=133 rows of 16 families" in check.measured
    # half the families (a shard never merged): the planted row still decodes, n says what is missing
    half = _sweep()
    half["n"], half["n_families"], half["rows"][9]["n"] = 400, 50, 400
    check = profile_check(half, PLANT, ROWS, _groups())
    assert not check.passed
    assert "sweep: n=400 of 50 families where n=800 labelled rows of 100 families" in check.measured
    assert "L3/last: n=400 where n=800" in check.measured and "n=800 labelled rows of 100 families" in check.target
    assert not leakage_check(half, ROWS).passed and "n=400 of 50 families" in leakage_check(half, ROWS).measured
    assert profile_check(_sweep(), PLANT, ROWS, None).passed is None  # no capture to read the groups from


def test_leakage_check_fails_when_the_shuffle_check_fires() -> None:
    sweep = _sweep()
    assert leakage_check(sweep, ROWS).passed
    sweep["rows"][4]["leakage_fires"], sweep["rows"][4]["leakage_auroc"] = True, 0.47  # fires, but a small effect
    assert leakage_check(sweep, ROWS).passed and "1 of 15 rows fire" in leakage_check(sweep, ROWS).measured
    sweep["rows"][5]["leakage_fires"], sweep["rows"][5]["leakage_auroc"] = True, 0.31
    check = leakage_check(sweep, ROWS)
    assert not check.passed and "0.310" in check.measured


def _iia(grid: list[list[float]]) -> dict:
    est = lambda v: {"value": v, "ci": [max(0.0, v - 0.05), min(1.0, v + 0.05)], "n": 40}  # noqa: E731
    return {"layers": list(range(5)), "positions": ["last", "text", "image"], "n_rows": 64, "n_families": 8,
            "decoded_flip": [[est(v) for v in row] for row in grid]}


def test_interchange_check_reads_the_constructed_ends() -> None:
    good = [[0.0, 0.0, 1.0], [0.1, 0.6, 0.5], [0.4, 0.8, 0.1], [0.9, 0.5, 0.0], [1.0, 0.0, 0.0]]
    check = interchange_check(_iia(good), PLANT, PAIRS)
    assert check.passed and "reaches the last position at L3" in check.measured
    shifted = [good[1]] + good[1:]  # layer 0 patched as layer 1: the image no longer carries it all
    assert not interchange_check(_iia(shifted), PLANT, PAIRS).passed
    late = good[:4] + [[0.8, 0.1, 0.1]]
    assert not interchange_check(_iia(late), PLANT, PAIRS).passed
    short = interchange_check({**_iia(good), "n_rows": 32, "n_families": 4}, PLANT, PAIRS)  # half the pairs patched
    assert not short.passed and "patched: n=32 of 4 families where n=64 patched pair directions" in short.measured


def test_interchange_check_reads_the_exact_no_change_before_the_plant() -> None:
    """IIA alone is the same at layers 0 and 1 on the organism, so a patch one layer late passed.
    The plant also says patching last or text at L0 changes nothing at all, and patching last at L1
    does: a shifted patch breaks the one or the other."""
    iia = [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [0.35, 0.0, 0.65], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    est = lambda v: {"value": v, "ci": [v - 0.1, v + 0.1], "n": 64}  # noqa: E731
    good = [[0.0, 0.0, 9.0], [2.5, 0.4, 9.0], [6.0, 0.1, 5.0], [9.0, 0.0, 0.0], [9.0, 0.0, 0.0]]  # nats

    def summary(change):
        return {**_iia(iia), "mean_change": [[est(v) for v in row] for row in change]}

    assert interchange_check(summary(good), PLANT, PAIRS).passed
    late = [good[1]] + good[1:]  # every layer patched one late: L0 shows L1's changes
    check = interchange_check(summary(late), PLANT, PAIRS)
    assert not check.passed and "L0 (patching last/text moved the log-odds by 2.5 nats)" in check.measured
    early = [good[0], good[0]] + good[2:]  # L1 shows L0's (no) change
    assert "L1 (patching last moved nothing)" in interchange_check(summary(early), PLANT, PAIRS).measured


def _span(first: list[tuple[str, bool]], rest: list[tuple[str, bool]]) -> SpanOutcomes:
    """span_outcomes' result at layer 0: per part, (family, predicted member, patched top agreed)."""
    per = lambda rows: {0: [(f"f{i % 8}", who, ok) for i, (who, ok) in enumerate(rows)]}  # noqa: E731
    return SpanOutcomes([0], {"image_first": per(first), "image_rest": per(rest)}, len(first), 8)


def test_image_span_check_needs_agreement_and_both_predictions() -> None:
    from evprobe.experiments.known_answer.span import image_span_check

    first = [("source", True)] * 27 + [("target", True)] * 5
    rest = [("target", True)] * 27 + [("source", True)] * 5
    check = image_span_check(_span(first, rest), PLANT, SPAN)
    assert check.passed, check
    assert "L0 image_first 1.000 [" in check.measured and "] (n=32 in 8 families);" in check.measured
    assert ("(32 predicted flips, 32 predicted stays; flips/stays by part: image_first 27/5, image_rest 5/27; 32 pair "
            "directions patched of 8 families)" in check.measured)
    # the span read out of order: the block patched as the offset, so the answer follows the other part
    swapped = image_span_check(_span([(w, w == "target") for w, _ in first], [(w, w == "source") for w, _ in rest]), PLANT, SPAN)
    assert not swapped.passed and "FAILS at L0 image_first, L0 image_rest" in swapped.measured
    # a patch that moves nothing agrees with every predicted stay; without predicted flips it cannot pass
    assert not image_span_check(_span([("target", True)] * 32, [("target", True)] * 32), PLANT, SPAN).passed
    assert image_span_check(None, PLANT, SPAN).passed is None
    short = image_span_check(replace(_span(first, rest), n_rows=30), PLANT, SPAN)  # results.jsonl short of rows
    assert not short.passed and "patched: n=30 of 8 families where n=32" in short.measured


def test_image_span_agreement_says_the_families_of_its_part() -> None:
    """Each part's agreement rests on the families holding its pairs with a prediction (issue 52), not
    on every patched family: here the offset's pairs lie in 4 of the 8, and fewer than 8 warns."""
    from evprobe.experiments.known_answer.span import image_span_check

    first = [("source", True)] * 27 + [("target", True)] * 5
    rest = {0: [(f"f{i % 4}", who, True) for i, who in enumerate(["target"] * 27 + ["source"] * 5)]}
    measured = image_span_check(replace(_span(first, first), parts={**_span(first, first).parts, "image_rest": rest}),
                                PLANT, SPAN).measured
    assert "(n=32 in 8 families); L0 image_rest" in measured
    assert "(n=32 in only 4 families: the interval may be too narrow)" in measured
