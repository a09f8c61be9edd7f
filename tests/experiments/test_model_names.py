"""A model name that is no model (a typo) is refused in one line with the closest names, before
any network (issue 28 item 4): `experiments.config.check_model_name`, on every command's path.

Each command is run with HF_HUB_OFFLINE unset and the network, the hub's downloads and the model
loader made to fail loudly (an exception `main` does not catch), so a refusal that came from a
lookup rather than from the check would fail the test, not pass it. A plausible hub id still
passes the check and reaches the loader (which fails offline, as before)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from evprobe.experiments.cli import main
from evprobe.experiments.config import (
    ConfigError,
    UnknownModelError,
    check_model_name,
    load_model_config,
    plausible_hub_id,
)

TYPO = "qwen2_5_vl_7"
HUB_ID = "nosuch-owner/nosuch-model"


class Reached(Exception):  # noqa: N818 - not an error of the code under test: what a guard saw
    """The network, a hub download or the model loader was called."""


def _commands(tmp_path: Path, model: str) -> dict[str, list[str]]:
    """Every command that takes a model, with the least else it needs (the model is checked first)."""
    bench, out = str(tmp_path / "bench"), str(tmp_path / "out")
    (tmp_path / "bench").mkdir(exist_ok=True)
    return {
        "run": ["run", "--model", model, "--bench", bench, "--out", out],
        "capture": ["capture", "--model", model, "--bench", bench, "--out", out],
        "patching": ["patching", "--config", "patching_tiny", "--model", model, "--out", out],
        "dose-response": ["dose-response", "--config", "dose_response_tiny", "--model", model, "--out", out],
        "layer-sweep": ["layer-sweep", "--config", "layer_sweep_tiny", "--model", model, "--out", out],
        "gating": ["gating", "--config", "gating_tiny", "--model", model, "--out", out],
        "quickstart": ["quickstart", "--model", model, "--out", out],
    }


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE unset, and any connection, hub download or model load raises Reached."""
    import huggingface_hub

    from evprobe import hooks

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def refuse(*args: object, **kwargs: object) -> None:
        raise Reached(f"called with {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    for name in ("snapshot_download", "hf_hub_download", "model_info"):
        monkeypatch.setattr(huggingface_hub, name, refuse)
    monkeypatch.setattr(hooks, "load", refuse)


@pytest.mark.parametrize("command", list(_commands(Path("."), TYPO)))
def test_a_typo_is_refused_in_one_line_with_the_closest_names_and_no_network(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_network: None, command: str) -> None:
    argv = _commands(tmp_path, TYPO)[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"unknown model {TYPO!r}: not a known name; did you mean qwen2_5_vl_7b," in err
    assert "hub id owner/name" in err  # what forms are accepted
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", list(_commands(Path("."), HUB_ID)))
def test_a_plausible_hub_id_passes_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = _commands(tmp_path, HUB_ID)[command]
    assert main(argv) == 2  # fails later, as before: the empty bench, or offline
    err = capsys.readouterr().err
    assert "unknown model" not in err and "did you mean" not in err


def test_a_plausible_hub_id_reaches_the_loader(small_bench: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str], no_network: None) -> None:
    argv = ["run", "--model", HUB_ID, "--bench", str(small_bench), "--out", str(tmp_path / "out"), "--limit", "1"]
    with pytest.raises(Reached):
        main(argv)


@pytest.mark.parametrize("model, message", [
    ("tiny:lava", "unknown tiny architecture 'lava'; did you mean llava?"),
    ("policy:refrence", "unknown policy 'refrence'; did you mean reference?"),
    ("qwen2_5_vl_7c.yaml", "model config file qwen2_5_vl_7c.yaml not found; did you mean qwen2_5_vl_7b"),
    ("Qwen/Qwen2.5 VL", "unknown model 'Qwen/Qwen2.5 VL': no such path, and not a hub id"),
])
def test_unknown_tiny_policy_and_config_names_name_the_closest(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               no_network: None, model: str, message: str) -> None:
    (tmp_path / "bench").mkdir()
    assert main(["run", "--model", model, "--bench", str(tmp_path / "bench"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_a_policy_is_a_model_of_run_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_network: None) -> None:
    (tmp_path / "bench").mkdir()
    argv = ["capture", "--model", "policy:reference", "--bench", str(tmp_path / "bench"), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "policy:reference is a scripted policy, which only `evprobe run` runs" in capsys.readouterr().err
    with pytest.raises(UnknownModelError):
        load_model_config("policy:reference")


@pytest.mark.parametrize("name, plausible", [
    ("Qwen/Qwen2.5-VL-7B-Instruct", True), ("mistral-community/pixtral-12b", True), ("a/b", True),
    ("HuggingFaceTB/SmolVLM2-2.2B-Instruct", True), ("owner_1/name.v2", True),
    ("qwen2_5_vl_7", False), ("a/b/c", False), ("/abs/path", False), ("owner/", False), ("-owner/name", False),
    ("owner/name-", False), ("owner/na me", False), ("owner/na--me", False), ("owner/na..me", False),
    ("owner/name.yaml", False), ("tiny:llava", False), ("o" * 97 + "/name", False),
])
def test_plausible_hub_ids_follow_the_hubs_rules(name: str, plausible: bool) -> None:
    assert plausible_hub_id(name) is plausible


def test_what_passes_the_check(tmp_path: Path, no_network: None) -> None:
    file = tmp_path / "weights.bin"
    file.write_bytes(b"")
    for model in ("qwen2_5_vl_7b", "tiny_llava.yaml", "tiny:llava", "organism", HUB_ID, str(tmp_path), str(file)):
        check_model_name(model)
    check_model_name("policy:random", policies=True)
    with pytest.raises(UnknownModelError) as err:
        check_model_name("policy:random")
    assert isinstance(err.value, ConfigError) and isinstance(err.value, ValueError)
    with pytest.raises(UnknownModelError, match="did you mean organism"):
        check_model_name("organsim")


def test_a_bare_hub_name_passes_only_when_in_the_local_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             no_network: None) -> None:
    """`gpt2` (a legacy id without an owner) is accepted when the local Hugging Face cache holds it,
    read from disk alone; uncached, the refusal says to write owner/name."""
    import huggingface_hub.constants

    from evprobe.core.errors import InputError

    cache = tmp_path / "hub"
    snapshot = cache / "models--gpt2" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (cache / "models--gpt2" / "refs").mkdir()
    (cache / "models--gpt2" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    check_model_name("gpt2")
    with pytest.raises(InputError, match="write owner/name, e.g. openai-community/gpt2"):
        check_model_name("distilgpt2")


def test_the_openai_backend_takes_whatever_name_its_server_serves(tmp_path: Path) -> None:
    """With --backend openai the model is a served name (`fault-model`, `gpt-4o`): no local check;
    the server's /models refuses a typo, with the names it serves (tests/bench/test_backend_openai.py)."""
    from evprobe.bench.runner import RunConfig
    from evprobe.experiments.cli import build_parser
    from evprobe.experiments.config import config_from_flags

    argv = ["run", "--model", "gpt-4o-mini", "--bench", "b", "--out", str(tmp_path)]
    served = config_from_flags(RunConfig, build_parser().parse_args([*argv, "--backend", "openai",
                                                                     "--base-url", "http://x/v1"]))
    assert served.model.model == served.source == "gpt-4o-mini"
    from evprobe.core.errors import InputError

    with pytest.raises(InputError, match="unknown model 'gpt-4o-mini'"):
        config_from_flags(RunConfig, build_parser().parse_args(argv))
