"""What a job folder pins about its model and input files, beyond their names (`core.jobs.Job.pinned`).

`model_fingerprint(model)` before the model is loaded, `model_fingerprint(model, handle)` after
(`loaded_fingerprint(handle)`: the part only the loaded model tells):

- `tiny:<arch>`: `tiny_arch` and `tiny_seed` (the seed `load` builds its weights with);
- a local folder, or a registered name (`organism`, resolved to its folder):
  `model_config_sha256` (config.json), `model_weights_sha256` (the listing of its weight files and
  index: name, size and content digest each) and `model_files_sha256` (the other files a load reads:
  tokenizer, processor, chat template, generation config, code);
- a hub id: nothing before loading; its revision once loaded;
- with a loaded `handle`: `model_revision` (the hub commit transformers loaded, None for a folder or
  a tiny model), `model_dtype` (the weights' dtype as loaded: "auto" differs between a GPU and a CPU)
  and `chat_template_sha256`.

A weight file's content digest: the blob name for a file of the hub cache (a symlink to
`blobs/<sha256 or git sha1>`, the file's own content hash), else the sha256 of the whole file up to
64 MiB, else of its size and 64 blocks of 64 KiB spread evenly over it (both ends included), so a
resume never reads tens of gigabytes: weights retrained in place change those blocks, while an edit
that leaves the size and every sampled block alone would go unseen.

`files_sha256` is the digest of a set of named files (a benchmark's images): the sha256 of their
sorted "name sha256" lines.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evprobe.core.json_types import JsonObject

if TYPE_CHECKING:
    from evprobe.hooks.handle import Handle

WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json")  # hooks.load reads safetensors only
MODEL_FILE_SUFFIXES = (".json", ".jinja", ".txt", ".model", ".tiktoken", ".py")  # what else a load may read
FULL_HASH_BYTES = 64 << 20
SAMPLES, SAMPLE_BYTES = 64, 64 << 10
_BLOB = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def files_sha256(named: Iterable[tuple[str, str | Path]]) -> str:
    """sha256 of the sorted "name sha256" lines of (name, path) pairs (each name once)."""
    lines = sorted(f"{name} {sha256_file(path)}" for name, path in dict(named).items())
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def _weight_digest(path: Path) -> str:
    real = Path(os.path.realpath(path))
    if path.is_symlink() and real.parent.name == "blobs" and _BLOB.fullmatch(real.name):
        return real.name  # the hub cache names a blob by its content hash
    size = real.stat().st_size
    if size <= FULL_HASH_BYTES:
        return sha256_file(real)
    digest = hashlib.sha256(f"{size}\n".encode())
    with real.open("rb") as fh:
        for k in range(SAMPLES):
            fh.seek(k * (size - SAMPLE_BYTES) // (SAMPLES - 1))
            digest.update(fh.read(SAMPLE_BYTES))
    return f"sampled:{digest.hexdigest()}"


def _listing(folder: Path, names: list[str], digest: Any) -> str:
    lines = [f"{name} {(folder / name).stat().st_size} {digest(folder / name)}" for name in names]
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def folder_fingerprint(folder: str | Path) -> JsonObject:
    """config.json's sha256 and the digests of a model folder's weights and other files (top level)."""
    folder = Path(folder)
    files = sorted(p.name for p in folder.iterdir() if p.is_file())
    weights = [n for n in files if n.endswith(WEIGHT_SUFFIXES)]
    others = [n for n in files if n.endswith(MODEL_FILE_SUFFIXES) and n not in weights and n != "config.json"]
    config = folder / "config.json"
    return {
        "model_config_sha256": sha256_file(config) if config.is_file() else None,
        "model_weights_sha256": _listing(folder, weights, _weight_digest),
        "model_files_sha256": _listing(folder, others, sha256_file),
    }


def chat_template_sha256(handle: Handle) -> str | None:
    from evprobe.hooks.handle import chat_template_of

    template = chat_template_of(handle.processor, handle.tokenizer)
    if template is None:
        return None
    text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_fingerprint(model: str, handle: Handle | None = None) -> JsonObject:
    """The pinned settings that identify `model` beyond its name (see the module docstring): meta.json
    entries, which a job's pins and a run's meta take in as they are."""
    out: JsonObject = {}
    if model.startswith("tiny:"):
        from evprobe.hooks.tiny_models import tiny

        # hooks.load builds tiny:<arch> with tiny()'s default seed
        out.update(tiny_arch=model.removeprefix("tiny:"), tiny_seed=inspect.signature(tiny).parameters["seed"].default)
    else:
        from evprobe.hooks.loading import resolve_model

        folder = resolve_model(model)
        if os.path.isdir(folder):
            out.update(folder_fingerprint(folder))
    if handle is not None:
        out.update(loaded_fingerprint(handle))
    return out


def loaded_fingerprint(handle: Handle) -> JsonObject:
    """What only the loaded model tells: `model_revision`, `model_dtype`, `chat_template_sha256`,
    `answer_prefix` (what every answer readout appends: Handle.answer_prefix) and, for a raw
    prompt format, `prompt_format` (Handle.prompt_format); with the thinking switch set, `thinking`."""
    out = {"model_revision": getattr(handle.model.config, "_commit_hash", None),
           "model_dtype": str(handle.dtype).removeprefix("torch."),
           "chat_template_sha256": chat_template_sha256(handle),
           "answer_prefix": handle.answer_prefix or None}  # None when none: older folders resume
    if handle.prompt_format != "chat":  # absent for chat: a folder written before the setting resumes
        out["prompt_format"] = handle.prompt_format
    if getattr(handle, "thinking", None) is not None:  # absent when unset (the template's default), likewise
        out["thinking"] = handle.thinking  # type: ignore[union-attr]
    return out


# ---------------------------------------------------------------- which model a direction was fitted on

OTHER_MODEL_OVERRIDE = "allow_other_model=True"  # the Python override's name, the same in every hooks function


def model_identity(model: str) -> str:
    """What "the same model" means for a direction's provenance: the model's name as given to
    `load` (Handle.model_id, a capture's `model`), with a registered name (`organism`) resolved to
    its folder and a folder to its real path, so `organism`, its folder and a relative path to it
    are one model. A `tiny:<arch>` name and a hub id stay as they are: a folder a tiny model was
    saved to is another model (its files may since have changed; nothing here hashes weights), so
    a direction fitted on `tiny:llava` is refused on that folder unless the override is given."""
    if model.startswith("tiny:"):
        return model
    from evprobe.hooks.loading import resolve_model

    folder = resolve_model(model)
    return os.path.realpath(folder) if os.path.isdir(folder) else model


def same_model(fitted_on: Any, model: Any) -> bool:
    """Whether a direction fitted on `fitted_on` (its provenance's `model`) belongs to `model`."""
    if not isinstance(fitted_on, str) or not isinstance(model, str):
        return False
    return fitted_on == model or model_identity(fitted_on) == model_identity(model)


def other_model_refusal(name: str, fitted_on: Any, model: Any, override: str | None = OTHER_MODEL_OVERRIDE) -> str:
    """The one-line refusal of a direction fitted on another model (the CLI's and the hooks')."""
    text = (f"direction {name} was fitted on {fitted_on!r}, not {model!r}; steer the model it was fitted on "
            "(or fit directions on this model's capture)")
    return text + (f", or pass {override} to use it on this model anyway" if override else "")


def check_fitted_on(name: str, fitted_on: Any, model: Any, *, allow_other_model: bool = False,
                    override: str | None = OTHER_MODEL_OVERRIDE, error: type[Exception] = ValueError) -> None:
    """Refuse (one line, `error`) a direction fitted on another model than `model`, unless
    `allow_other_model`. `fitted_on` None: no provenance (a raw vector), nothing to check."""
    if fitted_on is None or allow_other_model or same_model(fitted_on, model):
        return
    raise error(other_model_refusal(name, fitted_on, model, override))
