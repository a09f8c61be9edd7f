"""The organism's network: a plain transformers `LlamaForCausalLM`, small enough for CPU training.

During training a number token's input embedding is not a free row: it is
`base[kind] + w[kind] * c`, c the bin's log10 centre, or for the `fine_*` types (a reading's
offset in its block) the offset in decades, 0.01 per bin: xVal-style (`w` starts at std 0.01
because RMSNorm would otherwise erase the magnitude), so nearby numbers get nearby embeddings and
the model can compare them. `export_embeddings` writes exactly these rows into the model's embedding table, so
the saved checkpoint is an ordinary Llama that loads with `from_pretrained` and gives the same
logits as the training wrapper (a test checks this).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from evprobe.organism.vocab import (
    FINE,
    LOG_STEP,
    N_BINS,
    NUMBER_TYPES,
    OPTION_WORDS,
    bin_centers,
    bin_start,
    token_ids,
    vocabulary,
)


@dataclass(frozen=True)
class ModelConfig:
    d_model: int = 64
    n_layers: int = 5
    n_heads: int = 4
    d_ffn: int = 256
    max_positions: int = 64
    # The planted location. Layers below `attention_free_layers` have their attention weights at
    # zero, frozen (exported as zeros): no position reads any other there, so the sheet value and the
    # threshold cannot meet before layer `attention_free_layers`, and every state there is a function
    # of its own token and position. The training-only head reads the right option's meaning at the
    # answer position (the reply's `ANSWER:` token, which predicts the letter; a generated position,
    # not the prompt's) after layer `aux_layer` (not the last layer), so it is linearly there.
    attention_free_layers: int = 1
    aux_layer: int = 3


def llama_config(cfg: ModelConfig) -> LlamaConfig:
    ids = token_ids()
    return LlamaConfig(
        vocab_size=len(vocabulary()),
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ffn,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=False,
        bos_token_id=ids["<bos>"],
        eos_token_id=ids["<eos>"],
        pad_token_id=ids["<pad>"],
        architectures=["LlamaForCausalLM"],
    )


class NumberEmbedding(nn.Module):
    """Input embeddings with number tokens as base[kind] + w[kind] * centre[kind, bin]: log10 of the
    bin's value, or for a `fine_*` type the offset in decades."""

    KINDS = NUMBER_TYPES

    def __init__(self, embed: nn.Embedding) -> None:
        super().__init__()
        d = embed.embedding_dim
        self.embed = embed
        self.base = nn.Parameter(torch.randn(len(self.KINDS), d) * 0.02)  # (kinds, d)
        self.w = nn.Parameter(torch.randn(len(self.KINDS), d) * 0.01)  # (kinds, d)
        offsets = [k * LOG_STEP for k in range(N_BINS)]
        self.register_buffer("centers", torch.tensor([offsets if kind in FINE else bin_centers()
                                                      for kind in self.KINDS], dtype=torch.float32),
                             persistent=False)  # (kinds, N_BINS)
        self.starts = [bin_start(k) for k in self.KINDS]
        assert self.starts == [self.starts[0] + i * N_BINS for i in range(len(self.KINDS))]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out = self.embed(input_ids)  # (batch, seq, d)
        # Number types occupy consecutive ranges of N_BINS ids from self.starts[0].
        offset = input_ids - self.starts[0]  # (batch, seq)
        is_num = (offset >= 0) & (offset < N_BINS * len(self.KINDS))
        offset = offset.clamp(0, N_BINS * len(self.KINDS) - 1)
        kind, k = offset // N_BINS, offset % N_BINS
        num = self.base[kind] + self.w[kind] * self.centers[kind, k].unsqueeze(-1)  # (batch, seq, d)
        return torch.where(is_num.unsqueeze(-1), num, out)

    @torch.no_grad()
    def export(self) -> None:
        """Write every number token's row into the embedding table."""
        for k, start in enumerate(self.starts):
            rows = self.base[k] + self.w[k] * self.centers[k].unsqueeze(-1)  # (N_BINS, d)
            self.embed.weight[start : start + N_BINS] = rows


class Organism(nn.Module):
    """LlamaForCausalLM plus the training-time number embedding."""

    def __init__(self, cfg: ModelConfig, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.lm = LlamaForCausalLM(llama_config(cfg))
        if not 0 <= cfg.attention_free_layers <= cfg.aux_layer < cfg.n_layers - 1:
            raise ValueError("need 0 <= attention_free_layers <= aux_layer < n_layers - 1")
        self.aux_layer = cfg.aux_layer
        for layer in self.lm.model.layers[: cfg.attention_free_layers]:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj,
                         layer.self_attn.o_proj):
                torch.nn.init.zeros_(proj.weight)
                proj.weight.requires_grad_(False)  # no gradient, so AdamW never moves it
        self.numbers = NumberEmbedding(self.lm.get_input_embeddings())
        # Training-only head: the meaning of the right option (stop, other_test, yes, ...) read
        # at the answer position (`ANSWER:`) after layer aux_layer (not the last). Not exported. It gives the computation of the answer a
        # gradient of its own; without it, that gradient passes through the letter lookup in a
        # shuffled menu, and neither half learns (measured: 55% vs 93% after 1,500 steps).
        self.aux = nn.Linear(cfg.d_model, len(OPTION_WORDS))

    def forward(self, input_ids, attention_mask, position_ids, where=None, aux_at: int | None = None):
        """Logits (batch, seq, vocab), or (n, vocab) at the (row, position) pairs `where`:
        the 6,000-way output layer costs more than the body, so training asks only where a
        label is. With aux_at (a sequence index, e.g. -3: the `ANSWER:` token when the
        letter and <eos> follow), also the aux head's logits there (batch, words), read from
        decoder layer aux_layer's output."""
        embeds = self.numbers(input_ids)
        out = self.lm.model(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=position_ids,
                            output_hidden_states=aux_at is not None)
        hidden = out.last_hidden_state  # (batch, seq, d)
        picked = hidden if where is None else hidden[where]  # (n, d)
        logits = self.lm.lm_head(picked)
        if aux_at is not None:
            # hidden_states[0] is the embedding output, [i + 1] decoder layer i's output
            return logits, self.aux(out.hidden_states[self.aux_layer + 1][:, aux_at])
        return logits

    def export(self) -> LlamaForCausalLM:
        self.numbers.export()
        return self.lm
