"""What a run writes: the per-model table on stdout and the JSON report (written atomically)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from pathlib import Path

from .results import ModelResult, Overhead, Report, SettingCheck


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _status_of(m: ModelResult, name: str) -> str:
    return next((s.status for s in m.sections if s.name == name), "missing")


def _setting_line(c: SettingCheck) -> str:
    same = "identical" if c.identical else f"DIFFERENT in {c.differing_rows} of {c.rows} rows"
    extra = "" if c.max_abs_diff is None else ("; last-position logits identical" if c.max_abs_diff == 0
                                                else f"; last-position logits max |diff| {c.max_abs_diff:.3g}")
    first = "" if c.first_on_call_s is None else f"; first {c.on} call {_ms(c.first_on_call_s)}"
    sdpa = "" if not c.sdpa_calls else "; SDPA calls per batch forward in the vision tower " + ", ".join(
        f"{k} {v['vision']} (of {v['total']})" for k, v in c.sdpa_calls.items())
    return (f"{c.setting}: {c.off} {_ms(c.off_s.median_s)} vs {c.on} {_ms(c.on_s.median_s)}, ratio {c.ratio:.3f} "
            f"({c.timed}); {c.compared}: {same}{extra}{first}{sdpa}")


def model_lines(m: ModelResult) -> list[str]:
    head = f"== {m.name} ({m.arch}{', ' + m.checkpoint if m.checkpoint else ', tiny'}) on {m.device}, {m.dtype}"
    if m.error:
        return [head, f"   error: {m.error}"]
    out = [head + f", {m.params / 1e6:,.1f}M parameters, built in {m.build_s:.1f} s"]

    def section(name: str, lines: list[str]) -> None:
        status = _status_of(m, name)
        if status != "ok":
            lines = [status]
        out.append(f"  {name}")
        out.extend(f"      {line}" for line in lines)

    tp = m.throughput.points if m.throughput else ()
    section("throughput", [f"{'protocol':8s} {'batch':>5s} {'s/call':>9s} {'tok/s':>9s} {'processor':>10s} "
                           f"{'prefill':>9s} {'decode':>9s} {'step':>9s} {'prompt':>7s} {'peak MB':>9s}"]
            + [f"{p.protocol:8s} {p.batch_size:5d} {p.s_per_call:9.4f} {p.tokens_per_s:9.1f} "
               f"{p.processor_s:10.4f} {p.prefill_s:9.4f} {p.decode_s:9.4f} {p.decode_step_s:9.5f} "
               f"{p.prompt_tokens_mean:7.0f} {p.peak_memory_mb:9.0f}" for p in tp]
            + ([f"(seconds, medians of {tp[0].call.n}; step = decode / (new tokens - 1); peak: {tp[0].memory_kind})"]
               if tp else []) + [f"could not run: {f}" for f in (m.throughput.failures if m.throughput else ())])
    for name in ("capture", "steering"):
        o: Overhead | None = getattr(m, name)
        section(name, [f"{o.measured}: {_ms(o.measured_s.median_s)} vs {o.base}: {_ms(o.base_s.median_s)}; "
                       f"ratio {o.ratio:.3f} (batch {o.batch_size})" + (f"; {o.note}" if o.note else "")] if o else [])
    d = m.dose_response
    section("dose_response", [f"layer {d.layer}, alphas {list(d.alphas_norm)} x mean norm {d.mean_norm:.4g}: "
                              f"{_ms(d.seconds)} for {len(d.items)} items ({_ms(d.s_per_item_alpha)} per item and "
                              f"alpha); alpha 0 vs unsteered option_logprobs (alphas batched together): "
                              + ("identical" if d.alpha0_max_abs_diff == 0
                                 else f"max |diff| {d.alpha0_max_abs_diff:.3g}")]
            + [f"{it.item_id}: choice per alpha {it.choices}; log p({it.choices[0]}) per alpha "
               + " ".join(f"{lp[d.letters.index(it.choices[0])]:.3f}" for lp in it.logprobs) for it in d.items]
            if d else [])
    section("decode_cache", [_setting_line(c) for c in m.decode_cache or ()])
    for name in ("vision_attention", "sort_by_length", "prefetch"):
        c = getattr(m, name)
        section(name, [_setting_line(c)] if c else [])
    inv = m.batch_invariance
    section("batch_invariance", [f"batch {inv.batch_size} vs batch 1, capture max relative difference per layer: "
                                 + " ".join(f"{x:.2g}" for x in inv.capture_max_rel_diff),
                                 f"greedy replies ({inv.generation_new_tokens} tokens) identical in "
                                 f"{inv.generation_identical_fraction:.0%} of {inv.rows} rows"] if inv else [])
    ra = m.ratios
    section("ratios", ([f"{t.protocol} b{t.batch_size}: {t.s_per_call:.4f} s/call / Table 50 {t.anchor_s} s = "
                        f"{t.ratio:.3f}" for t in ra.table50]
                       + [f"{x.protocol} b{x.batch_size}: decode step {_ms(x.decode_step_s)} vs ideal "
                          f"{_ms(x.ideal_step_s)} = {x.decode_ratio:.2f}x; prefill {_ms(x.prefill_s)} vs ideal "
                          f"{_ms(x.ideal_prefill_s)} ({x.prefill_flops:.3g} FLOP) = {x.prefill_ratio:.2f}x"
                          for x in ra.hardware] + [ra.note]) if ra else [])
    return out


def write_json(path: Path, report: Report) -> None:
    """Atomically: a temporary file beside `path`, then os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(dataclasses.asdict(report), f, indent=1, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
