"""A tiny random text-only Llama saved as a folder: the model every backend can load offline.

vLLM's CPU attention refuses the tiny VLMs' head size (16), so this model has two heads of 64
(hidden 128). It shares the tiny models' tokenizer (`hooks.tiny_tokenizer`) with Llama-style chat
markers and a chat template that reads string or list content, so the benchmark's text-only items
render the same through transformers, vLLM and an OpenAI-compatible server.
"""

from __future__ import annotations

from pathlib import Path

N_LAYERS = 4
D_MODEL = 128
N_HEADS = 2
HEAD_DIM = 64  # vLLM's CPU attention: 64 works, 16 is refused
D_MLP = 256
# Weights ten times the usual init: replies then depend on the prompt (at 0.02 every prompt gets
# the same repeated token), so a comparison of backends compares something.
INIT_STD = 0.2

_SPECIALS = ["<s>", "</s>", "<pad>", "<unk>", "[INST]", "[/INST]"]


def save_tiny_text_model(folder: str | Path, *, seed: int = 0, thinking_switch: bool = False) -> Path:
    """Build the tiny text Llama (random weights from `seed`) and save it with its tokenizer and
    chat template in `folder` (created; float32 safetensors). Returns the folder. `thinking_switch`:
    a template with Qwen3's enable_thinking switch (hooks.chat_templates.chat_template)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from evprobe.hooks.chat_templates import chat_template
    from evprobe.hooks.tiny_tokenizer import build_tokenizer

    tok = build_tokenizer(special_tokens=_SPECIALS,
                          named=dict(unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"))
    tok.chat_template = chat_template(bos="<s>", user="[INST] ", user_end=" [/INST]", assistant="",
                                       assistant_end="</s>", image="", thinking_switch=thinking_switch)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=D_MODEL, intermediate_size=D_MLP,
                         num_hidden_layers=N_LAYERS, num_attention_heads=N_HEADS, num_key_value_heads=N_HEADS,
                         head_dim=HEAD_DIM, max_position_embeddings=2048, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=False,
                         initializer_range=INIT_STD)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        # Tokens that are not whole UTF-8 on their own (lone bytes >= 0x80) get a zero output row:
        # their logit is exactly 0 while ~400 random logits compete, so greedy decoding never
        # writes them and every reply is text that decodes the same everywhere (transformers
        # writes U+FFFD for a broken byte sequence, vLLM's detokenizer leaves it out).
        broken = [i for i in range(len(tok)) if "\ufffd" in tok.decode([i])]
        model.lm_head.weight[broken] = 0.0
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


BASE_ARCHS: tuple[str, ...] = ("gpt2", "llama")


def save_tiny_base_model(folder: str | Path, *, arch: str = "gpt2", seed: int = 0) -> Path:
    """A tiny random BASE language model (no chat template: its prompts go in raw) saved in
    `folder`: "gpt2" (GPT2LMHeadModel, learned positions, `transformer.h` blocks) or "llama"
    (LlamaForCausalLM with the same sizes as `save_tiny_text_model`). The tokenizer adds no BOS,
    as GPT-2's does not. Returns the folder."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    from evprobe.hooks.tiny_tokenizer import build_tokenizer

    if arch not in BASE_ARCHS:
        raise ValueError(f"unknown base architecture {arch!r}; choose from {', '.join(BASE_ARCHS)}")
    tok = build_tokenizer(special_tokens=["<|endoftext|>"],
                          named=dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>"))
    eos = tok.eos_token_id
    torch.manual_seed(seed)
    if arch == "gpt2":
        config = GPT2Config(vocab_size=len(tok), n_embd=D_MODEL, n_layer=N_LAYERS, n_head=N_HEADS, n_inner=D_MLP,
                            n_positions=1024, bos_token_id=eos, eos_token_id=eos, initializer_range=INIT_STD)
        model = GPT2LMHeadModel(config).eval()
    else:
        config = LlamaConfig(vocab_size=len(tok), hidden_size=D_MODEL, intermediate_size=D_MLP,
                             num_hidden_layers=N_LAYERS, num_attention_heads=N_HEADS, num_key_value_heads=N_HEADS,
                             head_dim=HEAD_DIM, max_position_embeddings=2048, bos_token_id=eos, eos_token_id=eos,
                             tie_word_embeddings=False, initializer_range=INIT_STD)
        model = LlamaForCausalLM(config).eval()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder
