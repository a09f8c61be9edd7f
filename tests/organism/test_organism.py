"""The model organism: its vocabulary, eye, reader, export, training and the committed checkpoint."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from evprobe.bench.calibration import readings, sheet_spec, sheet_value
from evprobe.bench.manifest import load_item_images, read_families, read_items
from evprobe.organism.data import select_example
from evprobe.organism.eye import fit_value, predicted
from evprobe.organism.reader import read_facts
from evprobe.organism.vocab import (
    LOG_STEP,
    N_BINS,
    NUMBER_TYPES,
    bin_start,
    build_tokenizer,
    number_token,
    vocabulary,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_number_tokens_are_log_bins_of_their_type() -> None:
    assert number_token("q", 1.0) == "<q:200>"  # log10 1 = 0 sits at (0 - -2) / 0.01
    assert number_token("mass", 10 ** (0.5 + 0.4 * LOG_STEP)) == "<mass:250>"
    assert number_token("cost", 0.0) == "<zero>"
    assert number_token("q", 1e-9) == "<q:0>" and number_token("q", 1e9) == f"<q:{N_BINS - 1}>"  # clamped
    assert number_token("q", -1.0) == "<unk>"
    starts = [bin_start(t) for t in NUMBER_TYPES]
    assert starts == [starts[0] + i * N_BINS for i in range(len(NUMBER_TYPES))]
    tok = build_tokenizer()
    ids = tok("<bos> spring <mass:189> <B:stop> select", add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids and len(ids) == 5
    assert tok.decode([tok.convert_tokens_to_ids("C"), tok.eos_token_id], skip_special_tokens=True) == "C"
    assert len(set(vocabulary())) == len(vocabulary())


def test_eye_forward_models_match_the_renderer_and_invert_them(small_bench: Path) -> None:
    from evprobe.bench.sheets import ORIENTATION

    for f in read_families(small_bench):
        for sheet in ("mass_0", "mass_1", "other_0", "other_1", "free_fall"):
            spec = sheet_spec(f.system, f.candidates, f.calibration, sheet)
            value = sheet_value(sheet, f.other, f.candidates) or f.constants["g"]
            cal = f.calibration["free_fall" if sheet == "free_fall" else
                                "test_mass" if sheet.startswith("mass") else "test_other"]
            want = readings(f.system, f.calibration, sheet, sheet_value(sheet, f.other, f.candidates))
            got = predicted(spec.kind, np.array([value]), cal, f.constants["g"])[0]
            assert np.allclose(got, want, rtol=1e-5, atol=1e-6)
            assert fit_value(spec.kind, want, cal, f.constants["g"]) == pytest.approx(value, rel=2e-3)


def test_reader_gives_the_training_facts_on_every_benchmark_selection(small_bench: Path) -> None:
    """The front end reads the same facts from prompt + pixels as training builds from the family;
    only the sheet value may differ, by at most one bin (the eye's reading error)."""
    fams = {f.family_id: f for f in read_families(small_bench)}
    items = read_items(small_bench)
    selects = [it for it in items if it.request == "select" and it.variant is None]
    assert len(selects) == 24
    for it in selects:
        f = fams[it.family_id]
        facts = read_facts(it.prompt, load_item_images(small_bench, it.images))
        order = [it.options[k] for k in sorted(it.options)]
        want, letter = select_example(f, it.history, it.threshold, order, f.value(f.initial, it.history))
        assert letter == it.reference_option
        got_t, want_t = facts.tokens(), want.tokens()
        assert len(got_t) == len(want_t)
        for a, b in zip(got_t, want_t):
            if a != b:
                assert a.startswith("<seen_") and a.split(":")[0] == b.split(":")[0], (a, b)
                assert abs(int(a[:-1].split(":")[1]) - int(b[:-1].split(":")[1])) <= 1
        value = facts.seen[0][1]
        assert abs(math.log10(value / f.value(f.initial, it.history))) < 0.004
    # Every other request is read without error; the ruler probe states no system.
    for it in items:
        facts = read_facts(it.prompt, load_item_images(small_bench, it.images))
        assert (facts is None) == (it.request == "read_ruler")
        if facts is not None and it.request in ("answer_initial", "answer_after_test"):
            assert facts.task == "answer" and all(v is not None for _, v in facts.seen)
            assert [w for _, w, _ in facts.options] and {w for _, w, _ in facts.options} <= {"yes", "no", "undetermined"}


def test_exported_checkpoint_is_a_plain_llama_with_the_training_logits(tmp_path: Path, small_bench: Path) -> None:
    from evprobe import hooks
    from evprobe.hooks.inputs import build_inputs
    from evprobe.organism.checkpoint import write_checkpoint
    from evprobe.organism.model import ModelConfig, Organism
    from evprobe.organism.train import encode

    model = Organism(ModelConfig(), seed=3)
    with torch.no_grad():  # a trained-looking number map, so the comparison is not trivially small
        model.numbers.w.normal_(0.0, 0.5)
    items = [it for it in read_items(small_bench) if it.request == "select"][:6]
    images = [load_item_images(small_bench, it.images) for it in items]
    facts = [read_facts(it.prompt, im) for it, im in zip(items, images)]
    enc = encode([(f, None) for f in facts])
    with torch.no_grad():
        want = model(enc["input_ids"], enc["attention_mask"], enc["position_ids"])
    write_checkpoint(model.export(), tmp_path / "ck", {"note": "test"})
    handle = hooks.load(str(tmp_path / "ck"))
    assert type(handle.model).__name__ == "LlamaForCausalLM" and handle.n_layers == 4
    got_enc = build_inputs(handle, [it.prompt for it in items], images)
    assert torch.equal(got_enc["input_ids"], enc["input_ids"])
    with torch.no_grad():
        got = handle.model(**got_enc).logits
    mask = enc["attention_mask"].bool()
    assert torch.allclose(got[mask], want[mask], atol=1e-5)


def test_training_loss_falls_and_a_killed_run_resumes_to_the_same_model(tmp_path: Path) -> None:
    from evprobe.organism.train import TrainConfig, train

    cfg = replace(TrainConfig(), steps=40, batch_size=16, eval_every=20, save_every=20, val_families=8, threads=1)
    logs: list[str] = []
    train(cfg, tmp_path / "whole", log=logs.append)
    rows = [json.loads(line) for line in (tmp_path / "whole" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [20, 40] and rows[1]["loss"] < rows[0]["loss"]
    assert (tmp_path / "whole" / "checkpoint" / "model.safetensors").is_file()

    assert train(cfg, tmp_path / "killed", log=logs.append, stop_after=20) == {"stopped_at": 20}
    train(cfg, tmp_path / "killed", log=logs.append)
    assert any("resuming at step 20" in line for line in logs)
    a = torch.load(tmp_path / "whole" / "train_state.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "killed" / "train_state.pt", weights_only=False)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="different training config"):
        train(replace(cfg, lr=1e-3), tmp_path / "killed")


def test_organism_is_a_model_name_with_image_positions_and_no_text_markers(small_bench: Path) -> None:
    from evprobe import hooks
    from evprobe.hooks.loading import config_n_layers, named_models
    from evprobe.hooks.inputs import build_inputs
    from evprobe.hooks.spans import token_spans

    assert "organism" in named_models()
    assert config_n_layers("organism") == 4
    handle = hooks.load("organism")
    assert handle.model_id == "organism"
    assert not handle.keeps_prompt_text and hooks.load("tiny:llava").keeps_prompt_text
    it = next(i for i in read_items(small_bench) if i.request == "answer_after_test" and len(i.images) == 3)
    images = load_item_images(small_bench, it.images)
    enc = build_inputs(handle, [it.prompt], [images])
    spans = token_spans(handle, enc["input_ids"][0], enc["attention_mask"][0], it.prompt, n_images=3)
    toks = handle.tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist())
    first = "mass" if it.initial_property == "mass" else _other(it.system)
    assert [toks[i].split(":")[0] for i in spans.image] == [f"<seen_{first}", "<seen_mass", f"<seen_{_other(it.system)}"]
    assert spans.last == len(toks) - 1 and toks[spans.last] == "answer"
    with pytest.raises(ValueError, match="does not read the prompt's words"):
        token_spans(handle, enc["input_ids"][0], enc["attention_mask"][0], it.prompt, "Question", n_images=3)


def _other(system: str) -> str:
    return {"sliding": "friction", "bouncing": "restitution", "spring": "stiffness"}[system]


def test_committed_checkpoint_meets_the_behaviour_targets_on_the_main_set(main_bench: Path, tmp_path: Path) -> None:
    """The held-out main set (144 families, 576 decisions) through the ordinary runner and scorer."""
    from evprobe.bench.runner import RunConfig, run
    from evprobe.experiments.scoring_io import score_run

    run(RunConfig(model="organism", bench=str(main_bench), out=str(tmp_path / "run"), requests=("select",),
                  batch_size=64), progress=False)
    scores, _ = score_run(tmp_path / "run", main_bench, n_boot=200)
    assert scores["min_cost_choice"]["n"] == 576
    assert scores["min_cost_choice"]["value"] >= 0.90
    assert scores["both_correct_image_pairs"]["n"] == 288
    assert scores["both_correct_image_pairs"]["value"] >= 0.80
    assert scores["validity_select"]["value"] == 1.0
