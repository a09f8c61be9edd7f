"""A probe sweep or a set of directions, written to a folder: what `evprobe sweep` and `evprobe
directions` do, as functions with typed arguments for every caller (the CLI, quickstart,
layer-sweep, gating).

- `labelled(acts, label, ...)`: the capture folders and the binary label on their rows (index
  fields, derived labels, behaviour from a run's records, `--restrict`).
- `sweep_to_folder(captures, label, out, config)`: `probes.sweep.sweep` (and transfer matrices)
  -> OUT/sweep.json, sweep.md, sweep.png (and transfer-KIND.json / .md / .png).
- `directions_to_folder(captures, label, out, layers)`: unit directions with provenance ->
  OUT/<name>.safetensors and directions.json (probes.directions: names, metadata), and with two or
  more directions in OUT their cosines
  (geometry.json / .md / .png).

`captures` is a `CaptureSet` or capture folders; `label` a `LabelSet` or a label name. Nothing is
printed: the results say what was written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from evprobe.core.bootstrap import DEFAULT_SEED
from evprobe.core.files import atomic_write_bytes
from evprobe.core.lock import folder_lock
from evprobe.probes.captures import CaptureSet, load_captures
from evprobe.probes.label_sets import LabelSet, labels, load_records, restrict_wrong
from evprobe.probes.registry import ProbeSpec, probe_names

if TYPE_CHECKING:  # the estimators behind them import scikit-learn: loaded when a sweep runs
    from evprobe.probes.directions import Direction
    from evprobe.probes.sweep import SweepConfig, SweepResult
    from evprobe.probes.transfer import TransferResult

_SAFE = re.compile(r"[^A-Za-z0-9._=+-]")
Captures = CaptureSet | Sequence[str | Path]


def labelled(
    captures: Captures,
    label: LabelSet | str | None = None,
    *,
    positive: Any = None,
    records: Sequence[str | Path] | None = None,
    requests: Sequence[str] | None = None,
    restrict: str | None = None,
    nonfinite: str = "refuse",
) -> tuple[CaptureSet, LabelSet]:
    """The captures (loaded from folders unless given) and the label on their rows.

    label: None reads `resolved` on the benchmark's captures and your capture's one label
    (probes.user_words; with several, one line lists them).
    records: run folders (records.jsonl) for behavioural labels and `restrict`, one for all
    captures or one per capture. restrict: confabulated | overcautious | not_reference, or
    confabulated_twin (each confabulated void with its own twin, 1:1; probes.label_sets).
    nonfinite: refuse | drop, what a capture row holding NaN or inf does (probes.captures)."""
    cs = captures if isinstance(captures, CaptureSet) else load_captures(captures, nonfinite=nonfinite)
    if isinstance(label, LabelSet):
        return cs, label
    if label is None:
        from evprobe.probes.user_words import default_label

        label = default_label(cs)
    runs = [load_records(r) for r in records] if records else None
    labelset = labels(cs, label, runs, positive, requests)
    if restrict:
        if runs is None:
            raise ValueError("--restrict needs the run's replies: add --records RUN")
        labelset = restrict_wrong(cs, labelset, runs, restrict)
    return cs, labelset


def default_sweep_out(acts: str | Path, labelset: LabelSet, probe: str) -> Path:
    """`evprobe sweep`'s folder when none is given: ACTS/probes/LABEL=POSITIVE.PROBE."""
    return Path(acts) / "probes" / _SAFE.sub("_", f"{labelset.title}.{probe}")


@dataclass(frozen=True)
class SweepRun:
    out: Path
    result: SweepResult
    transfers: dict[str, TransferResult] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)  # file names in `out`


def sweep_to_folder(
    captures: Captures,
    label: LabelSet | str,
    out: str | Path,
    config: SweepConfig | None = None,
    *,
    transfer: Sequence[str] = (),
    progress: str | None = None,
) -> SweepRun:
    """Sweep `label` at every (configured) layer and position and write sweep.json / .md / .png in
    `out`, and for each of `transfer`'s kinds its transfer-KIND.json / .md / .png.

    progress: the label of a progress line on stderr (None: none)."""
    from evprobe.probes.sweep import SweepConfig

    out = Path(out)
    with folder_lock(out, "evprobe sweep"):  # one writer per folder, taken before the captures are read
        return _sweep_locked(captures, label, out, config or SweepConfig(), transfer, progress)


def _sweep_locked(captures: Captures, label: LabelSet | str, out: Path, config: SweepConfig,
                  transfer: Sequence[str], progress: str | None) -> SweepRun:
    from evprobe.probes.report import sweep_markdown, sweep_png, transfer_markdown, transfer_png
    from evprobe.probes.sweep import stderr_progress, sweep
    from evprobe.probes.transfer import transfer as transfer_matrix

    cs, labelset = labelled(captures, label)
    result = sweep(cs, labelset, config, stderr_progress(progress) if progress else None)
    write_json(out / "sweep.json", result.to_json())
    atomic_write_bytes(out / "sweep.md", sweep_markdown(result).encode("utf-8"))
    sweep_png(result, out / "sweep.png")
    run = SweepRun(out, result, written=["sweep.json", "sweep.md", "sweep.png"])
    for kind in transfer:
        tr = transfer_matrix(cs, labelset, kind, config, stderr_progress(f"transfer {kind}") if progress else None)
        write_json(out / f"transfer-{kind}.json", tr.to_json())
        atomic_write_bytes(out / f"transfer-{kind}.md", transfer_markdown(tr).encode("utf-8"))
        transfer_png(tr, out / f"transfer-{kind}.png")
        run.transfers[kind] = tr
        run.written.extend([f"transfer-{kind}.json", f"transfer-{kind}.md", f"transfer-{kind}.png"])
    return run


@dataclass(frozen=True)
class DirectionsRun:
    out: Path
    directions: list[Direction]  # fitted now (the folder may hold others from earlier calls)
    written: list[str]  # file names in `out`


def directions_to_folder(
    captures: Captures,
    label: LabelSet | str,
    out: str | Path,
    layers: Sequence[int],
    *,
    position: str | None = None,
    probe: str | ProbeSpec | Sequence[str | ProbeSpec] = "massmean",
    by: str | None = None,
    seed: int = DEFAULT_SEED,
) -> DirectionsRun:
    """Fit one unit direction per layer (and per condition of `by`: system, initial, pairs,
    request, regime or an index field) at `position` (default: last if captured, else the first)
    with `probe` (a registered probe's name or ProbeSpec, several, or "all": every registered one
    at its defaults), add them to `out` and, when `out` then holds two or more directions of one
    d_model, write their cosine matrix."""
    if probe == "all":
        specs = [ProbeSpec.of(name) for name in probe_names()]
    else:
        specs = [ProbeSpec.of(p) for p in ((probe,) if isinstance(probe, str | ProbeSpec) else probe)]
    with folder_lock(out, "evprobe directions"):  # directions.json is read, extended and rewritten: one writer
        return _directions_locked(captures, label, Path(out), layers, position, specs, by, seed)


def _directions_locked(captures: Captures, label: LabelSet | str, out: Path, layers: Sequence[int],
                       position: str | None, specs: Sequence[ProbeSpec], by: str | None, seed: int) -> DirectionsRun:
    from evprobe.probes.directions import direction_file, fit_directions, read_directions, write_directions
    from evprobe.probes.geometry import cosine_matrix, geometry_markdown, heatmap_png
    from evprobe.probes.transfer import conditions

    cs, labelset = labelled(captures, label)
    position = position or ("last" if "last" in cs.positions else cs.positions[0])
    conds = None
    if by:
        conds = [(f"{by}={c.name}", c.mask) for c in conditions(cs, labelset, by, seed)]
    found: list[Direction] = []
    for spec in specs:
        found += fit_directions(cs, labelset, list(layers), position, spec, conds)
    index = write_directions(out, found)
    written = [index.name] + [direction_file(d.name) for d in found]
    every = read_directions(out)
    if len(every) >= 2:
        by_dim: dict[int, list[str]] = {}
        for n in sorted(every):
            by_dim.setdefault(len(every[n].vector), []).append(n)
        names = max(by_dim.values(), key=len)  # only directions of one d_model are comparable
        matrix = cosine_matrix([every[n].vector for n in names])
        write_json(out / "geometry.json", {"names": names, "cosine": np.round(matrix, 6).tolist()})
        atomic_write_bytes(out / "geometry.md", geometry_markdown(names, matrix).encode("utf-8"))
        heatmap_png(out / "geometry.png", names, matrix, f"Cosine similarity between {len(names)} directions")
        written += ["geometry.json", "geometry.md", "geometry.png"]
    return DirectionsRun(out, found, written)


def write_json(path: Path, obj: Any) -> None:
    """JSON with an indent of 2 and numpy scalars as numbers, written atomically."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, default=_json_default) + "\n").encode("utf-8"))


def _json_default(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")
