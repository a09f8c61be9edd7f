"""The vision tower's per-window attention as one call per layer (`set_vision_attention`).

Qwen2.5-VL and Qwen3-VL run their vision attention, under every non-flash implementation,
as one SDPA call per window (Qwen2.5-VL) or per image (Qwen3-VL): a Python loop over
`torch.split(..., cu_seqlens)`, thousands of small launches per batch on a GPU. Under a
flash implementation the same module calls the registered attention function ONCE per layer
with the window boundaries (`cu_seq_lens_q`/`cu_seq_lens_k`, `max_length_q`/`max_length_k`).
"packed" registers a function that answers that one call: it pads every window to the
longest, runs one batched SDPA with a key-padding mask, and packs the result back.

Memory: q, k and v are copied as (n_windows, heads, max_window_len, head_dim), every window
padded to the longest, i.e. n_windows x max_window_len tokens (an SDPA backend that materialises
scores adds n_windows x heads x max_window_len^2). Equal windows (the benchmark's square sheets)
have no padding and take the no-mask path.
The text model keeps its own implementation; only the vision sub-config is switched.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

    from evprobe.hooks.handle import Handle

VISION_ATTENTIONS: tuple[str, ...] = ("stock", "packed")

# The name under which the packed function is registered. It must contain "flash": the vision
# attention modules choose their branch by `is_flash_attention_requested(config)`, which is
# `"flash" in config._attn_implementation`, and only that branch passes the window boundaries
# and calls the attention function once. (It must not contain "sdpa" or "flex_attention",
# nor read "flash_attention_<n>": transformers would run those implementations' own checks.)
PACKED_IMPLEMENTATION = "evprobe_packed_flash"

# model_type -> why its vision attention takes the packed call (read in transformers 5.x and
# checked by tests/hooks/test_vision_attention.py). The other tiny archs have nothing to pack:
# idefics3/smolvlm (SigLIP-style), llava/llava_next/llava_next_video (CLIP) and gemma3 (SigLIP)
# attend over a (n_images, patches) batch of equal-size images in one call already and never
# pass cu_seqlens.
PACKED_ARCHS: dict[str, str] = {
    "qwen2_5_vl": "Qwen2_5_VLVisionAttention: one SDPA per window (stock) -> cu_seqlens under flash",
    "qwen3_vl": "Qwen3VLVisionAttention: one SDPA per image (stock) -> cu_seqlens under flash",
    "mistral3": "PixtralVisionModel: one SDPA with a dense block mask (stock) -> cu_seqlens under flash",
}

# model -> the vision implementation it had before "packed" (e.g. "sdpa", "eager"), for "stock".
_STOCK: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()


def packed_attention(
    module: nn.Module,
    query: torch.Tensor,  # (1, heads, total_tokens, head_dim), windows back to back
    key: torch.Tensor,  # (1, kv_heads, total_tokens, head_dim)
    value: torch.Tensor,  # (1, kv_heads, total_tokens, head_dim)
    attention_mask: torch.Tensor | None = None,
    scaling: float | None = None,
    dropout: float = 0.0,
    is_causal: bool = False,
    cu_seq_lens_q: torch.Tensor | None = None,  # (n_windows + 1,) int32 window boundaries
    cu_seq_lens_k: torch.Tensor | None = None,
    max_length_q: int | None = None,
    max_length_k: int | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention within each window of a packed sequence, as one batched SDPA call.

    Returns ((1, total_tokens, heads, head_dim), None), as transformers' attention functions do.
    """
    import torch
    import torch.nn.functional as F

    if cu_seq_lens_q is None or attention_mask is not None or is_causal:
        raise ValueError(f"{PACKED_IMPLEMENTATION} serves non-causal packed vision attention only "
                         "(cu_seq_lens_q given, no attention mask); use it on a vision sub-config")
    if cu_seq_lens_k is not cu_seq_lens_q and not torch.equal(cu_seq_lens_k, cu_seq_lens_q):
        raise ValueError(f"{PACKED_IMPLEMENTATION}: cu_seq_lens_k must equal cu_seq_lens_q (self-attention)")
    if dropout or module.training:
        raise ValueError(f"{PACKED_IMPLEMENTATION} is for inference: got dropout={dropout}, training={module.training}")
    batch, heads, total, head_dim = query.shape
    if batch != 1 or int(cu_seq_lens_q[-1]) != total:
        raise ValueError(f"{PACKED_IMPLEMENTATION}: expected one packed sequence of {total} tokens, got batch "
                         f"{batch} and cu_seq_lens_q ending at {int(cu_seq_lens_q[-1])}")
    if key.shape[1] != heads:  # grouped-query attention: each key/value head serves heads // kv_heads
        if heads % key.shape[1]:
            raise ValueError(f"{PACKED_IMPLEMENTATION}: {heads} query heads not a multiple of {key.shape[1]} key heads")
        key = key.repeat_interleave(heads // key.shape[1], dim=1)
        value = value.repeat_interleave(heads // value.shape[1], dim=1)

    starts = cu_seq_lens_q[:-1].long()  # (n_windows,)
    lengths = cu_seq_lens_q[1:].long() - starts  # (n_windows,)
    longest = int(max_length_q) if max_length_q is not None else int(lengths.max())
    pos = torch.arange(longest, device=query.device)  # (L,)
    valid = pos[None, :] < lengths[:, None]  # (n_windows, L): real token, not padding
    src = (starts[:, None] + pos[None, :]).clamp(max=total - 1)  # (n_windows, L) token index

    def windows(x: torch.Tensor) -> torch.Tensor:  # (1, heads, total, d) -> (n_windows, heads, L, d)
        return x[0][:, src].permute(1, 0, 2, 3)

    # Key padding only: every real query row sees at least its own window, so no row is all
    # masked; padded query rows are computed and then dropped by `valid` below.
    mask = None if bool(valid.all()) else valid[:, None, None, :]  # (n_windows, 1, 1, L)
    out = F.scaled_dot_product_attention(windows(query), windows(key), windows(value),
                                         attn_mask=mask, scale=scaling)  # (n_windows, heads, L, d)
    return out.permute(0, 2, 1, 3)[valid].unsqueeze(0), None  # (1, total, heads, d), window order


def packed_archs() -> tuple[str, ...]:
    """Model types (`handle.arch`) whose vision attention "packed" supports."""
    return tuple(PACKED_ARCHS)


def set_vision_attention(handle: Handle, name: str) -> None:
    """Switch the vision tower's attention: "stock" (the implementation it was loaded with, e.g.
    "sdpa" or "eager") or "packed" (one batched call per layer; `PACKED_ARCHS` only)."""
    from transformers import AttentionInterface

    if name not in VISION_ATTENTIONS:
        raise ValueError(f"unknown vision attention {name!r}; choose one of {', '.join(VISION_ATTENTIONS)}")
    if name == "packed" and handle.arch not in PACKED_ARCHS:
        raise ValueError(f"vision attention 'packed' does not support {handle.arch!r}; "
                         f"supported: {', '.join(PACKED_ARCHS)}")
    model = handle.model
    vision = getattr(model.config, "vision_config", None)
    if vision is None:
        if name == "stock":
            return
        raise ValueError(f"{handle.model_id}: config has no vision_config to set")
    current = vision._attn_implementation
    if name == "packed":
        if current != PACKED_IMPLEMENTATION:
            _STOCK[model] = current
        AttentionInterface.register(PACKED_IMPLEMENTATION, packed_attention)
        target = PACKED_IMPLEMENTATION
    else:
        target = _STOCK.pop(model, "sdpa") if current == PACKED_IMPLEMENTATION else current
    if target != current:
        # Set on the vision config itself, not through model.set_attn_implementation: from transformers
        # 5.25 that treats any name holding "flash" as a hub kernel to fetch (and fails offline), while
        # the vision modules read config._attn_implementation at every forward (tested on 5.24 and 5.25).
        vision._attn_implementation = target
