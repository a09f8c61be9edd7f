"""The generated paragraph that says what a sweep shows and what it does not (never a bare "pass").

Rules, per position, over the scored (non-degenerate) rows in layer order:

- decodable: the row's test against chance rejects (probes.chance: the whole per-layer pipeline
  refitted on relabellings under chance within families, step-down maxT adjusted p <= 0.05 over
  the sweep's rows); the
  paragraph names the first such layer with its AUROC, interval and n, and its p-values. The AUROC
  interval is for the procedure's expected held-out AUROC and is never read as a test: without the
  test (`--chance-permutations 0`) no layer is called decodable and the paragraph says so;
- selective: decoded better than every control task (the selectivity interval, AUROC - mean
  AUROC of the control tasks against their range, lies above 0), which the text words as "decoded
  better than every random function of the cell"; named likewise, with, beside it, how the label
  compares with the design's own factors decoded on the same rows (probes.factors), so a label
  decoded at ceiling is not read as singled out when the factors are at ceiling too. Decodable but
  not selective layers are said to carry the prompt's cell rather than this label in particular
  (Hewitt and Liang's reading of control tasks);
- without control tasks (a capture with no cell fields) the paragraph says decodability cannot
  be told apart from carrying the prompt's type.

Then the nested estimate (the layer chosen on validation folds only, and its permutation test
when one was run), the leakage check, and what probing cannot show.
"""

from __future__ import annotations

from collections.abc import Sequence

from evprobe.probes.control_tasks import fmt_selectivity
from evprobe.probes.factors import fmt_factors
from evprobe.probes.sweep import SweepResult, SweepRow


def _decodable(r: SweepRow) -> bool:
    return r.decodable is True


def _p_text(r: SweepRow) -> str:
    c = r.chance
    assert c is not None and c.p_adjusted is not None
    return f"permutation p = {c.p_value:.2g}, {c.p_adjusted:.2g} adjusted over the sweep's layer/positions"


def _layers(rows: Sequence[SweepRow]) -> str:
    ls = [r.layer for r in rows]
    if len(ls) > 2 and ls == list(range(ls[0], ls[-1] + 1)):
        return f"L{ls[0]}-L{ls[-1]}"
    return ", ".join(f"L{x}" for x in ls)


def position_sentence(label: str, position: str, rows: Sequence[SweepRow], controls_reason: str | None) -> str:
    scored = [r for r in rows if not r.degenerate and r.auroc.value is not None]
    if not scored:
        return f"At {position}, no layer could be scored (the representation is identical within families)."
    top = max(scored, key=lambda r: r.auroc.value)
    if all(r.chance is None for r in scored):
        return (f"At {position}, '{label}' was not tested against chance (no permutations), so no layer is called "
                f"decodable; the highest AUROC is L{top.layer} at {top.auroc.text()}, an interval for the "
                "procedure's expected held-out AUROC, not a test.")
    decodable = [r for r in scored if _decodable(r)]
    if not decodable:
        low = min((r for r in scored if r.chance is not None and r.chance.p_adjusted is not None),
                  key=lambda r: r.chance.p_adjusted)  # type: ignore[union-attr]
        return (f"At {position}, '{label}' is not decodable at any layer: no layer's permutation test rejects chance "
                f"(lowest at L{low.layer}: {_p_text(low)}; highest AUROC: L{top.layer} at {top.auroc.text()}).")
    first = decodable[0]
    text = f"At {position}, '{label}' is decodable from L{first.layer} at AUROC {first.auroc.text()} ({_p_text(first)})"
    if controls_reason is not None or all(r.controls is None for r in decodable):
        return text + "."  # why there are no control tasks: said once, after the positions (sweep_paragraph)
    selective = [r for r in decodable if r.selective]
    carried = [r for r in decodable if r.selective is False]
    if selective:
        s = selective[0]
        text += (f"; it is decoded better than every random function of the cell from L{s.layer} (selectivity "
                 f"{fmt_selectivity(s.selectivity)}; random functions of the cell reach {s.controls.mean:.3f} on "  # type: ignore[union-attr]
                 "average there)")
        factors = fmt_factors(s.factors)
        if factors:
            text += f"; beside the design's own factors, decoded there on the same rows with the same probe and folds, it is {factors}"
        singled = [r for r in decodable if r.factors is not None and r.factors.singled_out]
        if singled and singled[0] is not s:
            more = f" (so too at {_layers(singled[1:])})" if len(singled) > 1 else ""
            text += f"; at L{singled[0].layer} it is {fmt_factors(singled[0].factors)}{more}"
        if carried:
            text += (f". At {_layers(carried)} the control tasks decode about as well, so those layers carry the "
                     "cell rather than this label in particular")
        return text + "."
    if not carried:  # controls ran, but too few of them for a verdict
        return text + "; too few control tasks for a verdict on selectivity."
    worst = max(decodable, key=lambda r: r.controls.max if r.controls else 0.0)
    return text + (f", but random functions of the cell decode as well (up to {worst.controls.max:.3f} at "  # type: ignore[union-attr]
                   f"L{worst.layer}): the probe is not selective at {position}; the representation carries the "
                   "cell, not this label in particular.")


def sweep_paragraph(result: SweepResult) -> str:
    """The paragraph of the sweep's report (module docstring)."""
    tasks = result.control_tasks
    reason = tasks.skipped if not tasks.k else None
    positions = list(dict.fromkeys(r.position for r in result.rows))
    parts = [position_sentence(result.label, p, [r for r in result.rows if r.position == p], reason)
             for p in positions]
    tested = [r for r in result.rows if r.chance is not None and r.chance.p_adjusted is not None]
    if tested and result.chance:
        parts.append(f"Decodable means the test against chance rejects: {result.chance.permutations} relabellings of "
                     f"the label under chance, {result.chance.permuted}, the whole per-layer pipeline refitted on each, "
                     f"step-down maxT over the {len(tested)} tested layer/positions (family-wise error 5%); the "
                     "AUROC intervals are for the procedure's expected held-out AUROC, not tests.")
    if not tasks.k and any(_decodable(r) for r in result.rows if not r.degenerate and r.auroc.value is not None):
        why = "controls off" if tasks.skipped == "controls off" else "see the warning above"
        parts.append(f"There are no control tasks ({why}), so decodability cannot be told apart from the "
                     "representation carrying the prompt's type.")
    b = result.best
    if b is not None and b.auroc.value is not None:
        text = (f"Choosing the layer on validation folds only, the nested estimate is L{b.layer}/{b.position}: "
                f"AUROC {b.auroc.text()}")
        if b.permutation is not None:
            t = b.permutation
            text += (f", permutation p = {t.p_value:.3g} ({len(t.null)} relabellings under chance, "
                     "whole pipeline rerun)")
        if len({(c.layer, c.position) for c in b.choices}) > 1:
            text += "; the folds chose different layers, so the estimate describes the procedure, not one layer"
        parts.append(text + ".")
    fired = [r for r in result.rows if r.leakage_fires]
    if result.leakage is not None:
        parts.append(f"The leakage check fired at {_layers(fired)}: folds or features may carry family-specific "
                     "label information there; do not trust those rows." if fired else
                     "The leakage check stays at chance everywhere: no sign that the folds leak.")
    if result.intervals is None:
        parts.append("Intervals hold the fold models fixed and are too narrow (see the warning).")
    parts.append("Decodable means linearly readable from the residual stream, not used by the model: steering and "
                 "patching test use.")
    return " ".join(parts)
