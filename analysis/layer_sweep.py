"""A layer sweep on your own prompts in one call: capture every layer at your positions, write the
capture folder, and sweep probes for your label with the pipeline's sweep (probes.runs.sweep_to_folder:
family folds, refit intervals, control tasks, the leakage check, the nested choice of layer and
position), returning a tidy DataFrame and the same figure.

    result = probe_layers(handle, prompts, images, labels=enough, families=families, out="out/mine")
    result.frame          # one row per layer x position: auroc, ci, n, accuracy, chance_test (decodable),
                          # selectivity, factors (the label against your --cell-fields), ...
    result.sweep.best     # the nested estimate (layer and position chosen without test labels)
    result.figure         # out/mine/sweep/sweep.png
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evprobe.core.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from evprobe.probes.sweep import SweepResult


@dataclass(frozen=True)
class LayerSweepResult:
    """capture: the capture folder written (acts.npy, index.jsonl, meta.json); sweep: the
    probes.sweep.SweepResult; frame: its rows as a DataFrame (core.frames.to_dataframe); figure:
    sweep.png beside sweep.json and sweep.md."""

    capture: Path
    sweep: SweepResult
    frame: pd.DataFrame
    figure: Path

    def to_dataframe(self, table: str = "frame") -> pd.DataFrame:
        """The sweep's rows (a copy of `frame`)."""
        if table != "frame":
            raise InputError(f"table {table!r} is not one of the layer sweep's: frame")
        return self.frame.copy()


def probe_layers(
    handle: Any,
    prompts: Sequence[str],
    images: Sequence[Sequence[Any]] | None = None,
    *,
    labels: Sequence[bool],
    families: Sequence[str],
    out: str | Path,
    label: str = "label",
    layers: Sequence[int] | None = None,
    positions: Sequence[Any] = ("last",),
    extra: Sequence[Mapping[str, Any]] | None = None,
    config: Any = None,
    batch_size: int = 8,
    overwrite: bool = False,
) -> LayerSweepResult:
    """Capture `layers` (default: all) at `positions` and sweep a probe for `labels` (module docstring).

    labels: one bool per prompt; families: one id per prompt (the unit folds and resamples keep
    whole). out: a folder; the capture goes to out/acts and the sweep to out/sweep. extra: per
    prompt, more index fields (e.g. the cells a control task permutes within: SweepConfig.cell_fields; the
    sweep also decodes each of those fields beside the label, probes.factors). config: a
    probes.sweep.SweepConfig (default: its defaults; a row is called decodable only where its
    permutation test against chance rejects, probes.chance)."""
    from evprobe.core.frames import to_dataframe
    from evprobe.hooks.capture import capture_layers
    from evprobe.hooks.positions import position_label
    from evprobe.probes.capture_writer import write_capture
    from evprobe.probes.captures import load_captures
    from evprobe.probes.runs import sweep_to_folder

    from evprobe.analysis.inputs import identifiers, integer, prompt_lengths, texts

    prompts = texts("prompts", prompts, "Is the evidence enough?")
    batch_size = integer("batch_size", batch_size, 1, fix="prompts per forward, e.g. 8")
    n = len(prompts)
    for name, given in (("labels", labels), ("families", families), ("extra", extra)):
        if given is not None and len(given) != n:
            raise InputError(f"{n} prompts but {len(given)} {name}; give one per prompt")
    if any(not isinstance(x, bool) for x in labels):
        raise InputError(f"labels must be True / False, one per prompt; got {sorted({type(x).__name__ for x in labels})}")
    if len(set(labels)) < 2:
        raise InputError("labels hold one class only; a probe needs both")
    identifiers("families", list(families), "prompt", "give every prompt a family id (a string or number)")
    from evprobe.hooks.inputs import image_rows

    prompt_lengths(handle, prompts, list(image_rows(prompts, images)), batch_size, batch_size)
    chosen = list(range(handle.n_layers)) if layers is None else list(layers)
    acts = capture_layers(handle, prompts, images, layers=chosen, positions=list(positions), batch_size=batch_size)
    rows = [{"item_id": f"{i}", "family_id": str(f), label: bool(y), **(extra[i] if extra else {})}
            for i, (f, y) in enumerate(zip(families, labels, strict=True))]
    out = Path(out)
    names = [position_label(p) for p in positions]
    folder = write_capture(out / "acts", acts, rows, layers=chosen, positions=names, model=handle.model_id,
                           overwrite=overwrite)
    run = sweep_to_folder(load_captures([folder]), label, out / "sweep", config)
    return LayerSweepResult(capture=folder, sweep=run.result, frame=to_dataframe(run.result),
                            figure=out / "sweep" / "sweep.png")
