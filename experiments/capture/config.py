"""`evprobe capture`'s settings and what its files name: the config, the layer and position specs
(checked before any model loads), the index's fields and meta.json's wording (the command: its job)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from evprobe.bench.model_config import ModelConfig, as_model_config
from evprobe.bench.runner import HELP_INJECTION, INJECTION_DEFAULT, VideoInput
from evprobe.core.capture_schema import INDEX_OPTIONAL_DEFAULTS
from evprobe.core.errors import InputError
from evprobe.core.flags import HELP, setting
from evprobe.core.shard import Shard

if TYPE_CHECKING:
    from evprobe.bench.items import Item

CAPTURE_META_FILE = "meta.json"
FORMAT = "evprobe-capture/1"
STORED = (
    "raw decoder-layer outputs (layer i == hidden_states[i+1] for i < n_layers - 1; "
    "the last layer is before the final norm)"
)


def stored_text(component: str) -> str:
    """meta.json's `stored`: what acts.npy holds for `component` (hooks.capture.COMPONENTS)."""
    if component == "resid_post":
        return STORED
    if component == "resid_pre":
        return "each decoder layer's input (resid_pre: the residual stream before the block; hooks.sites)"
    return f"the {component} output of each decoder layer (hooks.sites), not the residual stream"


TEXT_MARKER_RULE = (
    "text_mean averages the tokens of the item's question sentence (the text after 'Question: ' to the end of "
    "that line); items without a 'Question: ' line (read_ruler, recover_property) use their whole prompt text"
)
QUESTION_PREFIX = "Question: "
# Item fields copied into each index.jsonl row (besides row and item_id).
INDEX_FIELDS = (
    "request", "variant", "family_id", "system", "initial_property", "decision_id", "history", "threshold_level",
    "test", "hidden_world", "image_pair_id", "threshold_pair_id", "resolved", "reference_action", "reference_answer",
)
# Item fields copied only when they differ from their default (core.capture_schema.INDEX_OPTIONAL_ITEM_TYPES).
INDEX_OPTIONAL_FIELDS = tuple(INDEX_OPTIONAL_DEFAULTS)
BACKENDS = ("hf", "vllm")
# The vllm backend's engine settings at their defaults: absent from an hf capture's recorded config
# (its meta.json stays what it was before the backend existed).
ENGINE_DEFAULTS = {"gpu_memory_utilization": None, "max_model_len": None}


@dataclass(frozen=True)
class CaptureConfig:
    """`evprobe capture`: every field is a flag (`--batch-size` for batch_size), with this help."""

    model: ModelConfig = setting(help="tiny:<arch>, a model config (a name in configs/models or a YAML), a hub id or "
                                      "a local folder; the model flags below override its keys")
    bench: str = setting(help="benchmark folder (evprobe generate)")
    out: str = setting(help="capture folder (acts.npy, index.jsonl, meta.json)")
    requests: tuple[str, ...] | None = setting(("select", "answer_initial"),
                                               "comma-separated request types and variant names")
    injection: tuple[int, ...] = setting(INJECTION_DEFAULT, HELP_INJECTION + " (one sweep should hold one level)")
    layers: str | tuple[int, ...] = setting("all", "all, or comma-separated decoder layer indices, e.g. 0,4,8")
    positions: tuple[str, ...] = setting(("last",), "comma-separated: last, image_mean, text_mean, token:I (the I-th "
                                         "real token, negative from the end), frame:K (the K-th image's tokens: a clip's "
                                         "frame) or marker:TEXT[:first|last|mean] (a "
                                         "substring's tokens; no comma in TEXT)")
    component: str = setting("resid_post", "what is read at each layer: resid_post (the residual stream after the "
                             "layer), resid_pre (before it), attn_out (attention output) or mlp_out (MLP output)")
    regime: str = setting("standard", HELP["regime"])
    protocol: str = setting("direct", HELP["protocol"])
    limit: int | None = setting(None, "only the first N selected items")
    batch_size: int = setting(8, "items per forward pass")
    shard: str | None = setting(None, HELP["shard"])
    video_input: VideoInput = setting("frames", "how a clip benchmark's clips reach the model: frames (one image a "
                                                "frame, any model) or native (one video through the model's video "
                                                "processor, a model with a video path)")
    backend: str = setting("hf", "what reads the rows: hf (transformers, in this process) or vllm (a vLLM engine: "
                                 "resid_post of text-only models and of LLaVA with images)")
    gpu_memory_utilization: float | None = setting(
        None, "vllm backend: share of accelerator memory (of RAM on CPU) the engine reserves; default 0.1 on CPU")
    max_model_len: int | None = setting(None, "vllm backend: context length of the engine (default 2048)")

    def __post_init__(self) -> None:
        # The settings that need no benchmark, checked when the config is made (before a model file
        # is hashed or loaded); positions, component and the selection: CaptureJob, before it loads.
        object.__setattr__(self, "model", as_model_config(self.model))  # a bare model string: its defaults
        if self.shard is not None:
            Shard.parse(self.shard)  # a bad K/N fails here, naming the fix
        check_layer_spec(self.layers)
        if isinstance(self.batch_size, bool) or self.batch_size < 1:
            raise InputError(f"--batch-size must be a positive integer, got {self.batch_size}")
        if self.limit is not None and self.limit < 1:
            raise InputError(f"--limit must be a positive integer, got {self.limit}")
        if self.video_input not in ("frames", "native"):
            raise InputError(f"--video-input must be frames or native, got {self.video_input!r}")
        if self.backend not in BACKENDS:
            raise InputError(f"--backend must be {' or '.join(BACKENDS)}, got {self.backend!r}")
        if self.backend == "vllm" and self.video_input == "native":
            raise InputError("--video-input native is not read through vLLM (the engine capture takes a clip's "
                             "frames as images); use --video-input frames or --backend hf")
        if self.backend != "vllm":
            changed = next((k for k, v in ENGINE_DEFAULTS.items() if getattr(self, k) != v), None)
            if changed is not None:
                raise InputError(f"--{changed.replace('_', '-')} is a setting of --backend vllm; drop it or add "
                                 "--backend vllm")


def index_row(row: int, item: Item, text_span: str, n_tokens: int, n_image: int, n_text: int,
              n_clipped: int) -> dict:
    """One index.jsonl line: the row, the item's INDEX_FIELDS (and INDEX_OPTIONAL_FIELDS off their
    defaults), the text span's kind and the token counts."""
    out: dict = {"row": row, "item_id": item.item_id}
    out.update({name: getattr(item, name) for name in INDEX_FIELDS})
    out.update({name: getattr(item, name) for name in INDEX_OPTIONAL_FIELDS
                if getattr(item, name) != INDEX_OPTIONAL_DEFAULTS[name]})
    out.update(text_span=text_span, n_tokens=n_tokens, n_image_tokens=n_image, n_text_tokens=n_text,
               n_clipped=n_clipped)
    return out


def recorded_config(config: CaptureConfig) -> dict:
    """meta.json's config: every setting, less the vllm backend's at their defaults on an hf capture
    (its meta.json is what it was before the backend existed)."""
    out = asdict(config)
    if config.backend == "hf":
        for key in ("backend", *ENGINE_DEFAULTS):
            del out[key]
    return out


def question_marker(prompt: str) -> str | None:
    """The text after 'Question: ' up to the end of its line, or None if no line starts with it."""
    for line in prompt.splitlines():
        if line.startswith(QUESTION_PREFIX):
            text = line[len(QUESTION_PREFIX):].rstrip()
            return text or None
    return None


def _layer_values(spec: str | Sequence[int]) -> list[int] | None:
    """The layer indices `spec` names ('0,4,8' or a sequence), None for 'all'; a malformed string is one line."""
    if not isinstance(spec, str):
        return list(spec)
    text = spec.strip()
    if text == "all":
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--layers must be 'all' or comma-separated integers, got {spec!r}") from None


def parse_layers(spec: str | Sequence[int], n_layers: int) -> list[int]:
    """'all', '0,4,8' or a sequence of ints -> validated layer indices (the order given)."""
    from evprobe.hooks.capture import check_layers

    values = _layer_values(spec)
    if values is None:
        return list(range(n_layers))
    try:
        return check_layers(values, n_layers)
    except (TypeError, ValueError) as err:
        raise ValueError(f"--layers: {err}") from None


def check_layer_spec(spec: str | Sequence[int]) -> None:
    """'all' or distinct layer indices >= 0, checked without the model (its layer count bounds
    them later: `parse_layers`)."""
    values = _layer_values(spec)
    if values is None:
        return
    if not values:
        raise ValueError("--layers: no layers given; use 'all' or layer indices")
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int) or v < 0]
    if bad:
        raise ValueError(f"--layers: {bad[0]!r} is not a layer index (0 or more); use 'all' or layer indices")
    if len(set(values)) != len(values):
        raise ValueError(f"--layers: layers {values} repeat an index; give each once")


def check_positions(positions: Sequence[str]) -> list[str]:
    # hooks.capture imports no torch at module level: cheap before any model is loaded.
    from evprobe.hooks.capture import check_positions as check

    try:
        return check(positions)
    except (TypeError, ValueError) as err:
        raise ValueError(f"--positions: {err}") from None
