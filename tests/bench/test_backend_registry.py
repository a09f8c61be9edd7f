"""Backends as a registry (bench.backends.registry): a toy backend registered by decorator (the one
docs/howto/add-backend.md shows) and one from an installed package's entry point, each run through
`evprobe run`; registrations, settings and names that do not fit, each refused in one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from evprobe.bench.backends import BackendOptions, backend_names, backend_spec, register_backend, unregister_backend
from evprobe.bench.backends import registry
from evprobe.bench.runner import RunConfig, RunJob
from evprobe.core.errors import InputError
from evprobe.core.flags import setting
from evprobe.experiments.cli import main
from tests.installed import install

PAGE = Path(__file__).parents[2] / "docs" / "howto" / "add-backend.md"
ROOT = Path(__file__).parents[2]
# run.json's config keys before backends were a registry (the backends' settings were RunConfig fields)
RECORDED_KEYS = {
    "model", "bench", "out", "protocol", "regime", "requests", "injection", "limit", "batch_size", "seed", "shard",
    "sort_by_length", "prefetch", "decode_cache", "vision_attention", "backend", "temperature", "top_p", "runs",
    "option_logprobs", "base_url", "served_model", "api_key_env", "concurrency", "request_timeout_s",
    "max_response_mb", "max_retries", "http_cache", "top_logprobs", "usd_per_mtok", "tensor_parallel",
    "pipeline_parallel", "gpu_memory_utilization", "max_model_len", "video_input",
    "max_new_tokens", "budget", "thinking_budget", "rubric"}  # bench.budgets (issue 55 item 1), --rubric


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(), re.S)


@pytest.fixture
def echo():
    """The how-to page's backend, registered as written (exec of its first code block)."""
    namespace: dict = {}
    exec(compile(_blocks("python")[0], str(PAGE), "exec"), namespace)  # noqa: S102 (the repository's own page)
    try:
        yield namespace
    finally:
        unregister_backend("echo")


def _run_argv(bench: Path, out: Path, *more: str) -> list[str]:
    return ["run", "--model", "echo-model", "--bench", str(bench), "--out", str(out), "--requests", "select",
            "--limit", "6", "--quiet", *more]


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def test_the_how_to_pages_backend_runs_through_evprobe_run(echo, small_bench: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "echo"
    assert main(_run_argv(small_bench, out, "--backend", "echo", "--letter", "B")) == 0
    rows = _records(out)
    assert len(rows) == 6 and {r["reply"] for r in rows} == {"B"} and all(r["choice"] == "B" for r in rows)
    meta = json.loads((out / "run.json").read_text())
    assert meta["backend"] == "echo" and meta["echo_letter"] == "B" and meta["model_source"] == "served"
    assert meta["config"]["letter"] == "B" and RECORDED_KEYS < set(meta["config"])
    assert meta["resources"]["calls"] >= 1 and meta["resources"]["generated_tokens"] == 6
    # the letter is pinned: another one into the same folder is refused in one line, a rerun resumes
    capsys.readouterr()
    assert main(_run_argv(small_bench, out, "--backend", "echo", "--letter", "C")) == 2
    err = capsys.readouterr().err.strip()
    assert "echo_letter='B', this run has echo_letter='C'" in err and "\n" not in err
    assert main(_run_argv(small_bench, out, "--backend", "echo", "--letter", "B")) == 0 and len(_records(out)) == 6
    # a merge rebuilds the run from run.json's flat config: the backend's own settings again
    assert RunJob.from_meta(meta, out).config.backend_options == echo["EchoOptions"]("B")


def test_the_how_to_pages_python_runs_as_written(echo, small_bench: Path, tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "bench").symlink_to(small_bench)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(_blocks("python")[1], str(PAGE), "exec"), namespace)  # noqa: S102
    assert namespace["summary"].n_records == namespace["summary"].n_selected > 0
    assert {r["reply"] for r in _records(tmp_path / "out" / "echo")} == {"B"}
    command = _blocks("bash")[0].split()
    assert command[:2] == ["evprobe", "run"] and "--backend" in command and "--letter" in command


@pytest.mark.parametrize(("argv", "words"), [
    (["--backend", "echo", "--letter", "BB"], "--letter must be one capital letter, got 'BB'"),
    (["--letter", "B"], "--letter is a setting of --backend echo; this run's backend is hf: drop it or use --backend echo"),
    (["--backend", "echo", "--base-url", "http://x/v1"], "--base-url is a setting of --backend openai; this run's "
                                                          "backend is echo"),
    (["--backend", "echo", "--decode-cache", "static"], "--decode-cache is a setting of --backend hf"),
])
def test_a_setting_that_does_not_fit_is_one_line_before_any_work(echo, argv, words, small_bench, tmp_path,
                                                                 capsys) -> None:
    out = tmp_path / "run"
    assert main(_run_argv(small_bench, out, *argv)) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err and not out.exists()


def test_the_python_api_refuses_the_same(echo, small_bench: Path, tmp_path: Path) -> None:
    base = dict(model="echo-model", bench=str(small_bench), out=str(tmp_path / "r"))
    with pytest.raises(InputError, match="^--letter is a setting of --backend echo; this run's backend is hf"):
        RunConfig.of(**base, letter="B")
    with pytest.raises(InputError, match="^--letter is a setting of --backend echo; this run's backend is openai"):
        RunConfig(**base, backend="openai", backend_options=echo["EchoOptions"]("B"))
    # another backend's options left at their defaults are no setting (dataclasses.replace(config, backend=...))
    assert RunConfig(**base, backend="echo", backend_options=echo["EchoOptions"]()).backend_options.letter == "A"
    from dataclasses import replace

    assert type(replace(RunConfig(**base), backend="echo").backend_options).__name__ == "EchoOptions"
    with pytest.raises(InputError, match="^unknown backend 'sglang'; choose from hf, vllm, openai, echo"):
        RunConfig(**base, backend="sglang")
    with pytest.raises(InputError, match="--letter must be one capital letter"):
        RunJob(RunConfig.of(**base, backend="echo", letter="b"))
    with pytest.raises(InputError, match="^a model in memory runs on the hf backend, not echo"):
        RunJob(RunConfig.of(**base, backend="echo"), handle=object())
    assert not (tmp_path / "r").exists()


def test_what_a_backend_does_not_do_is_refused_by_its_spec(echo, small_bench: Path, tmp_path: Path) -> None:
    """The checks that were `backend == ...` branches: a chat-only backend refuses raw prompts (its
    options' check), one without native video refuses --video-input native (its spec), before a record."""
    from evprobe.bench.model_config import ModelConfig
    from evprobe.bench.runner import run

    with pytest.raises(InputError, match="^--prompt-format raw needs a completion call; --backend openai sends chat"):
        RunJob(RunConfig.of(model=ModelConfig.of("m", prompt_format="raw"), bench=str(small_bench),
                            out=str(tmp_path / "raw"), backend="openai", base_url="http://127.0.0.1:1/v1"))
    out = tmp_path / "video"
    with pytest.raises(InputError, match="^--video-input native is built for the hf backend; use --video-input frames "
                                         "with --backend echo"):
        run(RunConfig.of(model="echo-model", bench=str(small_bench), out=str(out), backend="echo", limit=2,
                         video_input="native"), progress=False)
    assert not (out / "records.jsonl").exists()


def test_unknown_backends_list_the_registered_ones(capsys, small_bench, tmp_path) -> None:
    with pytest.raises(InputError, match=r"^unknown backend 'sglang'; choose from hf, vllm, openai \("):
        backend_spec("sglang")
    assert main(["run", "--model", "m", "--bench", str(small_bench), "--out", str(tmp_path / "r"), "--backend",
                 "sglang"]) == 2
    assert "invalid choice: 'sglang' (choose from 'hf', 'vllm', 'openai')" in capsys.readouterr().err


@dataclass(frozen=True)
class _Seed(BackendOptions):
    seed: int = setting(0, "a run flag already")


@dataclass(frozen=True)
class _Url(BackendOptions):
    base_url: str = setting("", "openai's flag already")


@dataclass(frozen=True)
class _NoDefault(BackendOptions):
    size: int = setting(help="no default")


class _Undecorated(BackendOptions):  # no @dataclass(frozen=True): its field would be no flag
    size: int = 1


def _opener(config, handle=None):  # noqa: ANN001, ANN202
    raise AssertionError("never opened")


@pytest.mark.parametrize(("name", "kwargs", "words"), [
    ("Echo2", {}, "use lowercase letters"),
    ("hf", {}, "backend 'hf' is already registered"),
    ("toy", {"options": _Seed}, "_Seed.seed would be --seed, already a setting of every run"),
    ("toy", {"options": _Url}, "_Url.base_url would be --base-url, already a setting of --backend openai"),
    ("toy", {"options": _NoDefault}, "_NoDefault.size has no default"),
    ("toy", {"options": _Undecorated}, "is not a frozen dataclass subclassing"),
    ("toy", {"options": dict}, "is not a frozen dataclass subclassing"),
    ("toy", {"model_keys": ("tensor_parallel",)}, "model_keys 'tensor_parallel' is no model flag"),
])
def test_wrong_registrations_are_refused(name, kwargs, words) -> None:
    with pytest.raises((ValueError, TypeError), match=re.escape(words)):
        register_backend(name, **kwargs)(_opener)
    assert name not in backend_names() if name != "hf" else backend_spec("hf").opener is not _opener


def test_what_is_no_backend_is_refused_in_one_line(small_bench: Path, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="backend 'toy': 42 is not callable"):
        register_backend("toy")(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="backend 'openai' is built in and cannot be unregistered"):
        unregister_backend("openai")
    with pytest.raises(InputError, match=r"^backend_options must be a HfOptions \(the settings of --backend hf\), got dict"):
        RunConfig(model="policy:random", bench="b", out="o", backend_options={"prefetch": 2})  # type: ignore[arg-type]


def _entry_point(tmp_path: Path, monkeypatch, name: str, value: str, source: str = "") -> None:
    install(tmp_path, monkeypatch, "badplugin", "evprobe.backends", {name: value}, {"badplugin.py": source})
    monkeypatch.setattr(registry, "_entry_points_read", False)


def test_an_entry_point_that_registers_nothing_is_one_line(tmp_path: Path, monkeypatch) -> None:
    _entry_point(tmp_path, monkeypatch, "quiet", "badplugin", "VALUE = 1\n")
    try:
        with pytest.raises(InputError, match=r"^backend 'quiet': badplugin registers no backend of that name; decorate"):
            backend_spec("quiet")
    finally:
        unregister_backend("quiet")
        sys.modules.pop("badplugin", None)


def test_an_entry_point_named_like_a_built_in_is_refused(tmp_path: Path, monkeypatch) -> None:
    _entry_point(tmp_path, monkeypatch, "openai", "badplugin")
    with pytest.raises(ValueError, match=r"^entry point openai = 'badplugin' \(group evprobe.backends\): backend "
                                         r"'openai' is already registered"):
        backend_names()
    assert "badplugin" not in sys.modules


def test_flags_reserved_after_a_backend_took_them_are_refused_naming_it(echo) -> None:
    """bench.runner reserves the run's settings on import; a backend registered before that with one
    of them is refused then, in one line."""
    with pytest.raises(ValueError, match=r"^backend 'echo': EchoOptions.letter would be --letter, already a test's"):
        registry.reserve_flags(["letter"], "a test's")
    assert "letter" not in registry._RESERVED


def test_every_built_in_backend_declares_its_settings_once() -> None:
    specs = registry.backend_specs()
    assert [s.name for s in specs] == ["hf", "vllm", "openai"]
    assert not {f.name for f in fields(RunConfig)} & {k for s in specs for k in s.settings}
    owned = [k for s in specs for k in s.settings]
    assert len(owned) == len(set(owned))  # one flag, one owner
    assert registry.backend_only()["openai"][0] == "base_url" and backend_spec("openai").served
    assert backend_spec("hf").takes_handle and backend_spec("hf").native_video
    # run.json's config has the keys it had when these were RunConfig fields, every built-in backend's
    assert set(registry.recorded_config(RunConfig(model="policy:random", bench="b", out="o"))) == RECORDED_KEYS


def test_the_registry_imports_no_backend_dependency() -> None:
    """Listing the names, a default RunConfig and `evprobe run --help` import no HTTP client and no vLLM."""
    code = ("import contextlib, io, sys\n"
            "from evprobe.bench.backends import backend_names\n"
            "from evprobe.bench.runner import RunConfig\n"
            "names = backend_names(); RunConfig(model='policy:random', bench='b', out='o')\n"
            "from evprobe.experiments.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: main(['run', '--help'])\n"
            "    except SystemExit: pass\n"
            "print(sorted(m for m in ('httpx', 'httpcore', 'vllm', 'torch') if m in sys.modules), names)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[] ('hf', 'vllm', 'openai')"


def test_a_backend_from_an_installed_package_entry_point(small_bench: Path, tmp_path: Path, monkeypatch,
                                                         capsys) -> None:
    """A real distribution on sys.path declaring an `evprobe.backends` entry point: listed without an
    import, its flag in `evprobe run`, its records written."""
    install(tmp_path, monkeypatch, "toyreplies", "evprobe.backends", {"toyreplies": "toyreplies"}, {"toyreplies.py": (
        "from dataclasses import dataclass\n"
        "from evprobe.bench.backends import BackendOptions, Reply, Resources, register_backend\n"
        "from evprobe.core.flags import setting\n\n"
        "@dataclass(frozen=True)\n"
        "class ToyOptions(BackendOptions):\n"
        "    toy_reply: str = setting('C', 'toyreplies backend: the reply')\n\n"
        "class Toy:\n"
        "    name, takes_images = 'toyreplies', True\n"
        "    def __init__(self, config, handle=None):\n"
        "        self.reply, self.resources = config.backend_options.toy_reply, Resources()\n"
        "    def __call__(self, prompts, prepared=None):\n"
        "        return [Reply(self.reply) for _ in prompts]\n"
        "    def pins(self):\n"
        "        return {}\n"
        "    def close(self):\n"
        "        pass\n\n"
        "register_backend('toyreplies', options=ToyOptions, help='a plugin', served=True)(Toy)\n")})
    monkeypatch.setattr(registry, "_entry_points_read", False)
    try:
        assert backend_names()[-1] == "toyreplies" and "toyreplies" not in sys.modules
        out = tmp_path / "run"
        argv = ["run", "--model", "toy", "--bench", str(small_bench), "--out", str(out), "--requests", "select",
                "--limit", "4", "--quiet", "--backend", "toyreplies"]
        assert main([*argv, "--toy-reply", "A"]) == 0
        assert [r["reply"] for r in _records(out)] == ["A"] * 4
        assert main([*argv[:-2], "--toy-reply", "A"]) == 2  # the plugin's flag refused for hf, in one line
        assert "--toy-reply is a setting of --backend toyreplies" in capsys.readouterr().err
    finally:
        unregister_backend("toyreplies")
        sys.modules.pop("toyreplies", None)
