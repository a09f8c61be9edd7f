"""Steering and directional ablation on every tiny architecture.

Real tiny models (random weights, built offline), no mocks. The edit is checked
directly: a recorder hook registered before the steering hook sees the layer's
output as computed, one registered after it sees what the rest of the model gets,
and their difference must be exactly alpha * v where (and when) the schedule says.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from evprobe import hooks
from evprobe.hooks import TINY_ARCHS, Handle, build_inputs, generate, next_token_logprobs, tiny
from evprobe.hooks.ablation import ablate
from evprobe.hooks.direction_vectors import mean_residual_norm, random_directions
from evprobe.hooks.steering import Steering, option_logprobs, steer, steered_generate
from tests.hooks.nnsight_twins import steered_generate_nnsight
from tests.hooks.test_handle import picture

LETTERS = ["A", "B", "C", "D", "E"]
# Three rows of clearly different lengths (left padding matters), one image each.
PROMPTS = [
    "Hi.",
    "Which letter? Answer A, B, C, D or E.",
    "Look at the picture, find the largest rectangle and answer with the letter only: A, B, C, D or E.",
]
IMAGES = [[picture(1, (96, 96))], [picture(2, (80, 112))], [picture(3, (128, 64))]]
LAYER = 1  # of 4
N = 5  # new tokens in the step-by-step checks


pytestmark = pytest.mark.usefixtures("one_torch_thread")


_HANDLES: dict[str, Handle] = {}


def _get(arch: str) -> Handle:
    if arch not in _HANDLES:
        _HANDLES[arch] = tiny(arch)
    return _HANDLES[arch]


@pytest.fixture(params=TINY_ARCHS)
def handle(request) -> Handle:
    return _get(request.param)


def direction(h: Handle, seed: int = 0) -> np.ndarray:
    return random_directions(h.d_model, 1, seed)[0]


_NORMS: dict[str, float] = {}


def layer_norm_at_answer(h: Handle) -> float:
    """Mean residual norm of layer LAYER's output at the last prompt position (via nnsight)."""
    if h.arch not in _NORMS:
        import nnsight

        enc = build_inputs(h, PROMPTS, IMAGES)
        with torch.inference_mode(), h.nn.trace(**enc):
            acts = nnsight.save(h.nn_layers[LAYER].output[:, -1, :])
        _NORMS[h.arch] = mean_residual_norm(acts.float().numpy())
    return _NORMS[h.arch]


def strong(h: Handle, **kw) -> Steering:
    """A dose that visibly moves every tiny model: 8 mean residual norms."""
    return Steering.from_norm_units(direction(h), LAYER, 8.0, mean_norm=layer_norm_at_answer(h), **kw)


class Recorder:
    """Forward hook that keeps a copy of a layer's output at each call."""

    def __init__(self, module: torch.nn.Module):
        self.outputs: list[torch.Tensor] = []
        self._handle = module.register_forward_hook(lambda m, a, o: self.outputs.append(o.detach().clone()))

    def remove(self) -> None:
        self._handle.remove()


def n_hooks(h: Handle) -> list[int]:
    return [len(layer._forward_hooks) for layer in h.layers]


# ---------------------------------------------------------------- exactness at alpha = 0


def test_alpha_zero_reproduces_unsteered_exactly(handle: Handle):
    base = generate(handle, PROMPTS, IMAGES, max_new_tokens=6, batch_size=3)
    base_logp = next_token_logprobs(handle, PROMPTS, IMAGES, LETTERS)
    zero = [Steering(direction(handle), layer, 0.0) for layer in range(handle.n_layers)]
    with steer(handle, zero + [Steering(direction(handle, 1), LAYER, 0.0, positions="last")]):
        steered = generate(handle, PROMPTS, IMAGES, max_new_tokens=6, batch_size=3)
        steered_logp = next_token_logprobs(handle, PROMPTS, IMAGES, LETTERS)
    assert [g.token_ids for g in steered] == [g.token_ids for g in base]
    assert np.array_equal(steered_logp, base_logp)
    assert np.array_equal(option_logprobs(handle, PROMPTS, IMAGES, steering=zero), base_logp)
    # The nnsight path at alpha = 0 reproduces plain generation bit for bit as well.
    plain = steered_generate(handle, PROMPTS, IMAGES, None, N)
    nn0 = steered_generate_nnsight(handle, PROMPTS, IMAGES, zero[LAYER], N)
    assert torch.equal(nn0.token_ids, plain.token_ids) and torch.equal(nn0.scores, plain.scores)


# ---------------------------------------------------------------- the edit, step by step


@pytest.mark.parametrize("schedule", ["every-step", "prompt-only"])
def test_schedule_edits_the_right_steps(handle: Handle, schedule: str):
    s = strong(handle, schedule=schedule)
    delta = s.delta(torch.float32)  # (d_model,)
    layer = handle.layers[LAYER]
    before = Recorder(layer)  # registered before the steering hook: sees the layer's own output
    try:
        with steer(handle, s) as log:
            after = Recorder(layer)  # registered after it: sees what the next layer gets
            run = steered_generate(handle, PROMPTS, IMAGES, None, N, min_new_tokens=N)
            after.remove()
    finally:
        before.remove()
    assert run.token_ids.shape == (3, N)
    seq = [o.shape[1] for o in before.outputs]
    assert seq == [run.prompt_len] + [1] * (N - 1), "one prompt pass, then N - 1 one-token decode steps"
    assert [n for _, _, n, _ in log.calls] == seq
    for step, (pre, post) in enumerate(zip(before.outputs, after.outputs, strict=True)):
        if step == 0 or schedule == "every-step":
            assert torch.equal(post, pre + delta), f"step {step} not edited"
        else:
            assert torch.equal(post, pre), f"prompt-only edited decode step {step}"
    assert [e for _, _, _, e in log.calls] == [True] + [schedule == "every-step"] * (N - 1)


def test_positions_last_hits_each_rows_last_real_token(handle: Handle):
    s = strong(handle, positions="last", schedule="prompt-only")
    enc = build_inputs(handle, PROMPTS, IMAGES)
    mask = enc["attention_mask"]  # (batch, seq)
    assert mask[0, 0] == 0 and bool(mask[:, -1].all()), "row 0 is left-padded; all rows end on a real token"
    layer = handle.layers[LAYER]
    before = Recorder(layer)
    try:
        with steer(handle, s), torch.inference_mode():
            after = Recorder(layer)
            handle.model(**enc)
            after.remove()
    finally:
        before.remove()
    (pre,), (post,) = before.outputs, after.outputs  # (batch, seq, d_model)
    assert torch.equal(post[:, -1], pre[:, -1] + s.delta(torch.float32))
    assert torch.equal(post[:, :-1], pre[:, :-1])


def test_explicit_positions(handle: Handle):
    s = Steering(direction(handle), LAYER, 3.0, positions=(-3, -1), schedule="prompt-only")
    enc = build_inputs(handle, PROMPTS[:1], IMAGES[:1])
    before = Recorder(handle.layers[LAYER])
    try:
        with steer(handle, s), torch.inference_mode():
            after = Recorder(handle.layers[LAYER])
            handle.model(**enc)
            after.remove()
    finally:
        before.remove()
    diff = (after.outputs[0] - before.outputs[0])[0]  # (seq, d_model)
    edited = diff.abs().sum(-1) > 0
    assert edited.nonzero().flatten().tolist() == [diff.shape[0] - 3, diff.shape[0] - 1]


# ---------------------------------------------------------------- nnsight cross-check


@pytest.mark.parametrize("positions", ["all", "last"])
def test_nnsight_path_matches_plain_hooks(handle: Handle, positions: str):
    runs = {}
    for schedule in ("every-step", "prompt-only"):
        s = strong(handle, positions=positions, schedule=schedule)
        plain = steered_generate(handle, PROMPTS, IMAGES, s, N, min_new_tokens=N)
        nn = steered_generate_nnsight(handle, PROMPTS, IMAGES, s, N, min_new_tokens=N)
        assert torch.equal(nn.token_ids, plain.token_ids), schedule
        torch.testing.assert_close(nn.scores, plain.scores, atol=1e-5, rtol=0)
        expected = (plain.prompt_len,) + (1,) * (N - 1 if schedule == "every-step" else 0)
        assert nn.edited == plain.edited == expected
        runs[schedule] = nn
    # The nnsight loop edits the decode steps too: every-step and prompt-only agree
    # on step 0's scores (same prompt pass) and differ on every later step.
    every, once = runs["every-step"].scores, runs["prompt-only"].scores  # (batch, N, vocab)
    finite = torch.isfinite(every) & torch.isfinite(once)
    assert torch.equal(every[:, 0], once[:, 0])
    for step in range(1, N):
        gap = (every[:, step] - once[:, step]).abs()[finite[:, step]]
        assert gap.max() > 1e-3, f"step {step}: every-step did not edit it"


def test_nnsight_path_matches_plain_hooks_with_several_steerings(handle: Handle):
    m = layer_norm_at_answer(handle)
    specs = [
        Steering.from_norm_units(direction(handle, 2), 2, 6.0, mean_norm=m, positions="last"),
        Steering.from_norm_units(direction(handle, 3), 0, 6.0, mean_norm=m, positions=(-4, -2),
                                 schedule="prompt-only"),
        Steering.from_norm_units(direction(handle, 4), 2, -3.0, mean_norm=m, positions=slice(-6, None)),
    ]
    plain = steered_generate(handle, PROMPTS, IMAGES, specs, N, min_new_tokens=N)
    nn = steered_generate_nnsight(handle, PROMPTS, IMAGES, specs, N, min_new_tokens=N)
    assert torch.equal(nn.token_ids, plain.token_ids)
    torch.testing.assert_close(nn.scores, plain.scores, atol=1e-5, rtol=0)
    assert nn.edited == plain.edited == (plain.prompt_len,) + (1,) * (N - 1)


def test_schedules_give_different_replies_on_some_arch():
    differs = []
    for arch in TINY_ARCHS:
        h = _get(arch)
        every = steered_generate(h, PROMPTS, IMAGES, strong(h), 8, min_new_tokens=8)
        once = steered_generate(h, PROMPTS, IMAGES, strong(h, schedule="prompt-only"), 8, min_new_tokens=8)
        differs.append(not torch.equal(every.token_ids, once.token_ids))
        if differs[-1]:
            break
    assert any(differs), "every-step and prompt-only produced the same tokens on every arch"


def test_nnsight_path_handles_an_early_stop():
    """Without min_new_tokens the run may end before max_new_tokens; both paths agree and
    nnsight's expected 'was never reached' warning does not escape."""
    h = _get("llava")
    free = steered_generate(h, PROMPTS, IMAGES, None, 6)
    config = h.model.generation_config
    saved = config.eos_token_id
    try:
        config.eos_token_id = [int(t) for t in free.token_ids[:, 1]]  # every row stops at step 2
        s = strong(h, positions="last")
        s0 = Steering(direction(h), LAYER, 0.0)
        plain = steered_generate(h, PROMPTS, IMAGES, s0, 6)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            nn0 = steered_generate_nnsight(h, PROMPTS, IMAGES, s0, 6)
            nn = steered_generate_nnsight(h, PROMPTS, IMAGES, s, 6)
        plain_s = steered_generate(h, PROMPTS, IMAGES, s, 6)
    finally:
        config.eos_token_id = saved
    assert plain.token_ids.shape[1] == 2 and torch.equal(nn0.token_ids, plain.token_ids)
    assert torch.equal(nn.token_ids, plain_s.token_ids)
    torch.testing.assert_close(nn.scores, plain_s.scores, atol=1e-5, rtol=0)


def test_nnsight_edit_does_not_reach_direct_model_calls():
    """Why `steer` uses plain hooks: nnsight's persistent edit (`edit(inplace=True)`) is
    replayed only on nnsight traces; hooks.generate / next_token_logprobs call the
    model directly and stay unsteered, while a forward hook steers them."""
    h = _get("llava")
    base_logp = next_token_logprobs(h, PROMPTS, IMAGES, LETTERS)
    delta = strong(h).delta(torch.float32)
    layers = h.nn_layers
    try:
        with h.nn.edit(inplace=True) as tracer:
            for _ in tracer.iter[:]:
                layers[LAYER].output[:] += delta
        assert len(h.nn._edits) == 1
        assert np.array_equal(next_token_logprobs(h, PROMPTS, IMAGES, LETTERS), base_logp)
    finally:
        h.nn.clear_edits()
    with steer(h, strong(h)):
        assert np.abs(next_token_logprobs(h, PROMPTS, IMAGES, LETTERS) - base_logp).max() > 1e-3


# ---------------------------------------------------------------- effect, batching, cleanup


def test_large_alpha_changes_the_output(handle: Handle):
    base = generate(handle, PROMPTS, IMAGES, max_new_tokens=6, batch_size=3)
    base_logp = option_logprobs(handle, PROMPTS, IMAGES)
    s = strong(handle)
    with steer(handle, s):
        steered = generate(handle, PROMPTS, IMAGES, max_new_tokens=6, batch_size=3)
    assert [g.token_ids for g in steered] != [g.token_ids for g in base]
    assert np.abs(option_logprobs(handle, PROMPTS, IMAGES, steering=s) - base_logp).max() > 1e-3
    # Random-direction control at the same dose: also a valid steering, different effect.
    control = Steering(random_directions(handle.d_model, 1, seed=123)[0], LAYER, s.alpha)
    assert not np.allclose(option_logprobs(handle, PROMPTS, IMAGES, steering=control),
                           option_logprobs(handle, PROMPTS, IMAGES, steering=s))


@pytest.mark.parametrize("positions", ["last", "all"])
def test_batched_steering_equals_one_at_a_time(handle: Handle, positions: str):
    s = strong(handle, positions=positions)
    with steer(handle, s):
        batched = generate(handle, PROMPTS, IMAGES, max_new_tokens=5, batch_size=3)
        single = generate(handle, PROMPTS, IMAGES, max_new_tokens=5, batch_size=1)
        lb = next_token_logprobs(handle, PROMPTS, IMAGES, LETTERS)
        ls = next_token_logprobs(handle, PROMPTS, IMAGES, LETTERS, batch_size=1)
    assert [g.token_ids for g in batched] == [g.token_ids for g in single]
    np.testing.assert_allclose(lb, ls, atol=1e-5, rtol=0)


def test_cleanup_after_an_exception(handle: Handle):
    base = generate(handle, PROMPTS, IMAGES, max_new_tokens=4, batch_size=3)
    base_logp = next_token_logprobs(handle, PROMPTS, IMAGES, LETTERS)
    hooks_before = n_hooks(handle)
    with pytest.raises(RuntimeError, match="boom"):
        with steer(handle, [strong(handle), Steering(direction(handle), 3, 5.0)]):
            assert n_hooks(handle)[LAYER] == hooks_before[LAYER] + 1
            generate(handle, PROMPTS[:1], IMAGES[:1], max_new_tokens=2)
            raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        with ablate(handle, direction(handle), layers="all"):
            assert n_hooks(handle) == [n + 1 for n in hooks_before]
            raise RuntimeError("boom")
    assert n_hooks(handle) == hooks_before
    assert [g.token_ids for g in generate(handle, PROMPTS, IMAGES, max_new_tokens=4, batch_size=3)] == [
        g.token_ids for g in base
    ]
    assert np.array_equal(next_token_logprobs(handle, PROMPTS, IMAGES, LETTERS), base_logp)


# ---------------------------------------------------------------- ablation


def test_ablation_projects_the_direction_out(handle: Handle):
    import nnsight

    v = direction(handle, 7)
    vt = torch.from_numpy(v).float()
    enc = build_inputs(handle, PROMPTS, IMAGES)
    real = enc["attention_mask"].bool()  # (batch, seq); padding rows are all zeros in some archs
    with ablate(handle, v, layers="all") as chosen, torch.inference_mode():
        recorders = [Recorder(layer) for layer in handle.layers]  # after the ablation hooks
        handle.model(**enc)
        for r in recorders:
            r.remove()
    assert chosen == list(range(handle.n_layers))
    for r in recorders:
        (out,) = r.outputs  # (batch, seq, d_model)
        rel = (out @ vt).abs()[real] / out.norm(dim=-1)[real]
        assert rel.max() < 1e-5
    # One layer only, checked through nnsight: the next layer's input has no v component,
    # while nnsight's .output of the ablated layer itself is read before the hook runs.
    with ablate(handle, v, layers=LAYER), torch.inference_mode(), handle.nn.trace(**enc):
        raw = nnsight.save(handle.nn_layers[LAYER].output)
        nxt = nnsight.save(handle.nn_layers[LAYER + 1].input)
    assert ((nxt @ vt).abs() / nxt.norm(dim=-1))[real].max() < 1e-5
    assert ((raw @ vt).abs() / raw.norm(dim=-1))[real].max() > 1e-3
    torch.testing.assert_close(nxt, raw - (raw @ vt).unsqueeze(-1) * vt, atol=1e-6, rtol=0)
    # And ablation changes what the model says next.
    with ablate(handle, v, layers="all"):
        ablated = next_token_logprobs(handle, PROMPTS, IMAGES, LETTERS)
    assert not np.array_equal(ablated, next_token_logprobs(handle, PROMPTS, IMAGES, LETTERS))


# ---------------------------------------------------------------- units and bad input


def test_norm_units_and_random_directions():
    v = random_directions(64, 1, seed=0)[0]
    s = Steering.from_norm_units(v, 2, 0.5, mean_norm=3.0)
    assert s.alpha == 0.5 * 3.0 and s.alpha_norm == 0.5 and s.mean_norm == 3.0
    acts = np.array([[3.0, 4.0], [6.0, 8.0]])
    assert mean_residual_norm(acts) == pytest.approx(7.5)
    r = random_directions(64, 4, seed=1)
    assert r.shape == (4, 64)
    np.testing.assert_allclose(np.linalg.norm(r, axis=1), 1.0, atol=1e-12)
    assert np.array_equal(r, random_directions(64, 4, seed=1))
    assert not np.array_equal(r, random_directions(64, 4, seed=2))
    # Directions are normalised and copied; torch input works too.
    w = np.full(64, 2.0)
    t = Steering(torch.full((64,), 2.0), 0, 1.0)
    assert np.allclose(Steering(w, 0, 1.0).direction, t.direction) and np.isclose(np.linalg.norm(t.direction), 1)
    assert w[0] == 2.0 and not t.direction.flags.writeable


def test_bad_input_fails_clearly():
    h = _get("llava")
    good = direction(h)
    with pytest.raises(ValueError, match=r"shape \(64,\)"):
        with steer(h, Steering(np.ones(32), 0, 1.0)):
            pass
    with pytest.raises(ValueError, match="zero vector"):
        Steering(np.zeros(64), 0, 1.0)
    with pytest.raises(ValueError, match=r"use 0 \.\. 3"):
        with steer(h, Steering(good, 4, 1.0)):
            pass
    with pytest.raises(ValueError, match="single row"):
        Steering(np.ones((2, 64)), 0, 1.0)
    with pytest.raises(ValueError, match=">= 0"):
        Steering(good, -1, 1.0)
    with pytest.raises(ValueError, match="schedule"):
        Steering(good, 0, 1.0, schedule="sometimes")
    with pytest.raises(ValueError, match="positions"):
        Steering(good, 0, 1.0, positions="first")
    with pytest.raises(ValueError, match="mean_norm"):
        Steering.from_norm_units(good, 0, 1.0, mean_norm=0.0)
    with pytest.raises(ValueError, match=r"use 0 \.\. 3"):
        with ablate(h, good, layers=[1, 9]):
            pass
    with pytest.raises(ValueError, match="zero vector"), ablate(h, np.zeros(64)):
        pass
    with pytest.raises(ValueError, match=r"shape \(64,\)"), ablate(h, np.ones(65)):
        pass
    assert n_hooks(h) == [0] * h.n_layers


def test_exported_from_hooks():
    # `steer` and `ablate` are imported from their modules (hooks.steering / hooks.ablation are
    # the submodules); the rest are package-level names too.
    assert hooks.Steering is Steering and hooks.option_logprobs is option_logprobs
    assert hooks.random_directions is random_directions and hooks.mean_residual_norm is mean_residual_norm
    assert "steered_generate_nnsight" not in hooks.__all__  # the nnsight twin is the tests' (tests/hooks/nnsight_twins.py)
