"""report.html's explorer (experiments.report.explorer) on a real small quickstart: every shown pair's
two items with their sheets, escaped replies, cross-fitted margins and steered doses; the filters,
run in headless chromium, show only the rows they select, and a row with a wrong data-system is
caught; an invalid reply is shown as invalid; nothing to explore gives None.

Browser tests follow test_report_html.py: CI (which sets CI) fails without chromium, elsewhere they skip."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evprobe.core.errors import OneLineWarning

from evprobe.experiments.report.explorer import explorer_section
from evprobe.experiments.report.explorer_data import read_explorer
from tests.experiments.test_report_html import FLAGS, browser

EVIL = "<script>document.title='pwned'</script> & \"quoted\""


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, one_torch_thread: None) -> Path:
    """The smallest real pipeline the explorer reads (~25 s, a quarter of the quickstart's): a 6-family
    benchmark, the organism's run on its selections, a capture at the last token, directions fitted
    per half of the families, and a dose-response of layer 3 on the held-out half (2 doses, 2 random
    directions). Read-only: tests copy what they edit."""
    from evprobe.bench.generate import GenerateConfig, generate
    from evprobe.bench.runner import RunConfig, run
    from evprobe.experiments.capture import CaptureConfig, capture
    from evprobe.experiments.dose_response.config import DoseResponseConfig
    from evprobe.experiments.dose_response import dose_response
    from evprobe.probes.runs import directions_to_folder, labelled

    out = tmp_path_factory.mktemp("explorer_pipeline")
    bench, acts, directions = out / "bench", out / "acts", out / "directions"
    generate(bench, GenerateConfig(families_per_system=2, subset_per_cell=0), progress=False)
    run(RunConfig(model="organism", bench=str(bench), out=str(out / "run"), requests=("select",), batch_size=32),
        progress=False)
    capture(CaptureConfig(model="organism", bench=str(bench), out=str(acts), requests=("select",),
                          positions=("last",), batch_size=32), progress=False)
    captures, resolved = labelled([acts], "resolved", requests=("select",))
    directions_to_folder(captures, resolved, directions, [3], position="last", by="half")
    dose_response(DoseResponseConfig(model="organism", bench=str(bench), directions=str(directions),
                                     out=str(out / "dose_response"), layers=(3,), alphas=(-1.0, 0.75), n_random=2,
                                     n_relabel=2, controls=(), positions="last", readout="both", n_boot=50,
                                     ablation=False), progress=False)
    return out


@pytest.fixture(scope="module")
def explored(pipeline: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A copy of the pipeline with two replies edited: the first shown pair's first member replies EVIL
    (valid), its second member an invalid reply. Its dose meta still names the pipeline's folders; the
    copy's own, inside the root, are preferred."""
    qs = pipeline
    root = tmp_path_factory.mktemp("explorer") / "root"
    shutil.copytree(qs, root)
    first = read_explorer([qs], limit_pairs=1)
    assert first is not None
    a, b = (m.item_id for m in first.pairs[0].members)
    rows = _jsonl(qs / "run" / "records.jsonl")
    for r in rows:
        if r["item_id"] == a:
            r.update(reply=EVIL, valid=True)
        if r["item_id"] == b:
            r.update(reply="I would rather not say <b>", valid=False, choice="C", route=None)
    (root / "run" / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    section = explorer_section([root], limit_pairs=12)
    assert section is not None
    return {"root": root, "section": section, "ex": read_explorer([root], limit_pairs=12), "a": a, "b": b}


def test_every_shown_pair_has_both_items_escaped_replies_and_thumbnails(explored: dict) -> None:
    section, ex = explored["section"], explored["ex"]
    assert section.startswith('<section id="explorer">') and section.endswith("</section>")
    assert 0 < len(ex.pairs) <= 12 and f"{len(ex.pairs)} of {ex.n_total} matched pairs shown" in section
    assert len({p.system for p in ex.pairs}) > 1  # taken in turn from each system
    for p in ex.pairs:
        assert f'data-pair="{html.escape(p.pair_id)}"' in section
        assert {m.resolved for m in p.members} == {True, False}
        for m in p.members:
            assert f'data-item="{html.escape(m.item_id)}"' in section
            assert m.thumbs and all(t.startswith("data:image/png;base64,") for t in m.thumbs)
            assert m.margins and all(g.value is not None for g in m.margins)  # held out: the other half's fit
            assert m.doses and {d.layer for d in m.doses} == set(ex.layers)
    # one thumbnail per sheet of every member, and each sheet's image once in the section (report.html
    # holds every image once): members of a pair share sheets
    assert section.count('role="img"') == sum(len(m.thumbs) for p in ex.pairs for m in p.members)
    uris = re.findall(r"data:image/png;base64,[A-Za-z0-9+/=]+", section)
    assert uris and len(uris) == len(set(uris)) == len({t for p in ex.pairs for m in p.members for t in m.thumbs})
    assert "<img " not in section
    # the reply is text: escaped, and only the section's own one script
    assert html.escape(EVIL) in section and EVIL not in section
    assert section.count("<script") == 1
    assert not re.search(r'src="(?!data:)', section) and "http" not in section


def test_margins_separate_the_held_out_classes(explored: dict) -> None:
    """The cross-fitted margin is a real read-out: on held-out items its sign mostly matches the label
    at some steered layer (a margin computed on the wrong half or with the wrong sign would not)."""
    members = [m for p in explored["ex"].pairs for m in p.members]
    best = max(sum((m.margins[k].value > 0) == m.resolved for m in members) / len(members)
               for k in range(len(members[0].margins)))
    assert best >= 0.75


def test_an_invalid_reply_is_shown_as_invalid(explored: dict) -> None:
    section, b = explored["section"], explored["b"]
    block = section[section.index(f'data-item="{b}"'):]
    block = block[: block.index('class="ex-member"') if 'class="ex-member"' in block else len(block)]
    assert "invalid reply" in block and "choice <b>C</b>" not in block
    assert html.escape("I would rather not say <b>") in block
    (member,) = [m for p in explored["ex"].pairs for m in p.members if m.item_id == b]
    assert member.valid is False and member.choice is None


def test_nothing_to_explore_is_none(pipeline: Path, tmp_path: Path) -> None:
    assert explorer_section([tmp_path]) is None
    shutil.copytree(pipeline / "run", tmp_path / "run")  # replies but no dose-response or patching
    assert explorer_section([tmp_path]) is None


def test_an_item_in_neither_half_says_so(explored: dict, tmp_path: Path) -> None:
    """Drop the first shown item from every direction's fit list (in the root's own directions folder,
    the one read): it gets no margin, and a note."""
    root = tmp_path / "root"
    shutil.copytree(explored["root"], root)
    index = json.loads((root / "directions" / "directions.json").read_text())
    for e in index["directions"]:
        e["items"] = [i for i in e["items"] if i != explored["a"]]
    (root / "directions" / "directions.json").write_text(json.dumps(index))
    ex = read_explorer([root], limit_pairs=1)
    a, b = ex.pairs[0].members
    assert a.item_id == explored["a"] and all(g.value is None and "neither half" in g.note for g in a.margins)
    assert all(g.value is not None for g in b.margins)
    assert "in neither half" in explorer_section([root], limit_pairs=1)


# The page's filters, driven as a reader would: set the controls, dispatch their events, then report
# which pairs, members and dose rows are visible, and what each visible pair's own text says.
PROBE = """<script>window.addEventListener("load", () => {
  const root = document.getElementById("explorer");
  const set = %s;
  for (const [name, value] of Object.entries(set)) {
    const el = root.querySelector('[data-filter="' + name + '"]');
    el.value = value;
    el.dispatchEvent(new Event(el.tagName === "INPUT" ? "input" : "change"));
  }
  const shown = el => getComputedStyle(el).display !== "none" && !el.closest("[hidden]");
  const pairs = [...root.querySelectorAll(".ex-pair")];
  document.body.setAttribute("data-check", JSON.stringify({
    pairs: pairs.length,
    visible: pairs.filter(shown).map(p => p.querySelector(".ex-system").textContent),
    by_text: pairs.map(p => p.querySelector(".ex-system").textContent),
    members: [...root.querySelectorAll(".ex-member")].filter(shown).map(m => m.dataset.condition),
    doses: [...root.querySelectorAll("tr.ex-dose")].filter(shown).map(r => r.dataset.alpha),
    count: root.querySelector(".ex-count").textContent, title: document.title}));
});</script>"""


def _filtered(section: str, tmp: Path, settings: dict[str, str]) -> dict:
    page = tmp / "page.html"
    page.write_text('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>t</title></head><body>'
                    + section + PROBE % json.dumps(settings) + "</body></html>")
    out = subprocess.run([browser(), *FLAGS, f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=5000",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    m = re.search(r'data-check="([^"]*)"', out.stdout)
    assert m, f"the page did not finish loading: {out.stderr[-500:]}"
    return json.loads(html.unescape(m.group(1)))


def _system_problems(seen: dict, system: str) -> list[str]:
    """What is wrong with a system filter's result: rows of other systems shown, or rows of it hidden."""
    wrong = [s for s in seen["visible"] if s != system]
    want = seen["by_text"].count(system)
    return ([f"{len(wrong)} rows of other systems shown"] if wrong else []) + (
        [f"{len(seen['visible'])} rows shown, {want} say {system}"] if len(seen["visible"]) != want else [])


def test_filters_in_a_browser_show_only_the_selected_rows(explored: dict, tmp_path: Path) -> None:
    section, ex = explored["section"], explored["ex"]
    system = ex.pairs[0].system
    alpha = f"{ex.alphas[0]:g}"
    seen = _filtered(section, tmp_path, {"system": system, "condition": "unresolved", "dose": alpha})
    assert seen["title"] == "t"  # the EVIL reply did not run
    assert seen["pairs"] == len(ex.pairs) and not _system_problems(seen, system)
    n = sum(p.system == system for p in ex.pairs)
    assert len(seen["visible"]) == n and f"{n} of the pairs" in seen["count"]
    assert seen["members"] == ["unresolved"] * n
    # one visible dose row per steered layer, all at the chosen alpha (rows of hidden members included)
    assert seen["doses"] and set(seen["doses"]) == {alpha}
    every = _filtered(section, tmp_path, {})
    assert len(every["visible"]) == len(ex.pairs) and len(every["members"]) == 2 * len(ex.pairs)


def test_a_row_with_a_wrong_system_is_caught(explored: dict, tmp_path: Path) -> None:
    section, ex = explored["section"], explored["ex"]
    system = ex.pairs[0].system
    other = next(p.system for p in ex.pairs if p.system != system)
    broken = section.replace(f'data-system="{system}"', f'data-system="{other}"', 1)
    assert broken != section
    assert _system_problems(_filtered(broken, tmp_path, {"system": system}), system)


def test_patching_pairs_alone_are_explored(pipeline: Path, tmp_path: Path) -> None:
    """Without a dose-response, the pairs a patching run patched are the rows: sheets and replies, no
    margins or doses, and the pair's patching line."""
    pairs: dict[str, list[str]] = {}
    for r in _jsonl(pipeline / "bench" / "items.jsonl"):
        if r["request"] == "select" and r.get("variant") is None and r.get("image_pair_id"):
            pairs.setdefault(r["image_pair_id"], []).append(r["item_id"])
    a, b = next(iter(pairs.values()))
    folder = tmp_path / "patching"
    folder.mkdir()
    (folder / "patching.md").write_text("# Pair patching\n")
    (folder / "meta.json").write_text(json.dumps({"kind": "patching", "model": "organism",
                                                  "config": {"bench": str(pipeline / "bench")}}))
    (folder / "results.jsonl").write_text(json.dumps({"source": a, "target": b, "ld_source": 1.5,
                                                      "ld_target": -2.0}) + "\n")
    shutil.copytree(pipeline / "run", tmp_path / "run")
    shutil.copytree(pipeline / "bench", tmp_path / "bench")  # the meta names the pipeline's; this one is inside
    ex = read_explorer([tmp_path])
    assert ex is not None and ex.n_total == 1
    (pair,) = ex.pairs
    assert {m.item_id for m in pair.members} == {a, b}
    assert all(m.thumbs and m.reply is not None and not m.doses and not m.margins for m in pair.members)
    assert "logit difference source +1.50, target -2.00" in explorer_section([tmp_path])


def test_a_bench_outside_the_roots_is_refused_and_none_of_its_text_reaches_the_html(explored: dict, pipeline: Path,
                                                                                    tmp_path: Path) -> None:
    """The issue's case: a dose-response whose meta names a bench outside the report's folders (here
    `../outside`, a copy holding a planted item history) embedded that items.jsonl's text."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    shutil.copytree(pipeline / "bench", outside / "bench")
    rows = _jsonl(outside / "bench" / "items.jsonl")
    for r in rows:
        r["history"] = "PLANTED-OUTSIDE"
    (outside / "bench" / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    shutil.copytree(explored["root"] / "dose_response", root / "dose_response")
    shutil.copytree(explored["root"] / "run", root / "run")
    meta_path = root / "dose_response" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["bench"] = str(root / ".." / "outside" / "bench")
    meta_path.write_text(json.dumps(meta))
    with pytest.warns(OneLineWarning, match=r"meta.json: field 'bench' names .*outside.*, outside the report's folders"):
        section = explorer_section([root], limit_pairs=2)
    assert section is None  # its only source's bench is refused: nothing to explore, no text of it
    # a symlink inside the root leading outside is outside too
    (root / "bench").symlink_to(outside / "bench")
    with pytest.warns(OneLineWarning, match="outside the report's folders"):
        assert explorer_section([root], limit_pairs=2) is None


def _damaged(explored: dict, tmp_path: Path, rel: str, edit) -> Path:
    """A copy of the explored root with the first row of `rel` edited by `edit` (a row -> row)."""
    root = tmp_path / "root"
    shutil.copytree(explored["root"], root)
    rows = _jsonl(root / rel)
    rows[0] = edit(dict(rows[0]))
    (root / rel).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.mark.parametrize("rel, edit, words", [
    ("dose_response/results.jsonl", lambda r: {k: v for k, v in r.items() if k != "item_id"},
     "results.jsonl:1: field 'item_id' is missing; it must be a string"),
    ("dose_response/results.jsonl", lambda r: {**r, "kind": "probe", "lp": {"choice": "A", "log_odds": "1.5"}},
     "results.jsonl:1: field 'lp.log_odds' is a string, not a number or null"),
    ("run/records.jsonl", lambda r: {k: v for k, v in r.items() if k != "item_id"},
     "records.jsonl:1: field 'item_id' is missing"),
    ("bench/items.jsonl", lambda r: {**r, "images": "images/a.png"}, "items.jsonl:1: field 'images' is a string"),
    ("dose_response/meta.json", None, "meta.json: field 'layer_directions' is"),
])
def test_a_damaged_row_is_left_out_with_one_line_naming_file_line_and_field(explored: dict, tmp_path: Path, rel: str,
                                                                            edit, words: str) -> None:
    if edit is None:  # the meta.json: its folder left out
        root = tmp_path / "root"
        shutil.copytree(explored["root"], root)
        meta = json.loads((root / rel).read_text())
        (root / rel).write_text(json.dumps({**meta, "layer_directions": {"three": {"name": 3}}}))
    else:
        root = _damaged(explored, tmp_path, rel, edit)
    with pytest.warns(OneLineWarning) as seen:
        explorer_section([root], limit_pairs=12)
    lines = [str(w.message) for w in seen if words in str(w.message)]
    assert len(lines) == 1 and "\n" not in lines[0] and str(root) in lines[0]
    assert "left out of the report's explorer" in lines[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["item_id", "kind", "layer", "alpha", "lp", "gen", "lp_set", "direction_index"]),
       value=st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                              st.sampled_from(["choice", "log_odds", "valid", "reply", "name"]), inner, max_size=3),
                          max_leaves=6))
def test_any_value_in_a_dose_row_builds_the_section_or_warns(explored: dict, tmp_path_factory, field: str,
                                                              value) -> None:
    """Whatever a results row's field holds, the section is built (the row shown or left out with a
    warning): never a traceback."""
    tmp = tmp_path_factory.mktemp("fuzz")
    root = tmp / "root"
    shutil.copytree(explored["root"] / "dose_response", root / "dose_response")
    for name in ("run", "bench", "directions"):
        (root / name).symlink_to(explored["root"] / name)
    rows = _jsonl(root / "dose_response" / "results.jsonl")
    rows = [{**r, field: value} for r in rows]
    (root / "dose_response" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OneLineWarning)
        section = explorer_section([root], limit_pairs=2)
    assert section is None or section.startswith('<section id="explorer">')


def test_a_sheet_over_the_pixel_budget_is_left_out_of_the_thumbnails(explored: dict, tmp_path: Path) -> None:
    from tests.bench.hostile_images import huge_png

    root = tmp_path / "root"
    shutil.copytree(explored["root"], root)
    first = read_explorer([root], limit_pairs=1).pairs[0].members[0]
    item = next(r for r in _jsonl(root / "bench" / "items.jsonl") if r["item_id"] == first.item_id)
    (root / "bench" / item["images"][0]).write_bytes(huge_png(20000, 20000))
    with pytest.warns(OneLineWarning, match=r"20000x20000 pixels, over the pixel budget.*left out of the report's explorer"):
        section = explorer_section([root], limit_pairs=1)
    assert "sheet(s) left out" in section
