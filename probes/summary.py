"""The generated paragraph that says what a sweep shows and what it does not (never a bare "pass").

Rules, per position, over the scored (non-degenerate) rows in layer order:

- decodable: the AUROC interval lies above 0.5; the paragraph names the first such layer and
  its AUROC with interval and n;
- selective: decoded better than every control task (the selectivity interval, AUROC - mean
  AUROC of the control tasks against their range, lies above 0); named likewise. Decodable but not selective layers are said to carry the prompt's cell rather
  than this label in particular (Hewitt and Liang's reading of control tasks);
- without control tasks (a capture with no cell fields) the paragraph says decodability cannot
  be told apart from carrying the prompt's type.

Then the nested estimate (the layer chosen on validation folds only, and its permutation test
when one was run), the leakage check, and what probing cannot show.
"""

from __future__ import annotations

from collections.abc import Sequence

from evprobe.probes.control_tasks import fmt_selectivity
from evprobe.probes.sweep import SweepResult, SweepRow


def _decodable(r: SweepRow) -> bool:
    return r.auroc.ci[0] is not None and r.auroc.ci[0] > 0.5


def _layers(rows: Sequence[SweepRow]) -> str:
    ls = [r.layer for r in rows]
    if len(ls) > 2 and ls == list(range(ls[0], ls[-1] + 1)):
        return f"L{ls[0]}-L{ls[-1]}"
    return ", ".join(f"L{x}" for x in ls)


def position_sentence(label: str, position: str, rows: Sequence[SweepRow], controls_reason: str | None) -> str:
    scored = [r for r in rows if not r.degenerate and r.auroc.value is not None]
    if not scored:
        return f"At {position}, no layer could be scored (the representation is identical within families)."
    decodable = [r for r in scored if _decodable(r)]
    if not decodable:
        top = max(scored, key=lambda r: r.auroc.value)
        return (f"At {position}, '{label}' is not decodable above chance at any layer (highest: L{top.layer} at "
                f"AUROC {top.auroc.text()}).")
    first = decodable[0]
    text = f"At {position}, '{label}' is decodable from L{first.layer} at AUROC {first.auroc.text()}"
    if controls_reason is not None or all(r.controls is None for r in decodable):
        return text + "."  # why there are no control tasks: said once, after the positions (sweep_paragraph)
    selective = [r for r in decodable if r.selective]
    carried = [r for r in decodable if r.selective is False]
    if selective:
        s = selective[0]
        text += (f", beyond the control tasks from L{s.layer} (selectivity {fmt_selectivity(s.selectivity)}; random "
                 f"functions of the cell reach {s.controls.mean:.3f} on average there)")  # type: ignore[union-attr]
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
    reason = tasks.get("skipped") if not tasks.get("k") else None
    positions = list(dict.fromkeys(r.position for r in result.rows))
    parts = [position_sentence(result.label, p, [r for r in result.rows if r.position == p], reason)
             for p in positions]
    if not tasks.get("k") and any(_decodable(r) for r in result.rows if not r.degenerate and r.auroc.value is not None):
        why = "controls off" if tasks.get("skipped") == "controls off" else "see the warning above"
        parts.append(f"There are no control tasks ({why}), so decodability cannot be told apart from the "
                     "representation carrying the prompt's type.")
    b = result.best
    if b is not None and b.auroc.value is not None:
        text = (f"Choosing the layer on validation folds only, the nested estimate is L{b.layer}/{b.position}: "
                f"AUROC {b.auroc.text()}")
        if b.permutation is not None:
            t = b.permutation
            text += (f", permutation p = {t.p_value:.3g} ({len(t.null)} within-family label permutations, "
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
