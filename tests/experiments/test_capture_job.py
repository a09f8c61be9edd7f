"""The capture job on a small generated benchmark with a tiny model: files, resume, refusals.

No mocks: a real benchmark (6 families), a real tiny LLaVA, a real SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from evprobe import hooks
from evprobe.core.errors import InputError
from evprobe.bench.manifest import load_item_images, read_items, resolve_image
from evprobe.bench.protocols import build_prompt
from evprobe.bench.runner import select_items
from evprobe.experiments.capture.store import ACTS_FILE, INDEX_FILE
from evprobe.bench.model_config import ModelConfig
from evprobe.experiments.capture import (
    FLOAT16_MAX,
    INDEX_FIELDS,
    STORED,
    CaptureConfig,
    add_capture_parser,
    capture,
    question_marker,
)
from evprobe.experiments.capture.job import _to_float16
from evprobe.hooks.capture import capture_layers
from evprobe.hooks.spans import batch_spans

ROOT = Path(__file__).resolve().parents[2]
MODEL = "tiny:llava"
POSITIONS = ("last", "image_mean", "text_mean")
FLOAT16_ULP = 2.0**-10  # relative spacing of float16 numbers: the only difference on disk


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def bench(small_bench: Path) -> Path:
    return small_bench  # shared, read-only (tests/conftest.py)


def config(bench: Path, out: Path, **changes) -> CaptureConfig:
    """A CaptureConfig; `changes` may hold the model's own keys too (answer_prefix=...), which go to its model."""
    model = {k: changes.pop(k) for k in list(changes) if k in ModelConfig.FLAGS}
    base = dict(model=MODEL, bench=str(bench), out=str(out), positions=POSITIONS, limit=16, batch_size=8)
    base.update(changes)
    base["model"] = ModelConfig.of(base["model"], **model)
    return CaptureConfig(**base)


@pytest.fixture(scope="module")
def first(bench: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted capture of 16 select / answer_initial items (two families)."""
    out = tmp_path_factory.mktemp("first") / "acts"
    summary = capture(config(bench, out), progress=False)
    assert summary.complete and summary.n_done == 16
    return out


@pytest.fixture(scope="module")
def handle():
    return hooks.load(MODEL)


def load_acts(out: Path) -> np.ndarray:
    return np.load(out / ACTS_FILE, mmap_mode="r")


def index_rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / INDEX_FILE).read_text().splitlines()]


def selection(bench: Path, cfg: CaptureConfig):
    items = select_items(read_items(bench), cfg.requests, cfg.limit)
    prompts = [build_prompt(it, cfg.protocol, cfg.regime) for it in items]
    images = []
    for it in items:
        row = []
        for rel in it.images:
            from PIL import Image

            with Image.open(resolve_image(bench, rel)) as im:
                row.append(im.convert("RGB"))
        images.append(row)
    return items, prompts, images


def test_files_hold_what_a_direct_capture_gives(bench: Path, first: Path, handle):
    acts = load_acts(first)
    assert acts.shape == (16, handle.n_layers, 3, handle.d_model) and acts.dtype == np.float16
    items, prompts, images = selection(bench, config(bench, first))
    direct = capture_layers(handle, prompts, images, layers=list(range(handle.n_layers)), positions=POSITIONS,
                            text_markers=[question_marker(it.prompt) for it in items], batch_size=8)
    np.testing.assert_allclose(np.asarray(acts, dtype=np.float32), direct, rtol=FLOAT16_ULP, atol=1e-7)
    meta = json.loads((first / "meta.json").read_text())
    assert meta["stored"] == STORED and "before the final norm" in meta["stored"]
    assert meta["layers"] == [0, 1, 2, 3] and meta["positions"] == list(POSITIONS)
    assert meta["shape"] == list(acts.shape) and meta["d_model"] == handle.d_model
    assert meta["items_sha256"] == json.loads((bench / "bench.json").read_text())["items_sha256"]
    assert meta["revision"] is None and meta["dtype"] == "float32" and meta["regime"] == "standard"
    assert set(meta["versions"]) >= {"torch", "transformers", "nnsight", "numpy"}
    assert len(meta["chat_template_sha256"]) == 64 and len(meta["images_sha256"]) == 64 and meta["n_images"] == 4
    assert set(meta["position_rules"]) == set(POSITIONS)


def test_index_rows_match_the_items(bench: Path, first: Path):
    items, _, _ = selection(bench, config(bench, first))
    rows = index_rows(first)
    assert [r["row"] for r in rows] == list(range(16))
    for row, it in zip(rows, items):
        assert row["item_id"] == it.item_id
        assert all(row[name] == getattr(it, name) for name in INDEX_FIELDS)
        assert row["text_span"] == "question" and row["n_image_tokens"] == 16 and row["n_clipped"] == 0
        assert 0 < row["n_text_tokens"] < row["n_tokens"]


def test_image_pair_members_share_every_text_token(bench: Path, first: Path, handle):
    """The construction makes an image pair's prompts byte-identical: outside the image span
    their token ids must be identical, and only the images differ."""
    items, prompts, images = selection(bench, config(bench, first))
    pairs: dict[str, list[int]] = {}
    for k, it in enumerate(items):
        pairs.setdefault(it.image_pair_id, []).append(k)
    assert len(pairs) == 8 and all(len(v) == 2 for v in pairs.values())
    for a, b in pairs.values():
        assert prompts[a] == prompts[b] and items[a].images != items[b].images
        enc = hooks.build_inputs(handle, [prompts[a], prompts[b]], [images[a], images[b]])
        sa, sb = batch_spans(handle, enc, [prompts[a], prompts[b]], [1, 1],
                             [question_marker(items[a].prompt), question_marker(items[b].prompt)])
        assert sa == sb
        keep = torch.ones(enc["input_ids"].shape[1], dtype=torch.bool)
        keep[list(sa.image)] = False
        assert torch.equal(enc["input_ids"][0, keep], enc["input_ids"][1, keep])
        assert not torch.equal(enc["pixel_values"][0], enc["pixel_values"][1])
    acts = load_acts(first)
    a, b = pairs[items[0].image_pair_id]
    assert np.abs(acts[a, :, 1].astype(np.float32) - acts[b, :, 1]).max() > 0  # image_mean sees the images


def test_resume_after_a_simulated_kill(first: Path, bench: Path, tmp_path: Path):
    """Index cut to 5 rows plus a torn line, rows 5.. overwritten with garbage: the rerun redoes
    exactly rows 5..15 and the file equals the uninterrupted one."""
    out = tmp_path / "acts"
    shutil.copytree(first, out)
    lines = (out / INDEX_FILE).read_text().splitlines(keepends=True)
    (out / INDEX_FILE).write_text("".join(lines[:5]) + lines[5][:40])
    acts = np.load(out / ACTS_FILE, mmap_mode="r+")
    acts[5:] = 7.0
    acts.flush()
    del acts
    summary = capture(config(bench, out), progress=False)
    assert summary.last_session.items == 11 and summary.complete
    assert [r["row"] for r in index_rows(out)] == list(range(16))
    got, ref = load_acts(out), load_acts(first)
    np.testing.assert_array_equal(got[:5], ref[:5])  # committed rows untouched
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(ref, np.float32), rtol=FLOAT16_ULP, atol=1e-7)
    again = capture(config(bench, out), progress=False)  # nothing left to do, no model load
    assert again.last_session.items == 0 and again.complete


def test_resume_after_a_real_sigkill(first: Path, bench: Path, tmp_path: Path):
    out = tmp_path / "acts"
    code = (
        "import torch; torch.set_num_threads(1)\n"
        "from evprobe.experiments.capture import CaptureConfig, capture\n"
        f"capture(CaptureConfig(model={MODEL!r}, bench={str(bench)!r}, out={str(out)!r}, positions={POSITIONS!r}, "
        "limit=16, batch_size=1), progress=False)\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env)
    index = out / INDEX_FILE
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if index.is_file() and index.read_bytes().count(b"\n") >= 2:
                break
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    killed_at = index.read_bytes().count(b"\n")
    assert proc.returncode == -signal.SIGKILL and 2 <= killed_at < 16
    summary = capture(config(bench, out, batch_size=1), progress=False)
    assert summary.complete and summary.last_session.items == 16 - killed_at
    np.testing.assert_allclose(np.asarray(load_acts(out), np.float32), np.asarray(load_acts(first), np.float32),
                               rtol=FLOAT16_ULP, atol=1e-7)


def test_mixed_image_counts_and_prompts_without_a_question(bench: Path, tmp_path: Path, handle):
    """answer_after_test rows carry 2 or 3 images (batched per count, rows kept in item order);
    read_ruler prompts have no 'Question:' line, so text_mean is the whole prompt."""
    for requests, limit, counts in ((("answer_after_test",), 12, {2, 3}), (("read_ruler",), 3, {1})):
        cfg = config(bench, tmp_path / requests[0], requests=requests, limit=limit, batch_size=4)
        capture(cfg, progress=False)
        items, prompts, images = selection(bench, cfg)
        assert {len(it.images) for it in items} == counts
        markers = [question_marker(it.prompt) for it in items]
        assert (requests == ("read_ruler",)) == all(m is None for m in markers)
        direct = np.concatenate([
            capture_layers(handle, [p], [i], layers=[0, 1, 2, 3], positions=POSITIONS, text_markers=[m])
            for p, i, m in zip(prompts, images, markers)
        ])
        np.testing.assert_allclose(np.asarray(load_acts(Path(cfg.out)), np.float32), direct, rtol=FLOAT16_ULP,
                                   atol=1e-6)
        rows = index_rows(Path(cfg.out))
        assert sorted(r["row"] for r in rows) == list(range(limit))
        assert [r["item_id"] for r in sorted(rows, key=lambda r: r["row"])] == [it.item_id for it in items]
        assert {r["text_span"] for r in rows} == {"prompt" if markers[0] is None else "question"}


@pytest.mark.parametrize(
    ("change", "setting"),
    [
        (dict(positions=("last",)), "positions"),
        (dict(layers="0,1"), "layers"),
        (dict(regime="guided"), "regime"),
        (dict(limit=8), "selection_sha256"),
        (dict(requests=("select",)), "selection_sha256"),
        (dict(model="tiny:gemma3"), "model"),
        (dict(component="mlp_out"), "component"),
        (dict(answer_prefix="ANSWER:"), "answer_prefix"),
    ],
)
def test_a_rerun_with_other_settings_is_refused(bench: Path, first: Path, change: dict, setting: str):
    with pytest.raises(InputError, match=rf"was written with {setting}=.*use another --out"):
        capture(config(bench, first, **change), progress=False)


def test_bad_input_fails_before_anything_is_written(bench: Path, tmp_path: Path):
    out = tmp_path / "never"
    with pytest.raises(ValueError, match=r"--layers: layer 9 is out of range: this model has layers 0\.\.3"):
        capture(config(bench, out, layers="0,9"), progress=False)
    with pytest.raises(ValueError, match="--positions: unknown position 'middle'"):
        capture(config(bench, out, positions=("last", "middle")), progress=False)
    with pytest.raises(ValueError, match="--positions: position 'token:x': token:I needs an integer index"):
        capture(config(bench, out, positions=("token:x",)), progress=False)
    with pytest.raises(ValueError, match="--positions: positions .* repeat one"):
        capture(config(bench, out, positions=("last", "token:-1", "token:-1")), progress=False)
    with pytest.raises(InputError, match="--component: unknown component 'attn'"):
        capture(config(bench, out, component="attn"), progress=False)
    with pytest.raises(ValueError, match="--layers must be 'all' or comma-separated integers"):
        capture(config(bench, out, layers="0-3"), progress=False)
    with pytest.raises(InputError, match=r"both_given\) has no image.*drop image_mean"):
        capture(config(bench, out, requests=("both_given",)), progress=False)
    with pytest.raises(InputError, match=r"both_given\) has no image, so it has no frame:1; drop frame:1 from"):
        capture(config(bench, out, requests=("both_given",), positions=("last", "frame:1")), progress=False)
    with pytest.raises(InputError, match="unknown request type 'selekt'"):
        capture(config(bench, out, requests=("selekt",)), progress=False)
    assert not out.exists()


def test_command_line(bench: Path, first: Path, tmp_path: Path, capsys):
    parser = argparse.ArgumentParser(prog="evprobe")
    add_capture_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "cli"
    args = parser.parse_args(["capture", "--model", MODEL, "--bench", str(bench), "--out", str(out),
                              "--layers", "3,1", "--positions", "text_mean,last", "--limit", "4", "--quiet"])
    assert args.run(args) == 0
    assert f"4/4 rows in {out / ACTS_FILE}" in capsys.readouterr().out
    meta = json.loads((out / "meta.json").read_text())
    assert meta["layers"] == [3, 1] and meta["positions"] == ["text_mean", "last"]
    assert meta["requests"] == ["select", "answer_initial"]
    ref = np.asarray(load_acts(first), np.float32)[:4][:, [3, 1]][:, :, [2, 0]]
    np.testing.assert_allclose(np.asarray(load_acts(out), np.float32), ref, rtol=FLOAT16_ULP, atol=1e-7)
    # Every CaptureConfig field has its flag (e.g. Pixtral's eager attention, seed 000 appendix I).
    eager = tmp_path / "eager"
    args = parser.parse_args(["capture", "--model", MODEL, "--bench", str(bench), "--out", str(eager), "--limit", "2",
                              "--attn-implementation", "eager", "--quiet"])
    assert args.run(args) == 0
    assert json.loads((eager / "meta.json").read_text())["config"]["model"]["attn_implementation"] == "eager"
    np.testing.assert_allclose(np.asarray(load_acts(eager), np.float32), np.asarray(load_acts(first), np.float32)[:2, :, :1],
                               rtol=1e-2, atol=1e-3)
    from evprobe.experiments import cli

    if cli.main(["capture", "--help"]) == 0:  # once the lead wires the subcommand in
        assert cli.main(["capture", "--model", MODEL, "--bench", str(bench), "--out", str(out), "--layers", "3,1",
                         "--positions", "text_mean,last", "--limit", "4", "--quiet"]) == 0
        assert "4/4 rows" in capsys.readouterr().out


def test_float16_storage_clips_and_counts_what_it_cannot_hold(bench: Path):
    items = select_items(read_items(bench), ("select",), 2)
    acts = np.zeros((2, 1, 1, 4), np.float32)
    acts[1, 0, 0, :2] = [1e5, -7e4]
    stored, clipped = _to_float16(acts, items)
    assert stored.dtype == np.float16 and clipped == [0, 2]
    assert stored[1, 0, 0, 0] == FLOAT16_MAX and stored[1, 0, 0, 1] == -FLOAT16_MAX
    acts[0, 0, 0, 3] = np.nan
    with pytest.raises(ValueError, match=f"item {items[0].item_id}: .*non-finite"):
        _to_float16(acts, items)


def test_question_marker():
    assert question_marker("Setup.\n\nQuestion: Will it slide more than 0.35 m?\n\nOptions:") == (
        "Will it slide more than 0.35 m?")
    assert question_marker("- Question: the impulse gives speed J / m.\nRead the ruler.") is None


def test_positions_and_components_of_ones_choosing(bench: Path, tmp_path: Path, handle):
    """`--positions token:I,marker:TEXT[:reduce]` and `--component`: token:-1 is the last token,
    the marker's last token is what the library reads there, and attn_out is not the residual."""
    from evprobe.hooks.positions import Marker

    positions = ("last", "token:-1", "marker:Question:last")
    resid = capture(config(bench, tmp_path / "resid", positions=positions, limit=4, requests=("select",)),
                    progress=False)
    attn = capture(config(bench, tmp_path / "attn", positions=positions, limit=4, requests=("select",),
                          component="attn_out"), progress=False)
    r = np.load(tmp_path / "resid" / ACTS_FILE)
    a = np.load(tmp_path / "attn" / ACTS_FILE)
    assert r.shape == a.shape == (4, 4, 3, handle.d_model)
    assert np.array_equal(r[:, :, 0], r[:, :, 1]) and np.array_equal(a[:, :, 0], a[:, :, 1])
    assert np.abs(r - a).max() > 1e-2
    items = select_items(read_items(bench), ["select"], 4)
    prompts = [build_prompt(it, "direct", "standard") for it in items]
    images = [load_item_images(bench, it.images) for it in items]
    direct = capture_layers(handle, prompts, images, layers=[0, 1, 2, 3], positions=[Marker("Question", "last")],
                            component="attn_out")
    assert np.allclose(a[:, :, 2], direct[:, :, 0], rtol=FLOAT16_ULP, atol=1e-3)
    meta = json.loads((tmp_path / "attn" / "meta.json").read_text())
    assert meta["positions"] == list(positions) and meta["component"] == "attn_out"
    assert meta["stored_component"] == "attn_out" and "not the residual stream" in meta["stored"]
    assert "'Question'" in meta["position_rules"]["marker:Question:last"]
    assert resid.meta["component"] is None and json.loads((tmp_path / "resid" / "meta.json").read_text())["stored"] == STORED


def test_an_answer_prefix_moves_the_last_position_only(bench: Path, tmp_path: Path, handle):
    """`--answer-prefix`: the last position becomes the prefix's (its state changes), the question
    marker's does not (a causal model: the prefix comes after it); pinned in meta.json."""
    positions = ("last", "marker:Question:last")
    plain = capture(config(bench, tmp_path / "plain", positions=positions, limit=4, requests=("select",)),
                    progress=False)
    prefixed = capture(config(bench, tmp_path / "prefixed", positions=positions, limit=4, requests=("select",),
                              answer_prefix="ANSWER:"), progress=False)
    assert plain.complete and prefixed.complete
    a, b = np.load(tmp_path / "plain" / ACTS_FILE), np.load(tmp_path / "prefixed" / ACTS_FILE)
    last_moved = np.abs(a[:, :, 0].astype(np.float32) - b[:, :, 0]).max()  # (the random tiny model's states are ~0.03)
    marker_moved = np.abs(a[:, :, 1].astype(np.float32) - b[:, :, 1]).max()
    assert last_moved > 1e-4 and marker_moved <= 1e-6 and last_moved > 100 * marker_moved
    assert json.loads((tmp_path / "prefixed" / "meta.json").read_text())["answer_prefix"] == "ANSWER:"
