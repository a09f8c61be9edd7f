"""evprobe.probe_layers: capture + the pipeline's probe sweep on one's own prompts in one call.
Known answer on the model organism (its planted layer profile): at the answer position nothing is
decodable at layer 0 (every row's state is the same there) and sufficiency is at layer 3."""

from __future__ import annotations

from pathlib import Path

import pytest

import evprobe
from evprobe.bench.manifest import load_item_images, read_items
from evprobe.bench.protocols import build_prompt
from evprobe.core.errors import InputError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_planted_profile_on_own_prompts(small_quickstart, tmp_path: Path) -> None:
    out, _ = small_quickstart
    items = [it for it in read_items(out / "bench") if it.request == "select" and it.variant is None]
    handle = evprobe.load("organism")
    result = evprobe.probe_layers(handle, [build_prompt(it, "direct", "standard") for it in items],
                                  [load_item_images(out / "bench", it.images) for it in items],
                                  labels=[bool(it.resolved) for it in items], families=[it.family_id for it in items],
                                  out=tmp_path / "mine", label="resolved",
                                  config=evprobe.SweepConfig(refits=0, n_boot=200, control_tasks=0, permutations=0))
    frame = result.frame.set_index("layer")
    assert frame.loc[3, "auroc"] >= 0.9 and frame.loc[3, "ci.lo"] > 0.7
    assert frame.loc[0, "auroc"] != frame.loc[0, "auroc"]  # NaN: layer 0's answer state is one vector for all
    assert result.figure.stat().st_size > 10_000 and (result.capture / "acts.npy").is_file()
    assert result.sweep.best.layer >= 2


def test_bad_labels_are_one_line(tmp_path: Path) -> None:
    handle = evprobe.tiny("llava")
    for kw, message in ((dict(labels=[True, True], families=["a", "b"]), "one class only"),
                        (dict(labels=[1, 0], families=["a", "b"]), "labels must be True / False"),
                        (dict(labels=[True, False], families=["a"]), "2 prompts but 1 families")):
        with pytest.raises(InputError, match=message):
            evprobe.probe_layers(handle, ["x", "y"], None, out=tmp_path / "x", **kw)
