"""Test-wide settings: nothing may wait on a network that is not there."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def main_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The full main set (144 families, 9,216 items, 864 images), generated once per session."""
    from evprobe.bench.generate import GenerateConfig, generate

    out = tmp_path_factory.mktemp("main") / "bench"
    generate(out, GenerateConfig(), progress=False)
    return out


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from 2 threads, and OpenMP spinning on a shared 2-core machine can
    slow them tenfold; modules that run models use this (restored after the module)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def small_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 6-family benchmark without variants (312 items), generated once per session; read-only."""
    from evprobe.bench.generate import GenerateConfig, generate

    out = tmp_path_factory.mktemp("small") / "bench"
    generate(out, GenerateConfig(families_per_system=2, subset_per_cell=0), progress=False)
    return out
