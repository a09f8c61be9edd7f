"""Reference implementations through nnsight, kept beside the tests that compare the toolkit with them.

`steered_generate_nnsight` is `hooks.steering.steered_generate` done with nnsight's iteration API
(`for step in tracer.iter[:n]`, editing each step's layer output in place) instead of the
intervention core's torch hooks: the cross-check that both steer the same (same generated ids,
scores within 1e-5 on every tiny architecture). It shares steered_generate's argument handling
(the Steering list, the model check, the generate arguments, the returned SteeredRun), so only the
edit mechanism differs. Timed against the core in benchmarks/steer_overhead.py and
benchmarks/intervention_overhead.py.

`trace_sites_nnsight` is `hooks.capture.trace_sites` through one nnsight trace: the cross-check of
the core's capture (tests/hooks/test_intervention.py) and the baseline of
benchmarks/intervention_overhead.py.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import gc

from evprobe.hooks.capture import _value, no_cache_kwargs, sites
from evprobe.hooks.steering import SteeredRun, Steering, _prepared, _run

if TYPE_CHECKING:
    from PIL import Image

    from evprobe.hooks.handle import Handle


def steered_generate_nnsight(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]] | None = None,
    steering: Steering | Sequence[Steering] | None = None,
    max_new_tokens: int | None = None,
    *,
    min_new_tokens: int | None = None,
    allow_other_model: bool = False,
) -> SteeredRun:
    """The same steered greedy generation done with nnsight's iteration API (the cross-check).

    One `handle.nn.generate()` trace in invoke mode: the first invoke carries the
    inputs and loops `for step in tracer.iter[:n]` (n = max_new_tokens for
    "every-step", 1 for "prompt-only"), adding the delta to
    `nn_layers[layer].output` in place at step 0's chosen positions and at the one
    position of each later step; a second, empty invoke saves `tracer.result`
    (statements after a loop the run cut short would not run). A run that ends
    before n steps (every row hit end-of-sequence) makes nnsight warn that the
    loop's next step "was never reached"; that expected warning is dropped,
    anything else is re-raised as a warning.
    """
    import nnsight
    import torch

    specs, kw, enc, prompt_len = _prepared(handle, prompts, images, steering, max_new_tokens, min_new_tokens,
                                           allow_other_model)
    model = handle.nn
    if not hasattr(model, "generate"):
        raise RuntimeError(f"handle.nn is a plain {type(model).__name__} (its TransformersModel wrap failed); "
                           "nnsight generation tracing needs TransformersModel")
    layers = handle.nn_layers
    # Everything the trace body reads is a local of this frame (nnsight captures the block).
    # Each vector on its layer's device (under a device_map layers may sit on different GPUs).
    deltas = [s.delta(handle.dtype, handle.layer_device(s.layer)) for s in specs]  # each (d_model,)
    n_steps = [max_new_tokens if s.schedule == "every-step" else 1 for s in specs]
    n_loop = max(n_steps, default=0)
    per_row = [s.positions for s in specs if not isinstance(s.positions, (str, tuple, slice)) or s.positions == "image"]
    if per_row:
        raise ValueError(f"steered_generate_nnsight edits fixed positions; positions {per_row[0]!r} differ by row: "
                         "use steered_generate (the intervention core)")
    order = sorted(range(len(specs)), key=lambda i: specs[i].layer)  # nnsight reads must follow execution order
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.inference_mode(), model.generate(**kw) as tracer:
            with tracer.invoke(**enc):
                edited = nnsight.save([])
                for step in tracer.iter[:n_loop]:
                    for i in order:
                        if step < n_steps[i]:
                            out = layers[specs[i].layer].output  # (batch, seq, d_model), live tensor
                            if step == 0 and specs[i].positions == "last":
                                out[:, -1] += deltas[i]
                            elif step == 0 and specs[i].positions != "all":
                                pos = specs[i].positions
                                out[:, list(pos) if isinstance(pos, tuple) else pos] += deltas[i]
                            else:
                                out[:] += deltas[i]
                            if i == 0:
                                edited.append(int(out.shape[1]))
            with tracer.invoke():
                result = tracer.result.save()
    for w in caught:
        if not (issubclass(w.category, UserWarning) and "was never reached" in str(w.message)):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return _run(result, prompt_len, list(edited))


def trace_sites_nnsight(handle: Handle, enc, layers: Sequence[int], components: Sequence[str], read) -> dict:
    """`trace_sites` through one nnsight trace (`.output` of each module, read in execution
    order, `tracer.stop()` after the last): the cross-check of the core's capture
    (tests/hooks/test_intervention.py) and the baseline of benchmarks/intervention_overhead.py.
    Unlike the core, nnsight reads a module's output before torch hooks run, so an edit made by
    `steer` / `intervene` at a site it reads is not seen there. resid_post, attn_out, mlp_out only."""
    import nnsight
    import torch

    plan = sites(handle, layers, components)
    if any(c == "resid_pre" for _, c, _ in plan):
        raise ValueError("trace_sites_nnsight reads module outputs; resid_pre is a layer's input")
    with torch.no_grad(), handle.nn.trace(**no_cache_kwargs(handle, enc)) as tracer:
        saved = nnsight.save([read(_value(handle.nn.get(path).output)) for _, _, path in plan])
        tracer.stop()  # nothing after the last asked-for layer is needed
    out = {(i, c): v for (i, c, _), v in zip(plan, saved, strict=True)}
    # A finished nnsight trace leaves reference cycles that keep this batch's tensors alive until
    # Python's cyclic GC happens to run; a young-generation collection (about 1 ms) frees them now.
    del tracer, saved
    gc.collect(1)
    return out
