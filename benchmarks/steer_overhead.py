"""Steering overhead: steered vs plain greedy generation, measured in one run.

    python benchmarks/steer_overhead.py                 # tiny model, 20 prompts x 16 tokens
    python benchmarks/steer_overhead.py --big           # also a random Qwen2-0.5B-shaped LM

Tiny part: one batch of `--prompts` rows (text + one image each) generating exactly
`--tokens` new tokens (min_new_tokens pins the count), three variants timed in
turn, `--repeats` rounds after one warm-up round:
  plain      hooks.steering.steered_generate(steering=None)  (model.generate, output_scores)
  hooks      the same under a plain forward hook (hooks.steering.steer), every step
  nnsight    the tests' steered_generate_nnsight (tests/hooks/nnsight_twins.py: tracer.iter editing every step)
Medians and the ratios steered / plain are printed.

--big: a Qwen2ForCausalLM built from config with random weights (Qwen2-0.5B
shape, ~494M parameters, fp32), ONE prompt of `--big-prompt` random token ids,
`--big-tokens` new tokens; plain vs forward-hook steering at the middle layer
(`hooks.steering.steer` on model.model.layers through a small Handle-like object),
and nnsight (TransformersModel over the same module, tracer.iter loop) if it wraps.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _rounds(variants: dict, repeats: int) -> dict[str, list[float]]:
    """One warm-up call of each, then `repeats` rounds timing each variant in turn."""
    for fn in variants.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            times[name].append(_timed(fn))
    return times


def _report(title: str, times: dict[str, list[float]], base: str = "plain") -> None:
    """Medians and minima; on a shared machine the minima are the steadier ratio."""
    med = {k: statistics.median(v) for k, v in times.items()}
    low = {k: min(v) for k, v in times.items()}
    print(f"\n{title}")
    for name, m in med.items():
        spread = f"{low[name]:.3f}-{max(times[name]):.3f}"
        ratio = "" if name == base else (f"   ratio vs {base}: median {m / med[base]:.3f}, "
                                         f"min {low[name] / low[base]:.3f}")
        print(f"  {name:8s} median {m:8.3f} s  (range {spread}){ratio}")


def tiny_benchmark(arch: str, n_prompts: int, n_tokens: int, repeats: int) -> dict[str, list[float]]:
    import torch

    from evprobe.hooks import tiny
    from evprobe.hooks.direction_vectors import random_directions
    from evprobe.hooks.steering import Steering, steered_generate
    from tests.hooks.nnsight_twins import steered_generate_nnsight
    from tests.hooks.test_handle import picture

    h = tiny(arch)
    prompts = [f"Question {i}: which rectangle is largest? Answer A, B, C, D or E." for i in range(n_prompts)]
    images = [[picture(i % 7 + 1, (96, 96))] for i in range(n_prompts)]
    s = Steering(random_directions(h.d_model, 1, 0)[0], h.n_layers // 2, 1.0)
    kw = dict(min_new_tokens=n_tokens)
    a = steered_generate(h, prompts, images, s, n_tokens, **kw)
    b = steered_generate_nnsight(h, prompts, images, s, n_tokens, **kw)
    assert torch.equal(a.token_ids, b.token_ids), "hooks and nnsight disagree"
    variants = {
        "plain": lambda: steered_generate(h, prompts, images, None, n_tokens, **kw),
        "hooks": lambda: steered_generate(h, prompts, images, s, n_tokens, **kw),
        "nnsight": lambda: steered_generate_nnsight(h, prompts, images, s, n_tokens, **kw),
    }
    times = _rounds(variants, repeats)
    _report(f"tiny {arch}: {n_prompts} prompts x {n_tokens} new tokens, one batch, "
            f"{torch.get_num_threads()} thread(s), {repeats} rounds", times)
    return times


def big_benchmark(prompt_len: int, n_tokens: int, repeats: int) -> dict[str, list[float]]:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from evprobe.hooks.direction_vectors import random_directions
    from evprobe.hooks.steering import Steering, steer

    config = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True)
    t = time.perf_counter()
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()  # fp32, random weights
    n_params = sum(p.numel() for p in model.parameters())
    print(f"\nbuilt random Qwen2-0.5B-shaped LM ({n_params / 1e6:.0f}M parameters, fp32) "
          f"in {time.perf_counter() - t:.1f} s")
    layers = model.model.layers
    like = SimpleNamespace(layers=layers, d_model=config.hidden_size)  # what steer() needs of a Handle
    layer = len(layers) // 2
    s = Steering(random_directions(config.hidden_size, 1, 0)[0], layer, 4.0)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 100000, (1, prompt_len), generator=gen)  # (1, prompt_len)
    enc = dict(input_ids=ids, attention_mask=torch.ones_like(ids))
    kw = dict(max_new_tokens=n_tokens, min_new_tokens=n_tokens, do_sample=False, num_beams=1, pad_token_id=0,
              eos_token_id=None, temperature=None, top_p=None, top_k=None)

    def plain():
        with torch.inference_mode():
            return model.generate(**enc, **kw)

    def hooked():
        with steer(like, s), torch.inference_mode():
            return model.generate(**enc, **kw)

    variants = {"plain": plain, "hooks": hooked}
    try:
        from nnsight.modeling.transformers import TransformersModel
        from tokenizers import Tokenizer, models
        from transformers import PreTrainedTokenizerFast

        # A stand-in tokenizer (the inputs are ids; nnsight's pipeline wants one).
        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<pad>": 0, "<unk>": 1},
                                                                                  unk_token="<unk>")),
                                      pad_token="<pad>", unk_token="<unk>")
        nn_model = TransformersModel(model, tokenizer=tok)
        nn_layers = nn_model.model.layers
        delta = s.delta(torch.float32)  # (d_model,)

        def nnsight_steered():
            with torch.inference_mode(), nn_model.generate(**kw) as tracer:
                with tracer.invoke(**enc):
                    for _ in tracer.iter[:n_tokens]:
                        nn_layers[layer].output[:] += delta
                with tracer.invoke():
                    result = tracer.result.save()
            return result

        a, b = hooked(), nnsight_steered()
        print(f"  hooks and nnsight generate the same ids: {bool(torch.equal(a, b))}")
        variants["nnsight"] = nnsight_steered
    except Exception as err:  # noqa: BLE001 - report and go on with the hook figures
        print(f"  nnsight variant skipped: {err!r}")
    times = _rounds(variants, repeats)
    _report(f"big: 1 prompt x {prompt_len} tokens, {n_tokens} new tokens, steering layer {layer}, "
            f"{torch.get_num_threads()} thread(s), {repeats} rounds", times)
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="llava", help="tiny architecture (hooks.TINY_ARCHS)")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--big", action="store_true", help="also time a random Qwen2-0.5B-shaped LM")
    ap.add_argument("--big-only", action="store_true", help="only the --big part")
    ap.add_argument("--big-prompt", type=int, default=64)
    ap.add_argument("--big-tokens", type=int, default=4)
    ap.add_argument("--big-repeats", type=int, default=3)
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.big_only:
        tiny_benchmark(args.arch, args.prompts, args.tokens, args.repeats)
    if args.big or args.big_only:
        big_benchmark(args.big_prompt, args.big_tokens, args.big_repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
