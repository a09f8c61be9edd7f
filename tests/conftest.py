"""Test-wide settings: nothing may wait on a network that is not there."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def main_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The full main set (144 families, 9,216 items, 864 images), generated once per session."""
    from bench.generate import GenerateConfig, generate

    out = tmp_path_factory.mktemp("main") / "bench"
    generate(out, GenerateConfig(), progress=False)
    return out
