"""Benchmark: the same items through every backend of `evprobe run`, side by side, and their parity with hf.

    python benchmarks/backends.py                  # 48 both_given items, 3 rounds, every setup available
    python benchmarks/backends.py --small          # 8 items, 1 round, hf and transformers serve only (the test's)
    python benchmarks/backends.py --items 16 --rounds 1 --setups hf,vllm --keep /tmp/backends --out x.json

Model and items: the tiny random text Llama (`hooks.tiny_text`, float32) saved into a temporary
folder, and a 6-family benchmark (`bench.generate`, 2 families per system, no variants) whose
`both_given` items (48, no images: the only ones a text model takes) are run with
`--option-logprobs`, greedy. Replies of random weights are meaningless; timings and agreement are not.
No reply of this model parses as a decision (every record is invalid, route invalid:no_option), so
decisions agree trivially: the reply text, token counts and option log-probs are what parity checks here.

Setups, one after another, each --rounds times into fresh run folders (nothing resumed, no HTTP cache
shared):
  hf                         `bench.runner.run` in this process (--batch-size items per call)
  vllm                       `.venv-vllm/bin/python -m evprobe run --backend vllm` (vLLM's own environment:
                             it pins another transformers; EVPROBE_VLLM_PYTHON names another), a subprocess
                             per round
  openai: transformers serve `transformers serve MODEL` on a free port, then each round's
                             `run --backend openai` here against it
  openai: vllm serve         vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server`, the vLLM
                             environment) on a free port, then each round's `run --backend openai` here,
                             and one more run for parity asking every token's log-prob (--top-logprobs:
                             the vocabulary's size; the letters of a random model are seldom in the top
                             20, and 518 alternatives at every reply token would slow the timed rounds)
A setup that cannot run says why ("not available: ..."; "error: ..." with the tail of its log);
`--small` skips vllm and vllm serve (their engines take tens of seconds to start on a CPU).
Each server is started by this script, waited for on GET /health, and stopped by its process id
(its process group: vLLM's engine runs in a child) with SIGTERM, then SIGKILL after 20 s.

Printed per setup, for its median round by items/s (the JSON holds every round, run.json's resources
and the parity result):
  items/s, generated tokens/s   from run.json's resources: the items and generated tokens over the
                                seconds inside the backend's calls (generate; the engine's step; the
                                HTTP round trips), so model loading, engine start and server start are
                                not in them
  best                          the fastest round's items/s
  x hf                          the median items/s over hf's median
  start s                       the server's start until /health answers (openai setups), or vLLM's
                                engine start (run.json's engine_start_s)
  wall s                        the whole `evprobe run` (in-process run, or the vllm subprocess)
  parity vs hf                  `experiments.parity.parity(hf's round 1, its round 1 (vllm serve: its
                                parity run), --tolerance)`: the verdict, the
                                decisions and replies that agree, the largest |option log-prob difference|,
                                and the first disagreeing field with its two values
Threads: --threads (default 1) torch threads for hf (this process) and OMP_NUM_THREADS for every
process started (transformers serve computes with it); vLLM binds its own OpenMP threads
(VLLM_CPU_OMP_THREADS_BIND, default auto). One thread because the machine's cores are shared by
whatever else runs (the JSON records the load average): on a loaded 2-core machine hf with 2 threads
took 0.8 s for a round and 10 s for the next (OpenMP threads spinning against other processes), with
1 thread 1.4-3.4 s. Rounds and the median for what noise remains; read the ratios as this machine's
at that moment, not a property of the backends.
Output: the table on stdout and one JSON file (--out, written atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SETUPS = ("hf", "vllm", "openai: transformers serve", "openai: vllm serve")
SMALL_SETUPS = ("hf", "openai: transformers serve")
SERVER_START_S = 300.0  # a vLLM server on a loaded CPU takes about 30 s
STOP_S = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vllm_python() -> Path | None:
    named = os.environ.get("EVPROBE_VLLM_PYTHON")
    path = Path(named) if named else ROOT / ".venv-vllm" / "bin" / "python"
    return path if path.is_file() else None


def tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:].strip()
    except OSError:
        return ""


class Server:
    """A server process this script starts (its own process group) and stops by its id."""

    def __init__(self, cmd: list[str], port: int, log: Path, env: dict[str, str]) -> None:
        self.cmd, self.port, self.log, self.env = cmd, port, log, env
        self.proc: subprocess.Popen | None = None
        self.start_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> Server:
        started = time.perf_counter()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT,
                                         start_new_session=True)
        deadline = started + SERVER_START_S
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}) before /health answered: "
                                   f"{tail(self.log, 600)}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as answer:
                    if answer.status == 200:
                        self.start_s = time.perf_counter() - started
                        return self
            except OSError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"the server did not answer /health within {SERVER_START_S:.0f} s: {tail(self.log, 600)}")

    def served_model(self) -> str:
        with urllib.request.urlopen(f"{self.base_url}/models", timeout=10) as answer:
            return json.loads(answer.read())["data"][0]["id"]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)  # the group of the process this script started
        try:
            self.proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(STOP_S)

    def __exit__(self, *exc: object) -> None:
        self.stop()


def make_inputs(folder: Path) -> tuple[Path, Path]:
    """The tiny text model and the 6-family benchmark, in `folder`."""
    from evprobe.bench.generate import GenerateConfig, generate
    from evprobe.hooks.tiny_text import save_tiny_text_model

    model = save_tiny_text_model(folder / "model")
    bench = folder / "bench"
    generate(bench, GenerateConfig(families_per_system=2, subset_per_cell=0), progress=False)
    return model, bench


def run_settings(args: argparse.Namespace, model: Path, bench: Path, out: Path) -> dict[str, Any]:
    from evprobe.bench.model_config import ModelConfig

    return dict(model=ModelConfig.of(str(model), dtype="float32"), bench=str(bench), out=str(out),
                requests=("both_given",), limit=args.items, option_logprobs=True)


def in_process(settings: dict[str, Any]) -> float:
    """`evprobe run` in this process; its wall seconds."""
    from evprobe.bench.runner import RunConfig, run

    started = time.perf_counter()
    run(RunConfig.of(**settings), progress=False)
    return time.perf_counter() - started


def setup_hf(args: argparse.Namespace, model: Path, bench: Path, outs: list[Path]) -> list[dict[str, Any]]:
    return [{"wall_s": in_process({**run_settings(args, model, bench, out), "batch_size": args.batch_size})}
            for out in outs]


NO_VLLM = "not available: no vLLM environment (.venv-vllm, made by .ci/run, or EVPROBE_VLLM_PYTHON)"


def setup_vllm(args: argparse.Namespace, model: Path, bench: Path, outs: list[Path]) -> list[dict[str, Any]]:
    """One `evprobe run --backend vllm` process per round (each starts its own engine)."""
    python = vllm_python()
    if python is None:
        return [{"status": NO_VLLM}]
    rounds = []
    for out in outs:
        s = run_settings(args, model, bench, out)
        cmd = [str(python), "-m", "evprobe", "run", "--backend", "vllm", "--model", s["model"].model, "--bench", s["bench"],
               "--out", s["out"], "--requests", "both_given", "--limit", str(args.items), "--dtype", "float32",
               "--option-logprobs", "--batch-size", str(args.batch_size), "--quiet", "--no-progress"]
        log = out.parent / f"{out.name}.log"
        started = time.perf_counter()
        with open(log, "wb") as fh:
            done = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=child_env(), cwd=ROOT, check=False)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            text = tail(log, 800)
            if "needs vLLM" in text or "No module named" in text:
                return [{"status": f"not available: {text.splitlines()[-1]}"}]
            return [{"status": f"error: exit {done.returncode}: {text}"}]
        rounds.append({"wall_s": wall})
    return rounds


def setup_served(args: argparse.Namespace, model: Path, bench: Path, outs: list[Path],
                 server: str) -> list[dict[str, Any]]:
    """One server started, every round's run against it (each a fresh run folder and HTTP cache), stopped."""
    port = free_port()
    on_gpu = _on_gpu()
    if server == "transformers":
        exe = Path(sys.executable).parent / "transformers"
        missing = [m for m in ("fastapi", "uvicorn") if not _importable(m)]
        if not exe.is_file() or missing:
            return [{"status": "not available: `transformers serve` needs the transformers CLI and "
                               f"{' and '.join(missing) or 'its serving extra'} (pip install 'transformers[serving]')"}]
        cmd = [str(exe), "serve", str(model), "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
               "--device", "auto" if on_gpu else "cpu"]
    else:
        python = vllm_python()
        if python is None:
            return [{"status": NO_VLLM}]
        # `vllm serve` itself fails in vllm-cpu (its CLI asks for the "vllm" distribution's version): the module
        # every token's log-prob may be asked (--max-logprobs): the letters of a random model are rarely among
        # the 20 most likely first tokens the OpenAI API's default allows, and then nothing is compared. Never
        # more than the vocabulary: vLLM 0.32's engine dies on a request for more (torch.topk out of range).
        top = vocabulary(model)
        cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
               "--port", str(port), "--dtype", "float32", "--max-model-len", "2048", "--seed", "0",
               "--max-logprobs", str(top)]
        if not on_gpu:  # as bench.backends.vllm starts its engine on a CPU: no compile, a tenth of the RAM
            cmd += ["--enforce-eager", "--gpu-memory-utilization", "0.1"]
    log = outs[0].parent / f"{outs[0].name}.server.log"
    with Server(cmd, port, log, child_env()) as srv:
        served = srv.served_model()

        def one(out: Path, **more: Any) -> float:
            return in_process({**run_settings(args, model, bench, out), "backend": "openai", "base_url": srv.base_url,
                               "served_model": served, "concurrency": args.concurrency, **more})

        rounds = [{"wall_s": one(out), "start_s": srv.start_s, "port": port} for out in outs]
        if server == "vllm":  # the timed rounds ask the API's usual 20 alternatives; parity reads every token's
            parity_run = outs[0].parent / f"{outs[0].name.rsplit('-', 1)[0]}-all-logprobs"
            one(parity_run, top_logprobs=vocabulary(model))
            rounds[0]["parity_run"] = parity_run
        return rounds


THREADS = {"n": 1}  # --threads, for the processes this script starts


def vocabulary(model: Path) -> int:
    return int(json.loads((model / "config.json").read_text())["vocab_size"])


def child_env() -> dict[str, str]:
    n = str(THREADS["n"])
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": n,
            "MKL_NUM_THREADS": n, "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING")}


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def round_numbers(out: Path, outcome: dict[str, Any]) -> dict[str, Any]:
    """One round's numbers from its run.json (resources: the seconds inside the backend's calls)."""
    meta = json.loads((out / "run.json").read_text())
    res = meta.get("resources") or {}
    seconds = res.get("seconds") or 0
    start = outcome.get("start_s") if outcome.get("start_s") is not None else res.get("engine_start_s")
    return {"run": str(out), "items": meta["n_records"], "seconds_in_calls": seconds,
            "items_per_s": round(meta["n_records"] / seconds, 3) if seconds else None,
            "generated_tokens_per_s": res.get("generated_tokens_per_s"), "start_s": start,
            "wall_s": None if outcome.get("wall_s") is None else round(outcome["wall_s"], 3), "resources": res}


def measure(name: str, outs: list[Path], outcomes: list[dict[str, Any]], hf: dict[str, Any] | None,
            tolerance: float) -> dict[str, Any]:
    """One setup's row: the median round's numbers (and every round's), the ratio to hf's median, and
    parity of its first round's run with hf's first round's."""
    status = outcomes[0].get("status", "ok")
    row: dict[str, Any] = {"setup": name, "status": status}
    if status != "ok":
        return row
    rounds = [round_numbers(out, o) for out, o in zip(outs, outcomes)]
    rates = sorted(r["items_per_s"] or 0 for r in rounds)
    median = min(rounds, key=lambda r: abs((r["items_per_s"] or 0) - statistics.median(rates)))
    row.update({k: median[k] for k in ("items", "items_per_s", "generated_tokens_per_s", "start_s", "wall_s",
                                       "seconds_in_calls", "resources")},
               run=rounds[0]["run"], port=outcomes[0].get("port"), items_per_s_best=rates[-1],
               items_per_s_rounds=[r["items_per_s"] for r in rounds], rounds=rounds)
    if hf is not None and hf.get("items_per_s") and row["items_per_s"]:
        row["items_per_s_vs_hf"] = round(row["items_per_s"] / hf["items_per_s"], 3)
        if hf.get("generated_tokens_per_s") and row["generated_tokens_per_s"]:
            row["generated_tokens_per_s_vs_hf"] = round(row["generated_tokens_per_s"] / hf["generated_tokens_per_s"], 3)
    if hf is not None and name != "hf":
        from evprobe.experiments.parity import parity

        result = parity(Path(hf["run"]), Path(outcomes[0].get("parity_run") or row["run"]), tolerance)
        row["parity_run"] = str(outcomes[0].get("parity_run") or row["run"])
        body = result.to_json()
        body["disagreements"] = body["disagreements"][:5]  # the first few; `evprobe parity` lists them all
        row["parity"] = {"summary": result.summary(), "ok": result.ok, "n_disagree": len(result.disagreements),
                         **{k: body[k] for k in ("n_common", "agree", "n_logprobs", "n_logprobs_one_side",
                                                 "max_logprob_diff", "max_logprob_item", "tolerance", "notes",
                                                 "disagreements")}}
    return row


def table(rows: list[dict[str, Any]]) -> str:
    def num(x: Any, digits: int = 2) -> str:
        return "-" if x is None else f"{x:.{digits}f}"

    lines = [f"{'setup':<28} {'items':>5} {'items/s':>8} {'best':>8} {'gen tok/s':>9} {'x hf':>6} {'start s':>7} "
             f"{'wall s':>7}  parity vs hf"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"{r['setup']:<28} {r['status']}")
            continue
        p = r.get("parity")
        if p is None:
            verdict = "(the reference)" if r["setup"] == "hf" else "-"
        else:
            a = p["agree"]
            verdict = (f"{'agree' if p['ok'] else 'DISAGREE on ' + str(p['n_disagree'])}: decisions "
                       f"{a['decision']}/{p['n_common']}, replies {a['reply']}/{p['n_common']}, max |d log p| "
                       f"{'-' if p['max_logprob_diff'] is None else format(p['max_logprob_diff'], '.2g')}"
                       f" ({p['n_logprobs']} compared)")
            if p["disagreements"]:
                d = p["disagreements"][0]
                f = d["fields"][0]
                verdict += f"; first: {d['item_id']} {f} {json.dumps(d['a'][f])[:40]} vs {json.dumps(d['b'][f])[:40]}"
        lines.append(f"{r['setup']:<28} {r['items']:>5} {num(r['items_per_s']):>8} {num(r['items_per_s_best']):>8} "
                     f"{num(r['generated_tokens_per_s'], 1):>9} {num(r.get('items_per_s_vs_hf')):>6} "
                     f"{num(r['start_s'], 1):>7} {num(r['wall_s'], 1):>7}  {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="8 items, one round, hf and transformers serve only (quick)")
    ap.add_argument("--items", type=int, default=None, help="both_given items (default 48, 8 with --small)")
    ap.add_argument("--rounds", type=int, default=None, help="runs of each setup, fresh folders (default 3, 1 with --small)")
    ap.add_argument("--batch-size", type=int, default=8, help="items per call of hf and vllm")
    ap.add_argument("--concurrency", type=int, default=8, help="requests in flight of the openai setups")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of hf and of transformers serve (OMP_NUM_THREADS of every process started)")
    ap.add_argument("--tolerance", type=float, default=None, help="parity's log-prob tolerance (default parity's)")
    ap.add_argument("--setups", default=None, help=f"comma-separated subset of: {', '.join(SETUPS)}")
    ap.add_argument("--keep", type=Path, default=None, help="keep the model, benchmark and runs here (default: temporary)")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default: a file under the temp folder)")
    args = ap.parse_args(argv)
    args.items = args.items or (8 if args.small else 48)
    args.rounds = args.rounds or (1 if args.small else 3)
    setups = tuple(s.strip() for s in args.setups.split(",")) if args.setups else SETUPS
    unknown = [s for s in setups if s not in SETUPS]
    if unknown:
        ap.error(f"unknown setup {unknown[0]!r}; choose from {', '.join(SETUPS)}")
    if min(args.items, args.rounds, args.batch_size, args.concurrency, args.threads) < 1:
        ap.error("--items, --rounds, --batch-size, --concurrency and --threads take positive integers")
    if args.keep is not None and args.keep.exists() and any(args.keep.iterdir()):
        ap.error(f"--keep {args.keep} is not empty; name a new or empty folder")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(args.threads)
    THREADS["n"] = args.threads
    from evprobe.core.files import atomic_write_json
    from evprobe.experiments.parity import DEFAULT_TOLERANCE

    tolerance = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
    out_json = args.out or Path(tempfile.gettempdir()) / "evprobe-backends-benchmark.json"
    with tempfile.TemporaryDirectory(prefix="evprobe-backends-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        model, bench = make_inputs(folder)
        rows: list[dict[str, Any]] = []
        hf_row = None
        for name in SETUPS:
            if name not in setups:
                continue
            if args.small and name not in SMALL_SETUPS:
                rows.append({"setup": name, "status": "skipped: --small (its engine takes tens of seconds to start)"})
                continue
            stem = "run-" + name.replace(": ", "-").replace(" ", "-")
            outs = [folder / f"{stem}-{r + 1}" for r in range(args.rounds)]
            t = time.perf_counter()
            try:
                outcomes = (setup_hf(args, model, bench, outs) if name == "hf" else
                            setup_vllm(args, model, bench, outs) if name == "vllm" else
                            setup_served(args, model, bench, outs, "transformers" if "transformers" in name else "vllm"))
            except Exception as err:  # noqa: BLE001 - a setup that fails is reported, the next one runs
                outcomes = [{"status": f"error: {type(err).__name__}: {str(err)[:800]}"}]
            row = measure(name, outs, outcomes, hf_row, tolerance)
            row["setup_s"] = round(time.perf_counter() - t, 2)
            rows.append(row)
            if name == "hf" and row["status"] == "ok":
                hf_row = row
            print(f"[{name}] {row['status']} in {row['setup_s']} s", file=sys.stderr, flush=True)
        report = {"items": args.items, "requests": "both_given", "model": "hooks.tiny_text (random, float32)",
                  "rounds": args.rounds, "batch_size": args.batch_size, "concurrency": args.concurrency,
                  "tolerance": tolerance, "small": args.small, "cpus": len(os.sched_getaffinity(0)),
                  "threads": args.threads, "torch_threads": torch.get_num_threads(), "gpu": _on_gpu(),
                  "load_average": [round(x, 2) for x in os.getloadavg()],
                  "seconds": round(time.perf_counter() - started, 2), "setups": rows}
    print(table(rows))
    for r in rows:
        for note in (r.get("parity") or {}).get("notes", []):  # all of them in the JSON
            if not note.startswith("pinned by") and "a served model" not in note:
                print(f"  {r['setup']}: {note}")
    atomic_write_json(out_json, report)
    print(f"wrote {out_json}")
    return 0 if hf_row is not None else 1


if __name__ == "__main__":
    sys.exit(main())
