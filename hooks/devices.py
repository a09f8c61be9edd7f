"""Where a module runs, for models spread by accelerate's big-model loading (`device_map`).

With `device_map="auto"` a model's layers may sit on several GPUs, on the CPU, or be offloaded
(their parameters on the `meta` device, loaded by an accelerate hook for each forward). Inputs go
to the device of the input embeddings; a steering vector goes to the device of the layer it is
added at; captured hidden states are moved to the CPU layer by layer as they are stored.

`max_memory` is accelerate's per-device budget, written as one string so that it fits a YAML
scalar, a CLI flag and a frozen config: "0=70GiB,1=70GiB,cpu=200GiB" (an integer is a GPU index).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["PLACEMENT_KEYS", "module_device", "parse_max_memory", "placement_of"]

# hooks.load's keywords (and the config fields) that say where a model's modules go.
from evprobe.core.flags import PLACEMENT_KEYS  # noqa: E402 - one definition, shared with the job runner

_SIZE = re.compile(r"^\d+(\.\d+)?\s*([KMGT]i?B|B)?$", re.IGNORECASE)


def module_device(root: nn.Module, path: str = "") -> torch.device:
    """The device the submodule `path` of `root` computes on: the execution device of the nearest
    accelerate hook on it or on a module above it (a device map may place a whole block, e.g. the
    language model, whose layers then carry no hook of their own; offloaded parameters sit on
    `meta` until the hook loads them), else its first parameter's or buffer's device that is not
    `meta`, else the CPU."""
    import torch

    parts = path.split(".") if path else []
    for depth in range(len(parts), -1, -1):
        hook = getattr(root.get_submodule(".".join(parts[:depth])), "_hf_hook", None)
        execution = getattr(hook, "execution_device", None)
        if execution is not None:
            return torch.device(f"cuda:{execution}" if isinstance(execution, int) else execution)
    module = root.get_submodule(path)
    for tensor in (*module.parameters(), *module.buffers()):
        if tensor.device.type != "meta":
            return tensor.device
    return torch.device("cpu")


def parse_max_memory(spec: str | None) -> dict[int | str, str] | None:
    """'0=70GiB,cpu=200GiB' -> {0: '70GiB', 'cpu': '200GiB'}; None or '' -> None."""
    if spec is None or not spec.strip():
        return None
    out: dict[int | str, str] = {}
    for part in spec.split(","):
        device, eq, size = (x.strip() for x in part.partition("="))
        if not eq or not device or not _SIZE.match(size):
            raise ValueError(f"max_memory entry {part.strip()!r} is not DEVICE=SIZE; write e.g. "
                             "0=70GiB,1=70GiB,cpu=200GiB (GPU index, cpu or disk; sizes in B, KB, MiB, GiB ...)")
        key: int | str = int(device) if device.isdigit() else device.lower()
        if isinstance(key, str) and key not in ("cpu", "disk", "mps"):
            raise ValueError(f"max_memory device {device!r} is not a GPU index, cpu or disk; e.g. 0=70GiB,cpu=200GiB")
        if key in out:
            raise ValueError(f"max_memory names device {device!r} twice; give each device once")
        out[key] = size.replace(" ", "")
    return out


def placement_of(config: object) -> dict[str, object]:
    """evprobe.hooks.load's placement keywords read off any config with `device_map` (and optionally
    `max_memory`, `offload_folder`) fields."""
    return {key: getattr(config, key, None) for key in PLACEMENT_KEYS}
