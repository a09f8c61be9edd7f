"""What report.html's explorer shows, read from the pipeline folders under the report's roots.

One `Pair` per matched image pair (bench `image_pair_id`: the two base selections that share a sheet
layout and differ in history, hence in whether the evidence suffices; patching patches the same
pairs), each member with its sheets, its unsteered reply from the run's records.jsonl, its
cross-fitted probe margin and its steered outcome at each layer x dose of the dose-response run.
Inputs are found the way experiments.report.build finds parts (`**/dose_response.md`, `**/patching.md`)
and then through the paths the results' own meta.json records (`bench`, `directions_folder`, the
directions' `captures`), each row and folder checked first (experiments.report.explorer_rows: a
damaged row left out with a warning, a folder outside the report's refused). Nothing here writes a file.
"""

from __future__ import annotations

import base64
import io
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from evprobe.core.errors import InputError, OneLineWarning
from evprobe.experiments.report.explorer_rows import DOSE, ITEM, PATCH, RECORD, checked_meta, checked_rows, contained
from evprobe.core.json_types import JsonObject

if TYPE_CHECKING:
    from evprobe.probes.captures import Capture
    from evprobe.probes.directions import Direction

THUMB_WIDTH = 160  # px: a sheet's thumbnail width (aspect kept)
THUMB_COLOURS = 32


@dataclass(frozen=True)
class Dose:
    """One steered reading of one item: the probe direction at `layer`, strength `alpha`."""
    layer: int
    alpha: float
    choice: str | None  # log-prob readout's option letter
    log_odds: float | None  # stop log-odds (log-prob readout)
    gen_choice: str | None  # generation readout's parsed choice; None when invalid or not generated
    gen_valid: bool | None
    null_lo: float | None  # min / max stop log-odds over the random directions at this layer x dose
    null_hi: float | None
    n_null: int


@dataclass(frozen=True)
class Margin:
    layer: int
    value: float | None  # None: no cross-fitted direction for this item (`note` says why)
    direction: str | None
    note: str


@dataclass(frozen=True)
class Member:
    item_id: str
    resolved: bool | None
    history: Any
    threshold_level: Any
    thumbs: tuple[str, ...]  # data URIs, one per sheet found inside the roots
    n_sheets: int  # sheets the item names
    reply: str | None
    valid: bool | None
    choice: str | None
    reply_source: str
    base_choice: str | None  # the dose run's own alpha = 0 readout
    base_log_odds: float | None
    margins: tuple[Margin, ...]
    doses: tuple[Dose, ...]


@dataclass(frozen=True)
class Pair:
    pair_id: str
    family_id: str
    system: str
    folder: str  # the results folder the pair came from, relative to its root (_shown_path)
    members: tuple[Member, Member]
    patching: str | None  # one line of the pair's patching logit differences, when patched


@dataclass(frozen=True)
class Explorer:
    pairs: tuple[Pair, ...]
    n_total: int  # pairs found, before limit_pairs
    layers: tuple[int, ...]
    alphas: tuple[float, ...]
    directions: tuple[str, ...]  # the steered (probe) directions' names
    position: str | None


def _found(roots: list[Path], name: str) -> list[Path]:
    """Folders holding `name` under the roots, as experiments.report.build finds parts (report folders skipped)."""
    out: list[Path] = []
    for root in roots:
        for md in sorted(Path(root).rglob(name)):
            if md.parent.resolve() not in {p.resolve() for p in out}:
                out.append(md.parent)
    return out


def _records(roots: list[Path]) -> dict[tuple[str | None, str], JsonObject]:
    """(model, item_id) -> the run's record, from every records.jsonl under the roots (first wins);
    with records of one model only, also (None, item_id), since a run may spell its model otherwise
    (a hub id) than the dose-response's meta (a config name)."""
    out: dict[tuple[str | None, str], JsonObject] = {}
    for root in roots:
        for path in sorted(Path(root).rglob("records.jsonl")):
            for row in checked_rows(path, RECORD):
                out.setdefault((row.get("model"), row["item_id"]), row)
    if len({model for model, _ in out}) == 1:
        out.update({(None, item): row for (_, item), row in list(out.items())})
    return out


class _Thumbs:
    """Sheet thumbnails as data URIs, each file downscaled once (members share sheets). Only files inside
    the report's roots are read (report.html's rule: a report carries only what its user put in it)."""

    def __init__(self, roots: list[Path]) -> None:
        self.cache: dict[Path, str | None] = {}
        self.roots = [r.resolve() for r in roots]

    def __call__(self, bench: Path, rel: str) -> str | None:
        from evprobe.bench.clips import sheet_view
        from evprobe.bench.manifest import resolve_image

        try:
            path = resolve_image(bench, rel)  # refuses paths that leave the benchmark folder
        except InputError:
            return None
        if not any(root in path.parents for root in self.roots):
            return None
        if path not in self.cache:
            try:  # within the pixel budget (bench.decode); a clip shows the sheet its panel frames make
                im = sheet_view(path)
            except InputError as err:  # one line naming the file; the member says its sheet is left out
                warnings.warn(f"{err}; left out of the report's explorer", OneLineWarning, stacklevel=2)
                self.cache[path] = None
                return None
            im.thumbnail((THUMB_WIDTH, THUMB_WIDTH * 4))
            buf = io.BytesIO()
            # a sheet is a few flat colours: a 32-colour palette keeps it legible at ~1/4 the bytes
            im.quantize(THUMB_COLOURS).save(buf, format="PNG", optimize=True)
            self.cache[path] = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
        return self.cache[path]


class _Margins:
    """Cross-fitted margins: x . v - (m1 + m0) / 2, where x is the item's captured activation at the
    direction's layer and position, v the unit direction fitted on the half the item is not in, and
    m1, m0 the mean projections of that direction's own fit rows of each class (its midpoint)."""

    def __init__(self, directions_folder: Path | None) -> None:
        self.dirs: dict[str, Direction] = {}
        self.captures: dict[str, tuple[Capture, dict[str, int]] | None] = {}
        self.mid: dict[str, float] = {}
        self.folder = directions_folder
        if directions_folder is not None and (directions_folder / "directions.json").is_file():
            from evprobe.probes.directions import read_directions

            self.dirs = read_directions(directions_folder)

    def _capture(self, direction: Any) -> tuple[Any, dict[str, int]] | None:
        from evprobe.probes.captures import CaptureError, CaptureSet, load_capture
        from evprobe.probes.provenance import capture_paths, check_capture

        try:  # from the directions folder (never the working directory), else beside it
            recorded = [str(p) for p in capture_paths(direction)]
        except CaptureError:  # an older folder's paths were relative to a working directory no file records
            recorded = []
        names = [p for p in direction.provenance.get("captures") or [] if isinstance(p, str)]
        for path in recorded + [str(self.folder.parent / Path(p).name) for p in names if self.folder]:
            if path not in self.captures:
                self.captures[path] = None
                if (Path(path) / "index.jsonl").is_file():
                    cap = load_capture(path)
                    try:
                        check_capture(direction, CaptureSet.of(cap))
                    except CaptureError:
                        continue  # not the capture it was fitted on (another model, or not its items): no margins
                    rows: dict[str, int] = {}
                    for r in cap.index:  # first row of an item (a capture holds one per item and regime)
                        rows.setdefault(r["item_id"], int(r["row"]))
                    self.captures[path] = (cap, rows)
            if self.captures[path] is not None:
                return self.captures[path]
        return None

    def _vector(self, direction: Any, cap: Any, row: int) -> float:
        li, pi = cap.layers.index(direction.layer), cap.positions.index(direction.position)
        return float(np.asarray(cap.acts[row, li, pi], dtype=np.float64) @ direction.vector.astype(np.float64))

    def _midpoint(self, d: Any, cap: Any, rows: dict[str, int]) -> float | None:
        if d.name not in self.mid:
            label, positive = d.provenance.get("label"), d.provenance.get("positive", True)
            by_id = {r["item_id"]: r for r in cap.index}
            groups: dict[bool, list[float]] = {True: [], False: []}
            for item in d.provenance.get("items") or []:
                if item in rows and label in by_id[item]:
                    groups[by_id[item][label] == positive].append(self._vector(d, cap, rows[item]))
            self.mid[d.name] = (float(np.mean(groups[True]) + np.mean(groups[False])) / 2
                                if groups[True] and groups[False] else float("nan"))
        mid = self.mid[d.name]
        return None if np.isnan(mid) else mid

    def margin(self, steered_name: str, layer: int, item_id: str) -> Margin:
        steered = self.dirs.get(steered_name)
        if steered is None:
            return Margin(layer, None, None, f"direction {steered_name} not found in its directions folder")
        prov = steered.provenance
        key = ("label", "positive", "probe", "layer", "position", "restriction")
        halves = [d for d in self.dirs.values() if str(d.provenance.get("condition", "")).startswith("half=")
                  and all(d.provenance.get(k) == prov.get(k) for k in key)]
        holding = [d for d in halves if item_id in (d.provenance.get("items") or [])]
        if not holding:
            return Margin(layer, None, None, "in neither half's fit: no cross-fitted margin")
        others = [d for d in halves if d.provenance.get("condition") != holding[0].provenance.get("condition")
                  and item_id not in (d.provenance.get("items") or [])]
        if not others:
            return Margin(layer, None, None, f"in {holding[0].provenance['condition']}; no other half's direction")
        d = sorted(others, key=lambda x: x.name)[0]
        found = self._capture(d)
        if found is None or item_id not in found[1]:
            return Margin(layer, None, d.name, "item not in the direction's capture")
        cap, rows = found
        mid = self._midpoint(d, cap, rows)
        if mid is None:
            return Margin(layer, None, d.name, "the direction's fit rows lack one class")
        return Margin(layer, self._vector(d, cap, rows[item_id]) - mid, d.name,
                      f"fitted on {d.provenance.get('condition')}")


def _shown_path(folder: Path, roots: list[Path]) -> str:
    """`folder` as the report names it: relative to the root holding it (a report is mailed around, so it
    names no path of the machine it was written on), the root's own name first."""
    for root in roots:
        r = root.resolve()
        if folder.resolve() == r or r in folder.resolve().parents:
            return str(Path(r.name) / folder.resolve().relative_to(r))
    return folder.name


def _pairs_of(items: dict[str, JsonObject], ids: list[str]) -> list[tuple[str, str, str]]:
    """(pair id, first, second) of the ids' image pairs (falling back to threshold pairs), manifest order;
    members ordered resolved first."""
    groups: dict[str, list[str]] = defaultdict(list)
    order = {i: n for n, i in enumerate(items)}
    for i in sorted(set(ids), key=lambda x: order.get(x, len(order))):
        it = items.get(i)
        if it is not None and (it.get("image_pair_id") or it.get("threshold_pair_id")):
            groups[it.get("image_pair_id") or it["threshold_pair_id"]].append(i)
    out = []
    for pid, members in groups.items():
        if len(members) == 2:
            a, b = sorted(members, key=lambda i: not items[i].get("resolved"))
            out.append((pid, a, b))
    return out


def _interleave(pairs: list[Any], system_of: Any) -> list[Any]:
    """Round-robin over systems (each in its own order), so the first N hold every system."""
    by: dict[str, list[Any]] = defaultdict(list)
    for p in pairs:
        by[system_of(p)].append(p)
    queues = [by[s] for s in sorted(by)]
    out = []
    for k in range(max((len(q) for q in queues), default=0)):
        out += [q[k] for q in queues if k < len(q)]
    return out


def _doses(rows: list[JsonObject], layers: dict[int, str]) -> tuple[JsonObject, tuple[Dose, ...]]:
    """One item's baseline row and its probe doses (with the random band) at the reported layers."""
    base: JsonObject = {}
    probe, null = {}, {}
    for r in rows:
        if r.get("kind") == "baseline":
            base = r
        elif r.get("layer") in layers and r.get("alpha") is not None:
            key = (r["layer"], float(r["alpha"]))
            if r.get("kind") == "probe" and r.get("direction_index") is None:
                probe[key] = r
            elif r.get("kind") == "random":
                values = (r.get("lp_set") or {}).get("log_odds") or []
                null[key] = [float(v) for v in values if v is not None]
    out = []
    for key in sorted(probe):
        lp, gen, band = probe[key].get("lp") or {}, probe[key].get("gen") or {}, null.get(key) or []
        valid = gen.get("valid") if gen else None
        out.append(Dose(key[0], key[1], lp.get("choice"), lp.get("log_odds"),
                        gen.get("choice") if valid else None, valid,
                        min(band) if band else None, max(band) if band else None, len(band)))
    return base, tuple(out)


def read_explorer(roots: list[Path], limit_pairs: int = 48) -> Explorer | None:
    """The explorer's pairs from every dose-response (else patching) folder under the roots, or None."""
    roots = [Path(r) for r in roots]
    records, thumbs = None, _Thumbs(roots)
    found: list[tuple[str, Any]] = []  # (system, builder) in order, built only when shown
    patch_lines: dict[tuple[Path, str], str] = {}  # (resolved bench, source item) -> one line
    patch_folders = _found(roots, "patching.md")
    for folder in patch_folders:
        meta = checked_meta(folder / "meta.json")
        recorded = None if meta is None else (meta.get("config") or {}).get("bench")
        bench = None if meta is None else contained(recorded, folder.parent / "bench", roots,
                                                     f"{folder / 'meta.json'}: field 'config.bench'")
        for r in checked_rows(folder / "results.jsonl", PATCH) if bench is not None else []:
            patch_lines[(bench.resolve(), r["source"])] = (
                f"patching {r['source']} into {r['target']}: logit difference source {r['ld_source']:+.2f}, "
                f"target {r['ld_target']:+.2f}")
    layers_all: set[int] = set()
    alphas_all: set[float] = set()
    names: list[str] = []
    position = None
    sources = [(f, "dose") for f in _found(roots, "dose_response.md")]
    if not any((f / "results.jsonl").is_file() for f, _ in sources):
        sources = [(f, "patching") for f in patch_folders]
    for folder, kind in sources:
        meta = checked_meta(folder / "meta.json")
        if meta is None:
            continue
        field = "bench" if meta.get("bench") else "config.bench"
        bench = contained(meta.get("bench") or (meta.get("config") or {}).get("bench"), folder.parent / "bench", roots,
                          f"{folder / 'meta.json'}: field '{field}'")
        if bench is None or not (bench / "items.jsonl").is_file():
            continue
        items = {r["item_id"]: r for r in checked_rows(bench / "items.jsonl", ITEM)}
        by_item: dict[str, list[JsonObject]] = defaultdict(list)
        layers: dict[int, str] = {}
        if kind == "dose":
            for r in checked_rows(folder / "results.jsonl", DOSE):
                by_item[r["item_id"]].append(r)
            layers = {int(k): v["name"] for k, v in (meta.get("layer_directions") or {}).items()}
            names += [n for n in layers.values() if n not in names]
            margins = _Margins(contained(meta.get("directions_folder"), folder.parent / "directions", roots,
                                         f"{folder / 'meta.json'}: field 'directions_folder'"))
            position = position or next((margins.dirs[n].position for n in layers.values() if n in margins.dirs), None)
        else:
            for r in checked_rows(folder / "results.jsonl", PATCH):
                by_item[r["source"]], by_item[r["target"]] = [], []
            margins = _Margins(None)
        layers_all |= set(layers)
        alphas_all |= {float(r["alpha"]) for rows in by_item.values() for r in rows
                       if r.get("kind") == "probe" and r.get("alpha") is not None}
        if records is None:
            records = _records(roots)

        def member(item_id: str, *, items=items, bench=bench, by_item=by_item, layers=layers, margins=margins,
                   model=meta.get("model")) -> Member:
            it = items[item_id]
            rec = records.get((model, item_id)) or records.get((None, item_id))
            base, doses = _doses(by_item[item_id], layers)
            if rec is not None:
                reply, valid, choice, source = rec.get("reply"), rec.get("valid"), rec.get("choice"), "run records"
            elif base.get("gen"):
                g = base["gen"]
                reply, valid, choice, source = g.get("reply"), g.get("valid"), g.get("choice"), "dose run, alpha = 0"
            else:
                reply, valid, choice, source = None, None, None, "no reply found"
            lp = base.get("lp") or {}
            return Member(item_id, it.get("resolved"), it.get("history"), it.get("threshold_level"),
                          tuple(t for t in (thumbs(bench, rel) for rel in it.get("images") or []) if t),
                          len(it.get("images") or []),
                          reply, valid, choice if valid else None, source, lp.get("choice"), lp.get("log_odds"),
                          tuple(margins.margin(name, layer, item_id) for layer, name in sorted(layers.items())),
                          doses)

        for pid, a, b in _pairs_of(items, list(by_item)):
            def build(pid=pid, a=a, b=b, member=member, items=items, bench=bench, folder=folder) -> Pair:
                line = patch_lines.get((bench.resolve(), a)) or patch_lines.get((bench.resolve(), b))
                return Pair(pid, items[a]["family_id"], items[a]["system"], _shown_path(folder, roots), (member(a), member(b)),
                            line)
            found.append((items[a]["system"], build))
    if not found:
        return None
    shown = _interleave(found, lambda f: f[0])[:limit_pairs]
    return Explorer(tuple(build() for _, build in shown), len(found), tuple(sorted(layers_all)),
                    tuple(sorted(alphas_all)), tuple(names), position)


__all__ = ["Dose", "Explorer", "Margin", "Member", "Pair", "THUMB_WIDTH", "read_explorer"]
