"""Directions carry their provenance into Python steering (issue 28 item 2).

A `probes.directions.Direction` names the model it was fitted on (`provenance["model"]`, the
capture's model name). `Steering.from_direction` remembers it, and every hooks function that takes
a direction or a Steering (steer, steered_generate, steered_generate_nnsight, option_logprobs,
ablate) refuses it on another model with the CLI's one-line refusal unless
`allow_other_model=True`. A raw vector carries no provenance and behaves as before. Real tiny
models, no mocks.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from evprobe.hooks import Handle, tiny
from evprobe.hooks.ablation import ablate
from evprobe.hooks.fingerprint import check_fitted_on, model_identity, other_model_refusal, same_model
from evprobe.hooks.loading import named_models, resolve_model
from evprobe.hooks.direction_vectors import provenance_of
from evprobe.hooks.steering import Steering, option_logprobs, steer, steered_generate
from evprobe.probes.directions import Direction, read_directions, write_directions
from tests.hooks.nnsight_twins import steered_generate_nnsight
from tests.hooks.test_handle import picture

PROMPTS = ["Hi.", "Which letter? Answer A, B, C, D or E."]
IMAGES = [[picture(1, (96, 96))], [picture(2, (80, 112))]]
LETTERS = ["A", "B", "C", "D", "E"]
LAYER = 1
MEAN_NORM = 7.5

pytestmark = pytest.mark.usefixtures("one_torch_thread")

_HANDLES: dict[str, Handle] = {}


def _get(arch: str) -> Handle:
    if arch not in _HANDLES:
        _HANDLES[arch] = tiny(arch)
    return _HANDLES[arch]


@pytest.fixture
def llava() -> Handle:
    return _get("llava")


@pytest.fixture
def qwen() -> Handle:
    return _get("qwen2_5_vl")


def fitted(model: str = "tiny:llava", position: str = "last", d_model: int = 64, **extra) -> Direction:
    """A direction as fit_directions makes it (unit float32 vector, the provenance keys readers use)."""
    v = np.random.default_rng(0).standard_normal(d_model).astype(np.float32)
    v /= np.linalg.norm(v)
    prov = {"model": model, "layer": LAYER, "position": position, "label": "resolved", "positive": True,
            "probe": "massmean", "mean_norm": MEAN_NORM, "d_model": d_model, **extra}
    return Direction(f"resolved.massmean.L{LAYER}.{position}", v, prov)


def _one_line_refusal(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    assert "'tiny:llava'" in text and "'tiny:qwen2_5_vl'" in text and "allow_other_model=True" in text
    assert text.startswith("direction resolved.massmean.L1.last was fitted on 'tiny:llava', not 'tiny:qwen2_5_vl'")
    return text


def test_direction_is_recognised_by_its_provenance() -> None:
    d = fitted()
    assert provenance_of(d)["model"] == "tiny:llava"
    assert provenance_of(d.vector) is None and provenance_of([0.0, 1.0]) is None


def test_from_direction_takes_layer_position_and_norm_units() -> None:
    d = fitted()
    s = Steering.from_direction(d, 2.0)
    assert (s.layer, s.positions, s.schedule) == (LAYER, "last", "every-step")
    assert s.alpha == pytest.approx(2.0 * MEAN_NORM) and (s.alpha_norm, s.mean_norm) == (2.0, MEAN_NORM)
    assert (s.fitted_on, s.direction_name, s.allow_other_model) == ("tiny:llava", d.name, False)
    np.testing.assert_allclose(s.direction, d.vector.astype(np.float64) / np.linalg.norm(d.vector), atol=0)
    raw = Steering.from_direction(d, 3.0, units="raw", positions="all", schedule="prompt-only")
    assert (raw.alpha, raw.alpha_norm, raw.positions, raw.schedule) == (3.0, None, "all", "prompt-only")
    # the stored norm was measured at "last": adding the vector elsewhere in those units is refused
    with pytest.raises(ValueError, match="measured at positions 'last' but the vector is added at 'all'"):
        Steering.from_direction(d, 1.0, positions="all")
    # a norm measured where the vector is added is the caller's to give
    given = Steering.from_direction(d, 1.0, positions="all", mean_norm=3.0, measured_at="all")
    assert given.alpha == 3.0
    # a direction read at a span no steering position equals: its stored norm is not the unit
    with pytest.raises(ValueError, match="measured at its capture position 'image_mean'"):
        Steering.from_direction(fitted(position="image_mean"), 1.0)
    assert Steering.from_direction(fitted(position="image_mean"), 1.0, units="raw").positions == "all"
    with pytest.raises(ValueError, match="units must be"):
        Steering.from_direction(d, 1.0, units="sigma")
    with pytest.raises(TypeError, match="takes a direction with provenance"):
        Steering.from_direction(d.vector, 1.0)


def test_refused_on_another_model_everywhere(llava, qwen) -> None:
    d = fitted()
    with pytest.raises(ValueError) as err:
        Steering.from_direction(d, 1.0, handle=qwen)
    _one_line_refusal(err)
    s = Steering.from_direction(d, 1.0)  # no handle: checked where it meets one
    calls = {
        "steer": lambda: steer(qwen, s).__enter__(),
        "steer list": lambda: steer(qwen, [Steering(d.vector, 0, 1.0), s]).__enter__(),
        "option_logprobs": lambda: option_logprobs(qwen, PROMPTS, IMAGES, LETTERS, s),
        "steered_generate": lambda: steered_generate(qwen, PROMPTS, IMAGES, s, 2),
        "steered_generate_nnsight": lambda: steered_generate_nnsight(qwen, PROMPTS, IMAGES, s, 2),
        "ablate": lambda: ablate(qwen, d, LAYER).__enter__(),
    }
    hooks_before = [len(layer._forward_hooks) for layer in qwen.layers]
    for what, call in calls.items():
        with pytest.raises(ValueError) as err:
            call()
        _one_line_refusal(err)
    assert [len(layer._forward_hooks) for layer in qwen.layers] == hooks_before  # refused before any hook


def test_override_steers_the_other_model(qwen) -> None:
    d = fitted()
    plain = Steering(d.vector, LAYER, 2.0 * MEAN_NORM, "last")
    want = option_logprobs(qwen, PROMPTS, IMAGES, LETTERS, plain)
    # the override given once, at construction, or per call: the same numbers as the bare vector
    waived = Steering.from_direction(d, 2.0, handle=qwen, allow_other_model=True)
    np.testing.assert_array_equal(option_logprobs(qwen, PROMPTS, IMAGES, LETTERS, waived), want)
    s = Steering.from_direction(d, 2.0)
    np.testing.assert_array_equal(option_logprobs(qwen, PROMPTS, IMAGES, LETTERS, s, allow_other_model=True), want)
    with steer(qwen, s, allow_other_model=True) as log:
        pass
    assert log.calls == []
    got = steered_generate(qwen, PROMPTS, IMAGES, s, 2, allow_other_model=True)
    assert torch.equal(got.token_ids, steered_generate(qwen, PROMPTS, IMAGES, plain, 2).token_ids)
    with ablate(qwen, d, LAYER, allow_other_model=True) as chosen:
        assert chosen == [LAYER]


def test_on_its_own_model_identical_to_the_raw_vector(llava) -> None:
    d = fitted()
    s = Steering.from_direction(d, 2.0, handle=llava)
    plain = Steering(d.vector, LAYER, 2.0 * MEAN_NORM, "last")
    assert s.alpha == plain.alpha and np.array_equal(s.direction, plain.direction)
    np.testing.assert_array_equal(option_logprobs(llava, PROMPTS, IMAGES, LETTERS, s),
                                  option_logprobs(llava, PROMPTS, IMAGES, LETTERS, plain))
    a = steered_generate(llava, PROMPTS, IMAGES, s, 3)
    b = steered_generate(llava, PROMPTS, IMAGES, plain, 3)
    assert torch.equal(a.token_ids, b.token_ids) and torch.equal(a.scores, b.scores) and a.edited == b.edited
    with ablate(llava, d, LAYER) as chosen:
        assert chosen == [LAYER]


def test_raw_vectors_are_unchecked_and_unchanged(qwen) -> None:
    v = fitted().vector  # bare: no provenance
    s = Steering(v, LAYER, 3.0)
    assert s.fitted_on is None
    with steer(qwen, s) as log:
        option_logprobs(qwen, PROMPTS, IMAGES, LETTERS)
    assert log.calls
    with ablate(qwen, v, "all") as chosen:
        assert chosen == [0, 1, 2, 3]
    check_fitted_on("x", None, "tiny:qwen2_5_vl")  # no provenance: nothing to refuse


def test_a_direction_where_a_steering_goes_is_one_line_pointing_to_from_direction(qwen) -> None:
    d = fitted()
    for call in (lambda: steer(qwen, d).__enter__(), lambda: steer(qwen, [d]).__enter__(),
                 lambda: option_logprobs(qwen, PROMPTS, IMAGES, LETTERS, d),
                 lambda: Steering(d, LAYER, 1.0)):
        with pytest.raises(TypeError) as err:
            call()
        assert "\n" not in str(err.value) and "Steering.from_direction(direction, alpha)" in str(err.value)


def test_a_saved_folder_keeps_the_model(tmp_path, qwen, llava) -> None:
    write_directions(tmp_path, [fitted()])
    (d,) = read_directions(tmp_path).values()
    with pytest.raises(ValueError) as err:
        Steering.from_direction(d, 1.0, handle=qwen)
    _one_line_refusal(err)
    assert Steering.from_direction(d, 1.0, handle=llava).fitted_on == "tiny:llava"


def test_what_counts_as_the_same_model(tmp_path, monkeypatch) -> None:
    # names as given to load: a tiny model is its name; a folder it was saved to is another model
    assert same_model("tiny:llava", "tiny:llava") and not same_model("tiny:llava", "tiny:qwen2_5_vl")
    saved = tmp_path / "tiny_llava"
    saved.mkdir()
    assert not same_model("tiny:llava", str(saved))
    # a folder by any path is one model
    monkeypatch.chdir(tmp_path)
    assert same_model(str(saved), "tiny_llava") and same_model(str(saved), "./tiny_llava/")
    assert model_identity("./tiny_llava") == os.path.realpath(saved)
    assert not same_model(str(saved), "some/hub-id") and not same_model(None, "tiny:llava")
    if "organism" in named_models():  # a registered name and its folder
        assert same_model("organism", resolve_model("organism"))


def test_one_home_for_the_cli_refusal() -> None:
    """The CLI (experiments.dose_response.plan) raises the same text, without the Python override."""
    cli = other_model_refusal("d", "tiny:llava", "tiny:qwen2_5_vl", override=None)
    assert cli == ("direction d was fitted on 'tiny:llava', not 'tiny:qwen2_5_vl'; steer the model it was fitted "
                   "on (or fit directions on this model's capture)")
    class ConfigError(ValueError):  # stands in for experiments.config.ConfigError (hooks tests import no experiments)
        pass

    with pytest.raises(ConfigError, match="^direction d was fitted on 'tiny:llava', not 'tiny:qwen2_5_vl'; steer"):
        check_fitted_on("d", "tiny:llava", "tiny:qwen2_5_vl", override=None, error=ConfigError)
    assert other_model_refusal("d", "a", "b").startswith(cli.replace("tiny:llava", "a").replace("tiny:qwen2_5_vl", "b"))


def test_measured_at_without_its_norm_is_refused_not_replaced() -> None:
    from types import SimpleNamespace

    import numpy as np

    from evprobe.hooks.steering import Steering

    direction = SimpleNamespace(vector=np.ones(64) / 8.0,
                                provenance={"model": "tiny:llava", "layer": 1, "position": "last", "mean_norm": 2.0})
    with pytest.raises(ValueError, match="measured_at='all' names where a mean_norm was measured"):
        Steering.from_direction(direction, 1.0, measured_at="all")
