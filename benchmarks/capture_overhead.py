"""Benchmark: activation capture vs a plain forward pass, and capture memory vs item count.

1. Overhead, measured side by side in one run on a tiny model (benchmark prompts, batches of 8,
   all layers, positions last + image_mean + text_mean). Per batch, interleaved rounds, medians:
     plain forward      model(**enc), inputs prebuilt
     plain + hidden     model(**enc, output_hidden_states=True) (what plain transformers
                        would need to capture), inputs prebuilt
     trace              the nnsight trace with the in-trace reduction, inputs and spans prebuilt
     capture (e2e)      hooks.capture.capture_batch: processor call + spans + trace
     inputs + forward   build_inputs + plain forward (the end-to-end baseline)
2. Memory: the whole `capture` job (files on disk) in a fresh process for N items, reporting
   peak RSS, the RSS when about 10% and 50% of the items were done and at the end, and the
   bytes written.

    python benchmarks/capture_overhead.py [--archs llava,qwen2_5_vl] [--items 200,1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POSITIONS = ["last", "image_mean", "text_mean"]

CHILD = """
import json, os, sys, threading, time
import torch
torch.set_num_threads(1)
from evprobe.experiments.capture.config import CaptureConfig
from evprobe.experiments.capture.job import capture
bench, out, n, arch = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
index = os.path.join(out, "index.jsonl")
samples, stop = [], threading.Event()
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
def sample():
    while not stop.is_set():
        try:
            with open(index, "rb") as f:
                done = f.read().count(b"\\n")
        except FileNotFoundError:
            done = 0
        samples.append((done, rss_mb()))
        time.sleep(0.05)
thread = threading.Thread(target=sample, daemon=True)
thread.start()
t = time.perf_counter()
requests = ("select", "answer_initial", "answer_after_test", "read_ruler", "recover_property")  # all with images
summary = capture(CaptureConfig(model="tiny:" + arch, bench=bench, out=out, requests=requests, limit=n,
                                positions=("last", "image_mean", "text_mean"), batch_size=8), progress=False)
wall = time.perf_counter() - t
stop.set(); thread.join()
def vm_hwm_mb():
    # Peak RSS of this process image. Not ru_maxrss: that survives exec, so a child forked from
    # a large parent would report the parent's size.
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
def rss_at(fraction):
    after = [r for d, r in samples if d >= max(1, int(n * fraction))]
    return after[0] if after else None
print(json.dumps({"n": summary.n_done, "wall": wall,
                  "peak_mb": vm_hwm_mb(),
                  "rss_at_10pct_mb": rss_at(0.1), "rss_at_50pct_mb": rss_at(0.5), "rss_end_mb": samples[-1][1],
                  "acts_bytes": os.path.getsize(os.path.join(out, "acts.npy"))}))
"""


def _bench(root: Path, families_per_system: int) -> Path:
    from evprobe.bench.generate import GenerateConfig, generate

    out = root / f"bench-{families_per_system}"
    if not (out / "bench.json").is_file():
        generate(out, GenerateConfig(families_per_system=families_per_system, subset_per_cell=0), progress=False)
    return out


def overhead(arch: str, bench: Path, rounds: int, *, short: bool = False, n_items: int = 32,
             batch_size: int = 8) -> dict[str, float]:
    """Per-batch median seconds of each variant. short: only each item's question line as the
    prompt (about 50 tokens instead of about 1,250), where fixed per-call costs dominate."""
    import nnsight
    import torch
    from PIL import Image

    from evprobe import hooks
    from evprobe.bench.manifest import read_items, resolve_image
    from evprobe.bench.protocols import build_prompt
    from evprobe.bench.runner import select_items
    from evprobe.experiments.capture.config import question_marker
    from evprobe.hooks.capture import gather_plan, reduce_at, capture_batch
    from evprobe.hooks.spans import batch_spans

    handle = hooks.load(f"tiny:{arch}")
    items = select_items(read_items(bench), ("select", "answer_initial"), n_items)
    batches = []
    for start in range(0, len(items), batch_size):
        batch = items[start : start + batch_size]
        prompts = [build_prompt(it, "direct", "standard") for it in batch]
        if short:
            prompts = [f"Question: {question_marker(it.prompt)}\nReply with the option letter only." for it in batch]
        images = []
        for it in batch:
            row = []
            for rel in it.images:
                with Image.open(resolve_image(bench, rel)) as im:
                    row.append(im.convert("RGB"))
            images.append(row)
        batches.append((prompts, images, [question_marker(it.prompt) for it in batch]))
    layers = list(range(handle.n_layers))
    prepared = []
    for prompts, images, markers in batches:
        enc = hooks.build_inputs(handle, prompts, images)
        spans = batch_spans(handle, enc, prompts, [len(i) for i in images], markers)
        prepared.append((enc, gather_plan(spans, POSITIONS, handle.device)))

    def plain():
        for enc, _ in prepared:
            handle.model(**enc, use_cache=False)

    def plain_hidden():
        for enc, _ in prepared:
            handle.model(**enc, use_cache=False, output_hidden_states=True)

    def trace():
        envoys = handle.nn_layers
        for enc, plan in prepared:
            with handle.nn.trace(**enc, use_cache=False) as tracer:
                nnsight.save([reduce_at(envoys[i].output, plan) for i in layers])
                tracer.stop()

    def capture_e2e():
        for prompts, images, markers in batches:
            capture_batch(handle, prompts, images, layers=layers, positions=POSITIONS, text_markers=markers)

    def inputs_plain():
        for prompts, images, _ in batches:
            handle.model(**hooks.build_inputs(handle, prompts, images), use_cache=False)

    runs = {"plain forward": plain, "plain + hidden": plain_hidden, "trace": trace, "capture (e2e)": capture_e2e,
            "inputs + forward": inputs_plain}
    times: dict[str, list[float]] = {name: [] for name in runs}
    with torch.no_grad():
        for fn in runs.values():  # warm-up
            fn()
        for _ in range(rounds):
            for name, fn in runs.items():
                t = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t) / len(batches))
    out = {name: statistics.median(v) for name, v in times.items()}
    out["tokens"] = float(prepared[0][0]["input_ids"].shape[1])
    return out


def memory(bench: Path, root: Path, n: int, arch: str) -> dict:
    out = root / f"acts-{arch}-{n}"
    shutil.rmtree(out, ignore_errors=True)  # a fresh capture, not a resume
    done = subprocess.run([sys.executable, "-c", CHILD, str(bench), str(out), str(n), arch], check=True,
                          capture_output=True, text=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def big_overhead(prompt_len: int, rounds: int) -> None:
    """Capture (nnsight trace reading all 24 layers at the last token) vs a plain forward on a
    random Qwen2-0.5B-shaped language model, one prompt of `prompt_len` random tokens."""
    import nnsight
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()  # fp32, random weights
    wrapped = nnsight.NNsight(model)
    ids = torch.randint(1000, 100000, (1, prompt_len), generator=torch.Generator().manual_seed(0))

    def plain():
        with torch.inference_mode():
            model(input_ids=ids, use_cache=False, logits_to_keep=1)

    def trace():
        with torch.no_grad(), wrapped.trace(input_ids=ids, use_cache=False, logits_to_keep=1):
            nnsight.save([wrapped.model.layers[i].output[:, -1, :] for i in range(24)])

    times = {"plain forward": [], "capture trace": []}
    for _ in range(rounds):  # interleaved, so drift hits both alike
        for name, fn in (("plain forward", plain), ("capture trace", trace)):
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n## Random Qwen2-0.5B-shaped LM (fp32), 1 prompt x {prompt_len} tokens, median of {rounds}\n")
    print(f"plain forward {med['plain forward']:.2f} s, capture of 24 layers {med['capture trace']:.2f} s, "
          f"ratio {med['capture trace'] / med['plain forward']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default="llava,qwen2_5_vl")
    parser.add_argument("--items", default="200,1000", help="item counts for the memory runs")
    parser.add_argument("--memory-arch", default="llava")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--big", action="store_true", help="also time a random Qwen2-0.5B-shaped LM")
    parser.add_argument("--big-only", action="store_true", help="only the --big part")
    parser.add_argument("--big-prompt", type=int, default=256)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    if args.big or args.big_only:
        big_overhead(args.big_prompt, max(3, args.rounds // 2))
        if args.big_only:
            return
    root = args.out or Path(tempfile.mkdtemp(prefix="evprobe-capture-"))
    small = _bench(root, 2)
    print(f"## Overhead (ms per batch of 8, median of {args.rounds} rounds, 1 thread; full prompts, then "
          "question-only prompts)\n")
    print("| arch | tokens/row | plain forward | plain + hidden | trace | capture (e2e) | inputs + forward | "
          "trace / plain | trace / plain+hidden | e2e / (inputs + forward) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for arch, short in [(a, s) for a in args.archs.split(",") for s in (False, True)]:
        r = overhead(arch, small, args.rounds, short=short)
        ms = {k: v * 1e3 for k, v in r.items()}
        print(f"| {arch} | {r['tokens']:.0f} | {ms['plain forward']:.1f} | {ms['plain + hidden']:.1f} | "
              f"{ms['trace']:.1f} | {ms['capture (e2e)']:.1f} | {ms['inputs + forward']:.1f} | "
              f"{r['trace'] / r['plain forward']:.2f} | {r['trace'] / r['plain + hidden']:.2f} | "
              f"{r['capture (e2e)'] / r['inputs + forward']:.2f} |")
    counts = [int(x) for x in args.items.split(",")]
    big = _bench(root, max(2, -(-max(counts) // (44 * 3))))  # 44 items with images per family, 3 systems
    print(f"\n## Memory of the capture job (tiny:{args.memory_arch}, all requests with images, 3 positions, "
          "fresh process)\n")
    print("| items | wall s | items/s | RSS at 10% MB | RSS at 50% MB | RSS at end MB | peak RSS MB | "
          "acts.npy bytes |")
    print("|---|---|---|---|---|---|---|---|")
    for n in counts:
        m = memory(big, root, n, args.memory_arch)
        print(f"| {m['n']} | {m['wall']:.1f} | {m['n'] / m['wall']:.1f} | {m['rss_at_10pct_mb']:.0f} | "
              f"{m['rss_at_50pct_mb']:.0f} | {m['rss_end_mb']:.0f} | {m['peak_mb']:.0f} | {m['acts_bytes']:,} |")


if __name__ == "__main__":
    main()
