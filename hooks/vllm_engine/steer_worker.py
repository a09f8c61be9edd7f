"""The steering half of evprobe's vLLM worker extension: per-request residual edits in one batch.

Mixed into vLLM's worker class (`LLM(worker_extension_cls=...)`, hooks.vllm_engine.extension), so
`self` is the worker and `self.model_runner` its model runner. `evprobe_install_steering` (called once
through `LLM.collective_rpc`) registers a forward pre-hook on the first decoder layer and a forward hook
on every decoder layer. The pre-hook reads the forward's requests (hooks.vllm_engine.batch_map); when
any carries edits (`SamplingParams.extra_args["evprobe_edits"]`, hooks.vllm_engine.edits) it maps
the flattened tokens to (request, position) once and builds, per edited layer, the rows to change
and their deltas. A layer with no edit in the batch returns its output untouched (one dict lookup).

The arithmetic is hooks.steering's on hf: vLLM's Llama-style decoder layers return
`(hidden_states, residual)` with the residual add deferred to the next layer's fused add-RMSNorm (or
the final norm), so the stream after layer L is `residual + hidden_states` (hf's layer output, same
order); the hook returns `(stream + delta at the edited rows, zeros)` and the next fused norm adds an
exact zero. Each delta is float64 alpha * v cast to the model's dtype, as `Steering.delta`; several
edits of one request at one layer apply in list order, as hf's ops do.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from evprobe.hooks.vllm_engine.batch_map import CHECKED_VLLM, BatchRequests, token_map
from evprobe.hooks.vllm_engine.edits import EXTRA_KEY, EngineEdit


def decoder_stack(model: Any) -> Any:
    """The decoder stack of a vLLM model: `model.model` of a causal LM; of a multimodal model (LLaVA:
    `language_model.model`) its language model's (`get_language_model()`, vLLM's SupportsMultiModal)."""
    stack = getattr(model, "model", None)
    if getattr(stack, "layers", None) is None and hasattr(model, "get_language_model"):
        stack = getattr(model.get_language_model(), "model", None)
    if getattr(stack, "layers", None) is None:
        raise ValueError(f"{type(model).__name__} has no model.layers; evprobe's vLLM interventions support "
                         "Llama-style decoder models only")
    return stack


def decoder_layers(model: Any) -> Any:
    """The decoder ModuleList of a vLLM model (decoder_stack(model).layers), one line otherwise."""
    return decoder_stack(model).layers


def check_layer_class(cls: type) -> None:
    """Refuse a decoder layer that does not take and return (hidden_states, residual): the edit needs
    vLLM's deferred residual add (its forward has a `residual` parameter)."""
    if "residual" not in inspect.signature(cls.forward).parameters:
        raise ValueError(f"{cls.__name__}.forward takes no residual: evprobe's vLLM interventions need decoder "
                         "layers that return (hidden_states, residual) (Llama-style)")


class SteerWorker:
    """Per-request steering inside the worker. Every attribute starts with `evprobe_` / `_evprobe_`
    (vLLM refuses an extension attribute the worker class already has)."""

    def evprobe_install_steering(self) -> dict[str, Any]:
        """Register the hooks once (again: no-op). Returns the model facts the client checks edits with."""
        import vllm

        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        layers = decoder_layers(model)
        check_layer_class(type(layers[0]))
        if getattr(self, "_evprobe_steer_handles", None) is None:
            self._evprobe_plan: dict[int, list[tuple[Any, Any]]] = {}
            self._evprobe_parsed: dict[str, list[tuple[EngineEdit, dict]]] = {}
            # on the first layer, not the decoder stack: vLLM's @support_torch_compile __call__ runs the stack's
            # forward directly, past its module hooks; the layers are plain modules
            handles = [layers[0].register_forward_pre_hook(self._evprobe_before_forward)]
            handles += [layer.register_forward_hook(self._evprobe_layer_hook(i)) for i, layer in enumerate(layers)]
            self._evprobe_steer_handles = handles
            self._evprobe_edited = [0, 0]  # forwards that edited, rows edited (summed over layers and passes)
        return {"n_layers": len(layers), "d_model": int(self.model_runner.model_config.get_hidden_size()),  # type: ignore[attr-defined]
                "layer_class": type(layers[0]).__name__, "vllm": vllm.__version__, "checked": list(CHECKED_VLLM)}

    def evprobe_steering_log(self) -> list[int]:
        """[forwards that carried an edit, rows edited in them] since the install."""
        return list(self._evprobe_edited)

    def _evprobe_edits_of(self, req_id: str, extra: dict | None) -> list[tuple[EngineEdit, dict]]:
        """A request's parsed edits (parsed once per request; the cache forgets finished requests)."""
        got = self._evprobe_parsed.get(req_id)
        if got is None:
            got = [(EngineEdit.from_json(e), {}) for e in (extra or {}).get(EXTRA_KEY) or ()]
            self._evprobe_parsed[req_id] = got
        return got

    def _evprobe_before_forward(self, module: Any, args: Any) -> None:
        runner = self.model_runner  # type: ignore[attr-defined]
        self._evprobe_plan = {}
        for gone in set(self._evprobe_parsed) - set(runner.requests):
            del self._evprobe_parsed[gone]
        num_reqs = int(runner.input_batch.num_reqs)
        if num_reqs == 0:  # the profile run at start-up
            return
        ids = tuple(runner.input_batch.req_ids[:num_reqs])
        states = [runner.requests[r] for r in ids]
        extras = [None if s.sampling_params is None else s.sampling_params.extra_args for s in states]
        if not any(e and e.get(EXTRA_KEY) for e in extras):
            return
        tm = token_map(runner, BatchRequests(ids, tuple(int(s.num_prompt_tokens) for s in states), tuple(extras)))
        self._evprobe_plan = self._evprobe_build_plan(tm)
        self._evprobe_edited[0] += 1
        self._evprobe_edited[1] += sum(rows.size for passes in self._evprobe_plan.values() for rows, _ in passes)

    def _evprobe_build_plan(self, tm: Any) -> dict[int, list[tuple[np.ndarray, list]]]:
        """Per layer, passes of (rows (n,) int64, [(edit, cache, count), ...]): pass k holds each
        request's k-th edit at that layer, so one request's edits there apply in list order."""
        plan: dict[int, list[tuple[list, list]]] = {}
        for r, (req_id, n_prompt, extra) in enumerate(zip(tm.requests.req_ids, tm.requests.num_prompt_tokens,
                                                          tm.requests.extra_args)):
            edits = self._evprobe_edits_of(req_id, extra)
            if not edits:
                continue
            lo, hi = int(tm.starts[r]), int(tm.starts[r + 1])
            position = tm.position[lo:hi]  # (n_r,) this request's rows in this forward
            rank: dict[int, int] = {}
            for edit, cache in edits:
                rows = lo + np.flatnonzero(edit.edited(position, n_prompt))
                k = rank.get(edit.layer, 0)
                rank[edit.layer] = k + 1
                if rows.size == 0:
                    continue
                passes = plan.setdefault(edit.layer, [])
                while len(passes) <= k:
                    passes.append(([], []))
                passes[k][0].append(rows)
                passes[k][1].append((edit, cache, rows.size))
        return {layer: [(np.concatenate(rows), parts) for rows, parts in passes if rows]
                for layer, passes in plan.items()}

    def _evprobe_layer_hook(self, index: int) -> Any:
        def hook(module: Any, args: Any, output: Any) -> Any:
            passes = self._evprobe_plan.get(index)
            if not passes:
                return None
            import torch

            if not (isinstance(output, tuple) and len(output) == 2 and output[1] is not None):
                raise RuntimeError(f"{type(module).__name__} does not return (hidden_states, residual); evprobe's "
                                   "vLLM steering supports Llama-style decoder layers only")
            hidden, residual = output  # each (num_tokens_padded, d_model): every request's tokens, flattened
            stream = residual + hidden  # hf's layer output: residual + hidden_states
            for rows, parts in passes:
                deltas = []
                for edit, cache, count in parts:
                    key = (hidden.dtype, hidden.device)
                    if key not in cache:  # float64 product cast to the model's dtype, as Steering.delta
                        cache[key] = torch.tensor(edit.delta, dtype=torch.float64).to(device=hidden.device, dtype=hidden.dtype)
                    deltas.append(cache[key].expand(count, -1))
                idx = torch.from_numpy(rows).to(hidden.device)
                stream[idx] = stream[idx] + torch.cat(deltas)  # (n_rows, d_model)
            return stream, torch.zeros_like(residual)

        return hook


__all__ = ["SteerWorker", "check_layer_class", "decoder_layers", "decoder_stack"]
