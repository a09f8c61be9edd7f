"""`evprobe capture --backend vllm` on a vision-language model (the tiny engine LLaVA) against the hf capture.

ONE subprocess in the vLLM environment (tests/experiments/capture_vlm_driver.py) writes the hf folder
there and the engine's folder (one engine start). This module writes the hf folder here too. The
benchmark's sheets are 672x672 and the tiny LLaVA's tower takes 56x56, so every image is resized:
the vLLM environment holds torchvision and transformers loads the torchvision LLaVA processor there
(for the handle and for vLLM alike), while here, without torchvision, it loads the PIL one, and the
two resize differently. So the engine's folder is compared within TOLERANCE with the hf folder of
its own environment, and its difference from this environment's hf folder is measured and stated
(the preprocessing, not the engine: the two hf folders differ by as much).

The tests at the end need no engine: the refusals before any engine starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from evprobe.core.errors import InputError

from tests.vllm_drivers import run_driver

DRIVER = Path(__file__).with_name("capture_vlm_driver.py")
TOLERANCE = 1e-4  # per vector, relative to its max |value| (tests/hooks/test_vllm_engine_vlm.py's)
# the first 9 items: a select row with one sheet, answer_after_test rows with two and three
FLAGS = {"requests": "select,answer_after_test", "limit": "9", "layers": "0,2,3", "batch-size": "4",
         "positions": "last,image_mean,text_mean,frame:0,frame:-1,token:-3,marker:Question:first"}


def _args(model: Path, bench: Path) -> list[str]:
    out = ["--model", str(model), "--bench", str(bench)]
    for k, v in FLAGS.items():
        out += [f"--{k}", v]
    return out


@pytest.fixture(scope="module")
def folders(vllm_python: Path, tiny_llava_engine_folder: Path, small_bench: Path,
            tmp_path_factory: pytest.TempPathFactory) -> dict:
    from evprobe.experiments.cli import main as cli

    folder = tmp_path_factory.mktemp("capture_vllm_vlm")
    assert cli(["capture", *_args(tiny_llava_engine_folder, small_bench), "--out", str(folder / "hf_here"),
                "--quiet"]) == 0
    result = run_driver(vllm_python, DRIVER, {"args": _args(tiny_llava_engine_folder, small_bench),
                                              "out": str(folder), "model": str(tiny_llava_engine_folder)},
                        folder, timeout=900)
    return {"folder": folder, "result": result}


def _compare(a_folder: Path, b_folder: Path) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Both folders' stored acts (float32) after checking the same rows, labels, layers and positions;
    (max |a - b|, worst per-vector |a - b| / max |b| beyond one float16 step of the stored value)."""
    import evprobe

    a, b = evprobe.load_capture(a_folder), evprobe.load_capture(b_folder)
    assert a.index == b.index and a.layers == b.layers and a.positions == b.positions
    x, y = np.asarray(a.acts, np.float32), np.asarray(b.acts, np.float32)
    ulp = np.spacing(np.abs(y).astype(np.float16)).astype(np.float32)  # float16's rounding of the stored value
    beyond = np.maximum(np.abs(x - y) - ulp, 0.0)
    return x, y, float(np.abs(x - y).max()), float((beyond.max(-1) / np.abs(y).max(-1)).max())


def test_the_engine_folder_is_the_hf_folder(folders: dict) -> None:
    """Same rows (1, 2 and 3 images), labels, layers, positions and token counts; values within TOLERANCE
    of the hf capture run with the same image processor; meta.json pins the engine and the processor."""
    folder, result = folders["folder"], folders["result"]
    assert result["hf_rc"] == result["vllm_rc"] == 0, result
    x, _, raw, rel = _compare(folder / "vllm", folder / "hf")
    assert rel <= TOLERANCE, (raw, rel)
    index = [json.loads(line) for line in (folder / "vllm" / "index.jsonl").read_text().splitlines()]
    assert sorted({row["n_image_tokens"] for row in index}) == [16, 32, 48]  # 16 feature tokens a sheet
    meta = json.loads((folder / "vllm" / "meta.json").read_text(encoding="utf-8"))
    assert meta["backend"] == "vllm" and meta["engine"]["version"] == "0.32.0" and meta["dtype"] == "float32"
    assert meta["image_processor"] == result["image_processor"] == "LlavaImageProcessor"
    print(f"engine vs hf folder (same environment, {result['image_processor']}): {x.shape} acts, max |diff| stored "
          f"{raw:.3g}, worst per-vector relative beyond float16's step {rel:.3g}; engine command "
          f"{result['vllm_s']:.0f} s (engine start included), hf command {result['hf_s']:.0f} s")


def test_the_difference_from_a_pil_processor_folder_is_the_preprocessing(folders: dict,
                                                                         tiny_llava_engine_folder: Path) -> None:
    """This environment's hf folder (PIL resize): the same rows and labels; the engine differs from it by
    what the hf folder of the vLLM environment differs from it, within TOLERANCE (the resize, measured)."""
    from evprobe.hooks.vllm_engine.capture import weightless_handle

    folder = folders["folder"]
    assert type(weightless_handle(str(tiny_llava_engine_folder)).processor.image_processor).__name__ == \
        "LlavaImageProcessorPil"
    _, _, raw, rel = _compare(folder / "vllm", folder / "hf_here")
    _, _, hf_raw, hf_rel = _compare(folder / "hf", folder / "hf_here")
    assert rel > TOLERANCE and abs(rel - hf_rel) <= TOLERANCE, (rel, hf_rel)  # the resize, as large for hf
    print(f"against this environment's hf folder (LlavaImageProcessorPil): engine max |diff| stored {raw:.3g}, "
          f"per-vector relative {rel:.3g}; the two hf folders (torchvision vs PIL resize) {hf_raw:.3g} ({hf_rel:.3g})")


# ---------------------------------------------------------------- refusals before any engine


def test_what_the_engine_capture_still_refuses(small_bench: Path, tiny_text_folder: Path, tmp_path: Path) -> None:
    """One line each, before any engine: a VLM class other than LLaVA, an item with images on a text-only
    model, clips read natively as video."""
    from evprobe.experiments.capture import CaptureConfig
    from evprobe.experiments.capture.job import CaptureJob
    from transformers import Qwen2VLConfig

    qwen = tmp_path / "qwen2_vl"
    config = Qwen2VLConfig()
    config.architectures = ["Qwen2VLForConditionalGeneration"]
    config.save_pretrained(qwen)  # its config is all the refusal reads
    base = {"bench": str(small_bench), "out": str(tmp_path / "x"), "requests": ("select",), "limit": 2,
            "backend": "vllm"}
    cases = [(str(qwen), ("is a vision-language model of class Qwen2VLForConditionalGeneration: the capture through "
                          "vLLM takes LlavaForConditionalGeneration only")),
             (str(tiny_text_folder), "has images and --model")]
    for model, line in cases:
        with pytest.raises(InputError) as err:
            CaptureJob(CaptureConfig(model=model, **base))
        assert line in str(err.value) and "\n" not in str(err.value), str(err.value)
    with pytest.raises(InputError, match="--video-input native is not read through vLLM") as err:
        CaptureConfig(model=str(tiny_text_folder), video_input="native", **base)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "x").exists()
    from evprobe.experiments.capture.engine import check_image_processor

    check_image_processor("LlavaImageProcessor", "LlavaImageProcessor")
    with pytest.raises(InputError, match="vLLM loaded the image processor LlavaImageProcessor, the handle "
                                         "LlavaImageProcessorPil: their resizes differ"):
        check_image_processor("LlavaImageProcessor", "LlavaImageProcessorPil")


def test_the_documented_command_is_the_one_tested() -> None:
    """docs/api/capture.md's VLM command is FLAGS above (its --model, --bench and --out placeholders aside)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "api" / "capture.md").read_text(encoding="utf-8")
    section = page.split("### Vision-language models through vLLM", 1)[1]
    args = section.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ").split()
    assert args[:9] == ["evprobe", "capture", "--backend", "vllm", "--model", "LLAVA_DIR", "--bench", "BENCH", "--out"]
    assert args[10:] == [x for k, v in FLAGS.items() for x in (f"--{k}", v)]
