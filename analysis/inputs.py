"""Checks of the own-data functions' arguments, run before any work: each failure one InputError
line naming the argument, the value given and the fix.

Numbers are Python or numpy numbers, never bools (`True` is not a count of resamples). Readouts
must be finite (NaN where a measure is undefined) and at most MAX_VALUE in magnitude: the
intervals sum squares of per-family sums and multiply two such sums, so a value of 1e308 would
turn every bound into inf. Identifiers (conditions, items, families, groups) are present scalars:
None or NaN is no family. Resampling is bounded in memory (MAX_BOOT_NUMBERS).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from evprobe.core.errors import InputError, shown

# |value| <= 1e50 keeps (F x n x value)^4, the largest power an interval forms, finite for up to 1e9
# items; a readout beyond it is in the wrong units (rescale it)
MAX_VALUE = 1e50
MAX_BOOT = 1_000_000
# n_boot x (families + cells): the resample counts and each condition's resampled ratios, 8 bytes
# each, under about 400 MB per array
MAX_BOOT_NUMBERS = 50_000_000


def integer(name: str, value: Any, low: int, high: int | None = None, fix: str = "") -> int:
    """`value` as an int after checking it is an integer (not a bool) in [low, high]."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if not ok or value < low or (high is not None and value > high):
        span = f">= {low}" if high is None else f"from {low} to {high}"
        kind = "a bool" if isinstance(value, (bool, np.bool_)) else shown(value, 40)
        raise InputError(f"{name} must be an integer {span}, got {kind}{'; ' + fix if fix else ''}")
    return int(value)


def real(name: str, value: Any, *, positive: bool = False, bound: float | None = None, fix: str = "") -> float:
    """`value` as a float after checking it is a finite real number (not a bool), > 0 when
    `positive`, at most `bound` in magnitude."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    x = float(value) if ok else math.nan
    if not ok or not math.isfinite(x) or (positive and not x > 0) or (bound is not None and abs(x) > bound):
        want = "a finite number" + (" > 0" if positive else "") + (f" of magnitude <= {bound:g}" if bound else "")
        kind = "a bool" if isinstance(value, (bool, np.bool_)) else shown(value, 40)
        raise InputError(f"{name} must be {want}, got {kind}{'; ' + fix if fix else ''}")
    return x


def missing(value: Any) -> bool:
    """None, NaN, pd.NA or NaT: no value."""
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN, NaT; pd.NA raises (its truth is ambiguous)
    except (TypeError, ValueError):  # pd.NA, or an array (no id either)
        return True


def identifiers(name: str, values: Sequence[Any], what: str, fix: str) -> None:
    """Refuse a missing or unhashable id among `values` (one per row), naming the first."""
    for i, v in enumerate(values):
        try:
            hash(v)  # a tuple holding a list passes isinstance(v, Hashable) and fails here
            bad = missing(v)
        except TypeError:
            bad = True
        if bad:
            raise InputError(f"{name}: {what} {i} is {shown(v, 40)}, not an id; {fix}")


def readouts(values: np.ndarray, where: Callable[[tuple[int, ...]], str]) -> None:
    """Refuse inf and values beyond MAX_VALUE in a float array (NaN: undefined, allowed)."""
    bad = np.isinf(values) | (np.abs(np.nan_to_num(values)) > MAX_VALUE)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise InputError(f"{where(index)}: {float(values[index])!r} is not a readout; values "
                         f"must be finite and at most {MAX_VALUE:g} in magnitude (NaN where undefined): rescale "
                         "the measure, or mark the value NaN")


def boot_memory(n_boot: int, n_families: int, n_cells: int) -> None:
    """Refuse a bootstrap whose arrays would pass MAX_BOOT_NUMBERS numbers."""
    size = n_boot * (n_families + n_cells)
    if size > MAX_BOOT_NUMBERS:
        raise InputError(f"n_boot {n_boot} x ({n_families} families + {n_cells} cells) = {size:,} numbers per "
                         f"resample array, beyond {MAX_BOOT_NUMBERS:,}; lower n_boot (e.g. 2000) or use fewer groups")




# -- steering_dose_response ----------------------------------------------------------------------

MAX_ALPHA = 1000.0  # in norm units: 1000 x the typical residual norm is far past any dose that reads a model
MAX_DOSES = 1000
MAX_NULL = 100_000  # null directions of each kind
# the model's activations per token, in multiples of d_model: residual, attention q/k/v/out, the MLP's
# intermediate states (about 4 x d_model, up and gate) and the autograd-free copies between them
ACTIVATION_FACTOR = 16


def texts(name: str, values: Any, what: str, *, empty: bool = True) -> list[str]:
    """A list of strings (not one string), each a str (non-empty unless `empty`)."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise InputError(f"{name} must be a list of strings, got {shown(values, 40)}; e.g. {name}=[{shown(what)}]")
    for i, v in enumerate(values):
        if not isinstance(v, str) or (not empty and not v):
            raise InputError(f"{name}[{i}] is {shown(v, 40)}; each must be a {'non-empty ' if not empty else ''}string")
    return list(values)


def doses(alphas: Any, units: str) -> list[float]:
    """The non-zero doses, sorted, after checking each is a finite number (not a bool) within bounds."""
    if isinstance(alphas, str | bytes) or not isinstance(alphas, Sequence | np.ndarray):
        raise InputError(f"alphas must be a list of numbers, e.g. alphas=(-1, -0.5, 0, 0.5, 1), got {shown(alphas, 40)}")
    if len(alphas) > MAX_DOSES:
        raise InputError(f"alphas holds {len(alphas)} doses, more than {MAX_DOSES}; give a grid of a few doses")
    bound = MAX_ALPHA if units == "norm" else None
    fix = "doses are in multiples of the mean residual norm (units='norm')" if bound else "raw units"
    values = [real(f"alphas[{i}]", a, bound=bound, fix=fix) for i, a in enumerate(alphas)]
    steps = sorted(set(values) - {0.0})
    if not steps:
        raise InputError("alphas has no dose but 0; give e.g. alphas=(-1, -0.5, 0.5, 1)")
    return steps


def unit_norms(mean_norm: Any, layers: Sequence[int]) -> None:
    """mean_norm: None, a finite number > 0, or {layer: such a number} for steered layers."""
    if mean_norm is None:
        return
    fix = "the mean residual norm at the layer (None measures it on these prompts)"
    if isinstance(mean_norm, Mapping):
        for layer, value in mean_norm.items():
            if isinstance(layer, bool) or not isinstance(layer, numbers.Integral) or int(layer) not in layers:
                raise InputError(f"mean_norm has key {shown(layer, 40)}, not a steered layer ({sorted(layers)}); give "
                                 "{layer: norm} for steered layers")
            real(f"mean_norm[{layer}]", value, positive=True, fix=fix)
    else:
        real("mean_norm", mean_norm, positive=True, fix=fix)


def context_limit(handle: Any) -> tuple[int, str] | None:
    """The model's context in tokens and what says so: the config's max_position_embeddings, else the
    tokenizer's model_max_length (when set: tokenizers without one report about 1e30); None if neither."""
    from evprobe.hooks.inputs import context_length

    limit = context_length(handle.model)
    if limit is not None:
        return limit, "its config's max_position_embeddings"
    value = getattr(getattr(handle, "tokenizer", None), "model_max_length", None)
    if isinstance(value, int) and 0 < value < 10**8:
        return value, "its tokenizer's model_max_length"
    return None


def free_bytes(device: Any) -> int | None:
    """Memory free for a forward: the GPU's free memory, or the host's MemAvailable (Linux); None when unknown."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def forward_bytes(handle: Any, rows: int, tokens: int) -> int:
    """A rough peak of one forward of `rows` rows of `tokens` tokens: activations, plus the attention
    scores (rows x heads x tokens^2 float32) where they are materialised (eager attention, or any on a CPU)."""
    import torch

    config = handle.model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(getattr(text, "num_attention_heads", 1) or 1)
    width = max(handle.d_model, int(getattr(text, "intermediate_size", 0) or 0) // 4)
    itemsize = torch.empty((), dtype=handle.dtype).element_size()
    total = rows * tokens * width * itemsize * ACTIVATION_FACTOR
    fused = torch.device(handle.device).type == "cuda" and getattr(config, "_attn_implementation", "eager") != "eager"
    return total + (0 if fused else rows * heads * tokens * tokens * 4)


def prompt_lengths(handle: Any, prompts: list[str], images: Sequence[Any], batch_size: int, rows: int) -> None:
    """Refuse, before any forward, a prompt longer than the model's context, and batches whose
    forward (`rows` rows of the batch's padded length) would pass the memory free for it."""
    from evprobe.hooks.inputs import encode_inputs

    limit = context_limit(handle)
    free = free_bytes(handle.device)
    for start in range(0, len(prompts), batch_size):
        enc = encode_inputs(handle, prompts[start:start + batch_size], images[start:start + batch_size])
        lengths = enc["attention_mask"].sum(dim=1).tolist()  # images' tokens included
        for i, n in enumerate(lengths):
            if limit is not None and n > limit[0]:
                raise InputError(f"prompts[{start + i}] is {n} tokens (images included), beyond the {limit[0]}-token "
                                 f"context of {handle.model_id} ({limit[1]}); shorten it or use a model with a longer "
                                 "context")
        need = forward_bytes(handle, rows, int(enc["input_ids"].shape[1]))
        if free is not None and need > free:
            raise InputError(f"prompts[{start}:{start + batch_size}] ({int(enc['input_ids'].shape[1])} tokens padded) "
                             f"in forwards of {rows} rows need about {need / 2**30:.1f} GiB, beyond the "
                             f"{free / 2**30:.1f} GiB free; lower max_rows and batch_size, or shorten the prompts")



def dose_arguments(prompts: Sequence[str], families: Sequence[str], groups: Sequence[str] | None, alphas: Sequence[float],
                   candidates: Sequence[str] | None, target: str | Sequence[str] | None, goal: int, units: str,
                   counts: dict[str, Any], n_measures: int = 2) -> tuple[np.ndarray, list[float]]:
    """steering_dose_response's arguments that need no model, checked before any work: one InputError
    line each. counts: the integer arguments by name, as (value, lowest, highest or None). Returns the
    families as an array and the sorted non-zero doses."""
    prompts = texts("prompts", prompts, "Is the evidence enough? Answer A or B.")
    n = len(prompts)
    if not n:
        raise InputError("prompts is empty; give one prompt per item")
    if isinstance(families, str) or not isinstance(families, Sequence | np.ndarray) or len(families) != n:
        got = f"{len(families)} family ids" if isinstance(families, Sequence | np.ndarray) else shown(families, 40)
        raise InputError(f"{n} prompts but {got}; give one family per prompt (items that share a source share a family)")
    identifiers("families", list(families), "prompt", "give every prompt a family id (a string or number)")
    if groups is not None:
        if isinstance(groups, str) or not isinstance(groups, Sequence | np.ndarray) or len(groups) != n:
            raise InputError(f"{n} prompts but groups {shown(groups, 40)}; give one label per prompt, or groups=None")
        identifiers("groups", list(groups), "prompt", "give every prompt a group label (a string)")
    if len(set(families)) < 2:
        raise InputError("a family bootstrap and a cross-fitted choice need at least 2 families")
    if candidates is not None:  # None: a generated readout (analysis.generated_readout), no letters to read
        candidates = texts("candidates", candidates, "A", empty=False)
        if len(candidates) < 2 or len(set(candidates)) != len(candidates):
            raise InputError(f"give at least two distinct candidates, got {list(candidates)}")
        targets = [target] * n if isinstance(target, str) else texts("target", target, "A")
        if len(targets) != n:
            raise InputError(f"{n} prompts but {len(targets)} targets; give one target, or one per prompt")
        bad = next((t for t in targets if t not in candidates), None)
        if bad is not None:
            raise InputError(f"target {bad!r} is not a candidate; choose from {', '.join(candidates)}")
    if isinstance(goal, bool) or goal not in (1, -1):
        raise InputError(f"goal must be +1 (raise the target's log-odds) or -1 (lower them), got {goal!r}")
    if units not in ("norm", "raw"):
        raise InputError(f"units must be 'norm' (multiples of the mean residual norm) or 'raw', got {units!r}")
    steps = doses(alphas, units)
    for name, (value, low, high) in counts.items():
        if not (name == "random_seed" and value is None):
            integer(name, value, low, high)
    boot_memory(counts["n_boot"][0], len(set(families)), n_measures * (1 + len(set(map(str, groups or ())))))
    return np.asarray(families, dtype=object), steps


__all__ = ["MAX_ALPHA", "MAX_BOOT", "MAX_BOOT_NUMBERS", "MAX_DOSES", "MAX_NULL", "MAX_VALUE", "boot_memory",
           "context_limit", "dose_arguments", "doses", "forward_bytes", "free_bytes", "identifiers", "integer", "missing",
           "prompt_lengths", "readouts", "real", "texts", "unit_norms"]
