"""report.html's explorer: one filterable table of matched pairs, both members side by side.

`explorer_section(roots)` returns one self-contained HTML fragment, `<section id="explorer">`:
filters (system, pair text, condition = resolved / unresolved member, steered layer, dose alpha)
and one block per pair (experiments.report.explorer_data reads them), each member with its sheets
as ~160 px thumbnails (each sheet's data URI once, in the section's stylesheet), its unsteered reply (an invalid one shown as invalid, never as a
choice), its cross-fitted probe margin and its steered outcome at each layer x dose. Filtering is a
small inline script over the blocks' data-* attributes; every string read from disk is HTML-escaped
and nothing from disk reaches the script as code. No network, no file beside it.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from evprobe.core.decimals import fixed
from evprobe.core.estimate_text import missing_text
from evprobe.experiments.report.explorer_data import Dose, Explorer, Member, Pair, read_explorer

STYLE = """
#explorer [hidden] { display: none !important; }
#explorer .ex-controls label { margin-right: 1rem; }
#explorer .ex-pair { border: 1px solid #ccc; margin: 0.8rem 0; padding: 0.4rem 0.6rem; }
#explorer .ex-members { display: flex; gap: 1rem; flex-wrap: wrap; }
#explorer .ex-member { flex: 1 1 20rem; border-left: 3px solid #999; padding-left: 0.5rem; }
#explorer .ex-member[data-condition="resolved"] { border-left-color: #2a7; }
#explorer .ex-member[data-condition="unresolved"] { border-left-color: #c60; }
#explorer .ex-sheet { display: inline-block; width: 160px; margin: 0 0.3rem 0.3rem 0; border: 1px solid #ddd;
  background-size: contain; background-repeat: no-repeat; vertical-align: top; }
#explorer .ex-invalid { color: #b00; font-weight: bold; }
#explorer pre { white-space: pre-wrap; margin: 0.2rem 0; font-size: 0.85rem; background: #f7f7f7; }
#explorer table { font-size: 0.8rem; }
"""

# Reads only the page's own controls and data-* attributes; `hidden` toggles visibility.
SCRIPT = """
(() => {
  const root = document.getElementById("explorer");
  const value = name => root.querySelector('[data-filter="' + name + '"]').value;
  function apply() {
    const system = value("system"), text = value("pair").trim().toLowerCase(), condition = value("condition");
    const layer = value("layer"), dose = value("dose");
    let shown = 0;
    for (const pair of root.querySelectorAll(".ex-pair")) {
      const ok = (system === "" || pair.dataset.system === system)
        && (text === "" || pair.dataset.pair.toLowerCase().includes(text));
      pair.hidden = !ok;
      if (ok) shown += 1;
      for (const m of pair.querySelectorAll(".ex-member")) {
        m.hidden = !(condition === "" || m.dataset.condition === condition);
      }
    }
    for (const row of root.querySelectorAll("tr.ex-dose")) {
      row.hidden = !((layer === "" || row.dataset.layer === layer) && (dose === "" || row.dataset.alpha === dose));
    }
    root.querySelector(".ex-count").textContent = shown + " of the pairs below match the filters.";
  }
  for (const el of root.querySelectorAll("[data-filter]")) {
    el.addEventListener(el.tagName === "INPUT" ? "input" : "change", apply);
  }
  apply();
})();
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(x: float | None, digits: int = 2) -> str:
    return missing_text() if x is None else fixed(x, digits, sign=True)


def _alpha(a: float) -> str:
    return f"{a:g}"


def _condition(m: Member) -> str:
    return {True: "resolved", False: "unresolved"}.get(m.resolved, "unknown")  # type: ignore[arg-type]


def _select(name: str, label: str, options: list[tuple[str, str]]) -> str:
    opts = "".join(f'<option value="{_e(v)}">{_e(t)}</option>' for v, t in [("", "all"), *options])
    return f'<label>{_e(label)} <select data-filter="{name}">{opts}</select></label>'


def _dose_rows(doses: tuple[Dose, ...]) -> str:
    rows = []
    for d in doses:
        gen = ("" if d.gen_valid is None else _e(d.gen_choice) if d.gen_valid
               else '<span class="ex-invalid">invalid</span>')
        null = (f"[{_num(d.null_lo)}, {_num(d.null_hi)}] (n={d.n_null})" if d.n_null else missing_text("no null"))
        rows.append(f'<tr class="ex-dose" data-layer="{d.layer}" data-alpha="{_e(_alpha(d.alpha))}"><td>L{d.layer}</td>'
                    f"<td>{_e(_alpha(d.alpha))}</td><td>{_e(d.choice or missing_text('no choice'))}</td><td>{_num(d.log_odds)}</td>"
                    f"<td>{null}</td><td>{gen}</td></tr>")
    if not rows:
        return "<p><em>No steered readings for this item.</em></p>"
    return ("<table><tr><th>layer</th><th>alpha</th><th>choice (log-prob)</th><th>stop log-odds</th>"
            "<th>random-direction range</th><th>generated choice</th></tr>" + "".join(rows) + "</table>")


def _sheet_size(uri: str) -> tuple[int, int]:
    """(width, height) of a PNG data URI, from its IHDR chunk (bytes 16-24 of the file)."""
    head = base64.b64decode(uri.split(",", 1)[1][:44])
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def _sheet_styles(ex: Explorer) -> tuple[dict[str, str], str]:
    """Each distinct sheet once: its CSS class (`ex-sheet-3`) and one stylesheet rule per sheet.
    Members share sheets (a pair's two members, and pairs of one family, show the same ones), and
    report.html holds every image once, so a thumbnail is a background of a class, not an <img>."""
    classes: dict[str, str] = {}
    rules = []
    for uri in (t for p in ex.pairs for m in p.members for t in m.thumbs):
        if uri not in classes:
            classes[uri] = f"ex-sheet-{len(classes)}"
            w, h = _sheet_size(uri)
            rules.append(f'#explorer .{classes[uri]} {{ background-image: url("{uri}"); '
                         f"aspect-ratio: {w} / {h}; }}")
    return classes, "\n".join(rules)


def _member(m: Member, sheets: dict[str, str]) -> str:
    thumbs = "".join(f'<span class="ex-sheet {sheets[t]}" role="img" aria-label="sheet {n + 1} of {_e(m.item_id)}">'
                     "</span>" for n, t in enumerate(m.thumbs))
    if len(m.thumbs) < m.n_sheets:
        thumbs += (f"<em>{m.n_sheets - len(m.thumbs)} sheet(s) left out: not found inside the report's "
                   "folders</em>")
    if m.reply is None:
        reply = f"<p><em>{_e(m.reply_source)}</em></p>"
    else:
        verdict = (f"choice <b>{_e(m.choice or missing_text('no choice'))}</b>" if m.valid else '<span class="ex-invalid">invalid reply</span>')
        reply = f'<p class="ex-reply">Unsteered reply ({_e(m.reply_source)}): {verdict}</p><pre>{_e(m.reply)}</pre>'
    margins = "; ".join(
        f"L{g.layer}: {_num(g.value)}" if g.value is not None else f"L{g.layer}: <em>{_e(g.note)}</em>"
        for g in m.margins)
    base = (f"dose run at alpha 0: {_e(m.base_choice)}, stop log-odds {_num(m.base_log_odds)}"
            if m.base_choice is not None else "")
    return (f'<div class="ex-member" data-condition="{_condition(m)}" data-item="{_e(m.item_id)}">'
            f"<p><b>{_e(m.item_id)}</b> ({_condition(m)}; history {_e(m.history)}, threshold "
            f"{_e(m.threshold_level)})</p><div>{thumbs or '<em>no sheets</em>'}</div>{reply}"
            f"<p>Probe margin: {margins or '<em>no direction</em>'}</p><p>{base}</p>{_dose_rows(m.doses)}</div>")


def _pair(p: Pair, sheets: dict[str, str]) -> str:
    patch = f"<p>{_e(p.patching)}</p>" if p.patching else ""
    return (f'<div class="ex-pair" data-system="{_e(p.system)}" data-pair="{_e(p.pair_id)}" '
            f'data-family="{_e(p.family_id)}"><p><b>Pair {_e(p.pair_id)}</b> &middot; system '
            f'<span class="ex-system">{_e(p.system)}</span> &middot; family {_e(p.family_id)} &middot; from '
            f"<code>{_e(p.folder)}</code></p>{patch}"
            f'<div class="ex-members">{"".join(_member(m, sheets) for m in p.members)}</div></div>')


def render_explorer(ex: Explorer) -> str:
    """The section of an already read Explorer."""
    systems = sorted({p.system for p in ex.pairs})
    sheets, sheet_rules = _sheet_styles(ex)
    controls = " ".join([
        _select("system", "System", [(s, s) for s in systems]),
        '<label>Pair <input type="search" data-filter="pair" placeholder="family or pair id"></label>',
        _select("condition", "Condition", [("resolved", "resolved (evidence suffices)"),
                                           ("unresolved", "unresolved (evidence does not suffice)")]),
        _select("layer", "Steered layer", [(str(l), f"L{l}") for l in ex.layers]),
        _select("dose", "Dose (alpha)", [(_alpha(a), _alpha(a)) for a in ex.alphas]),
    ])
    names = ", ".join(f"<code>{_e(n)}</code>" for n in ex.directions) or "none"
    caption = (
        f"<p>{len(ex.pairs)} of {ex.n_total} matched pairs shown (the first in manifest order, taken in turn "
        f"from each system). A pair is a bench image pair: two base selections that share the sheet layout and "
        f"differ in history, one with evidence that suffices (resolved) and one without. For each member: its "
        f"sheets (thumbnails), its unsteered reply from the run's records (an invalid reply is marked invalid, "
        f"never read as a choice), and its <b>probe margin</b>: x &middot; v &minus; (m<sub>1</sub> + "
        f"m<sub>0</sub>)/2, where x is the item's captured activation at the steered direction's layer and "
        f"position ({_e(ex.position or missing_text())}), v the unit direction fitted on the half of the fit items the item "
        f"is <em>not</em> in (cross-fitted), and m<sub>1</sub>, m<sub>0</sub> the mean projections of that "
        f"direction's own fit rows per class; positive means on the resolved side. Items in neither half get no "
        f"margin, and say so. Steered outcome: the dose-response readings with the probe direction(s) {names} "
        f"added at each layer and alpha (in units of the residual norm): the log-prob choice, the stop "
        f"log-odds, the min&ndash;max stop log-odds over the random directions at the same layer and dose, and "
        f"the generated choice.</p>")
    return (f'<section id="explorer">\n<h2>Explorer: pairs, replies, margins and steering</h2>\n'
            f"<style>{STYLE}{sheet_rules}\n</style>\n{caption}\n<div class=\"ex-controls\">{controls}</div>\n"
            f'<p class="ex-count"></p>\n' + "\n".join(_pair(p, sheets) for p in ex.pairs)
            + f"\n<script>{SCRIPT}</script>\n</section>")


def explorer_section(roots: list[Path], limit_pairs: int = 48) -> str | None:
    """The explorer of the dose-response (else patching) results under `roots`, or None when there are none."""
    ex = read_explorer([Path(r) for r in roots], limit_pairs)
    return None if ex is None else render_explorer(ex)


__all__ = ["explorer_section", "render_explorer"]
