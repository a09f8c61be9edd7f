"""The batch_invariance section: batched vs batch-1 capture and greedy replies, and what to expect."""

from __future__ import annotations

from typing import Any

from .items import Rows
from .results import BatchInvariance


INVARIANCE_ADVICE = (
    "What to expect: a row's numbers depend on the batch it runs in. Left padding changes the shapes the "
    "kernels see, so matrix products and attention reduce in another order: in float32 the differences stay at "
    "rounding level and greedy replies match; in bfloat16 on a GPU they grow through the layers and a greedy "
    "reply can change after a near-tie between two tokens. Bit-stable runs: batch size 1 (--batch-size 1, no "
    "padding), float32 (--dtype float32), deterministic kernels (torch.use_deterministic_algorithms(True), "
    "CUBLAS_WORKSPACE_CONFIG=:4096:8, TF32 off), decode_cache dynamic and vision_attention stock (the settings "
    "that change floating-point order), and the same GPU, driver, torch and transformers versions.")


def run_invariance(handle: Any, rows: Rows, b: int) -> BatchInvariance:
    import numpy as np

    from evprobe.bench.budgets import default_reply_budget as max_new_tokens
    from evprobe.hooks.capture import capture_batch
    from evprobe.hooks.generation import generate

    prompts, images = rows.prompts("direct", b), rows.image_lists(b)
    layers = list(range(handle.n_layers))
    cap = lambda p, i: capture_batch(handle, p, i, layers=layers, positions=["last"]).acts  # noqa: E731
    batched = cap(prompts, images)  # (rows, layers, 1, d_model)
    single = np.concatenate([cap(prompts[i:i + 1], images[i:i + 1]) for i in range(b)])
    diff = np.abs(batched - single).max(axis=(0, 2, 3))  # (layers,)
    scale = np.abs(single).max(axis=(0, 2, 3))
    n = max_new_tokens("direct", "standard")
    together = generate(handle, prompts, images, max_new_tokens=n, batch_size=b)
    alone = generate(handle, prompts, images, max_new_tokens=n, batch_size=1)
    same = sum(x.token_ids == y.token_ids for x, y in zip(together, alone, strict=True))
    return BatchInvariance(b, b, tuple(layers), tuple(float(x) for x in diff / np.maximum(scale, 1e-30)), same / b, n)
