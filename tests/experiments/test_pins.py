"""Resume pins every setting that changes outputs: run (a policy and a tiny model), capture, patching
and dose-response. For each, a first run, then reruns into the same folder that each change exactly
one pinned setting (dtype, seed, protocol, regime, the benchmark's image files swapped, the model's
files) are refused in one line naming that setting and both values; a rerun that changes only the
batch size or the progress display is accepted and computes nothing.

No mocks: real benchmark copies with two images' bytes swapped, tiny real models, a saved model
folder whose config is edited.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from evprobe.bench.manifest import read_items, resolve_image
from evprobe.bench.protocols import prompt_template_sha256
from evprobe.bench.runner import RunConfig, run, select_items
from evprobe.core.errors import InputError
from evprobe.experiments.capture import CaptureConfig, capture
from evprobe.experiments.config import load_model_config
from evprobe.experiments.dose_response.config import load_dose_response_config
from evprobe.experiments.dose_response import dose_response
from evprobe.experiments.patching.job import PatchingConfig, run_patching, select_pairs
from evprobe.hooks.fingerprint import model_fingerprint

MODEL = "tiny:llava"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def refused(setting: str, old: object = None, new: object = None):
    """pytest.raises for the runner's one-line refusal naming `setting` (and, if given, both values)."""
    if old is None and new is None:
        pattern = rf"was written with {setting}=(.+), this run has {setting}=(.+); use another --out"
    else:
        pattern = rf"was written with {setting}={re.escape(repr(old))}, this run has {setting}={re.escape(repr(new))};"
    return pytest.raises(InputError, match=pattern)


def swapped_images(bench: Path, dest: Path, items: list) -> tuple[Path, tuple[str, str]]:
    """A copy of `bench` in which the first two distinct images `items` use have each other's bytes."""
    shutil.copytree(bench, dest)
    a, b = list(dict.fromkeys(rel for it in items for rel in it.images))[:2]
    pa, pb = resolve_image(dest, a), resolve_image(dest, b)
    da, db = pa.read_bytes(), pb.read_bytes()
    assert da != db
    pa.write_bytes(db)
    pb.write_bytes(da)
    return dest, (a, b)


def check_images_refused(match_call) -> None:
    """The image refusal names images_sha256 and two different hashes."""
    with refused("images_sha256") as err:
        match_call()
    old, new = re.search(r"images_sha256='(\w+)', this run has images_sha256='(\w+)'", str(err.value)).groups()
    assert old != new


@pytest.fixture(scope="module")
def items(small_bench: Path) -> list:
    return read_items(small_bench)


# ---------------------------------------------------------------- run: a scripted policy


def test_run_policy_pins(small_bench: Path, items: list, tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = RunConfig(model="policy:random", bench=str(small_bench), out=str(out), requests=("select",), limit=6,
                     batch_size=3)
    first = run(base, progress=False)
    assert first.n_records == 6
    meta = json.loads((out / "run.json").read_text())
    assert meta["prompt_template_sha256"] == prompt_template_sha256("direct", "standard")
    assert len(meta["images_sha256"]) == 64 and meta["max_new_tokens"] == 16
    with refused("seed", 0, 1):
        run(replace(base, seed=1), progress=False)
    with refused("protocol", "direct", "brief"):
        run(replace(base, protocol="brief"), progress=False)
    with refused("regime", "standard", "guided"):
        run(replace(base, regime="guided"), progress=False)
    with refused("dtype", "auto", "float32"):
        run(replace(base, model=replace(base.model, dtype="float32")), progress=False)
    copy, _ = swapped_images(small_bench, tmp_path / "bench", items)
    check_images_refused(lambda: run(replace(base, bench=str(copy)), progress=False))
    before = (out / "records.jsonl").read_bytes()
    again = run(replace(base, batch_size=1), progress=True)  # batch size and progress change no record
    assert again.last_session.items == 0 and (out / "records.jsonl").read_bytes() == before


# ---------------------------------------------------------------- run: a tiny model


def test_run_tiny_model_pins(small_bench: Path, items: list, tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = RunConfig(model="tiny:qwen2_5_vl", bench=str(small_bench), out=str(out), requests=("select",), limit=2,
                     batch_size=2)
    run(base, progress=False)
    meta = json.loads((out / "run.json").read_text())
    assert (meta["tiny_arch"], meta["tiny_seed"]) == ("qwen2_5_vl", 0)
    # what only the loaded model tells, pinned once it was loaded
    assert meta["model_dtype"] == "float32" and meta["model_revision"] is None
    assert "chat_template_sha256" in meta
    with refused("dtype", "auto", "bfloat16"):
        run(replace(base, model=replace(base.model, dtype="bfloat16")), progress=False)
    with refused("regime", "standard", "json"):
        run(replace(base, regime="json"), progress=False)
    copy, _ = swapped_images(small_bench, tmp_path / "bench", items)
    check_images_refused(lambda: run(replace(base, bench=str(copy)), progress=False))
    before = (out / "records.jsonl").read_bytes()
    assert run(replace(base, batch_size=1), progress=True).last_session.items == 0
    assert (out / "records.jsonl").read_bytes() == before
    # A setting only the loaded model tells (here: the folder was written by a model loaded as bfloat16,
    # as dtype auto loads a checkpoint on a GPU) is checked once the model is loaded for missing rows.
    (out / "run.json").write_text(json.dumps({**meta, "model_dtype": "bfloat16"}))
    with refused("model_dtype", "bfloat16", "float32"):
        run(replace(base, limit=3), progress=False)
    assert (out / "records.jsonl").read_bytes() == before


def test_run_model_folder_pins_its_files(small_bench: Path, tmp_path: Path) -> None:
    """A local model folder: its config.json (and weights, and other files) are pinned by hash."""
    from evprobe import hooks

    folder = tmp_path / "model"
    handle = hooks.tiny("llava")
    handle.model.save_pretrained(folder)
    handle.processor.save_pretrained(folder)
    out = tmp_path / "run"
    base = RunConfig(model=str(folder), bench=str(small_bench), out=str(out), requests=("select",), limit=1)
    run(base, progress=False)
    meta = json.loads((out / "run.json").read_text())
    assert meta["model_config_sha256"] == model_fingerprint(str(folder))["model_config_sha256"]
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "evprobe_note": "edited"}, indent=2))
    with refused("model_config_sha256"):
        run(base, progress=False)


def test_model_fingerprint_sees_each_kind_of_model_file(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "x"}')
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (folder / "tokenizer_config.json").write_text('{"chat_template": "a"}')
    (folder / "README.md").write_text("not read by a load")
    first = model_fingerprint(str(folder))
    assert set(first) == {"model_config_sha256", "model_weights_sha256", "model_files_sha256"}
    (folder / "README.md").write_text("edited")
    assert model_fingerprint(str(folder)) == first
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[5000] ^= 1
    (folder / "model.safetensors").write_bytes(bytes(data))
    second = model_fingerprint(str(folder))
    assert second["model_weights_sha256"] != first["model_weights_sha256"]
    assert second["model_config_sha256"] == first["model_config_sha256"]
    (folder / "tokenizer_config.json").write_text('{"chat_template": "b"}')
    assert model_fingerprint(str(folder))["model_files_sha256"] != second["model_files_sha256"]
    assert model_fingerprint("tiny:llava") == {"tiny_arch": "llava", "tiny_seed": 0}
    assert model_fingerprint("someone/not-a-folder") == {}  # a hub id: its revision, once loaded


def test_prompt_template_hash_follows_protocol_and_regime() -> None:
    hashes = {(p, r): prompt_template_sha256(p, r) for p in ("direct", "brief") for r in ("standard", "guided", "json")}
    assert len(set(hashes.values())) == len(hashes) - 1  # json replaces the protocol's text: brief/json == direct/json
    assert hashes[("direct", "json")] == hashes[("brief", "json")]
    assert prompt_template_sha256("direct", "guided") == hashes[("direct", "guided")]


# ---------------------------------------------------------------- capture


@pytest.fixture(scope="module")
def captured(small_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[CaptureConfig, dict]:
    out = tmp_path_factory.mktemp("pins") / "acts"
    cfg = CaptureConfig(model=MODEL, bench=str(small_bench), out=str(out), requests=("select",), layers="1",
                        positions=("last",), limit=8, batch_size=4)
    return cfg, capture(cfg, progress=False)


def test_capture_pins(captured, small_bench: Path, items: list, tmp_path: Path) -> None:
    cfg, first = captured
    assert first.n_done == 8
    meta = json.loads((Path(cfg.out) / "meta.json").read_text())
    assert (meta["requested_dtype"], meta["dtype"], meta["tiny_arch"]) == ("auto", "float32", "llava")
    with refused("requested_dtype", "auto", "bfloat16"):
        capture(replace(cfg, model=replace(cfg.model, dtype="bfloat16")), progress=False)
    with refused("regime", "standard", "guided"):
        capture(replace(cfg, regime="guided"), progress=False)
    with refused("protocol", "direct", "brief"):
        capture(replace(cfg, protocol="brief"), progress=False)
    selected = select_items(items, ["select"], 8)
    copy, _ = swapped_images(small_bench, tmp_path / "bench", selected)
    check_images_refused(lambda: capture(replace(cfg, bench=str(copy)), progress=False))
    index = (Path(cfg.out) / "index.jsonl").read_bytes()
    again = capture(replace(cfg, batch_size=1), progress=True)
    assert again.computed == 0 and (Path(cfg.out) / "index.jsonl").read_bytes() == index


# ---------------------------------------------------------------- patching


def test_patching_pins(small_bench: Path, items: list, tmp_path: Path) -> None:
    out = tmp_path / "patch"
    base = PatchingConfig(model=MODEL, bench=str(small_bench), out=str(out), layers="1", positions=("last",),
                          limit_pairs=1, n_boot=50)
    assert run_patching(base, progress=False).n_rows == 2
    with refused("dtype", "auto", "bfloat16"):
        run_patching(replace(base, model=replace(base.model, dtype="bfloat16")), progress=False)
    with refused("regime", "standard", "guided"):
        run_patching(replace(base, regime="guided"), progress=False)
    with refused("protocol", "direct", "brief"):
        run_patching(replace(base, protocol="brief"), progress=False)
    pair = select_pairs(items, 1)[0]
    copy, _ = swapped_images(small_bench, tmp_path / "bench", list(pair))
    check_images_refused(lambda: run_patching(replace(base, bench=str(copy)), progress=False))
    before = (out / "results.jsonl").read_bytes()
    assert run_patching(base, progress=True).n_rows == 2  # progress changes no row
    assert (out / "results.jsonl").read_bytes() == before


# ---------------------------------------------------------------- dose-response


@pytest.fixture(scope="module")
def directions(captured, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A resolved mass-mean direction at layer 1, fitted on the capture's (one) family."""
    from evprobe.probes.captures import load_captures
    from evprobe.probes.label_sets import labels
    from evprobe.probes.directions import fit_directions, write_directions

    cfg, _ = captured
    cs = load_captures([cfg.out])
    out = tmp_path_factory.mktemp("pins") / "dirs"
    write_directions(out, fit_directions(cs, labels(cs, "resolved"), [1], "last", "massmean"))
    return out


def test_dose_response_pins(directions: Path, small_bench: Path, items: list, tmp_path: Path) -> None:
    out = tmp_path / "dose"
    base = load_dose_response_config("dose_response_tiny", {
        "bench": str(small_bench), "directions": str(directions), "out": str(out), "layers": [1],
        "n_random": 1, "n_relabel": 1, "ablation": False, "limit": 2, "batch_size": 2, "n_boot": 50})
    first = dose_response(base, progress=False)
    # base, probe -1 / +1, the random, relabelled and control sets -1 / +1
    assert first.n_rows == 2 * 9
    meta = json.loads((out / "meta.json").read_text())
    assert meta["model_dtype"] == "float32" and meta["tiny_arch"] == "llava"
    model = load_model_config("tiny_llava")
    with refused("dtype", "float32", "bfloat16"):
        dose_response(replace(base, model=replace(model, dtype="bfloat16")), progress=False)
    with refused("random_seed", 0, 1):
        dose_response(replace(base, random_seed=1), progress=False)
    with refused("n_relabel", 1, 2):
        dose_response(replace(base, n_relabel=2), progress=False)
    with refused("regime", "standard", "guided"):
        dose_response(replace(base, regime="guided"), progress=False)
    copy, _ = swapped_images(small_bench, tmp_path / "bench", items)
    check_images_refused(lambda: dose_response(replace(base, bench=str(copy)), progress=False))
    before = (out / "results.jsonl").read_bytes()
    again = dose_response(replace(base, batch_size=1), progress=True)
    assert again.computed == 0 and (out / "results.jsonl").read_bytes() == before
