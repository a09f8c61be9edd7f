"""A toy architecture the toolkit does not know, and its adapter: the whole of adding an
architecture is the `register_adapter(...)` call at the bottom (docs: Adding a site).

Its children have names no automatic rule looks for (`backbone.stack` blocks of `mixer` + `ffwd`,
the heads' output projection `proj_out`), so without the adapter it cannot be found at all.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from evprobe.hooks.sites import Adapter, register_adapter


class ToyConfig(PretrainedConfig):
    model_type = "toy_lm"

    def __init__(self, vocab_size: int = 520, hidden_size: int = 32, num_hidden_layers: int = 2,
                 num_attention_heads: int = 4, **kwargs) -> None:
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        super().__init__(**kwargs)


class Mixer(nn.Module):
    """Causal multi-head attention; padding keys masked (left padding), heads side by side into proj_out."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj_out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # x (batch, seq, d), mask (batch, seq)
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)  # each (b, h, n, hd)
        keep = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()[None, None] & mask[:, None, None, :].bool()
        keep = keep | torch.eye(n, dtype=torch.bool, device=x.device)[None, None]  # a padded query sees itself
        z = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)  # (b, h, n, hd)
        return self.proj_out(z.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mixer = Mixer(d, heads)
        self.ffwd = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.mixer(self.norm1(x), mask)
        return x + self.ffwd(self.norm2(x))


class Backbone(nn.Module):
    def __init__(self, config: ToyConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.stack = nn.ModuleList(Block(config.hidden_size, config.num_attention_heads)
                                   for _ in range(config.num_hidden_layers))


class ToyLM(PreTrainedModel):
    config_class = ToyConfig
    base_model_prefix = "backbone"

    def __init__(self, config: ToyConfig) -> None:
        super().__init__(config)
        self.backbone = Backbone(config)
        self.head = nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.backbone.embed

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **kwargs) -> CausalLMOutput:
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        x = self.backbone.embed(input_ids)
        for block in self.backbone.stack:
            x = block(x, mask)
        return CausalLMOutput(logits=self.head(x))


def toy_model(seed: int = 0) -> ToyLM:
    torch.manual_seed(seed)
    return ToyLM(ToyConfig()).eval()


ADAPTER = register_adapter(Adapter(
    name="toy", model_types=("toy_lm",), decoder_layers="backbone.stack", attention="mixer", mlp="ffwd",
    head_input="proj_out", vision_blocks="", projector="",
))
