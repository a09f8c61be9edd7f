"""Loading a model into a `Handle`: tiny architectures, registered names, hub ids and folders;
`wrap` for a model the researcher already holds in memory (transformers or nnsight).

`load("tiny:<arch>")` builds a tiny random model (hooks.tiny_models); a name that an installed package
registers in the `evprobe.models` entry-point group (`organism`) resolves to its folder; anything
else is a hub id or local folder loaded with AutoProcessor / AutoModelForImageTextToText
(AutoModelForCausalLM for a text-only checkpoint, whose processor turns images into tokens).

Entry points keep `hooks` free of the benchmark: the model organism's processor reads benchmark
sheets, so it lives in the `organism` package, which `hooks` finds only through
`evprobe.models` (name -> function returning the folder) and `evprobe.processors`
(processor_class -> class), both declared in pyproject.toml.
"""

from __future__ import annotations

import logging
import os
import re
from typing import TYPE_CHECKING, Any

from evprobe.core.json_files import read_json_object
from evprobe.hooks.handle import Handle, resolve_prompt_format, resolve_thinking

if TYPE_CHECKING:
    from evprobe.hooks.sites import Adapter

_DTYPES = ("auto", "float32", "bfloat16", "float16")

# Third-party messages that tell an evprobe user nothing, dropped by their text here and nowhere
# else (`quiet_third_party_messages`, installed when this module is imported, i.e. before `load`):
# one pattern per message, on the logger that emits it, so every other message of that logger,
# every warning and our own messages still print. Each entry says why the message is noise.
#
# - transformers' Pipeline.check_model_type logs at ERROR "The model 'LlamaForCausalLM' is not
#   supported for image-text-to-text. Supported models are [...]" (~3,700 characters listing every
#   class) when nnsight wraps a model with task="image-text-to-text" (hooks.handle._wrap_nnsight)
#   whose class is not in that task's mapping: the model organism and every text-only checkpoint,
#   all of which come through `load` (every tiny:<arch> is a class of the mapping).
#   nnsight builds the pipeline only for its plumbing and never runs it; tracing, capture,
#   steering and generation work (tests/hooks), so the message reports no problem. It was 7,486
#   of the quickstart's 11,046 console characters.
QUIET_MESSAGES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("transformers.pipelines.base",
     re.compile(r"^The model '\w+' is not supported for image-text-to-text\. Supported models are")),
)


class _DropMessages(logging.Filter):
    """Drops the records of one logger whose message matches `pattern`."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        super().__init__()
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        return self.pattern.search(record.getMessage()) is None


def quiet_third_party_messages() -> None:
    """Install the filters of QUIET_MESSAGES (once; imports nothing: a logger exists before the
    library that logs to it is imported, and transformers' loggers are the standard library's)."""
    for name, pattern in QUIET_MESSAGES:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropMessages) and f.pattern is pattern for f in logger.filters):
            logger.addFilter(_DropMessages(pattern))


quiet_third_party_messages()


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
    config = read_json_object(path, "the model's preprocessor_config.json must be a JSON object: fix or download it again")[0]
    return config.get("processor_class")


def _load_processor(model: str, *, trust_remote_code: bool):
    """AutoProcessor, except for our torchvision-free processor classes.

    A folder saved from a tiny model names one of hooks.processors' classes,
    which AutoProcessor cannot resolve. A real Qwen-VL / SmolVLM / Pixtral
    checkpoint on a machine without torchvision fails in AutoProcessor (video
    processors and PixtralProcessor import torchvision); then the same files are
    loaded with our image-only stand-in.
    """
    from transformers import AutoProcessor

    from evprobe.hooks.processors import LOCAL_PROCESSORS, TORCHVISION_FREE

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
        from evprobe.hooks.tiny_models import N_LAYERS, TINY_ARCHS

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
    answer_prefix: str | None = None,
    prompt_format: str | None = None,
    thinking: str | None = None,
    adapter: Adapter | str | None = None,
) -> Handle:
    """Load a vision-language model (or a text-only causal LM) and its processor into a Handle.

    model: "tiny:<arch>" (see hooks.tiny_models.TINY_ARCHS), a registered name (`named_models()`, e.g.
        "organism"), a hub id or a local folder.
    dtype: "auto" = float32 on CPU, the checkpoint's dtype on GPU; or an explicit one.
    device_map: passed to from_pretrained (None = CPU): "auto" (accelerate's big-model loading
        over the visible GPUs, then CPU, then disk), "cuda:1", or a module -> device mapping.
    max_memory: accelerate's budget per device, "0=70GiB,cpu=200GiB" or a dict (hooks.devices).
    offload_folder: where layers that fit nowhere else are offloaded (device_map "disk").
    trust_remote_code: off unless asked for (never implied).
    attn_implementation: e.g. "eager" or "sdpa"; None = transformers' default.
    answer_prefix: what the reply starts with before the answer, appended by every answer readout
        (Handle.answer_prefix); None = the model's own (the organism's "ANSWER:"), else none.
    prompt_format: "chat" (the chat template) or "raw" (the prompt string itself: a base model);
        None = "chat" when the processor or tokenizer has a chat template, else "raw"
        (Handle.prompt_format).
    thinking: "on" / "off": the chat template's thinking switch (`enable_thinking`, Handle.thinking);
        None = the template's default. A template without the switch is refused before the weights load.
    adapter: where the model's sites live, for an architecture the toolkit does not know
        (hooks.sites.Adapter, or a registered adapter's name); None = the adapter registered for
        its model_type, else the automatic detection (docs: Adding a site).
    """
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"load takes a model name or folder, got a {type(model).__name__}; for a model already "
                        "in memory (transformers or nnsight) use evprobe.wrap(model, processor)")
    model = os.fspath(model)
    if model.startswith("tiny:"):
        import torch

        from evprobe.hooks.tiny_models import tiny

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
        if adapter is not None:
            handle = handle.with_adapter(adapter)
        return handle.with_options(answer_prefix=answer_prefix, prompt_format=prompt_format, thinking=thinking)

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
        from evprobe.hooks.devices import parse_max_memory

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
    # a prompt format or thinking switch the tokenizer cannot render is refused before the weights load
    tokenizer = getattr(processor, "tokenizer", processor)
    fmt = resolve_prompt_format(processor, tokenizer, prompt_format, name)
    resolve_thinking(processor, tokenizer, thinking, fmt, name)
    hf_model = _model_class(model, trust_remote_code).from_pretrained(model, **kwargs)
    return Handle.from_parts(hf_model, processor, model_id=name, answer_prefix=answer_prefix,
                             prompt_format=prompt_format, thinking=thinking, adapter=adapter)


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


def wrap(model: Any, processor: Any = None, *, model_id: str | None = None,
         answer_prefix: str | None = None, prompt_format: str | None = None, thinking: str | None = None,
         adapter: Adapter | str | None = None) -> Handle:
    """A Handle on a model the researcher already loaded: the same Handle `load` gives.

    model: a transformers model (a `*ForConditionalGeneration` / `*ForCausalLM`, on any device and
        dtype, dispatched by accelerate or not), or an nnsight wrapper of one (`NNsight`,
        `TransformersModel`, `LanguageModel`, `VisionLanguageModel`): the wrapper is unwrapped to
        the module it holds (an undispatched nnsight model is dispatched first, which loads its
        weights) and the Handle builds its own nnsight wrapper over that same module; the
        caller's wrapper keeps working beside it (tests/hooks/test_wrap.py).
        A Handle is returned as is, or with `answer_prefix` / `prompt_format` when given (a copy
        sharing its model: `Handle.with_options`).
    processor: its processor (tokenizer + image processor + chat template); a tokenizer for a
        text-only model. None: taken from the nnsight wrapper (`.processor`, else `.tokenizer`).
    model_id: a label for reports; None = the config's `_name_or_path`, else the class name.
    answer_prefix: as for `load` (Handle.answer_prefix).
    prompt_format: as for `load` (Handle.prompt_format): a base model's tokenizer has no chat
        template, so its prompts go in raw unless told otherwise.
    thinking: as for `load` (Handle.thinking).
    adapter: as for `load`: where the sites of an architecture the toolkit does not know live.

    What it changes on the caller's objects, as `load` does: the model is put in eval mode and
    the tokenizer pads on the left (and pads with eos when it has no pad token). Weights,
    placement and dtype are left alone.
    """
    from torch import nn

    if isinstance(model, Handle):
        if processor is not None and processor is not model.processor:
            raise ValueError("wrap got a Handle and a different processor; a Handle already has its processor")
        if adapter is not None:
            model = model.with_adapter(adapter)
        return model.with_options(answer_prefix=answer_prefix, prompt_format=prompt_format, thinking=thinking)
    module, processor = _unwrap_nnsight(model, processor)
    if not isinstance(module, nn.Module):
        raise TypeError(f"wrap takes a transformers model or an nnsight wrapper of one, got {type(model).__name__}; "
                        "to load by name or folder use evprobe.load")
    if getattr(module, "config", None) is None:
        raise TypeError(f"{type(module).__name__} has no `config`: wrap needs a transformers model (PreTrainedModel)")
    if processor is None:
        raise ValueError(f"wrap({type(module).__name__}) needs its processor (AutoProcessor.from_pretrained(...)), "
                         "or its tokenizer for a text-only model")
    if getattr(module, "hf_device_map", None) is None and any(p.device.type == "meta" for p in module.parameters()):
        raise ValueError(f"{type(module).__name__} has weights on the meta device and no accelerate device map: "
                         "its weights were never loaded")
    name = model_id or getattr(module.config, "_name_or_path", "") or type(module).__name__
    return Handle.from_parts(module, processor, model_id=str(name), answer_prefix=answer_prefix,
                             prompt_format=prompt_format, thinking=thinking, adapter=adapter)


def _unwrap_nnsight(model: Any, processor: Any) -> tuple[Any, Any]:
    """(torch module, processor) of an nnsight Envoy; anything else unchanged.

    Checked by type (nnsight's `Envoy`, the base of every nnsight model class) only when nnsight
    is already imported: an object cannot be an Envoy otherwise, and wrap stays import-cheap."""
    import sys

    if "nnsight" not in sys.modules:
        return model, processor
    from nnsight.intervention.envoy import Envoy

    if not isinstance(model, Envoy):
        return model, processor
    if getattr(model, "dispatched", True) is False:
        model.dispatch()  # a lazily loaded nnsight model holds meta weights until dispatched
    if processor is None:
        processor = getattr(model, "processor", None) or getattr(model, "tokenizer", None)
    return model._module, processor
