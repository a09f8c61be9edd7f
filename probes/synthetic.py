"""Synthetic capture folders with a known answer: for tests, the benchmark and worked examples.

`reference_rows` lays out select items with the benchmark's structure: per family four
decisions (history 0/1 x threshold level low/high), image pairs (same level) and threshold pairs
(same history), and sufficiency = history XOR level XOR a per-family flip (which history is
answerable at which threshold depends on the family's physics), so every (history, level) cell
is half resolved when pooled.

`write_capture` writes a capture folder through the public writer
(`probes.capture_writer.write_capture`) and can damage it for tests (a partial index, a torn last
line); `planted_acts` makes Gaussian activations with a planted unit direction
along which the classes of a label separate at chosen layers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from evprobe.core.json_types import JsonObject
from evprobe.probes.capture_writer import write_capture as write_public
from evprobe.probes.captures import INDEX_FILE, META_FILE

SYSTEMS = ("sliding", "bouncing", "spring")
OTHER = {"sliding": "friction", "bouncing": "restitution", "spring": "stiffness"}


def reference_rows(n_families: int = 24, seed: int = 0) -> list[JsonObject]:
    """Index rows of `4 * n_families` select items shaped like the benchmark's."""
    rng = np.random.default_rng(seed)
    rows = []
    for f in range(n_families):
        system = SYSTEMS[f % len(SYSTEMS)]
        fid = f"{system}-{f:03d}"
        initial = "mass" if (f // len(SYSTEMS)) % 2 == 0 else OTHER[system]
        flip = int(rng.integers(2))
        for h in (0, 1):
            for level in ("low", "high"):
                resolved = bool(h ^ (level == "high") ^ flip)
                missing = "test_other" if initial == "mass" else "test_mass"
                rows.append({
                    "item_id": f"{fid}.select.h{h}.{level}", "request": "select", "variant": None,
                    "family_id": fid, "system": system, "initial_property": initial,
                    "decision_id": f"{fid}.h{h}.{level}", "history": h, "threshold_level": level,
                    "test": None, "hidden_world": None,
                    "image_pair_id": f"{fid}.select.{level}", "threshold_pair_id": f"{fid}.select.h{h}",
                    "resolved": resolved, "reference_action": "stop" if resolved else missing,
                    "reference_answer": ("yes" if rng.integers(2) else "no") if resolved else "undetermined",
                })
    return rows


def planted_acts(
    y: np.ndarray,
    n_layers: int,
    n_positions: int,
    d_model: int,
    signal_layers: Iterable[int] = (),
    strength: float = 3.0,
    seed: int = 0,
    direction: np.ndarray | None = None,
    family_offsets: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(acts (n, layers, positions, d) float16, unit direction (d,)).

    Noise is N(0, 1) per coordinate; at every position of each signal layer, rows of class 1
    move by +strength/2 along the direction and class 0 by -strength/2. `family_offsets` (n, d),
    if given, is added everywhere (a per-family component that a probe could memorise).
    """
    rng = np.random.default_rng(seed)
    n = len(y)
    if direction is None:
        direction = rng.standard_normal(d_model)
    direction = direction / np.linalg.norm(direction)
    acts = rng.standard_normal((n, n_layers, n_positions, d_model)).astype(np.float32)
    if family_offsets is not None:
        acts += family_offsets[:, None, None, :]
    sign = (2.0 * np.asarray(y, dtype=np.float32) - 1.0) * strength / 2
    for layer in signal_layers:
        acts[:, layer] += sign[:, None, None] * direction[None, None, :]
    return acts.astype(np.float16), direction


def write_capture(
    path: str | Path,
    acts: np.ndarray,
    rows: Sequence[JsonObject],
    layers: Sequence[int] | None = None,
    positions: Sequence[str] | None = None,
    model: str = "synthetic",
    regime: str = "standard",
    indexed: Sequence[int] | None = None,
    torn_tail: str | None = None,
    as_benchmark: bool = False,
) -> Path:
    """Write a capture folder with the public writer (`probes.capture_writer.write_capture`; an
    existing folder is overwritten), plus two test-only damages: `indexed` lists the rows to commit
    in index.jsonl (default all: fewer makes a partial capture, in the order given); `torn_tail` is
    appended without a newline (a torn line). Positions default to the capture's names.
    `as_benchmark`: meta.json without `written_by`, as `evprobe capture` writes the benchmark's."""
    n_positions = acts.shape[2]
    positions = ["last", "image_mean", "text_mean"][:n_positions] if positions is None else list(positions)
    path = write_public(path, acts, rows, layers=layers, positions=positions, model=model, regime=regime,
                        overwrite=True)
    if indexed is not None or torn_tail is not None:
        index = path / INDEX_FILE
        lines = index.read_text().splitlines(keepends=True)  # line i is row i
        text = "".join(lines[i] for i in (range(len(rows)) if indexed is None else indexed))
        index.write_text(text + (torn_tail or ""))
    if as_benchmark:
        meta = json.loads((path / META_FILE).read_text())
        del meta["written_by"]
        (path / META_FILE).write_text(json.dumps(meta))
    return path


def write_records(path: str | Path, rows: Sequence[JsonObject], actions: Sequence[str | None]) -> Path:
    """A RUN folder whose select records chose `actions` (None: an invalid reply)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    lines = []
    for row, action in zip(rows, actions, strict=True):
        lines.append(json.dumps({"item_id": row["item_id"], "request": row["request"], "family_id": row["family_id"],
                                 "valid": action is not None, "action": action, "answer": None}))
    (path / "records.jsonl").write_text("\n".join(lines) + "\n")
    return path
