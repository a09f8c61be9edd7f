"""The speed settings, each ON vs its default with the outputs compared: decode_cache, vision_attention,
and the runner's sort_by_length and prefetch."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .availability import NotApplicable
from .items import Rows
from .results import SettingCheck, Timing
from .timing import count_sdpa, rounds, timed


def _differing(a: Sequence[Any], b: Sequence[Any]) -> int:
    return sum(x.token_ids != y.token_ids for x, y in zip(a, b, strict=True))


def run_decode_cache(handle: Any, rows: Rows, b: int, repeats: int) -> tuple[SettingCheck, ...]:
    from evprobe.bench.budgets import default_reply_budget as max_new_tokens

    from evprobe.hooks.generation import DECODE_CACHES as caches
    from evprobe.hooks.generation import generate

    prompts, images = rows.prompts("direct", b), rows.image_lists(b)
    n = max_new_tokens("direct", "standard")
    variants = {c: (lambda c=c: generate(handle, prompts, images, max_new_tokens=n, batch_size=b, decode_cache=c))
                for c in caches}
    t, out, first = rounds(variants, repeats, handle.device)
    return tuple(SettingCheck("decode_cache", "dynamic", c, b, f"generate(direct, {n} new tokens, batch {b})",
                              t["dynamic"], t[c], t[c].median_s / t["dynamic"].median_s,
                              _differing(out["dynamic"], out[c]) == 0, "greedy token ids", b,
                              _differing(out["dynamic"], out[c]), first_on_call_s=first[c])
                 for c in caches if c != "dynamic")


def _vision_tower(model: Any) -> Any:
    inner = getattr(model, "model", model)
    for name in ("visual", "vision_tower", "vision_model"):
        if hasattr(inner, name):
            return getattr(inner, name)
    raise NotApplicable(f"no vision tower found on {type(model).__name__}")


def run_vision_attention(handle: Any, rows: Rows, b: int, repeats: int) -> SettingCheck:
    import torch

    from evprobe.bench.budgets import default_reply_budget as max_new_tokens
    from evprobe.hooks.generation import generate
    from evprobe.hooks.inputs import build_inputs

    from evprobe.hooks.vision_attention import packed_archs, set_vision_attention

    archs = packed_archs()
    if handle.arch not in archs:
        raise NotApplicable(f"packed vision attention serves {', '.join(archs)}; {handle.arch}'s tower attends "
                            "over equal-size images in one call already")
    prompts, images = rows.prompts("direct", b), rows.image_lists(b)
    enc = build_inputs(handle, prompts, images)
    tower = _vision_tower(handle.model)
    n = max_new_tokens("direct", "standard")

    def forward():
        with torch.inference_mode():
            return handle.model(**enc, use_cache=False, logits_to_keep=1).logits[:, -1].float()  # (rows, vocab)

    names = ("stock", "packed")
    logits, gens, first, calls = {}, {}, {}, {}
    samples: dict[str, list[float]] = {name: [] for name in names}
    try:
        for name in names:  # the switch is model-wide: one setting at a time, switched outside the clock
            set_vision_attention(handle, name)
            with count_sdpa(tower) as counts:
                first[name], logits[name] = timed(forward, handle.device)  # warm-up call, counted
            calls[name] = dict(counts)
            gens[name] = generate(handle, prompts, images, max_new_tokens=n, batch_size=b)
        for _ in range(repeats):  # interleaved rounds
            for name in names:
                set_vision_attention(handle, name)
                seconds, logits[name] = timed(forward, handle.device)
                samples[name].append(seconds)
    finally:
        set_vision_attention(handle, "stock")
    timings = {name: Timing.of(v) for name, v in samples.items()}
    diff = float((logits["stock"] - logits["packed"]).abs().max())
    differing = _differing(gens["stock"], gens["packed"])
    return SettingCheck("vision_attention", "stock", "packed", b, f"one forward of batch {b} (inputs prebuilt)",
                        timings["stock"], timings["packed"], timings["packed"].median_s / timings["stock"].median_s,
                        differing == 0, f"greedy token ids ({n} new tokens)", b, differing,
                        max_abs_diff=diff, first_on_call_s=first["packed"], sdpa_calls=calls)


def _runner_records(handle: Any, label: str, bench: Path, out: Path, b: int, n: int, **setting: Any
                    ) -> tuple[float, dict[str, dict[str, Any]]]:
    """One bench.runner.run of the first n items (every request type) with the in-memory handle;
    the records by item id without their `seconds`."""
    from evprobe.bench.records import RECORDS_FILE, load_records
    from evprobe.bench.runner import RunConfig, run

    config = RunConfig.of(model=label, bench=str(bench), out=str(out), protocol="direct", batch_size=b, limit=n,
                          **setting)
    seconds, _ = timed(lambda: run(config, progress=False, handle=handle), handle.device)
    records = load_records(out / RECORDS_FILE)
    return seconds, {k: {f: v for f, v in dataclasses.asdict(r).items() if f != "seconds"} for k, r in records.items()}


RUNNER_SETTINGS: dict[str, Any] = {"sort_by_length": True, "prefetch": 1}  # the ON values; OFF: False, 0


def run_runner_settings(handle: Any, label: str, bench: Path, scratch: Path, b: int, n: int, repeats: int
                        ) -> dict[str, SettingCheck]:
    """Every runner setting ON vs the shared OFF run: one untimed OFF run (the runner's first-use
    costs), then `repeats` interleaved rounds of OFF and each setting ON, fresh folders."""
    ready = RUNNER_SETTINGS
    out: dict[str, SettingCheck] = {}
    _runner_records(handle, label, bench, scratch / "warm", b, n)
    samples: dict[str, list[float]] = {"off": [], **{s: [] for s in ready}}
    records: dict[str, dict] = {}
    for r in range(repeats):
        for key in samples:
            setting = {} if key == "off" else {key: ready[key]}
            seconds, records[key] = _runner_records(handle, label, bench, scratch / f"{key}-{r}", b, n, **setting)
            samples[key].append(seconds)
    off_t = Timing.of(samples["off"])
    for s, on in ready.items():
        differing = sum(records["off"].get(k) != v for k, v in records[s].items())
        differing += len(set(records["off"]) ^ set(records[s]))
        on_t = Timing.of(samples[s])
        out[s] = SettingCheck(s, str(type(on)()), str(on), b,
                              f"evprobe.bench.runner.run: {n} items (every request type), direct", off_t, on_t,
                              on_t.median_s / off_t.median_s, differing == 0,
                              "records by item_id (all fields but seconds)", len(records[s]), differing)
    return out
