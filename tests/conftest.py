"""Test-wide settings: nothing may wait on a network that is not there."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Under pytest-xdist the workers share the cores: each worker's torch (and every process a test
# starts, which inherits the variable) gets its share of threads, not all of them. OpenMP threads
# of two workers spinning against each other on two cores slow tiny models several times over.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _share = len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _share)))

from pathlib import Path  # noqa: E402
from typing import NoReturn  # noqa: E402

import pytest  # noqa: E402

# Longest files first. With `--dist loadfile` a worker takes whole files in collection order, so a
# long file collected last (tests/test_readme.py runs the whole quickstart; it sorts after every
# folder) runs alone at the end while the other worker idles. These are the longest files of a
# `--durations` run, longest first; the rest keep their order. (xdist's own reordering, by number of
# tests per file, would undo this: pyproject's addopts turn it off with --no-loadscope-reorder.)
LONGEST_FIRST = (
    "tests/test_readme.py", "tests/experiments/test_known_answer_mutations.py",
    "tests/experiments/test_known_answer_mutations_rest.py", "tests/experiments/test_shard.py",
    "tests/bench/test_backend_openai.py", "tests/experiments/test_dose_response.py", "tests/experiments/test_gating.py",
    "tests/bench/test_vllm_steering.py", "tests/bench/test_backend_vllm.py", "tests/hooks/test_gpu_throughput_script.py",
)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order


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


@pytest.fixture(scope="session")
def small_void_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """small_bench's families with the void block (bench.voids: occluded, unstated), generated once per
    session; read-only."""
    from evprobe.bench.generate import GenerateConfig, generate

    out = tmp_path_factory.mktemp("small_voids") / "bench"
    generate(out, GenerateConfig(families_per_system=2, subset_per_cell=0, voids=("occluded", "unstated")),
             progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_text_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny text-only Llama (hooks.tiny_text) saved once per session; read-only. Every backend
    loads it: transformers in this process, vLLM, and the servers the backend tests start."""
    from evprobe.hooks.tiny_text import save_tiny_text_model

    return save_tiny_text_model(tmp_path_factory.mktemp("tiny_text") / "model")


@pytest.fixture(scope="session")
def tiny_llava_engine_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny LLaVA that vLLM loads (hooks.tiny_vllm: head_dim 64, hub key layout) saved once per session."""
    from evprobe.hooks.tiny_vllm import save_tiny_llava_for_engines

    return save_tiny_llava_for_engines(tmp_path_factory.mktemp("tiny_llava_engine") / "model")


def _env_python(variable: str, venv: str) -> Path | None:
    """The Python that `variable` names, else the repository's `venv`'s, or None when neither exists."""
    named = os.environ.get(variable)
    path = Path(named) if named else Path(__file__).resolve().parents[1] / venv / "bin" / "python"
    return path if path.is_file() else None


def _required(message: str) -> NoReturn:
    """Skip without an optional environment; fail under CI, which installs it."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The Python of the environment that holds vLLM and evprobe (`.ci/run` makes `.venv-vllm`;
    EVPROBE_VLLM_PYTHON names another): vLLM pins a transformers older than this environment's, so
    it lives in its own. Skips without one, and fails under CI, which installs it."""
    path = _env_python("EVPROBE_VLLM_PYTHON", ".venv-vllm")
    if path is None:
        _required("no vLLM environment (.venv-vllm or EVPROBE_VLLM_PYTHON); .ci/run installs it")
    return path


@pytest.fixture(scope="session")
def video_python() -> Path:
    """The Python of the environment with torchvision (`.ci/run` makes `.venv-video`; EVPROBE_VIDEO_PYTHON
    names another), where transformers' own video processors run: the index's torchvision is built for
    another torch than this environment's CPU build. Skips without one, and fails under CI."""
    path = _env_python("EVPROBE_VIDEO_PYTHON", ".venv-video")
    if path is None:
        _required("no video environment (.venv-video or EVPROBE_VIDEO_PYTHON); .ci/run installs it")
    return path
