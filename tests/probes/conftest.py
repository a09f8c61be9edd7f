"""Synthetic capture folders shared by the probe tests (probes.synthetic: known answers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

N_FAMILIES = 72
SIGNAL_LAYER = 2


@pytest.fixture(scope="session")
def rows() -> list[dict]:
    return reference_rows(N_FAMILIES, seed=3)


@pytest.fixture(scope="session")
def planted(tmp_path_factory: pytest.TempPathFactory, rows: list[dict]) -> tuple[Path, np.ndarray]:
    """5 layers x 2 positions x 32 dims; `resolved` separates along one direction at layer 2."""
    y = np.array([r["resolved"] for r in rows], dtype=int)
    acts, direction = planted_acts(y, 5, 2, 32, signal_layers=[SIGNAL_LAYER], strength=4.0, seed=11)
    path = write_capture(tmp_path_factory.mktemp("planted") / "acts", acts, rows, layers=[0, 4, 8, 12, 16])
    return path, direction
