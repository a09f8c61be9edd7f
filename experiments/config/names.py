"""The names configs and models go by: YAML configs found by name in the repository's configs/<kind>/
folders, and the check that a model name names a model (a typo refused before any network).

Split from `experiments.config` (which imports these back: `resolve_config`, `check_model_name`, ...),
so that the typed loader stays one module of its size.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from evprobe.bench.model_config import did_you_mean
from evprobe.core.errors import ConfigError, InputError

CONFIGS_DIR = Path(__file__).resolve().parents[2] / "configs"  # experiments/config/names.py -> the repository
CONFIG_KINDS = ("models", "experiments")
YAML_SUFFIXES = (".yaml", ".yml")


# ---------------------------------------------------------------- which model names exist

POLICY_PREFIX = "policy:"  # bench.runner's: a scripted policy, which only `evprobe run` runs
# A hub id as the hub allows it: `owner/name`, one slash, letters, digits, `-`, `_` and `.`, each
# part starting and ending with a letter or digit, no `--` or `..` (huggingface_hub's
# validate_repo_id), at most 96 characters a part.
_HUB_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_HUB_ID = re.compile(rf"{_HUB_PART}/{_HUB_PART}")
_ACCEPTED = ("a model config (a name in configs/models or a YAML path), an existing folder, tiny:<arch>, "
             "a registered name, or a hub id owner/name")


class UnknownModelError(ConfigError, InputError):
    """A model name that is no config, folder, known name or plausible hub id (one line, closest matches)."""


def plausible_hub_id(name: str) -> bool:
    """`owner/name` as the hub allows it (`_HUB_ID`): what may be worth a hub lookup."""
    return _HUB_ID.fullmatch(name) is not None and "--" not in name and ".." not in name \
        and not name.endswith(YAML_SUFFIXES)


def known_model_names(*, policies: bool = False) -> list[str]:
    """Every name a model flag knows without a folder or a hub: the configs in configs/models,
    tiny:<arch>, the registered names and (with `policies`) policy:<name>."""
    from evprobe.hooks.loading import named_models
    from evprobe.hooks.tiny_models import TINY_ARCHS

    names = [*config_names("models"), *(f"tiny:{a}" for a in TINY_ARCHS), *named_models()]
    if policies:
        from evprobe.bench.policies import POLICIES

        names += [f"{POLICY_PREFIX}{p}" for p in POLICIES]
    return names


def _in_hub_cache(model: str) -> bool:
    """Whether a bare hub name (a legacy id without an owner, `gpt2`) is in the local Hugging Face
    cache: read from disk only. Such a name is accepted when cached; otherwise it must be written
    owner/name (`openai-community/gpt2`), so a typo is never a network lookup."""
    if "/" in model or not model:
        return False
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(model, "config.json"), str)
    except Exception:  # noqa: BLE001 - a name the cache cannot even look up is not in it
        return False


def check_model_name(model: str, *, policies: bool = False) -> None:
    """Refuse, in one line naming the closest known names, a model that is neither an existing
    path, a model config, tiny:<known arch>, a registered name, (with `policies`) policy:<known
    name), nor a plausible hub id (`plausible_hub_id`): before any network, download or load, so a
    typo (`qwen2_5_vl_7`) is not a hub lookup. The one check of every command that takes a model
    (`model_config_path` -> run, capture, patching; `load_model_config` -> the experiments' configs,
    quickstart)."""
    if os.path.exists(model):
        return
    if model.startswith("tiny:"):
        from evprobe.hooks.tiny_models import TINY_ARCHS

        arch = model.removeprefix("tiny:")
        if arch not in TINY_ARCHS:
            raise UnknownModelError(f"unknown tiny architecture {arch!r}{did_you_mean(arch, list(TINY_ARCHS))} "
                                    f"Choose from {', '.join(TINY_ARCHS)}")
        return
    if model.startswith(POLICY_PREFIX):
        from evprobe.bench.policies import POLICIES

        name = model.removeprefix(POLICY_PREFIX)
        if not policies:
            raise UnknownModelError(f"{model} is a scripted policy, which only `evprobe run` runs; give a model: "
                                    f"{_ACCEPTED}")
        if name not in POLICIES:
            raise UnknownModelError(f"unknown policy {name!r}{did_you_mean(name, list(POLICIES))} "
                                    f"Choose from {', '.join(POLICIES)}")
        return
    if model.endswith(YAML_SUFFIXES):
        if find_config(model, "models") is None:
            stem = Path(model).stem if Path(model).name == model else model
            raise UnknownModelError(f"model config file {model} not found{did_you_mean(stem, config_names('models'))} "
                                    f"Give an existing YAML path or a name from {CONFIGS_DIR / 'models'} "
                                    f"(known: {', '.join(config_names('models'))})")
        return
    if find_config(model, "models") is not None or plausible_hub_id(model):
        return
    from evprobe.hooks.loading import named_models

    if model in named_models() or _in_hub_cache(model):
        return
    known = known_model_names(policies=policies)
    pathlike = "/" in model or os.sep in model or model.startswith(".")
    why = "no such path, and not a hub id owner/name (letters, digits, -, _, .)" if pathlike else "not a known name"
    close = did_you_mean(model, known)
    if close == ".":  # nothing close: the names there are
        close = f" (model configs: {', '.join(config_names('models'))})."
    bare = "" if pathlike else " (a hub model without an owner only when in the local cache: write owner/name, e.g. " \
        "openai-community/gpt2)"
    raise UnknownModelError(f"unknown model {model!r}: {why}{close} Give {_ACCEPTED}"
                            f"{', or policy:<name>' if policies else ''}{bare}")


# ---------------------------------------------------------------- finding config files


def config_names(kind: str) -> list[str]:
    """The bare names of the YAML configs in configs/<kind>/ (sorted)."""
    folder = CONFIGS_DIR / kind
    return sorted(p.stem for p in folder.glob("*") if p.suffix in YAML_SUFFIXES) if folder.is_dir() else []


def find_config(ref: str, kind: str) -> Path | None:
    """An existing YAML file: `ref` itself, or configs/<kind>/<ref>[.yaml|.yml]; None if neither."""
    path = Path(ref)
    if path.suffix in YAML_SUFFIXES and path.is_file():
        return path
    if path.name == ref:  # a bare name, not a path
        for suffix in ("", *YAML_SUFFIXES):
            candidate = CONFIGS_DIR / kind / f"{ref}{suffix}"
            if candidate.suffix in YAML_SUFFIXES and candidate.is_file():
                return candidate
    return None


def resolve_config(ref: str | Path, kind: str) -> Path:
    """The YAML file `ref` names: a path, or a bare name in configs/<kind>/. Missing: one-line error."""
    if kind not in CONFIG_KINDS:
        raise ValueError(f"unknown config kind {kind!r}; choose from {', '.join(CONFIG_KINDS)}")
    found = find_config(str(ref), kind)
    if found is None:
        known = ", ".join(config_names(kind)) or "none"
        raise ConfigError(f"config file {ref} not found (not a YAML file, not a name in {CONFIGS_DIR / kind}; "
                          f"known: {known})")
    return found
