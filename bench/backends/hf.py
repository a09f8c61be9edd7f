"""`--backend hf`: transformers' `generate` in this process, one batch per call (the default).

The only backend that capture, steering and patching share: the Handle is the same object.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from evprobe.bench.backends.base import BackendOptions, ModelPrompt, Reply, Resources, Sampling
from evprobe.bench.backends.registry import register_backend
from evprobe.core.errors import InputError
from evprobe.core.flags import setting
from evprobe.core.json_types import JsonObject

if TYPE_CHECKING:
    from evprobe.bench.runner import RunConfig

# hooks.generation.DECODE_CACHES and hooks.vision_attention.VISION_ATTENTIONS, spelled here because
# bench imports hooks only inside functions (tests/bench/test_runner_speed.py checks they agree).
DecodeCache = Literal["dynamic", "static", "compiled"]
VisionAttention = Literal["stock", "packed"]


@dataclass(frozen=True)
class HfOptions(BackendOptions):
    """The hf backend's throughput settings (README: "Throughput settings"). None changes a greedy
    record in float32; the two that change floating-point order (decode_cache, vision_attention) are
    pinned in run.json."""

    prefetch: int = setting(0, "batches whose inputs (images, prompts, processor) a thread prepares ahead while the "
                               "model runs; 0 = none")
    decode_cache: DecodeCache = setting(
        "dynamic", "KV cache of decoding: dynamic, static, or static with the decoding step compiled (torch.compile)")
    vision_attention: VisionAttention = setting(
        "stock", "the vision tower's attention: stock, or packed (one call per layer instead of one per window; "
                 "Qwen2.5-VL, Qwen3-VL, Pixtral)")

    def check(self, config: Any) -> None:
        if type(self.prefetch) is not int or self.prefetch < 0:
            raise InputError(f"--prefetch must be a non-negative integer, got {self.prefetch}")
        for name, value, choices in (("decode-cache", self.decode_cache, get_args(DecodeCache)),
                                     ("vision-attention", self.vision_attention, get_args(VisionAttention))):
            if value not in choices:
                raise InputError(f"--{name} {value!r} is not one of {', '.join(choices)}")

    def pins(self) -> JsonObject:
        # floating-point order of the model's arithmetic; None when the default, so a run.json
        # written before these settings resumes
        return {"decode_cache": None if self.decode_cache == "dynamic" else self.decode_cache,
                "vision_attention": None if self.vision_attention == "stock" else self.vision_attention}


@register_backend("hf", options=HfOptions, help="transformers, in this process",
                  model_keys=("device_map", "max_memory", "offload_folder", "attn_implementation"),
                  takes_handle=True, native_video=True, thinking_budget=True)
def open_backend(config: RunConfig, handle: Any = None) -> HFBackend:
    if handle is None:
        from evprobe.bench.model_config import load_model

        handle = load_model(config.model, config.source)
    return HFBackend(handle, config)


class HFBackend:
    """Replies of a Handle in two steps: `prepare` (CPU: images read, prompts rendered, the
    processor called) and the call (inputs moved to the model, generate, decode), so the job
    runner can prepare the next batch on a thread while this one generates."""

    name = "hf"

    def __init__(self, handle: Any, config: RunConfig) -> None:
        from evprobe.hooks.vision_attention import set_vision_attention

        self.handle, self.config = handle, config
        options: HfOptions = config.backend_options  # type: ignore[assignment]
        self.decode_cache, self.prefetch = options.decode_cache, options.prefetch  # prefetch: the job runner reads it
        self.budget = config.budget_tokens
        self.limit = self.budget.total  # the most new tokens a reply can take, reasoning included
        self.sampling = Sampling(config.temperature, config.top_p, config.seed)
        self.resources = Resources()
        try:
            set_vision_attention(handle, options.vision_attention)
        except ValueError as err:  # an arch without windowed vision attention: before any record
            raise InputError(f"--vision-attention {options.vision_attention}: {err}; use --vision-attention stock") from None
        # The prefetch thread calls its own copy of the processor: no tokenizer object is used by
        # two threads at once (the main thread decodes with the handle's while the thread encodes).
        self.processor = copy.deepcopy(handle.processor) if self.prefetch else handle.processor
        from evprobe.hooks.inputs import takes_images

        self.takes_images = takes_images(handle.processor)

    def check_context(self, prompt: ModelPrompt) -> None:
        """Refuse, before any model call, a prompt whose tokens (its images' or clip frames' included)
        and reply do not fit the model's context (`hooks.inputs.context_length`)."""
        from evprobe.hooks.inputs import context_length, encode_inputs

        limit = context_length(self.handle.model)
        if limit is None:
            return
        images = self.prepare_images(prompt)
        n = int(encode_inputs(self.handle, [prompt.text], [images], for_generation=True)["input_ids"].shape[1])
        if n + self.limit > limit:
            raise InputError(
                f"item {prompt.key}: its prompt is {n} tokens ({len(images)} images or clip "
                f"frames included) and its reply up to {self.limit}, beyond the {limit}-token context of "
                f"--model {self.config.source}; lower the budget (--max-new-tokens, --thinking-budget), generate "
                "clips with fewer --frames, select items with fewer images (--requests), or run a model with a "
                "longer context")

    def prepare_images(self, prompt: ModelPrompt) -> list[Any]:
        """The images the model reads for a prompt (a clip: its frames)."""
        from evprobe.bench.manifest import load_images

        return load_images(prompt.images, clips_as_video=self.config.video_input == "native")

    def prepare(self, prompts: list[ModelPrompt]) -> Any:
        """The batch's processor output, on the CPU."""
        from evprobe.hooks.inputs import encode_inputs

        images = [self.prepare_images(p) for p in prompts]
        return encode_inputs(self.handle, [p.text for p in prompts], images, for_generation=True,
                             processor=self.processor)

    def __call__(self, prompts: list[ModelPrompt], prepared: Any = None) -> list[Reply]:
        from evprobe.hooks.generation import candidate_token_ids, generate_encoded
        from evprobe.hooks.inputs import to_model

        letters = _shared_letters(prompts)
        ids = None if letters is None else candidate_token_ids(self.handle, letters)
        t = time.perf_counter()
        enc = to_model(self.handle, self.prepare(prompts) if prepared is None else prepared)
        s = self.sampling
        gens = generate_encoded(self.handle, enc, max_new_tokens=self.budget.reply, decode_cache=self.decode_cache,
                                temperature=s.temperature, top_p=s.top_p,
                                seed=None if s.greedy else s.call_seed([p.key for p in prompts]),
                                first_token_ids=ids, thinking_budget=self.budget.thinking)
        replies = [Reply(g.text, g.n_prompt_tokens, g.n_new_tokens,
                         option_logprobs=_letter_logprobs(p, letters, g.first_logprobs),
                         cut_off=g.cut_off, thinking_closed=g.thinking_closed)
                   for p, g in zip(prompts, gens)]
        self.resources.add(replies, time.perf_counter() - t)
        self.resources.peak_memory_bytes = _peak_memory(self.handle)
        return replies

    def pins(self) -> JsonObject:
        from evprobe.hooks.fingerprint import loaded_fingerprint

        return loaded_fingerprint(self.handle)

    def close(self) -> None:
        pass


def _shared_letters(prompts: list[ModelPrompt]) -> tuple[str, ...] | None:
    """Every letter any prompt of the batch asks for (one readout for the batch), or None."""
    letters = sorted({x for p in prompts for x in (p.letters or ())})
    return tuple(letters) or None


def _letter_logprobs(prompt: ModelPrompt, letters: tuple[str, ...] | None,
                     row: tuple[float, ...] | None) -> dict[str, float] | None:
    if prompt.letters is None or letters is None or row is None:
        return None
    values = dict(zip(letters, row))
    return {x: values[x] for x in prompt.letters}


def _peak_memory(handle: Any) -> int | None:
    """Peak accelerator memory of this process (torch's counter), or None on the CPU."""
    import torch

    if handle.device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(handle.device))
    return None
