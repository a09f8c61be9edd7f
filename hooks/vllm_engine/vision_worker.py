"""Capture at a VLM's vision sites inside a vLLM worker: the vision tower's blocks and the projector.

vLLM runs a multimodal model's encoder apart from the decoder's flattened tokens: the worker's
`_execute_mm_encoder(scheduler_output)` takes the step's scheduled encoder inputs, encodes them in
batches of items (each item one image; CLIP's blocks see (items, tokens, width)) and stores each
item's output in its encoder cache under the item's identifier, and a later request whose item has
that identifier is served from the cache without running the tower. So a vision-site read is keyed
by item, not by request, and only an item whose tower runs inside the capture can be read:

- the client (hooks.vllm_engine.vision.capture_vision) gives every image of every request a fresh
  identifier (`multi_modal_uuids`, vLLM's public per-item cache key) that names the call, the
  request and the image (`evprobe-<nonce>-<request>-<image>`): no cache entry of an earlier call
  or another request can serve it, so its tower runs here;
- the worker learns the order of the encoder's items from `runner._batch_mm_inputs_from_scheduler`
  (wrapped on the runner instance while a capture runs; it returns the items' identifiers in the
  order `_execute_mm_encoder` batches them: stable-sorted by modality, then cut into consecutive
  groups), and each site's forward hook takes its batch's rows in that order, summing each item's
  tokens in float32.

Internals relied on (vLLM 0.32.0, `vllm/v1/worker/gpu_model_runner.py`; the CPU runner inherits
them): `_batch_mm_inputs_from_scheduler` returning `(mm_hashes, mm_kwargs, ...)` in encoding order,
the identifier of an item given a uuid being that uuid, and each encoder batch running the tower's
modules once on its items in order. Sites, by vLLM model class (`VISION_MODULES`): LLaVA's
`vision_tower.vision_model.encoder.layers[k]` (vLLM builds the tower only up to the feature layer,
so deeper blocks are absent: refused) and `multi_modal_projector`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

UUID_PREFIX = "evprobe-"  # identifiers the capture gives; others are never read
# vLLM model class -> (the vision tower's block list, the projector), attribute paths from the model
VISION_MODULES: dict[str, tuple[str, str]] = {
    "LlavaForConditionalGeneration": ("vision_tower.vision_model.encoder.layers", "multi_modal_projector"),
}


def _attr(obj: Any, path: str) -> Any:
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


def check_sites(model_name: str, n_blocks: int | None, sites: list[str]) -> list[int | None]:
    """Per site the vision block index (None: the projector), one line for a site vLLM's model lacks."""
    if n_blocks is None:
        raise ValueError(f"{model_name} has no vision sites evprobe reads through vLLM (checked: "
                         f"{', '.join(VISION_MODULES)}); read them with backend 'hf'")
    out: list[int | None] = []
    for site in sites:
        if site == "projector_out":
            out.append(None)
        elif site.startswith("vision_block.L") and site[len("vision_block.L"):].isdigit():
            k = int(site[len("vision_block.L"):])
            if k >= n_blocks:
                raise ValueError(f"site {site}: vLLM's {model_name} builds {n_blocks} vision block(s) (the tower up "
                                 f"to its feature layer); use vision_block.L0..L{n_blocks - 1}, or backend 'hf'")
            out.append(k)
        else:
            raise ValueError(f"site {site!r} is not a vision site (vision_block.L<k>, projector_out)")
    return out


def vision_facts(model: Any) -> dict[str, Any]:
    """{"model": vLLM's model class, "blocks": the vision blocks it builds, None when not a checked VLM}."""
    name = type(model).__name__
    paths = VISION_MODULES.get(name)
    return {"model": name, "blocks": None if paths is None else len(_attr(model, paths[0]))}


def vision_modules(model: Any, sites: list[str]) -> list[Any]:
    """The module whose output each site is (`vision_block.L<k>`, `projector_out`), one line otherwise."""
    facts = vision_facts(model)
    index = check_sites(facts["model"], facts["blocks"], sites)
    blocks, projector = (_attr(model, p) for p in VISION_MODULES[facts["model"]])
    return [projector if k is None else blocks[k] for k in index]


class VisionWorker:
    """The worker-side vision-site capture (a mixin of evprobe's vLLM worker extension)."""

    def evprobe_vision_facts(self) -> dict[str, Any]:
        """vision_facts of the worker's model (the client checks sites with it before any request)."""
        return vision_facts(self.model_runner.get_model())  # type: ignore[attr-defined]

    def evprobe_vision_begin(self, sites: list[str]) -> dict[str, Any]:
        """Hook each site's module and the runner's encoder batching. Returns vision_facts."""
        self._evprobe_vision_stop()
        runner = self.model_runner  # type: ignore[attr-defined]
        model = runner.get_model()
        modules = vision_modules(model, sites)
        order: list[str] = []  # identifiers of the current encoder call, in batching order
        cursor = [0] * len(sites)  # per site: how many of `order` its hook has taken
        sums: dict[str, list[list]] = {}  # identifier -> per site [sum (width,) float32, token count]
        batch = runner._batch_mm_inputs_from_scheduler

        def batched(scheduler_output: Any) -> Any:
            got = batch(scheduler_output)
            order[:] = [str(h) for h in got[0]]
            cursor[:] = [0] * len(sites)
            return got

        def make_hook(slot: int):
            def hook(module: Any, args: Any, output: Any) -> None:
                value = output[0] if isinstance(output, tuple) else output  # (items, tokens, width) or (tokens, width)
                if value.dim() == 2:
                    value = value.unsqueeze(0)
                start = cursor[slot]
                if start + value.shape[0] > len(order):
                    raise RuntimeError(f"vision site {sites[slot]}: the encoder ran {start + value.shape[0]} items but "
                                       f"the step scheduled {len(order)}; evprobe's vision capture was checked on vLLM "
                                       "0.32.0's encoder batching only")
                cursor[slot] = start + value.shape[0]
                per_item = value.float().sum(dim=1).cpu().numpy()  # (items, width)
                for k, ident in enumerate(order[start:start + value.shape[0]]):
                    if ident.startswith(UUID_PREFIX):
                        slots = sums.setdefault(ident, [[None, 0] for _ in sites])
                        slots[slot] = [per_item[k].astype(np.float32), int(value.shape[1])]
            return hook

        runner._batch_mm_inputs_from_scheduler = batched  # this instance only; removed by _evprobe_vision_stop
        handles = [m.register_forward_hook(make_hook(i)) for i, m in enumerate(modules)]
        self._evprobe_vision = {"handles": handles, "sums": sums, "sites": list(sites)}
        return vision_facts(model)

    def evprobe_vision_end(self, folder: str) -> dict[str, Any] | None:
        """Remove the hooks; hand back {"files": per site an .npy of (items, width) float32 token sums
        in `folder`, "items": the items' identifiers, "counts": (items, sites) tokens summed}; None
        when no capture ran."""
        import os

        state = self._evprobe_vision_stop()
        if state is None:
            return None
        items = sorted(state["sums"])
        missing = [(i, s) for i in items for s, (v, _) in enumerate(state["sums"][i]) if v is None]
        if missing:
            raise RuntimeError(f"item {missing[0][0]}: site {state['sites'][missing[0][1]]} never ran on it")
        files = []
        for s in range(len(state["sites"]) if items else 0):
            name = f"vision-{items[0]}-S{s}.npy"
            tmp = os.path.join(folder, f".{name}.tmp.npy")
            np.save(tmp, np.stack([state["sums"][i][s][0] for i in items]), allow_pickle=False)  # (items, width)
            os.replace(tmp, os.path.join(folder, name))  # whole or absent
            files.append(name)
        return {"files": files, "items": items, "counts": [[n for _, n in state["sums"][i]] for i in items]}

    def _evprobe_vision_stop(self) -> dict[str, Any] | None:
        state = getattr(self, "_evprobe_vision", None)
        if state is not None:
            for handle in state["handles"]:
                handle.remove()
            self.model_runner.__dict__.pop("_batch_mm_inputs_from_scheduler", None)  # type: ignore[attr-defined]
            self._evprobe_vision = None
        return state


__all__ = ["UUID_PREFIX", "VISION_MODULES", "VisionWorker", "check_sites", "vision_facts", "vision_modules"]
