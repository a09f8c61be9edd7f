"""evprobe: do vision-language models know when their evidence is enough?

The installed package is `evprobe`; its parts live in the repository's top-level folders and
install under it (`bench/` -> `evprobe.bench`, `hooks/` -> `evprobe.hooks`, `probes/` ->
`evprobe.probes`, `analysis/` -> `evprobe.analysis`, `experiments/` -> `evprobe.experiments`,
`organism/` -> `evprobe.organism`, `core/` -> `evprobe.core`). This module is the short public API; `import evprobe` stays cheap:
every name is imported on first use.

    evprobe.load(model, ...) -> Handle          a Hugging Face VLM (name, folder or model config)
    evprobe.wrap(model, processor) -> Handle    a model already in memory (transformers or nnsight)
    evprobe.tiny(arch) -> Handle                a tiny random instance of an architecture, offline
    evprobe.capture(handle, prompts, images, layers=, positions=) -> (n, layers, positions, d_model)
        positions (one vocabulary for capture, steering and patching): "last", "all", "image" (every image
        token; capture reads its mean, as "image_mean"), "text" / "text_mean", token indices (int, evprobe.Token; negative
        from the end), evprobe.Marker(text, "mean" | "first" | "last"); component= "resid_post"
        (default), "attn_out", "mlp_out"; evprobe.capture_components(..., components=[...]) one pass
        backend="vllm", engine=llm: read inside a vLLM engine (resid_post, text-only; docs/api/capture.md)
        evprobe.Frame(k) the k-th image's (or a video's k-th frame's) tokens
    evprobe.mark_video(frames, key, fps)  frames a model with a video path reads as ONE video (any row's images)
    evprobe.capture_tokens(handle, prompts, images, layers=) -> TokenActs (one array per row)
    evprobe.capture_sites(handle, prompts, images, sites=["attn_head.L3.H2", ...], positions=) -> {site: array}
    evprobe.intervene(handle, [Read(site), Add(site, delta), Ablate, Replace, Patch])  the one intervention
        core (context manager): reads and edits at any site (evprobe.Site; handle.sites lists them),
        every forward inside, composable; evprobe.Adapter / register_adapter place an architecture's sites
    evprobe.patch_sites(handle, source, target, sites=, position_sets=, candidates=)  activation patching
    evprobe.steering_dose_response(handle, prompts, images, direction=, candidates=, target=, families=)
        the pipeline's dose-response on your own prompts: random and label-free null directions (the
        latter from the rows the direction was fitted on: fit_rows= or its capture), cross-fitted choice,
        family-bootstrap intervals, a verdict on specificity; tidy DataFrames and a plot
    evprobe.label_free_directions(acts, labels, families, direction)  the label-free null directions of
        a steering claim (fitted like the probe once the label carries nothing); evprobe.direction_rows(d)
        the rows a fitted Direction was fitted on (a FitRows)
    evprobe.fit_direction(acts, labels, families, layer=)  a steering Direction from your own arrays (a
        registered probe's unit vector toward label 1; it keeps its rows for the label-free null)
    evprobe.paired_effects(frame, baseline=, measures=)  your own per-item readouts (any model, engine or
        API) -> each condition's estimate and paired change with the pipeline's family-bootstrap intervals
    evprobe.pair_patching(handle, pairs, families=, candidates=, answers=, sites=)  pair patching on your
        own aligned pairs, both ways, with the pipeline's measures and intervals
    evprobe.probe_layers(handle, prompts, images, labels=, families=, out=)  capture + the probe sweep
    evprobe.Steering(direction, layer, alpha)   one additive edit; `with evprobe.steer(handle, s): ...`
    evprobe.ablate(handle, direction, layers)   project a direction out (context manager)
    evprobe.generate(handle, prompts, images)   batched greedy generation
    evprobe.load_capture(folder), evprobe.labels(...), evprobe.LogisticProbe, ... (probes)
    evprobe.write_capture(folder, acts, rows, layers=)  your own arrays and labels -> a capture folder
    evprobe.to_dataframe(run | results | sweep)  rows as a pandas DataFrame, nested fields dotted
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

# name -> (module, attribute in it)
_API: dict[str, tuple[str, str]] = {
    "load": ("evprobe.hooks.loading", "load"),
    "wrap": ("evprobe.hooks.loading", "wrap"),
    "Handle": ("evprobe.hooks.handle", "Handle"),
    "tiny": ("evprobe.hooks.tiny_models", "tiny"),
    "capture": ("evprobe.hooks.capture_backend", "capture"),
    "capture_components": ("evprobe.hooks.capture", "capture_components"),
    "capture_tokens": ("evprobe.hooks.token_capture", "capture_tokens"),
    "capture_sites": ("evprobe.hooks.site_capture", "capture_sites"),
    "intervene": ("evprobe.hooks.intervention", "intervene"),
    "Read": ("evprobe.hooks.intervention", "Read"),
    "Add": ("evprobe.hooks.intervention", "Add"),
    "Ablate": ("evprobe.hooks.intervention", "Ablate"),
    "Replace": ("evprobe.hooks.intervention", "Replace"),
    "Patch": ("evprobe.hooks.intervention", "Patch"),
    "Site": ("evprobe.hooks.sites", "Site"),
    "Adapter": ("evprobe.hooks.sites", "Adapter"),
    "register_adapter": ("evprobe.hooks.sites", "register_adapter"),
    "patch_sites": ("evprobe.hooks.patching", "patch_sites"),
    "build_inputs": ("evprobe.hooks.inputs", "build_inputs"),
    "steering_dose_response": ("evprobe.analysis.dose_response", "steering_dose_response"),
    "ChoiceRule": ("evprobe.analysis.dose_grid", "ChoiceRule"),
    "GeneratedReadout": ("evprobe.analysis.generated_readout", "GeneratedReadout"),
    "pair_patching": ("evprobe.analysis.patching", "pair_patching"),
    "paired_effects": ("evprobe.analysis.effects", "paired_effects"),
    "label_free_directions": ("evprobe.analysis.label_null", "label_free_directions"),
    "direction_rows": ("evprobe.analysis.label_null", "direction_rows"),
    "FitRows": ("evprobe.analysis.label_null", "FitRows"),
    "fit_direction": ("evprobe.analysis.directions", "fit_direction"),
    "probe_layers": ("evprobe.analysis.layer_sweep", "probe_layers"),
    "Token": ("evprobe.hooks.positions", "Token"),
    "Frame": ("evprobe.hooks.positions", "Frame"),
    "resolve_positions": ("evprobe.hooks.positions", "resolve_positions"),
    "mark_video": ("evprobe.core.video", "mark_video"),
    "Marker": ("evprobe.hooks.positions", "Marker"),
    "Steering": ("evprobe.hooks.steering", "Steering"),
    "steer": ("evprobe.hooks.steering", "steer"),
    "ablate": ("evprobe.hooks.ablation", "ablate"),
    "generate": ("evprobe.hooks.generation", "generate"),
    "next_token_logprobs": ("evprobe.hooks.generation", "next_token_logprobs"),
    "load_capture": ("evprobe.probes.captures", "load_capture"),
    "load_captures": ("evprobe.probes.captures", "load_captures"),
    "labels": ("evprobe.probes.label_sets", "labels"),
    "write_capture": ("evprobe.probes.capture_writer", "write_capture"),
    "read_directions": ("evprobe.probes.directions", "read_directions"),
    "load_direction": ("evprobe.probes.directions", "load_direction"),
    "LinearProbe": ("evprobe.probes.protocol", "LinearProbe"),
    "register_probe": ("evprobe.probes.registry", "register_probe"),
    "ProbeSpec": ("evprobe.probes.registry", "ProbeSpec"),
    "check_probe": ("evprobe.probes.probe_checks", "check_probe"),
    "LogisticProbe": ("evprobe.probes.estimators", "LogisticProbe"),
    "MassMeanProbe": ("evprobe.probes.estimators", "MassMeanProbe"),
    "NearestCentroidProbe": ("evprobe.probes.estimators", "NearestCentroidProbe"),
    "SweepConfig": ("evprobe.probes.sweep", "SweepConfig"),
    "SweepResult": ("evprobe.probes.sweep", "SweepResult"),
    "sweep": ("evprobe.probes.sweep", "sweep"),
    "InputError": ("evprobe.core.errors", "InputError"),
    "to_dataframe": ("evprobe.core.frames", "to_dataframe"),
}

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name in _API:
        module, attribute = _API[name]
        value = getattr(import_module(module), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'evprobe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
