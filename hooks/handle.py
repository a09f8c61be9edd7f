"""The model handle every later stage uses: model + processor + decoder layers.

`load("tiny:<arch>")` builds a tiny random model (hooks.tiny); a name that an installed package
registers in the `evprobe.models` entry-point group (`organism`) resolves to its folder; anything
else is a hub id or local folder loaded with AutoProcessor / AutoModelForImageTextToText
(AutoModelForCausalLM for a text-only checkpoint, whose processor turns images into tokens).

Entry points keep `hooks` free of the benchmark: the model organism's processor reads benchmark
sheets, so it lives in the `organism` package, which `hooks` finds only through
`evprobe.models` (name -> function returning the folder) and `evprobe.processors`
(processor_class -> class), both declared in pyproject.toml.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, ProcessorMixin

_DTYPES = ("auto", "float32", "bfloat16", "float16")


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
    """

    # repr shows model_id and arch only (the module trees are long).
    model: PreTrainedModel = field(repr=False)
    processor: ProcessorMixin = field(repr=False)
    tokenizer: PreTrainedTokenizerBase = field(repr=False)
    model_id: str
    arch: str
    layers: nn.ModuleList = field(repr=False)
    _nn: Any = field(default=None, repr=False)

    @classmethod
    def from_parts(cls, model: PreTrainedModel, processor: ProcessorMixin, *, model_id: str) -> Handle:
        from hooks.layers import find_decoder_layers

        tokenizer = getattr(processor, "tokenizer", None)
        if tokenizer is None:
            raise ValueError(f"{model_id}: processor {type(processor).__name__} has no tokenizer")
        # Left padding keeps every row's last real token at position -1 (batched
        # next-token reads and generation).
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.eval()
        return cls(
            model=model,
            processor=processor,
            tokenizer=tokenizer,
            model_id=model_id,
            arch=model.config.model_type,
            layers=find_decoder_layers(model),
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
        from hooks.devices import module_device

        return module_device(self.model, self._embeddings_path)

    @cached_property
    def _embeddings_path(self) -> str:
        """Dotted path of the input embeddings (found once: Handle.device is read every batch)."""
        return _module_path(self.model, self.model.get_input_embeddings())

    def layer_device(self, layer: int) -> torch.device:
        """The device decoder layer `layer` computes on (a steering vector for it goes there)."""
        from hooks.devices import module_device

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

    @property
    def layers_path(self) -> str:
        """Dotted path of `layers` inside `model`, e.g. "model.language_model.layers"."""
        return _module_path(self.model, self.layers)

    @property
    def nn_layers(self):
        """The nnsight Envoy of `layers`: `handle.nn_layers[i].output` inside a trace."""
        return self.nn.get(self.layers_path)


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
        from hooks.devices import module_device

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
            from hooks.devices import module_device

            return module_device(self._module, embeddings)

    Placed.__name__ = Placed.__qualname__ = envoy_class.__name__
    return Placed


def _module_path(root: nn.Module, target: nn.Module) -> str:
    for name, module in root.named_modules():
        if module is target:
            return name
    raise ValueError(f"{type(target).__name__} is not a submodule of {type(root).__name__}")


def _resolve_dtype(dtype: str, device_map: str | dict | None):
    import torch

    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
    if dtype != "auto":
        return getattr(torch, dtype)
    on_gpu = device_map is not None and device_map != "cpu" and torch.cuda.is_available()
    # CPUs here have no fast bf16: float32 on CPU, the checkpoint's dtype on GPU.
    return "auto" if on_gpu else torch.float32


def _entry_points(group: str) -> dict:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=group)}


def named_models() -> tuple[str, ...]:
    """Model names registered by installed packages (e.g. "organism")."""
    return tuple(sorted(_entry_points("evprobe.models")))


def resolve_model(model: str) -> str:
    """The folder of a registered model name; any other name unchanged."""
    ep = _entry_points("evprobe.models").get(model)
    return model if ep is None else str(ep.load()())


def _saved_processor_class(model: str) -> str | None:
    """`processor_class` from a (local or cached) processor_config.json, if any."""
    from transformers.utils import cached_file

    path = cached_file(
        model,
        "processor_config.json",
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
        _raise_exceptions_for_gated_repo=False,
    )
    if path is None:
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("processor_class")


def _load_processor(model: str, *, trust_remote_code: bool):
    """AutoProcessor, except for our torchvision-free processor classes.

    A folder saved from a tiny model names one of hooks.processors' classes,
    which AutoProcessor cannot resolve. A real Qwen-VL / SmolVLM / Pixtral
    checkpoint on a machine without torchvision fails in AutoProcessor (video
    processors and PixtralProcessor import torchvision); then the same files are
    loaded with our image-only stand-in.
    """
    from transformers import AutoProcessor

    from hooks.processors import LOCAL_PROCESSORS, TORCHVISION_FREE

    saved = _saved_processor_class(model)
    if saved in LOCAL_PROCESSORS:
        return LOCAL_PROCESSORS[saved].from_pretrained(model)
    plugins = _entry_points("evprobe.processors")
    if saved in plugins:
        return plugins[saved].load().from_pretrained(model)
    try:
        return AutoProcessor.from_pretrained(model, trust_remote_code=trust_remote_code)
    except Exception:  # ImportError (torchvision) or OSError (video processor files), among others
        from transformers.utils import is_torchvision_available

        if saved in TORCHVISION_FREE and not is_torchvision_available():
            return TORCHVISION_FREE[saved].from_pretrained(model)
        raise


def config_n_layers(model: str, *, trust_remote_code: bool = False) -> int | None:
    """The language model's decoder layer count read from the model's config alone (no weights),
    so layer choices can be checked before a slow load; None when the config cannot be read
    (e.g. a hub id not in the local cache on an offline machine)."""
    if model.startswith("tiny:"):
        from hooks.tiny import N_LAYERS, TINY_ARCHS

        return N_LAYERS if model.removeprefix("tiny:") in TINY_ARCHS else None
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(resolve_model(model), trust_remote_code=trust_remote_code)
        return int(config.get_text_config().num_hidden_layers)
    except Exception:  # noqa: BLE001 - any failure means "unknown here"; load() reports it properly
        return None


def load(
    model: str,
    *,
    dtype: str = "auto",
    device_map: str | dict[str, str | int] | None = None,
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
    max_memory: str | dict[int | str, str] | None = None,
    offload_folder: str | None = None,
) -> Handle:
    """Load a vision-language model and its processor into a Handle.

    model: "tiny:<arch>" (see hooks.tiny.TINY_ARCHS), a registered name (`named_models()`, e.g.
        "organism"), a hub id or a local folder.
    dtype: "auto" = float32 on CPU, the checkpoint's dtype on GPU; or an explicit one.
    device_map: passed to from_pretrained (None = CPU): "auto" (accelerate's big-model loading
        over the visible GPUs, then CPU, then disk), "cuda:1", or a module -> device mapping.
    max_memory: accelerate's budget per device, "0=70GiB,cpu=200GiB" or a dict (hooks.devices).
    offload_folder: where layers that fit nowhere else are offloaded (device_map "disk").
    trust_remote_code: off unless asked for (never implied).
    attn_implementation: e.g. "eager" or "sdpa"; None = transformers' default.
    """
    if model.startswith("tiny:"):
        import torch

        from hooks.tiny import tiny

        if max_memory is not None or offload_folder is not None or isinstance(device_map, dict):
            raise ValueError(f"{model} is built in memory: max_memory, offload_folder and a device_map mapping "
                             "need a saved model; save it (Handle.model.save_pretrained) and load the folder")
        handle = tiny(model.removeprefix("tiny:"))
        resolved = _resolve_dtype(dtype, device_map)
        if resolved != "auto":
            handle.model.to(resolved)
        if device_map not in (None, "cpu") and torch.cuda.is_available():
            # A tiny model fits anywhere: "auto" means the first GPU.
            handle.model.to("cuda" if device_map == "auto" else device_map)
        if attn_implementation is not None:
            handle.model.set_attn_implementation(attn_implementation)
        return handle

    name, model = model, resolve_model(model)
    if (os.path.isabs(model) or model.startswith(".")) and not os.path.isdir(model):
        raise FileNotFoundError(f"model folder {model!r} does not exist (and it is not a hub id)")

    kwargs: dict[str, Any] = dict(
        dtype=_resolve_dtype(dtype, device_map),
        use_safetensors=True,
        trust_remote_code=trust_remote_code,
    )
    if device_map is not None:
        kwargs["device_map"] = device_map
    if isinstance(max_memory, str):
        from hooks.devices import parse_max_memory

        max_memory = parse_max_memory(max_memory)
    if max_memory is not None or offload_folder is not None:
        if device_map is None:
            raise ValueError("max_memory and offload_folder place a model by accelerate's device_map; "
                             "give a device map too (e.g. device_map='auto')")
        if max_memory is not None:
            kwargs["max_memory"] = max_memory
        if offload_folder is not None:
            kwargs["offload_folder"] = offload_folder
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    processor = _load_processor(model, trust_remote_code=trust_remote_code)
    hf_model = _model_class(model, trust_remote_code).from_pretrained(model, **kwargs)
    return Handle.from_parts(hf_model, processor, model_id=name)


def _model_class(model: str, trust_remote_code: bool):
    """AutoModelForImageTextToText, or AutoModelForCausalLM for a text-only config."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
    if getattr(config, "vision_config", None) is None and config.model_type in _causal_lm_types():
        return AutoModelForCausalLM
    return AutoModelForImageTextToText


def _causal_lm_types() -> set[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


# The functions that take a Handle, importable from here as well.
from hooks.generation import Generation, generate, next_token_logprobs
from hooks.inputs import build_inputs

__all__ = ["Generation", "Handle", "build_inputs", "generate", "load", "next_token_logprobs"]
