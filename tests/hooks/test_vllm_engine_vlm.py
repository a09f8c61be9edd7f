"""A vision-language model through vLLM (hooks.vllm_engine.vision) against hf, on the tiny engine LLaVA.

vLLM runs in its own environment (`vllm_python`; a VLM there needs torchvision beside the CUDA build
of torch, docs/reference/model-side.md): ONE subprocess, tests/hooks/vllm_vlm_driver.py, starts one
engine and does everything below. This module builds the prompts with hf's processor (placeholders
expanded), resolves the positions with hooks.positions, and computes each readout with the hf model:
- the ids vLLM expands from the text prompt itself equal hf's expanded ids;
- residual-stream capture (layers 0, 2, 3) at last / all / image_mean / token / Frame / text_mean;
- vision_block.L0 and projector_out at image_mean (hf's capture_sites);
- per-request steering in ONE batch: edits at "image" (image_edit), "last", "all", indices, both
  schedules, a text-only request beside requests with one and two images; option log-probs and
  greedy generations vs hf's option_logprobs / steered_generate one request at a time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.vllm_drivers import run_driver

DRIVER = Path(__file__).with_name("vllm_vlm_driver.py")
TOLERANCE = 1e-4  # relative to each vector's max |value| (capture), absolute on log-probs (steering)
LETTERS = ("A", "B", "C", "D")
PROMPTS = ("Which colour is the picture? A) red B) blue C) green D) black",
           "Compare the two pictures. A) same B) different C) both D) none",
           "Is water wet? A) yes B) no C) sometimes D) never")
# per prompt; the last has no image. At the tower's input size (56x56) no resize runs: vLLM's environment
# loads the torchvision LlavaImageProcessor, hf here the PIL one, and their resizes of a 30x30 or 40x20
# image differ (pixel means by up to 8e-5, which moved vision_block.L0 by 8e-4 of its scale and option
# log-probs by 0.018): not the engine's arithmetic, so the comparison feeds both the same pixels
IMAGE_SIZES = ([(56, 56)], [(56, 56), (56, 56)], [])
LAYERS = [0, 2, 3]
CAPTURE_ROWS = [0, 1]
SITES = ["vision_block.L0", "projector_out"]
# per request: (prompt, [(direction, layer, alpha, positions, schedule), ...])
REQUESTS = [
    (0, []),
    (0, [(0, 1, 16.0, "image", "every-step")]),
    (1, [(1, 0, 32.0, "image", "prompt-only")]),
    (1, [(2, 2, 8.0, "last", "every-step")]),
    (0, [(0, 1, 8.0, "all", "every-step"), (1, 2, 16.0, "image", "every-step")]),
    (2, [(2, 1, 16.0, "all", "every-step")]),
    (1, [(0, 0, 32.0, (0, 5, -2), "prompt-only")]),  # early: reaches the last token through three layers
    (2, []),
]
MAX_NEW = 5


def _images(rng: np.random.Generator):
    from PIL import Image

    return [[Image.fromarray((rng.random((h, w, 3)) * 255).astype("uint8")) for w, h in row] for row in IMAGE_SIZES]


@pytest.fixture(scope="module")
def compared(vllm_python: Path, tiny_llava_engine_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    import torch
    from evprobe.hooks.capture import capture_layers
    from evprobe.hooks.direction_vectors import random_directions
    from evprobe.hooks.generation import candidate_token_ids
    from evprobe.hooks.inputs import build_inputs, render_prompts
    from evprobe.hooks.positions import Frame, Token, image_ids
    from evprobe.hooks.site_capture import capture_sites
    from evprobe.hooks.steering import Steering, option_logprobs, steered_generate
    from evprobe.hooks.vllm_engine.capture import resolve_prompts, weightless_handle
    from evprobe.hooks.vllm_engine.edits import EngineEdit
    from evprobe.hooks.vllm_engine.vision import image_edit

    from evprobe import hooks

    folder = tmp_path_factory.mktemp("vllm_vlm")
    handle = hooks.load(str(tiny_llava_engine_folder), dtype="float32")
    images = _images(np.random.default_rng(0))
    paths = []
    for r, row in enumerate(images):
        paths.append([str(folder / f"img{r}_{i}.png") for i in range(len(row))])
        for im, p in zip(row, paths[-1]):
            im.save(p)
    dirs = random_directions(handle.d_model, 3, seed=0)
    positions = ["last", "all", "image_mean", Token(2), Token(-3), Frame(-1), "text_mean"]
    cap_prompts, cap_images = [PROMPTS[r] for r in CAPTURE_ROWS], [images[r] for r in CAPTURE_ROWS]
    ids, groups, _, _ = resolve_prompts(weightless_handle(str(tiny_llava_engine_folder)), cap_prompts, positions,
                                        images=cap_images)
    ids_loaded, groups_loaded, _, _ = resolve_prompts(handle, cap_prompts, positions, images=cap_images)
    assert ids == ids_loaded and groups == groups_loaded  # the weightless handle places hf's positions
    capture_ids = [None] * len(PROMPTS)
    for r, row in zip(CAPTURE_ROWS, ids):
        capture_ids[r] = row

    def enc_ids(for_generation: bool) -> list[list[int]]:
        return [build_inputs(handle, [p], [im], position_ids=False, for_generation=for_generation)["input_ids"][0]
                .tolist() for p, im in zip(PROMPTS, images)]

    option_ids, gen_ids = enc_ids(False), enc_ids(True)
    image_tokens = image_ids(handle)

    def steerings(edits: list) -> list:
        return [Steering(dirs[d], layer, alpha, positions, schedule) for d, layer, alpha, positions, schedule in edits]

    def engine_edits(p: int, edits: list, ids: list[int]) -> list[dict]:
        out = []
        for s in steerings(edits):
            if s.positions == "image":
                out.append(image_edit(EngineEdit(s.layer, s.alpha * s.direction), ids, image_tokens).to_json())
            else:
                out.append(EngineEdit.from_steering(s).to_json())
        return out

    # the option and generation prompts differ by the answer prefix only (after the images): same image positions
    spec = {"model": str(tiny_llava_engine_folder), "images": paths, "capture_ids": capture_ids,
            "option_ids": option_ids, "gen_ids": gen_ids, "texts": render_prompts(handle, PROMPTS, images),
            "capture": {"rows": CAPTURE_ROWS, "layers": LAYERS, "labels": [g.label for g in groups],
                        "groups": [[list(x) for x in g.rows] for g in groups]},
            "sites": SITES, "letter_ids": candidate_token_ids(handle, LETTERS), "max_new_tokens": MAX_NEW,
            "requests": [{"row": p, "edits": engine_edits(p, e, option_ids[p])} for p, e in REQUESTS]}
    assert all(engine_edits(p, e, option_ids[p]) == engine_edits(p, e, gen_ids[p]) for p, e in REQUESTS)
    vllm = run_driver(vllm_python, DRIVER, spec, folder, timeout=600)

    hf = {"capture": capture_layers(handle, cap_prompts, cap_images, layers=LAYERS, positions=positions),
          "vision": capture_sites(handle, cap_prompts, cap_images, sites=SITES, positions=["image_mean"]),
          "option": [], "gen": [], "plain_option": [], "expanded": option_ids}
    letters = spec["letter_ids"]
    for p, edits in REQUESTS:  # one request at a time, unpadded
        s = steerings(edits) or None
        hf["option"].append(option_logprobs(handle, [PROMPTS[p]], [images[p]], LETTERS, s)[0])
        run = steered_generate(handle, [PROMPTS[p]], [images[p]], s, MAX_NEW)
        logp = torch.log_softmax(run.scores.float(), dim=-1)[0][..., letters].double().numpy()
        hf["gen"].append({"token_ids": run.token_ids[0].tolist(), "logprobs": logp})
        hf["plain_option"].append(option_logprobs(handle, [PROMPTS[p]], [images[p]], LETTERS)[0])
    hf["render_ids"] = [build_inputs(handle, [p], [im], position_ids=False, for_generation=True)["input_ids"][0].tolist()
                        for p, im in zip(PROMPTS, images)]
    return {"vllm": vllm, "hf": hf, "eos": handle.tokenizer.eos_token_id, "groups": groups}


def _relative(v: np.ndarray, h: np.ndarray) -> tuple[float, float]:
    """(max |v - h| over everything, worst per-vector |v - h| / max |h| of that vector)."""
    diff = np.abs(v - h)
    return float(diff.max()), float((diff.max(-1) / np.abs(h).max(-1)).max())


def test_vllm_expands_the_image_placeholders_as_hf(compared: dict) -> None:
    """Handed the text prompt and the images, vLLM's own expansion gives hf's ids (the capture and
    steering hand it hf's expanded ids, checked equal to what ran on every call)."""
    for r, ids in compared["vllm"]["text_ids"].items():
        hf_ids = compared["hf"]["render_ids"][int(r)]
        # the template writes <s> as text; vLLM's tokenizer adds no second BOS
        assert ids == hf_ids, (r, len(ids), len(hf_ids))
    assert sorted(compared["vllm"]["text_ids"]) == ["0", "1"]


def test_residual_capture_with_images_is_hfs(compared: dict) -> None:
    v, h = np.array(compared["vllm"]["capture"], dtype=np.float32), compared["hf"]["capture"]
    assert v.shape == h.shape == (len(CAPTURE_ROWS), len(LAYERS), 7, 128)
    raw, rel = _relative(v, h)
    assert rel <= TOLERANCE, (raw, rel)
    image_mean = [g.label for g in compared["groups"]].index("image_mean")
    assert [len(g) for g in compared["groups"][image_mean].rows] == [16, 32]  # one image, two images
    print(f"resid_post with images: max |vLLM - hf| {raw:.2g}, worst per-vector relative {rel:.2g}; "
          f"capture call {compared['vllm']['capture_s']:.2f} s, engine start {compared['vllm']['engine_start_s']:.0f} s")


def test_vision_sites_are_hfs(compared: dict) -> None:
    for site in SITES:
        v, h = np.array(compared["vllm"]["vision"][site], dtype=np.float32), compared["hf"]["vision"][site]
        assert v.shape == h.shape == (len(CAPTURE_ROWS), 1, {"vision_block.L0": 32, "projector_out": 128}[site])
        raw, rel = _relative(v, h)
        assert rel <= TOLERANCE, (site, raw, rel)
        again = np.array(compared["vllm"]["vision_again"][site], dtype=np.float32)
        assert np.array_equal(again, v)  # fresh identifiers: the tower ran again, not served from the cache
        print(f"{site} image_mean: max |vLLM - hf| {raw:.2g}, relative {rel:.2g}")


def test_batched_steering_with_images_is_hfs(compared: dict) -> None:
    v, h = np.array(compared["vllm"]["option"]), np.array(compared["hf"]["option"])
    assert v.shape == h.shape == (len(REQUESTS), len(LETTERS))
    worst = float(np.abs(v - h).max())
    assert worst <= TOLERANCE, worst
    moved = [float(np.abs(h[r] - compared["hf"]["plain_option"][r]).max()) for r in range(len(REQUESTS))]
    assert moved[0] == moved[-1] == 0.0 and min(m for (_, e), m in zip(REQUESTS, moved) if e) > 10 * TOLERANCE, moved
    gen_worst = 0.0
    for r, (g, hg) in enumerate(zip(compared["vllm"]["gen"], compared["hf"]["gen"])):
        n = next((i + 1 for i, t in enumerate(hg["token_ids"]) if t == compared["eos"]), MAX_NEW)
        assert g["token_ids"][:n] == hg["token_ids"][:n], (r, REQUESTS[r])
        assert compared["vllm"]["replies"][r] == hg["token_ids"][:n]
        gen_worst = max(gen_worst, float(np.abs(np.array(g["logprobs"][:n]) - hg["logprobs"][:n]).max()))
    assert gen_worst <= TOLERANCE, gen_worst
    print(f"option log-probs max |vLLM - hf| {worst:.2g} (edits move them {min(x for x in moved if x):.3g}-"
          f"{max(moved):.3g}); generation letter log-probs {gen_worst:.2g} over {MAX_NEW} steps")


def test_refusals_name_their_input(compared: dict) -> None:
    r = compared["vllm"]["refusals"]
    assert "builds 1 vision block(s)" in r["deep_block"] and "vision_block.L0..L0" in r["deep_block"], r
    assert "row 0: a vision site is read at image_mean" in r["no_images"], r
    given, ran = compared["vllm"]["expanded_twice"]
    assert ran > given and f"vLLM ran {ran} prompt tokens, not the {given} of hf's processor" in r["expanded_twice"]
    print(f"hf's expanded ids handed over as they are: {given} tokens ran as {ran}, refused")


def test_vision_site_steering_and_unresolved_image_positions_are_refused() -> None:
    """No engine needed: the refusals come before any request."""
    from evprobe.hooks.steering import Steering
    from evprobe.hooks.vllm_engine.edits import EngineEdit
    from evprobe.hooks.vllm_engine.vision import capture_vision, image_positions

    v = np.ones(32)
    for site in ("vision_block.L0", "projector_out"):
        with pytest.raises(ValueError, match="is not steered through vLLM: its encoder cache keys") as err:
            EngineEdit.from_steering(Steering.at(site, v if site != "projector_out" else np.ones(128), 4.0))
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="resolve them on its prompt ids first"):
        EngineEdit.from_steering(Steering(np.ones(128), 1, 4.0, "image"))
    with pytest.raises(ValueError, match="the request has no image tokens"):
        image_positions([1, 2, 3], frozenset({516}))
    with pytest.raises(ValueError, match="site resid_post.L1 is on the text stream"):
        capture_vision(None, [[1]], [[object()]], sites=["resid_post.L1"])
    with pytest.raises(ValueError, match="row 1: a vision site is read at image_mean"):
        capture_vision(None, [[1], [2]], [[object()], []], sites=["projector_out"])
