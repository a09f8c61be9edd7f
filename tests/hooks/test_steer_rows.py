"""hooks.steering's many-directions path and the norm where the vector is added, on a tiny real LLaVA."""

from __future__ import annotations

import numpy as np
import pytest

from evprobe import hooks
from evprobe.hooks.steering import Steering, option_logprobs
from evprobe.hooks.steer_rows import option_logprobs_rows, residual_norms_at, steer_rows

pytestmark = pytest.mark.usefixtures("one_torch_thread")
PROMPTS = ["Which option? A or B.", "Pick one letter: C, D or E."]


@pytest.fixture(scope="module")
def handle():
    return hooks.load("tiny:llava")


def test_rows_path_equals_one_steering_at_a_time(handle) -> None:
    images = [[], []]
    D = np.random.default_rng(1).standard_normal((3, handle.d_model))  # (K, d_model) raw vectors
    got = option_logprobs_rows(handle, PROMPTS, images, list("ABCDE"), 1, D, max_rows=4)  # 2 directions per forward
    for k in range(3):
        v = D[k]
        want = option_logprobs(handle, PROMPTS, images, list("ABCDE"),
                               Steering(v, 1, float(np.linalg.norm(v))), batch_size=2)
        assert np.allclose(got[k], want, atol=1e-6)
    assert not np.allclose(got[0], got[1])  # different directions, different readouts


def test_steer_rows_refuses_a_forward_of_another_size(handle) -> None:
    with pytest.raises(RuntimeError, match="3 row vectors but the forward has 2 rows"):
        with steer_rows(handle, 1, np.zeros((3, handle.d_model))):
            hooks.next_token_logprobs(handle, PROMPTS, [[], []], ["A"], batch_size=2)


def test_norm_over_all_positions_is_not_the_last_token_norm(handle) -> None:
    every = residual_norms_at(handle, PROMPTS, [[], []], [1, 2], "all", batch_size=2)
    last = residual_norms_at(handle, PROMPTS, [[], []], [1, 2], "last", batch_size=1)
    from evprobe.hooks.inputs import build_inputs

    enc = build_inputs(handle, PROMPTS, [[], []])
    assert every[1][1] == int(enc["attention_mask"].sum()) and last[1][1] == 2  # padding left out of "all"
    assert every[1][0] != pytest.approx(last[1][0], rel=1e-3)
    with pytest.raises(ValueError, match="measured at positions 'last'"):
        Steering.from_norm_units(np.ones(handle.d_model), 1, 1.0, last[1][0], positions="all", measured_at="last")
    Steering.from_norm_units(np.ones(handle.d_model), 1, 1.0, every[1][0], positions="all", measured_at="all")
