"""Capture inside a vLLM worker: the worker-side half of `hooks.vllm_engine.capture`.

`CaptureWorker` is mixed into evprobe's worker extension class (hooks.vllm_engine.extension), so
its methods run in every worker and are called by name through `LLM.collective_rpc`:

    evprobe_capture_begin(layers)        forward hooks on those decoder layers this worker holds
    evprobe_capture_end(folder)          remove them and hand back what they read

What a hook reads: the residual stream after decoder layer L (evprobe's `resid_post`). vLLM's
Llama-style decoder layers return `(hidden_states, residual)` with the residual add deferred to
the next layer's fused add-RMSNorm (or the final norm), so the stream after layer L is their sum,
`residual + hidden_states`, as hf's layer output (bench.backends.vllm_steer says the same of the
steering hook). A hook registered after a steering hook reads the steered stream.

Which rows: only requests whose `SamplingParams.extra_args` carry CAPTURE_KEY, a dict
`{"key": str, "groups": [[position, ...], ...]}`: absolute prompt positions (0 is the prompt's
first token), one group per captured position of the caller (a token, a span). The hook maps each
flattened token of the forward to its request and absolute position (hooks.vllm_engine.batch_map)
and adds the float32 row of every token that falls in a group to that group's sum: per request a
(layers, groups, d_model) float32 sum and a (layers, groups) count. Chunked prefill splits a
prompt across forwards; the sums gather it. Decode steps (positions past the prompt) are never
read, since groups hold prompt positions only. The driver divides and checks the counts (a token
that never ran, e.g. one served from a prefix cache, leaves its group short: refused there).

Hand-back: collective_rpc answers travel by msgpack, so nothing is pickled: each request's sums
are written as `<key>.L<first layer>.npy` (np.save, allow_pickle=False) into the driver's folder
(workers on the driver's machine) and the answer names them, with the counts as plain lists.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

CAPTURE_KEY = "evprobe_capture"  # SamplingParams.extra_args key of a request to capture


def _decoder(worker: Any) -> tuple[Any, int, int]:
    """(decoder layers, first and one past last layer this worker holds): pipeline parallelism
    leaves other ranks' layers as placeholders (vLLM's start_layer / end_layer)."""
    from evprobe.hooks.vllm_engine.steer_worker import check_layer_class, decoder_stack

    stack = decoder_stack(worker.model_runner.get_model())  # a VLM's: its language model's
    layers = stack.layers
    check_layer_class(type(layers[0]))  # a layer without the deferred residual: one line, before any forward
    return layers, int(getattr(stack, "start_layer", 0)), int(getattr(stack, "end_layer", len(layers)))


class CaptureWorker:
    """The worker-side capture methods (a mixin of evprobe's vLLM worker extension)."""

    def evprobe_capture_begin(self, layers: list[int]) -> dict[str, Any]:
        """Register a resid_post read on each of `layers` this worker holds (others are another
        pipeline rank's). Returns {"n_layers": decoder layers, "held": the layers hooked here}."""
        from evprobe.hooks.vllm_engine.batch_map import batch_requests, token_map

        self._evprobe_capture_stop()  # never two captures' hooks at once (a failed call's are dropped)
        decoder, start, end = _decoder(self)
        bad = [layer for layer in layers if not 0 <= layer < len(decoder)]
        if bad:
            raise ValueError(f"layer {bad[0]} is out of range: this model has {len(decoder)} decoder layers")
        held = [int(layer) for layer in layers if start <= layer < end]
        # key -> [sums (len(held), groups, d) float32, counts (len(held), groups) int64]
        sums: dict[str, list[np.ndarray]] = {}
        self._evprobe_capture = {"held": held, "sums": sums, "handles": []}

        def make_hook(slot: int):
            def hook(module, args, output):
                if not (isinstance(output, tuple) and len(output) == 2 and output[1] is not None):
                    raise RuntimeError(f"{type(module).__name__} does not return (hidden_states, residual); "
                                       "evprobe's vLLM capture reads Llama-style decoder layers only")
                hidden, residual = output  # each (num_tokens (padded), d_model), every request flattened
                requests = batch_requests(self.model_runner)
                specs = [(extra or {}).get(CAPTURE_KEY) for extra in requests.extra_args]
                if not any(specs):
                    return  # no request of this forward asks: no per-token work
                tokens = token_map(self.model_runner, requests)
                for r, spec in enumerate(specs):
                    if spec is None:
                        continue
                    rows = np.arange(tokens.starts[r], tokens.starts[r + 1])  # this request's flattened tokens
                    if rows.size == 0:
                        continue
                    where = tokens.position[rows]  # their absolute positions
                    hit_rows, hit_groups = [], []
                    for g, group in enumerate(spec["groups"]):
                        inside = np.isin(where, np.asarray(group, dtype=np.int64))
                        hit_rows.extend(rows[inside].tolist())
                        hit_groups.extend([g] * int(inside.sum()))
                    if not hit_rows:
                        continue
                    index = np.asarray(hit_rows)
                    stream = (residual[index] + hidden[index]).float().cpu().numpy()  # (hits, d_model)
                    if spec["key"] not in sums:
                        n_groups = len(spec["groups"])
                        sums[spec["key"]] = [np.zeros((len(held), n_groups, stream.shape[1]), np.float32),
                                             np.zeros((len(held), n_groups), np.int64)]
                    acc, count = sums[spec["key"]]
                    np.add.at(acc[slot], np.asarray(hit_groups), stream)
                    np.add.at(count[slot], np.asarray(hit_groups), 1)
                return  # the output is left as it is

            return hook

        for slot, layer in enumerate(held):
            self._evprobe_capture["handles"].append(decoder[layer].register_forward_hook(make_hook(slot)))
        return {"n_layers": len(decoder), "held": held}

    def evprobe_capture_end(self, folder: str) -> dict[str, Any] | None:
        """Remove the hooks and hand back their sums: {"held": layers, "counts": {key: (layers, groups)
        nested list}, "files": {key: the .npy file in `folder` holding its (layers, groups, d_model)
        float32 sums}}; None when no capture was running."""
        state = self._evprobe_capture_stop()
        if state is None:
            return None
        held, sums = state["held"], state["sums"]
        files = {}
        for key, (acc, _) in sums.items():
            name = f"{key}.L{held[0]}.npy"
            tmp = os.path.join(folder, f".{name}.tmp.npy")
            np.save(tmp, acc, allow_pickle=False)
            os.replace(tmp, os.path.join(folder, name))  # whole or absent
            files[key] = name
        return {"held": held, "counts": {k: v[1].tolist() for k, v in sums.items()}, "files": files}

    def _evprobe_capture_stop(self) -> dict[str, Any] | None:
        """Remove the running capture's hooks; its state (held layers, sums), or None."""
        state = getattr(self, "_evprobe_capture", None)
        if state is not None:
            for handle in state["handles"]:
                handle.remove()
            self._evprobe_capture = None
        return state


__all__ = ["CAPTURE_KEY", "CaptureWorker"]
