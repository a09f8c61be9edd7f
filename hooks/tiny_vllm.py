"""A tiny random LLaVA saved as a folder that vLLM loads: the vision-language model of the engine tests.

`hooks.tiny_models`' tiny LLaVA has head_dim 16, which vLLM's CPU attention refuses, so this one
keeps its vision tower, processor, tokenizer and chat template (`tiny("llava")`'s) and
gives the language model hooks.tiny_text's shape: hidden 128, two heads of 64, MLP 256, 4 layers,
weights at std 0.2 (replies then depend on the prompt). transformers 5 saves the CLIP tower's keys
as `vision_tower.<rest>`; vLLM 0.32's loader reads the hub's layout, `vision_tower.vision_model.<rest>`
(what llava-hf checkpoints hold, and what transformers 5 loads as well), so the keys are renamed on save.
"""

from __future__ import annotations

from pathlib import Path

from evprobe.hooks.tiny_text import D_MLP, D_MODEL, HEAD_DIM, INIT_STD, N_HEADS

TOWER_PREFIX = "vision_tower."  # what transformers 5 writes
HUB_TOWER_PREFIX = "vision_tower.vision_model."  # what vLLM's LLaVA loader reads (llava-hf's checkpoints)


def hub_key(key: str) -> str:
    """A saved key in the hub's layout: `vision_tower.X` -> `vision_tower.vision_model.X` (others as they are)."""
    if key.startswith(TOWER_PREFIX) and not key.startswith(HUB_TOWER_PREFIX):
        return HUB_TOWER_PREFIX + key[len(TOWER_PREFIX):]
    return key


def save_tiny_llava_for_engines(folder: str | Path, *, seed: int = 0) -> Path:
    """Build the tiny engine LLaVA (random weights from `seed`: the same folder bytes every time) and
    save it with its processor in `folder` (created; float32 safetensors, hub key layout). Returns
    the folder."""
    import torch
    from evprobe.hooks.tiny_models import tiny
    from safetensors.torch import load_file, save_file
    from transformers import LlavaConfig, LlavaForConditionalGeneration

    parts = tiny("llava")  # its processor (tokenizer, PIL image processor, chat template) and config
    processor, tok = parts.processor, parts.tokenizer
    config = LlavaConfig.from_dict(parts.model.config.to_dict())
    text = {"hidden_size": D_MODEL, "intermediate_size": D_MLP, "num_attention_heads": N_HEADS,
            "num_key_value_heads": N_HEADS, "head_dim": HEAD_DIM, "initializer_range": INIT_STD}
    for name, value in text.items():
        setattr(config.text_config, name, value)
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    with torch.no_grad():
        # as hooks.tiny_text: tokens that are no whole UTF-8 alone get a zero output row (logit exactly 0),
        # so greedy replies never write them and decode the same in every backend
        broken = [i for i in range(len(tok)) if "\ufffd" in tok.decode([i])]
        model.lm_head.weight[broken] = 0.0
    gen = model.generation_config
    gen.pad_token_id, gen.eos_token_id, gen.bos_token_id = tok.pad_token_id, tok.eos_token_id, tok.bos_token_id
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    processor.save_pretrained(folder)
    weights = sorted(folder.glob("*.safetensors"))
    for path in weights:  # the hub layout, written whole then renamed into place
        tensors = {hub_key(k): v for k, v in load_file(str(path)).items()}
        tmp = path.with_name(f".{path.name}.tmp")
        save_file(tensors, str(tmp), metadata={"format": "pt"})
        tmp.replace(path)
    index = folder / "model.safetensors.index.json"
    if index.exists():  # one file at this size; a sharded save's index would name the old keys
        raise RuntimeError(f"{index}: the tiny LLaVA was saved in shards; its index is not renamed")
    return folder


__all__ = ["HUB_TOWER_PREFIX", "TOWER_PREFIX", "hub_key", "save_tiny_llava_for_engines"]
