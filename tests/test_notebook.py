"""The notebooks run end to end on tiny models, so they never rot, and show their figures inline."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def execute(name: str, tmp_path: Path, first_cell: str | None = None) -> nbformat.NotebookNode:
    """Run a notebook; `first_cell` replaces its first code cell (the one a reader edits for their model)."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    if first_cell is not None:
        next(cell for cell in nb.cells if cell.cell_type == "code").source = first_cell
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs if o.output_type == "error"]
    assert not errors
    return nb


def text_of(nb: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs)


def figures_of(nb: nbformat.NotebookNode) -> int:
    """Figures shown inline (an image/png display), not saved to files."""
    return sum("image/png" in o.get("data", {}) for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs)


def test_probing_notebook_executes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVPROBE_ACTS", raising=False)
    nb = execute("probing.ipynb", tmp_path)
    outputs = text_of(nb)
    assert "labelled rows" in outputs and "AUROC" in outputs and "unit directions" in outputs
    assert figures_of(nb) >= 1


# The first cell as a reader changes it: the tiny LLaVA as written, a text-only base LM, the LLaVA in nnsight.
BASE_LM = """import numpy as np
from PIL import Image, ImageDraw
from transformers import AutoModelForCausalLM, AutoTokenizer

import evprobe

model, processor = AutoModelForCausalLM.from_pretrained({path!r}), AutoTokenizer.from_pretrained({path!r})
handle = evprobe.wrap(model, processor, model_id="my-model")
print(handle, f"- {{len(handle.layers)}} decoder layers")
"""
NNSIGHT = """import numpy as np
from nnsight import NNsight
from PIL import Image, ImageDraw

import evprobe

tiny = evprobe.tiny("llava")
handle = evprobe.wrap(NNsight(tiny.model), tiny.processor, model_id="my-model")
print(handle, f"- {len(handle.layers)} decoder layers")
"""


@pytest.mark.parametrize("model", ["llava", "gpt2", "nnsight-llava"])
def test_your_own_model_notebook_executes(model: str, tmp_path: Path) -> None:
    """Wrap, capture at chosen positions and components, write a capture, sweep, fit a direction,
    steer by hand and with the nulls: inline plots, on each kind of model the notebook names."""
    first = None
    if model == "gpt2":
        from evprobe.hooks.tiny_text import save_tiny_base_model

        first = BASE_LM.format(path=str(save_tiny_base_model(tmp_path / "gpt2", arch="gpt2")))
    elif model == "nnsight-llava":
        first = NNSIGHT
    nb = execute("your_own_model.ipynb", tmp_path, first)
    outputs = text_of(nb)
    d = 128 if model == "gpt2" else 64
    assert "Handle(model_id='my-model'" in outputs and f"resid_post (32, 4, 3, {d})" in outputs
    assert f"attn_out (32, 4, 3, {d})" in outputs and "nested estimate" in outputs and "alpha +1.0" in outputs
    assert "enough.massmean.L" in outputs and "fitted on 32 rows" in outputs
    assert figures_of(nb) == 3  # the sweep, the hand-made curves and the dose-response with its nulls
