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
    BLOCK_BINS,
    LOG_STEP,
    N_BINS,
    NUMBER_TYPES,
    bin_start,
    build_tokenizer,
    number_token,
    reading_tokens,
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


def test_a_reading_is_two_image_tokens_block_then_offset() -> None:
    assert reading_tokens("mass", 1.0) == ["<seen_mass:200>", "<fine_mass:0>"]  # bin 200 = 5 x 40 + 0
    assert reading_tokens("friction", 10 ** (0.39 + 0.4 * LOG_STEP)) == ["<seen_friction:200>", "<fine_friction:39>"]
    assert reading_tokens("g", 10 ** 0.4) == ["<seen_g:240>", "<fine_g:0>"]  # the next block
    assert reading_tokens("mass", 1e9) == [f"<seen_mass:{N_BINS - 1}>", "<fine_mass:0>"]  # bin 400, clamped
    assert reading_tokens("mass", 0.0) == ["<zero>"] and reading_tokens("mass", -1.0) == ["<unk>"]
    for x in np.logspace(-2, 2, 97):
        block, offset = reading_tokens("stiffness", float(x))
        k = int(number_token("seen_stiffness", float(x))[:-1].split(":")[1])
        assert int(block[:-1].split(":")[1]) + int(offset[:-1].split(":")[1]) == k
        assert int(block[:-1].split(":")[1]) % BLOCK_BINS == 0 and 0 <= int(offset[:-1].split(":")[1]) < BLOCK_BINS


def test_offset_tokens_embed_their_offset_and_block_tokens_their_value() -> None:
    """Training's number embedding: base + w * centre, the centre log10 of the bin's value for a block
    token and the offset in decades for an offset token (so block + offset is linear in log10)."""
    from evprobe.organism.model import ModelConfig, Organism

    numbers = Organism(ModelConfig(), seed=0).numbers
    ids = build_tokenizer().convert_tokens_to_ids(["<seen_mass:240>", "<fine_mass:7>", "<fine_mass:0>", "<mass:247>"])
    with torch.no_grad():
        e = numbers(torch.tensor([ids]))[0]
        kinds = list(numbers.KINDS)
        seen, fine, mass = kinds.index("seen_mass"), kinds.index("fine_mass"), kinds.index("mass")
        torch.testing.assert_close(e[0], numbers.base[seen] + numbers.w[seen] * (-2.0 + 240 * LOG_STEP))
        torch.testing.assert_close(e[1], numbers.base[fine] + numbers.w[fine] * (7 * LOG_STEP))
        torch.testing.assert_close(e[2], numbers.base[fine])
        torch.testing.assert_close(e[3], numbers.base[mass] + numbers.w[mass] * (-2.0 + 247 * LOG_STEP))


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


def _merge_readings(tokens: list[str]) -> list[str]:
    """A reading's two image tokens (<seen_p:block> <fine_p:offset>) as one <seen_p:bin> token."""
    out: list[str] = []
    for t in tokens:
        if t.startswith("<fine_"):
            kind, k = out[-1][1:-1].split(":")
            assert kind == "seen_" + t[6:].split(":")[0] and int(k) % BLOCK_BINS == 0, (out[-1], t)
            out[-1] = f"<{kind}:{int(k) + int(t[:-1].split(':')[1])}>"
        else:
            out.append(t)
    return out


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
        got_t, want_t = _merge_readings(facts.tokens()), _merge_readings(want.tokens())
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
    assert type(handle.model).__name__ == "LlamaForCausalLM" and handle.n_layers == 5
    got_enc = build_inputs(handle, [it.prompt for it in items], images)
    assert torch.equal(got_enc["input_ids"], enc["input_ids"])
    with torch.no_grad():
        got = handle.model(**got_enc).logits
    mask = enc["attention_mask"].bool()
    assert torch.allclose(got[mask], want[mask], atol=1e-5)


def test_training_loss_falls_and_a_killed_run_resumes_to_the_same_model(tmp_path: Path) -> None:
    from evprobe.organism.train import TrainConfig, read_train_state, train

    cfg = replace(TrainConfig(), steps=40, batch_size=16, eval_every=20, save_every=20, val_families=8, threads=1)
    logs: list[str] = []
    train(cfg, tmp_path / "whole", log=logs.append)
    rows = [json.loads(line) for line in (tmp_path / "whole" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [20, 40] and rows[1]["loss"] < rows[0]["loss"]
    assert (tmp_path / "whole" / "checkpoint" / "model.safetensors").is_file()

    assert train(cfg, tmp_path / "killed", log=logs.append, stop_after=20) == {"stopped_at": 20}
    train(cfg, tmp_path / "killed", log=logs.append)
    assert any("resuming at step 20" in line for line in logs)
    a = read_train_state(tmp_path / "whole").model
    b = read_train_state(tmp_path / "killed").model
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="different training config"):
        train(replace(cfg, lr=1e-3), tmp_path / "killed")


# A training config as small as the resume test's above: 40 steps of 16, saved at 20.
_SMALL_TRAIN = dict(steps=40, batch_size=16, eval_every=20, save_every=20, val_families=8, threads=1)


def _write_marker(path: str) -> None:  # what the planted pickle's payload does when unpickled
    Path(path).write_text("unpickled")


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (_write_marker, (self.marker,))


def test_a_planted_pickle_where_training_resumes_is_refused_never_unpickled(tmp_path: Path) -> None:
    import pickle

    from evprobe.core.errors import InputError
    from evprobe.experiments.cli import main
    from evprobe.organism.train import TrainConfig, train

    control = tmp_path / "control"  # the payload works: unpickling it writes its marker
    pickle.loads(pickle.dumps(_Payload(control)))
    assert control.read_text() == "unpickled"

    marker = tmp_path / "marker"
    out = tmp_path / "train"
    out.mkdir()
    torch.save({"model": _Payload(marker), "step": 20}, out / "train_state.pt")  # the old format's name
    cfg = replace(TrainConfig(), **_SMALL_TRAIN)
    with pytest.raises(InputError) as err:
        train(cfg, out, log=lambda _: None)
    text = str(err.value)
    assert "\n" not in text and "train_state.pt is not read" in text and "delete it" in text
    assert main(["organism", "train", "--out", str(out), "--steps", "40"]) == 2  # the command: exit 2, one line
    assert not marker.exists()
    assert sorted(p.name for p in out.iterdir()) == ["train_state.pt"]  # nothing trained, nothing written

    # The same pickle under the new state's names is not a state either: refused, not unpickled.
    (out / "train_state.pt").unlink()
    payload = pickle.dumps(_Payload(marker))
    (out / "train_state.json").write_bytes(payload)
    with pytest.raises(InputError, match="train_state.json: not valid JSON"):
        train(cfg, out, log=lambda _: None)
    (out / "train_state-00000020.safetensors").write_bytes(payload)
    (out / "train_state.json").write_text(json.dumps({
        "format": 1, "step": 20, "seconds": 1.0, "config": {}, "tensors": "train_state-00000020.safetensors",
        "tensors_sha256": __import__("hashlib").sha256(payload).hexdigest(), "optimizer": {}, "rng": {}}))
    with pytest.raises(InputError, match="not a safetensors file"):
        train(cfg, out, log=lambda _: None)
    assert not marker.exists()


def test_an_interrupted_training_resumes_from_safetensors_and_json_to_the_same_state(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from evprobe.organism.train import TrainConfig, read_train_state, train

    cfg = replace(TrainConfig(), **_SMALL_TRAIN)
    logs: list[str] = []
    train(cfg, tmp_path / "whole", log=logs.append)
    assert train(cfg, tmp_path / "killed", log=logs.append, stop_after=20) == {"stopped_at": 20}
    killed = tmp_path / "killed"
    assert sorted(p.name for p in killed.iterdir()) == [
        "train_log.jsonl", "train_state-00000020.safetensors", "train_state.json"]
    assert json.loads((killed / "train_state.json").read_text())["step"] == 20
    train(cfg, killed, log=logs.append)
    assert "resuming at step 20" in " ".join(logs)
    for folder in (tmp_path / "whole", killed):  # the finished state: step 40's files only, no pickles
        names = sorted(p.name for p in folder.iterdir())
        assert names == ["checkpoint", "train_log.jsonl", "train_state-00000040.safetensors", "train_state.json"]

    a, b = read_train_state(tmp_path / "whole"), read_train_state(killed)
    assert a.step == b.step == 40 and a.config == b.config and a.rng == b.rng
    assert a.model.keys() == b.model.keys() and len(a.model) > 10
    assert all(torch.equal(a.model[k], b.model[k]) for k in a.model)
    sa, sb = a.optimizer["state"], b.optimizer["state"]
    assert sa.keys() == sb.keys() and a.optimizer["param_groups"] == b.optimizer["param_groups"]
    assert all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in ("step", "exp_avg", "exp_avg_sq"))
    assert a.optimizer["param_groups"][0]["betas"] == (0.9, 0.98)
    ca = load_file(tmp_path / "whole" / "checkpoint" / "model.safetensors")
    cb = load_file(killed / "checkpoint" / "model.safetensors")
    assert ca.keys() == cb.keys() and all(torch.equal(ca[k], cb[k]) for k in ca)
    rows = [json.loads(line) for line in (killed / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [20, 40]


def test_organism_is_a_model_name_with_image_positions_and_no_text_markers(small_bench: Path) -> None:
    from evprobe import hooks
    from evprobe.hooks.loading import config_n_layers, named_models
    from evprobe.hooks.inputs import build_inputs
    from evprobe.hooks.spans import token_spans

    assert "organism" in named_models()
    assert config_n_layers("organism") == 5
    handle = hooks.load("organism")
    assert handle.model_id == "organism"
    assert not handle.keeps_prompt_text and hooks.load("tiny:llava").keeps_prompt_text
    it = next(i for i in read_items(small_bench) if i.request == "answer_after_test" and len(i.images) == 3)
    images = load_item_images(small_bench, it.images)
    enc = build_inputs(handle, [it.prompt], [images])
    spans = token_spans(handle, enc["input_ids"][0], enc["attention_mask"][0], it.prompt, n_images=3)
    toks = handle.tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist())
    first = "mass" if it.initial_property == "mass" else _other(it.system)
    # each sheet is a span of two image tokens: its reading's block, then the offset in the block
    assert [toks[i].split(":")[0] for i in spans.image] == [
        f"<seen_{first}", f"<fine_{first}", "<seen_mass", "<fine_mass", f"<seen_{_other(it.system)}",
        f"<fine_{_other(it.system)}"]
    assert list(spans.image) == list(range(spans.image[0], spans.image[0] + 6))
    # readouts end at the answer prefix (the position that predicts the letter); generation at the task word
    assert spans.last == len(toks) - 1 and toks[spans.last] == "ANSWER:" and toks[spans.last - 1] == "answer"
    assert handle.answer_prefix == "ANSWER:"
    gen_enc = build_inputs(handle, [it.prompt], [images], for_generation=True)
    assert handle.tokenizer.convert_ids_to_tokens(gen_enc["input_ids"][0].tolist())[-1] == "answer"
    with pytest.raises(ValueError, match="does not read the prompt's words"):
        token_spans(handle, enc["input_ids"][0], enc["attention_mask"][0], it.prompt, "Question", n_images=3)


def test_the_planted_location_is_in_the_committed_checkpoint(small_bench: Path) -> None:
    """Below layer k no position reads another: layer 0's attention weights are zero, so what it
    adds to the stream (attn_out) is exactly zero, and each state there depends on its own token
    only (a row's state at a position is the same whatever the other tokens)."""
    from evprobe import hooks
    from evprobe.hooks.capture import capture_layers
    from evprobe.organism.checkpoint import planted_location

    plant = planted_location()
    assert plant == {"n_layers": 5, "attention_free_layers": 1, "aux_layer": 3}
    handle = hooks.load("organism")
    for layer in handle.layers[: plant["attention_free_layers"]]:
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            assert not getattr(layer.self_attn, proj).weight.any()
    items = [it for it in read_items(small_bench) if it.request == "select"][:8]
    images = [load_item_images(small_bench, it.images) for it in items]
    got = capture_layers(handle, [it.prompt for it in items], images, layers=[0, 1], positions=["last"],
                         component="attn_out")  # (rows, 2 layers, 1, d)
    assert not got[:, 0].any() and got[:, 1].any()
    resid = capture_layers(handle, [it.prompt for it in items], images, layers=[0, 1], positions=["last"])
    same_family = [i for i, it in enumerate(items) if it.family_id == items[0].family_id]
    assert len(same_family) >= 2  # the four decisions of a family: one last token, one position
    assert np.array_equal(resid[same_family[0], 0], resid[same_family[1], 0])
    assert not np.array_equal(resid[same_family[0], 1], resid[same_family[1], 1])


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
    assert scores["min_cost_choice"]["value"] >= 0.95
    assert scores["both_correct_image_pairs"]["n"] == 288
    assert scores["both_correct_image_pairs"]["value"] >= 0.90
    assert scores["validity_select"]["value"] == 1.0


def test_the_eye_reads_each_sheet_file_once_and_again_when_it_changes(small_bench: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    import evprobe.organism.eye as eye
    from evprobe.bench.render import STYLES
    from evprobe.organism.reader import calibration

    calls = []
    original = eye.detect_sheet

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(eye, "detect_sheet", counted)
    monkeypatch.setattr(eye, "_READINGS", type(eye._READINGS)())
    items = read_items(small_bench)
    item = next(it for it in items if it.request == "select" and it.initial_property == "mass")
    other = next(it for it in items if it.request == "select" and it.family_id == item.family_id
                 and it.history != item.history)
    cal = calibration(item.prompt)["mass"]
    g = next(f for f in read_families(small_bench) if f.family_id == item.family_id).constants["g"]
    style = STYLES[item.style]
    # A private copy of the sheet's file (the shared bench is read-only), at the same relative path.
    bench = tmp_path / "bench"
    (bench / item.images[0]).parent.mkdir(parents=True)
    shutil.copy(small_bench / item.images[0], bench / item.images[0])
    first = eye.read_sheet(load_item_images(bench, item.images)[0], "mass", cal, g, style)
    again = eye.read_sheet(load_item_images(bench, item.images)[0], "mass", cal, g, style)
    assert first == again and len(calls) == 1  # the same file: read once
    plain = load_item_images(bench, item.images)[0].copy()
    plain.info.clear()
    assert eye.read_sheet(plain, "mass", cal, g, style) == first and len(calls) == 2  # no digest: read
    # The file rewritten at once with the pair partner's sheet: read again, its own value back.
    (bench / item.images[0]).write_bytes((small_bench / other.images[0]).read_bytes())
    swapped = eye.read_sheet(load_item_images(bench, item.images)[0], "mass", cal, g, style)
    assert len(calls) == 3 and swapped != pytest.approx(first, rel=1e-3)


def test_the_letter_is_generated_after_the_prefix_and_only_decode_step_steering_moves_it(small_bench: Path) -> None:
    """The organism replies `ANSWER: <letter>`: the letter is the top letter of the teacher-forced
    readout (the answer prefix), and steering at the planted layer's last position moves the generated
    letter exactly as it moves that readout when every decode step is steered; steering the prompt
    pass alone leaves the reply as it was (the letter's state is a generated token's)."""
    import re

    from evprobe import hooks
    from evprobe.hooks.capture import capture_layers
    from evprobe.hooks.steering import Steering, steer

    letters = ["A", "B", "C", "D", "E"]
    handle = hooks.load("organism")
    items = [it for it in read_items(small_bench) if it.request == "select"]
    prompts = [it.prompt for it in items]
    images = [load_item_images(small_bench, it.images) for it in items]

    def replies(**kw) -> list[str]:
        gens = hooks.generate(handle, prompts, images, max_new_tokens=4, batch_size=len(items), **kw)
        assert all(re.fullmatch(r"ANSWER: [A-E]", g.text.strip()) for g in gens), [g.text for g in gens][:4]
        return [g.text.strip()[-1] for g in gens]

    def top(logp: np.ndarray) -> list[str]:
        return [letters[i] for i in logp.argmax(1)]

    plain = replies()
    assert plain == top(hooks.next_token_logprobs(handle, prompts, images, letters))
    # a direction toward "not resolved" at the planted layer (class means of these items' states)
    acts = capture_layers(handle, prompts, images, layers=[3], positions=["last"])[:, 0, 0]  # (rows, d)
    resolved = np.array([bool(it.resolved) for it in items])
    direction = acts[~resolved].mean(0) - acts[resolved].mean(0)
    norm = float(np.linalg.norm(acts, axis=1).mean())
    every = Steering(direction, layer=3, alpha=1.0 * norm, positions="last")
    with steer(handle, every):
        steered_logp = hooks.next_token_logprobs(handle, prompts, images, letters)
        steered = replies()
    moved = sum(a != b for a, b in zip(steered, plain))
    assert moved >= len(items) // 4, (moved, len(items))
    assert steered == top(steered_logp)
    with steer(handle, replace(every, schedule="prompt-only")):
        assert replies() == plain


def test_rewriting_a_checkpoint_replaces_only_a_checkpoint_of_its_own_files(tmp_path: Path) -> None:
    """The broken input: the old folder was removed whole, a user's file in it with it."""
    from evprobe.core.errors import InputError
    from evprobe.organism.checkpoint import write_checkpoint
    from evprobe.organism.model import ModelConfig, Organism

    exported = Organism(ModelConfig(), seed=3).export()
    ck = tmp_path / "ck"
    write_checkpoint(exported, ck, {"note": "first"})
    write_checkpoint(exported, ck, {"note": "second"})  # a checkpoint over a checkpoint: replaced
    assert json.loads((ck / "organism.json").read_text())["note"] == "second"
    (ck / "my_notes.txt").write_text("mine")
    with pytest.raises(InputError, match=r"also my_notes.txt, which training did not write"):
        write_checkpoint(exported, ck, {"note": "third"})
    assert (ck / "my_notes.txt").read_text() == "mine"
    other = tmp_path / "thesis"
    other.mkdir()
    (other / "chapter.txt").write_text("mine")
    with pytest.raises(InputError, match="is not an organism checkpoint"):
        write_checkpoint(exported, other, {"note": "x"})
    assert (other / "chapter.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "thesis"]  # no temporary left


def test_reader_gives_the_training_facts_on_every_void_item(small_void_bench: Path) -> None:
    """Void items (bench.voids) read as training draws them (organism.data.void_example): an occluded
    sheet is `unread`, an unstated threshold leaves no q token, and the training label is the item's
    reference option; only a readable sheet's value may differ, by at most one bin."""
    from evprobe.organism.data import void_example

    fams = {f.family_id: f for f in read_families(small_void_bench)}
    voids = [it for it in read_items(small_void_bench) if it.void is not None]
    assert len(voids) == 36 and {(it.void, it.request) for it in voids} == {
        ("occluded", "select"), ("occluded", "answer_initial"), ("unstated", "answer_initial")}
    by_id = {it.item_id: it for it in read_items(small_void_bench)}
    for it in voids:
        f = fams[it.family_id]
        facts = read_facts(it.prompt, load_item_images(small_void_bench, it.images))
        word = "mass" if f.initial == "mass" else f.other
        twin = by_id[it.twin_id]
        value = None if it.void == "occluded" else f.value(f.initial, twin.history)
        order = [it.options[k] for k in sorted(it.options)]
        task = "select" if it.request == "select" else "answer"
        want, letter = void_example(f, it.void, task, twin.threshold, order, [(word, value)])
        assert letter == it.reference_option, it.item_id
        got_t, want_t = _merge_readings(facts.tokens()), _merge_readings(want.tokens())
        assert ("unread" in got_t) == (it.void == "occluded") and not any(t.startswith("<q:") for t in got_t) == (
            it.void == "unstated")
        assert len(got_t) == len(want_t)
        for a, b in zip(got_t, want_t):
            if a != b:
                assert a.startswith("<seen_") and a.split(":")[0] == b.split(":")[0], (a, b)


def test_void_examples_are_labelled_from_what_the_void_leaves() -> None:
    from evprobe.bench.reference import ACTIONS, ANSWERS
    from evprobe.organism.data import draw_family, void_example

    rng = np.random.default_rng(3)
    family = draw_family(rng, 0)
    word = "mass" if family.initial == "mass" else family.other
    outcomes = sorted(family.outcomes().values())
    answers, actions = list(ANSWERS), list(ACTIONS)
    # a threshold between the outcomes: nothing known settles nothing; the cheapest settling action
    q = family.thresholds["low"]
    facts, letter = void_example(family, "occluded", "answer", q, answers, [(word, None)])
    assert answers[LETTERS_INDEX[letter]] == "undetermined" and "unread" in facts.tokens()
    facts, letter = void_example(family, "occluded", "select", q, actions, [(word, None)])
    assert actions[LETTERS_INDEX[letter]] == "combined_report"
    # a threshold below every outcome settles the answer with no evidence at all: stop, "yes"
    low = outcomes[0] / 2
    _, letter = void_example(family, "occluded", "select", low, actions, [(word, None)])
    assert actions[LETTERS_INDEX[letter]] == "stop"
    # an unstated threshold is undetermined whatever is read, and writes no q token
    facts, letter = void_example(family, "unstated", "answer", low, answers, [(word, family.value(family.initial, 0))])
    assert answers[LETTERS_INDEX[letter]] == "undetermined" and not any(t.startswith("<q:") for t in facts.tokens())
    with pytest.raises(ValueError, match="no settling action"):
        void_example(family, "unstated", "select", q, actions, [(word, 1.0)])
    with pytest.raises(ValueError, match="must be None"):
        void_example(family, "occluded", "answer", q, answers, [(word, 1.0)])


LETTERS_INDEX = {letter: i for i, letter in enumerate("ABCDE")}
