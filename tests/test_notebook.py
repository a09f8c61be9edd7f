"""notebooks/probing.ipynb runs end to end on the tiny model, so it never rots."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "probing.ipynb"


def test_probing_notebook_executes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("EVPROBE_ACTS", raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs)
    assert "labelled rows" in outputs and "AUROC" in outputs and "unit directions" in outputs
    errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs if o.output_type == "error"]
    assert not errors
