"""The notebooks run end to end on tiny models, so they never rot, and show their figures inline."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def execute(name: str, tmp_path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
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


def test_your_own_model_notebook_executes(tmp_path: Path) -> None:
    """Wrap, capture at chosen positions and components, write a capture, sweep, steer: inline plots."""
    nb = execute("your_own_model.ipynb", tmp_path)
    outputs = text_of(nb)
    assert "Handle(model_id='my-vlm'" in outputs and "resid_post (32, 4, 3, 64)" in outputs
    assert "attn_out (32, 4, 3, 64)" in outputs and "nested estimate" in outputs and "alpha +1.0" in outputs
    assert figures_of(nb) == 2
