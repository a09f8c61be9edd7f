"""The model handle every later stage uses: model + processor + decoder layers (`Handle`).

`load` (hooks.loading) builds one from a name, a folder or a tiny architecture;
`wrap` (hooks.loading) and `Handle.from_parts` take a model and processor already in memory
(`wrap` also unwraps an nnsight wrapper and checks what it is given).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, ProcessorMixin

    from evprobe.hooks.sites import Adapter, SiteMap



@dataclass(eq=False)
class Handle:
    """A loaded vision-language model and what is needed to feed and probe it.

    model: the transformers model, in eval mode.
    processor: its processor (tokenizer + image processor + chat template).
    tokenizer: processor.tokenizer, set to pad on the left.
    model_id: "tiny:<arch>", a hub id or a local path.
    arch: config.model_type (e.g. "qwen2_5_vl").
    layers: the language model's decoder layers (an nn.ModuleList); layer i's
        output is a (batch, seq, d_model) tensor.
    sites: the model's SiteMap (hooks.sites): every site it has and the module each lives in,
        from its architecture's adapter (or the automatic detection, or the `adapter` given).
    answer_prefix: text the model's reply starts with before its answer (e.g. "ANSWER:"; "" =
        none). Readouts of the answer (next-token log-probs, capture, patching, steered
        log-probs) append it after the generation prompt, teacher-forced, so their last
        position is the one that predicts the answer's first token; generation does not (the
        model writes it). The model organism declares "ANSWER:" (its processor's
        `answer_prefix`); for another model pass it to `load` / `wrap`.
    prompt_format: how a prompt string becomes the model's text (hooks.inputs.render_prompts):
        "chat" = one user turn through the chat template, then the assistant generation prompt;
        "raw" = the string itself (a base model's continuation; images, if any, as the
        processor's image placeholders before it). `load` / `wrap` choose "chat" when the
        processor or tokenizer has a chat template and "raw" when it has none, unless told.
    thinking: the chat template's thinking switch (seed 002's reasoning on/off pairs): "on" or "off"
        is passed to the template as `enable_thinking` (True / False), as Qwen3's templates read it;
        None passes nothing, so the template's own default holds. Only a chat template that reads
        `enable_thinking` takes it (`resolve_thinking`).
    """

    # repr shows model_id and arch only (the module trees are long).
    model: PreTrainedModel = field(repr=False)
    processor: ProcessorMixin = field(repr=False)
    tokenizer: PreTrainedTokenizerBase = field(repr=False)
    model_id: str
    arch: str
    layers: nn.ModuleList = field(repr=False)
    answer_prefix: str = ""
    prompt_format: str = "chat"
    thinking: str | None = None
    _nn: Any = field(default=None, repr=False)
    sites: SiteMap | None = field(default=None, repr=False)

    @classmethod
    def from_parts(cls, model: PreTrainedModel, processor: ProcessorMixin, *, model_id: str,
                   answer_prefix: str | None = None, prompt_format: str | None = None,
                   thinking: str | None = None, adapter: Adapter | str | None = None) -> Handle:
        """answer_prefix None: the processor's `answer_prefix` attribute, else none ("").
        prompt_format None: "chat" when there is a chat template, else "raw" (PROMPT_FORMATS).
        thinking: "on", "off" or None (the template's default): `resolve_thinking`.
        adapter: where the model's sites live (hooks.sites.Adapter, or a registered adapter's name);
        None = the adapter registered for its model_type, else found from its structure."""
        from evprobe.hooks.sites import site_map

        from transformers import PreTrainedTokenizerBase

        tokenizer = getattr(processor, "tokenizer", None)
        if tokenizer is None and isinstance(processor, PreTrainedTokenizerBase):
            tokenizer = processor  # a text-only model: its tokenizer is its processor (no images)
        if tokenizer is None:
            raise ValueError(f"{model_id}: processor {type(processor).__name__} has no tokenizer")
        # Left padding keeps every row's last real token at position -1 (batched
        # next-token reads and generation).
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        fmt = resolve_prompt_format(processor, tokenizer, prompt_format, model_id)
        thinking = resolve_thinking(processor, tokenizer, thinking, fmt, model_id)
        model.eval()
        sites = site_map(model, adapter)
        return cls(
            model=model,
            processor=processor,
            tokenizer=tokenizer,
            model_id=model_id,
            arch=model.config.model_type,
            layers=sites.layers,
            sites=sites,
            answer_prefix=_answer_prefix(processor, answer_prefix),
            prompt_format=fmt,
            thinking=thinking,
        )

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def d_model(self) -> int:
        return self.model.config.get_text_config().hidden_size

    @property
    def device(self) -> torch.device:
        """Where inputs go: the device of the input embeddings (under a device_map the first
        parameter may be offloaded to `meta`, or sit on another GPU)."""
        from evprobe.hooks.devices import module_device

        return module_device(self.model, self._embeddings_path)

    @cached_property
    def _embeddings_path(self) -> str:
        """Dotted path of the input embeddings (found once: Handle.device is read every batch)."""
        return _module_path(self.model, self.model.get_input_embeddings())

    def layer_device(self, layer: int) -> torch.device:
        """The device decoder layer `layer` computes on (a steering vector for it goes there)."""
        from evprobe.hooks.devices import module_device

        return module_device(self.model, f"{self.layers_path}.{layer}")

    @property
    def device_map(self) -> dict[str, str | int] | None:
        """accelerate's placement of the model's modules (`hf_device_map`), None when not dispatched."""
        return getattr(self.model, "hf_device_map", None)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def nn(self):
        """nnsight wrapper of `model` (built on first use).

        `TransformersModel(model, processor=..., tokenizer=..., task="image-text-to-text")`
        wraps the already-loaded model (no reload, offline). Its module tree mirrors
        `model`, e.g. `handle.nn.model.language_model.layers[i].output`.
        """
        if self._nn is None:
            self._nn = _wrap_nnsight(self.model, self.processor, self.tokenizer)
            # nnsight re-derives padding; keep ours (left) whatever it decided.
            self.tokenizer.padding_side = "left"
        return self._nn

    @property
    def keeps_prompt_text(self) -> bool:
        """False when the processor rewrites the prompt (the model organism reads facts), so text
        positions and markers do not exist for this model (hooks.spans)."""
        return bool(getattr(self.processor, "keeps_prompt_text", True))

    def image_ids(self) -> frozenset[int]:
        """The token ids of the position "image" (hooks.positions.image_ids; one ValueError line
        for a model without image tokens)."""
        from evprobe.hooks.positions import image_ids

        return image_ids(self)

    @property
    def layers_path(self) -> str:
        """Dotted path of `layers` inside `model`, e.g. "model.language_model.layers"."""
        return _module_path(self.model, self.layers)

    def with_answer_prefix(self, prefix: str | None) -> Handle:
        """This handle with another answer prefix: a shallow copy sharing the model, processor and
        nnsight wrapper (self is left as it is); None: self unchanged. A non-string is a TypeError."""
        if prefix is None:
            return self
        other = copy.copy(self)
        other.answer_prefix = _answer_prefix(self.processor, prefix)
        return other

    def with_prompt_format(self, prompt_format: str | None) -> Handle:
        """This handle with another prompt format ("chat" | "raw"): a shallow copy sharing the
        model, as `with_answer_prefix`; None: self unchanged."""
        if prompt_format is None:
            return self
        other = copy.copy(self)
        other.prompt_format = resolve_prompt_format(self.processor, self.tokenizer, prompt_format, self.model_id)
        resolve_thinking(self.processor, self.tokenizer, self.thinking, other.prompt_format, self.model_id)
        return other

    def with_thinking(self, thinking: str | None) -> Handle:
        """This handle with the chat template's thinking switch set ("on" | "off"): a shallow copy
        sharing the model, as `with_answer_prefix`; None: self unchanged (`resolve_thinking`)."""
        if thinking is None:
            return self
        other = copy.copy(self)
        other.thinking = resolve_thinking(self.processor, self.tokenizer, thinking, self.prompt_format, self.model_id)
        return other

    def with_adapter(self, adapter: Adapter | str) -> Handle:
        """This handle with its sites found through another adapter: a shallow copy sharing the model."""
        from evprobe.hooks.sites import site_map

        other = copy.copy(self)
        other.sites = site_map(self.model, adapter)
        other.layers = other.sites.layers
        return other

    def with_options(self, *, answer_prefix: str | None = None, prompt_format: str | None = None,
                     thinking: str | None = None) -> Handle:
        """`with_answer_prefix`, `with_prompt_format`, then `with_thinking` (None leaves a setting as it is)."""
        return self.with_answer_prefix(answer_prefix).with_prompt_format(prompt_format).with_thinking(thinking)

    @property
    def nn_layers(self):
        """The nnsight Envoy of `layers`: `handle.nn_layers[i].output` inside a trace."""
        return self.nn.get(self.layers_path)


PROMPT_FORMATS: tuple[str, ...] = ("chat", "raw")


def chat_template_of(processor: Any, tokenizer: Any) -> Any:
    """The chat template the processor carries, else its tokenizer's; None when neither has one."""
    return getattr(processor, "chat_template", None) or getattr(tokenizer, "chat_template", None)


def has_chat_template(processor: Any, tokenizer: Any) -> bool:
    """Whether there is a chat template (a base LM has none), or the processor declares it renders
    chat turns itself (`prompt_format = "chat"`: the organism)."""
    return bool(chat_template_of(processor, tokenizer) or getattr(processor, "prompt_format", None) == "chat")


def resolve_prompt_format(processor: Any, tokenizer: Any, given: str | None, model_id: str) -> str:
    chat = has_chat_template(processor, tokenizer)
    if given is None:
        return "chat" if chat else "raw"
    if given not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format must be one of {', '.join(PROMPT_FORMATS)}, got {given!r}")
    if given == "chat" and not chat:
        raise ValueError(f"{model_id}: prompt_format='chat' but its tokenizer has no chat template (a base "
                         "model); use prompt_format='raw' (the prompt string as the model's text)")
    return given


def resolve_thinking(processor: Any, tokenizer: Any, given: str | None, prompt_format: str, model_id: str) -> str | None:
    """`given` when the chat template can take it, else a one-line ValueError: a value other than
    THINKING, a raw prompt (no template renders it), or a template that never reads enable_thinking
    (the switch would change nothing, and a run would be labelled with a setting it did not have)."""
    if given is None:
        return None
    if given not in THINKING:
        raise ValueError(f"thinking must be one of {', '.join(THINKING)}, or None (the template's default); got {given!r}")
    if prompt_format != "chat":
        raise ValueError(f"{model_id}: thinking needs prompt_format='chat' (the chat template takes the switch); "
                         "a raw prompt has no template: drop thinking")
    template = chat_template_of(processor, tokenizer)
    texts = template.values() if isinstance(template, dict) else [template or ""]
    if not any(THINKING_SWITCH in str(t) for t in texts):
        raise ValueError(f"{model_id}: its chat template has no thinking switch (it never reads {THINKING_SWITCH}); "
                         "drop thinking, or use a model whose template has one (e.g. Qwen3's)")
    return given


def _answer_prefix(processor: Any, given: str | None) -> str:
    prefix = getattr(processor, "answer_prefix", "") if given is None else given
    if not isinstance(prefix, str):
        raise TypeError(f"answer_prefix must be a string, got {type(prefix).__name__}")
    return prefix


def _wrap_nnsight(model, processor, tokenizer):
    """TransformersModel over the loaded model; plain NNsight if its pipeline cannot be built.

    Both trace a forward on the keyword inputs from build_inputs
    (`with nn.trace(**enc): ...`); only TransformersModel adds `.generate`
    tracing through its pipeline plumbing.
    """
    import warnings

    from nnsight import NNsight
    from nnsight.modeling.transformers import TransformersModel

    # transformers' pipeline takes the FIRST value of hf_device_map as its device; "disk" (a module
    # offloaded by accelerate) is no torch device. Put the input embeddings' entry first while the
    # pipeline is built (the placement itself is unchanged; only the dict's order is).
    embeddings = _module_path(model, model.get_input_embeddings())
    placement = getattr(model, "hf_device_map", None)
    if placement and next(iter(placement.values())) in ("disk", "meta"):
        from evprobe.hooks.devices import module_device

        first = str(module_device(model, embeddings))
        model.hf_device_map = {"": first, **{k: v for k, v in placement.items() if k != ""}}
    try:
        return _placed(TransformersModel, embeddings)(model, processor=processor, tokenizer=tokenizer,
                                                      task="image-text-to-text")
    except Exception as err:  # noqa: BLE001 - e.g. remote-code models the pipeline rejects
        warnings.warn(f"nnsight TransformersModel failed ({err!r}); using NNsight(model)", stacklevel=3)
        return _placed(NNsight, embeddings)(model)
    finally:
        if placement is not None:
            model.hf_device_map = placement


def _placed(envoy_class: type, embeddings: str) -> type:
    """`envoy_class` whose `device` (where nnsight moves a trace's inputs) is the execution device
    of the input embeddings (dotted path `embeddings`): nnsight's own is the first parameter's,
    which is `meta` when accelerate offloaded the module holding it (e.g. the vision tower)."""

    class Placed(envoy_class):  # type: ignore[misc, valid-type]
        @property
        def device(self):
            from evprobe.hooks.devices import module_device

            return module_device(self._module, embeddings)

    Placed.__name__ = Placed.__qualname__ = envoy_class.__name__
    return Placed


def _module_path(root: nn.Module, target: nn.Module) -> str:
    for name, module in root.named_modules():
        if module is target:
            return name
    raise ValueError(f"{type(target).__name__} is not a submodule of {type(root).__name__}")


# The functions that take a Handle, importable from here as well.
from evprobe.hooks.generation import Generation, generate, next_token_logprobs
from evprobe.hooks.inputs import build_inputs
from evprobe.hooks.inputs import THINKING, THINKING_SWITCH  # resolve_thinking's (the rendering is hooks.inputs')

__all__ = ["Generation", "Handle", "build_inputs", "generate", "next_token_logprobs"]
