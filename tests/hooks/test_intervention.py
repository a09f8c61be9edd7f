"""The intervention core (hooks.intervention): reads and edits at any site in one forward pass,
the prompt pass and every generated token, composable, always cleaned up. Real tiny models.

The core's capture equals nnsight's capture bit for bit on every architecture; edits compose in
the order given; a capture of an edited site returns the edited value; the hooks are gone after
an error; a forward stopped after the last read runs nothing later.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evprobe.hooks import TINY_ARCHS, build_inputs, generate
from evprobe.hooks.capture import reduce_at, position_plan, trace_sites
from tests.hooks.nnsight_twins import trace_sites_nnsight
from evprobe.hooks.intervention import Ablate, Add, Patch, Read, Replace, intervene
from evprobe.hooks.steering import Steering, steered_generate

from .conftest import tiny_handle
from .test_handle import picture

pytestmark = pytest.mark.usefixtures("one_torch_thread")
PROMPTS = ["Question: Is it red?\nAnswer yes or no.", "Describe the picture in one short sentence, please."]
IMAGES = [[picture(1, (96, 96))], [picture(2, (96, 96))]]


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_core_capture_equals_nnsight_capture(handles, arch) -> None:
    h = tiny_handle(handles, arch)
    enc = build_inputs(h, PROMPTS, IMAGES)
    comps = ["attn_out", "mlp_out", "resid_post"]
    core = trace_sites(h, enc, [0, 2, 3], comps, lambda out: out.detach().clone())
    ref = trace_sites_nnsight(h, enc, [0, 2, 3], comps, lambda out: out.detach().clone())
    assert core.keys() == ref.keys()
    for key in core:
        torch.testing.assert_close(core[key], ref[key], atol=0, rtol=0)


def test_steer_at_one_layer_and_read_it_and_later_layers_in_one_pass(handles) -> None:
    """What the two substrates could not do together: an edit at layer 1 and reads of layers 1-3 in
    the same forward, checked against plain forward hooks registered in that order."""
    h = tiny_handle(handles, "qwen2_5_vl")
    enc = build_inputs(h, PROMPTS, IMAGES)
    delta = np.random.default_rng(1).normal(size=h.d_model) * 5.0
    with torch.no_grad(), intervene(h, [Add("resid_post.L1", delta)] + [Read(f"resid_post.L{i}") for i in (1, 2, 3)]
                                    ) as run:
        h.model(**enc)
    seen = {}
    d = torch.tensor(delta, dtype=torch.float32)
    removers = [h.layers[1].register_forward_hook(lambda m, a, o: o + d)]
    removers += [h.layers[i].register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(i, o.clone())) for i in (1, 2, 3)]
    try:
        with torch.no_grad():
            h.model(**enc)
    finally:
        for r in removers:
            r.remove()
    for k, i in enumerate((1, 2, 3), start=1):
        torch.testing.assert_close(run.value(k), seen[i], atol=0, rtol=0)


def test_reads_cover_the_prompt_and_every_generated_token(handles) -> None:
    h = tiny_handle(handles, "llava")
    read = Read("resid_post.L2", positions="last", schedule="every-step")
    v = np.random.default_rng(2).normal(size=h.d_model)
    with intervene(h, [Add("resid_post.L2", 3.0 * v / np.linalg.norm(v)), read]) as run:
        gens = generate(h, PROMPTS[:1], IMAGES[:1], max_new_tokens=4)
    values = run.values(read)
    assert len(values) == 1 + (gens[0].n_new_tokens - 1)  # the prompt pass, then one per decode step
    assert values[0].shape == (1, h.d_model) and all(x.shape == (1, 1, h.d_model) for x in values[1:])
    edited = [entry for entry in run.log if entry[0] == 0]
    assert [e[3] for e in edited] == [True] * len(values)  # the Add edited every forward
    # the steered generation through the same Add equals steered_generate's
    s = Steering(v, layer=2, alpha=3.0, positions="all")
    ref = steered_generate(h, PROMPTS[:1], IMAGES[:1], s, max_new_tokens=4)
    assert list(ref.token_ids[0][: gens[0].n_new_tokens].tolist()) == list(gens[0].token_ids)


def test_a_one_token_prompt_is_a_prompt_pass() -> None:
    """Prompt or decode step is read off the KV cache, not the sequence length: a base model's
    one-token prompt is still the prompt pass (a prompt-only Read sees it)."""
    from evprobe.hooks.tiny_tokenizer import build_tokenizer
    from evprobe.hooks.loading import wrap
    from tests.hooks.toy_arch import toy_model

    tok = build_tokenizer(special_tokens=["<s>", "</s>"], named=dict(bos_token="<s>", eos_token="</s>"))
    h = wrap(toy_model(), tok)
    enc = build_inputs(h, ["hi"], None)
    assert enc["input_ids"].shape[1] == 1
    with torch.no_grad(), intervene(h, [Read("resid_post.L0")]) as run:
        h.model(**enc)
    assert run.value(0).shape == (1, 1, 32)


def test_edits_at_positions_rows_and_in_order(handles) -> None:
    h = tiny_handle(handles, "gemma3")
    enc = build_inputs(h, PROMPTS, IMAGES)
    v = np.random.default_rng(3).normal(size=h.d_model)
    site = "resid_post.L1"
    ops = [Read(site), Replace(site, np.zeros(h.d_model), positions="last", rows=1), Read(site),
           Ablate(site, v), Read(site), Add(site, np.ones(h.d_model), positions=(0, 2), rows=(0,)), Read(site)]
    with torch.no_grad(), intervene(h, ops) as run:
        h.model(**enc)
    before, replaced, ablated, added = (run.value(i) for i in (0, 2, 4, 6))
    assert replaced[1, -1].abs().max() == 0 and torch.equal(replaced[0], before[0])
    assert torch.equal(replaced[1, :-1], before[1, :-1])
    unit = torch.tensor(v / np.linalg.norm(v), dtype=torch.float32)
    assert (ablated @ unit).abs().max() < 1e-4 and (before @ unit).abs().max() > 1e-2
    torch.testing.assert_close(added[0, [0, 2]], ablated[0, [0, 2]] + 1.0, atol=1e-6, rtol=0)
    assert torch.equal(added[1], ablated[1]) and torch.equal(added[0, 1], ablated[0, 1])


def test_hooks_are_removed_even_after_an_error(handles) -> None:
    h = tiny_handle(handles, "llava")
    counts = [len(m._forward_hooks) + len(m._forward_pre_hooks) for m in h.model.modules()]
    with pytest.raises(RuntimeError, match="boom"):
        with intervene(h, [Add("attn_head.L1.H0", np.ones(h.sites.head_dim)), Read("resid_pre.L2"),
                           Read("vision_block.L0")]):
            raise RuntimeError("boom")
    assert [len(m._forward_hooks) + len(m._forward_pre_hooks) for m in h.model.modules()] == counts


def test_a_forward_stopped_after_its_last_read_runs_nothing_later(handles) -> None:
    h = tiny_handle(handles, "llava")
    enc = build_inputs(h, PROMPTS, IMAGES)
    ran = []
    spy = h.layers[2].register_forward_pre_hook(lambda m, a: ran.append(2))
    try:
        last = enc["input_ids"].shape[1] - 1
        plan = position_plan([[(last,), (last,)]], h.device)
        got = trace_sites(h, enc, [1], ["resid_post"], lambda out: reduce_at(out, plan))
    finally:
        spy.remove()
    assert ran == [] and got[1, "resid_post"].shape == (2, 1, h.d_model)


def test_bad_operations_are_refused_before_any_hook(handles) -> None:
    h = tiny_handle(handles, "llava")
    before = [len(m._forward_hooks) for m in h.model.modules()]
    with pytest.raises(ValueError, match=r"site attn_head.L1.H7: head 7 is out of range .* valid sites of"):
        with intervene(h, [Add("resid_post.L0", np.ones(h.d_model)), Read("attn_head.L1.H7")]):
            pass
    assert [len(m._forward_hooks) for m in h.model.modules()] == before
    with pytest.raises(ValueError, match="vision stream.*use positions='all'"):
        Read("projector_out", positions="last")
    with pytest.raises(ValueError, match="Patch edits the prompt pass only"):
        Patch("resid_post.L0", np.zeros((3, 4)), schedule="every-step")
    with pytest.raises(TypeError, match="expected hooks.intervention ops"):
        with intervene(h, ["resid_post.L0"]):
            pass
    enc = build_inputs(h, PROMPTS, IMAGES)
    with pytest.raises(ValueError, match="the source has 3 positions and the target"):
        with torch.no_grad(), intervene(h, [Patch("resid_post.L0", np.zeros((3, h.d_model)))]):
            h.model(**enc)
    with pytest.raises(RuntimeError, match="3 row vectors but the forward has 2 rows"):
        with torch.no_grad(), intervene(h, [Add("resid_post.L0", np.zeros((3, h.d_model)))]):
            h.model(**enc)


def test_the_overhead_benchmark_runs_and_prints_its_targets() -> None:
    """benchmarks/intervention_overhead.py (docs quote it) runs end to end and prints each ratio;
    its numbers are the docs', not this test's (one round on one model measures nothing)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "intervention_overhead.py"
    done = subprocess.run([sys.executable, str(script), "--archs", "organism", "--rounds", "1", "--rows", "2",
                           "--tokens", "2"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    for line in ("capture core / capture nnsight", "steer core / steer bare hook", "capture core / forward",
                 "worst target ratio (median of per-round ratios)"):
        assert line in done.stdout
