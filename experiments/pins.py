"""The pins of a model job, written once: what a rerun into the same folder must agree on about its
inputs, and what only the loaded model tells (core.jobs refuses a rerun whose pins differ, naming
the setting and both values).

    input_pins(model, templates=("direct", "standard"), images=(bench, items))
        {"prompt_template_sha256": ..., "images_sha256": ..., **hooks.fingerprint.model_fingerprint(model)}
    loaded_pins(handle)  hooks.fingerprint.loaded_fingerprint: revision, loaded dtype, chat template, ...

templates: one (protocol, regime) pair, or {key: (protocol, regime)} when a job prompts under
several (gating pins both regimes' text). images: the benchmark folder and the items whose images
the job reads (its selection), or None where the job pins them itself (capture also counts them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evprobe.bench.items import Item
from evprobe.bench.manifest import resolve_image
from evprobe.bench.protocols import prompt_template_sha256
from evprobe.core.json_types import JsonObject


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def images_sha256(bench: Path, items: Sequence[Item]) -> tuple[str, int]:
    """sha256 of the sorted 'path sha256' lines of every image the items use, and their count."""
    paths = sorted({rel for it in items for rel in it.images})
    lines = [f"{rel} {_sha256_file(resolve_image(bench, rel))}" for rel in paths]
    return sha256_text("\n".join(lines)), len(paths)


def input_pins(model: str, *, templates: tuple[str, str] | Mapping[str, tuple[str, str]],
               images: tuple[Path, Sequence[Item]] | None = None) -> JsonObject:
    """The prompt template text, the images read and the model's files (module docstring)."""
    from evprobe.hooks.fingerprint import model_fingerprint

    if isinstance(templates, Mapping):
        text: Any = {key: prompt_template_sha256(*pair) for key, pair in templates.items()}
    else:
        text = prompt_template_sha256(*templates)
    out: JsonObject = {"prompt_template_sha256": text}
    if images is not None:
        out["images_sha256"] = images_sha256(*images)[0]
    return {**out, **model_fingerprint(model)}


def loaded_pins(handle: Any) -> JsonObject:
    """What only the loaded model tells (hooks.fingerprint.loaded_fingerprint)."""
    from evprobe.hooks.fingerprint import loaded_fingerprint

    return loaded_fingerprint(handle)
