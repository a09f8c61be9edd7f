"""Writing and locating the organism's checkpoint folder."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from evprobe.core.errors import InputError
from evprobe.core.json_files import read_json_object
from evprobe.core.json_types import JsonObject

# The committed checkpoint (trained once with the default TrainConfig; see organism.json in it).
CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoint"
PROCESSOR_CLASS = "OrganismProcessor"


def checkpoint_path() -> str:
    """The committed checkpoint folder (the `organism` model name resolves here)."""
    if not (CHECKPOINT_DIR / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"the organism checkpoint is missing from {CHECKPOINT_DIR}; restore it from git "
            "(git checkout -- organism/checkpoint) or train one: evprobe organism train --out DIR"
        )
    return str(CHECKPOINT_DIR)


def _check_replaceable(out: Path, own: set[str]) -> None:
    """Refuse to replace `out` unless it is a checkpoint holding only files a checkpoint is written with:
    the replacement removes the old folder, and must never take a user's file with it."""
    if out.is_symlink() or not out.is_dir() or not (out / "organism.json").is_file():
        raise InputError(f"{out} exists and is not an organism checkpoint (no organism.json); move it aside "
                         "or choose another --out")
    foreign = sorted(p.name for p in out.iterdir() if p.name not in own or not p.is_file() or p.is_symlink())
    if foreign:
        raise InputError(f"{out} holds a checkpoint but also {', '.join(foreign[:3])}, which training did not "
                         f"write; move them out of {out} or choose another --out")


def write_checkpoint(model, out: str | Path, meta: JsonObject) -> Path:
    """model + tokenizer + processor_config.json + organism.json into `out`, atomically."""
    from evprobe.organism.vocab import build_tokenizer

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        build_tokenizer().save_pretrained(tmp)
        (tmp / "processor_config.json").write_text(json.dumps({"processor_class": PROCESSOR_CLASS}, indent=2) + "\n")
        (tmp / "organism.json").write_text(json.dumps(meta, indent=2) + "\n")
        for p in tmp.iterdir():
            os.chmod(p, 0o644)
        os.chmod(tmp, 0o755)
        if out.exists():
            _check_replaceable(out, {p.name for p in tmp.iterdir()})
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def planted_location(path: str | Path | None = None) -> dict[str, int]:
    """Where the organism's computation is planted, from its organism.json (organism.model.ModelConfig):
    n_layers, attention_free_layers (layers below it read no other position) and aux_layer (the
    training-only head read the right option's meaning at the answer position, `ANSWER:`, after it)."""
    folder = Path(path) if path is not None else CHECKPOINT_DIR
    model = read_json_object(folder / "organism.json", "retrain it: evprobe organism train --out DIR")[0]["recipe"]["model"]
    if "attention_free_layers" not in model:
        raise ValueError(f"{folder}/organism.json: an organism without a planted location (v1); retrain it: "
                         "evprobe organism train --out DIR")
    return {k: int(model[k]) for k in ("n_layers", "attention_free_layers", "aux_layer")}
