"""A digest of the quickstart's outputs, so a refactor that changes what the main job writes fails a test
(tests/test_readme.py compares it with tests/data/quickstart_digest.json).

Each file's digest is the sha256 of its content with what legitimately varies between two runs taken
out: the output folder's own path, wall-clock fields ("seconds", throughput), the library versions a
capture records, and the throughput table
rows of the run's scores; JSON floats are read to 9 significant digits and tensors to 6 decimals, so a
different BLAS's last bits do not count. report.html is left out (it inlines the pages and figures that
are digested, and a throughput table).

Floating point is not the same on every kind of CPU: acts.npy is written as raw float16 bytes, and what
is computed from the activations (sweep, directions, dose-response, patching and their report pages and
figures) differs in the last bits between kinds (32 files; seen between the machine the digest was first
recorded on and an AMD EPYC with AVX-512, 2026-12-03); the records, the benchmark and the known-answer
pages are the same on both. So the digest file (DIGEST_FILE: `kinds`, `written_on`, `files`) holds each
file's entry as one digest (the same on every kind measured) or as {kind: digest} per kind of CPU measured,
a kind named by `machine_kind()`: a key over the CPU's vendor, model and the instruction sets the
kernels dispatch on, the torch and numpy builds, and the bits of a small float32 Llama forward and a
float64 BLAS product run here (two machines with one key compute alike). A per-kind file is compared on
a kind that is recorded, and on another kind it is not compared at all (`unmeasured` lists it, and the
README test prints it): it cannot pass or fail against values measured elsewhere. An entry is
refreshed only with what is measured: after an intended change, on a recorded kind, rewrite the entries
(a changed per-kind file keeps only this kind's value: the others' were measured on the old outputs):

    evprobe quickstart --out out/quickstart && python -m tests.quickstart_digest out/quickstart --write

and, on a new kind of machine, with main unchanged, add its values (a kind-independent file that
differs here becomes per kind):

    evprobe quickstart --out out/quickstart && python -m tests.quickstart_digest out/quickstart --add-machine

A refactor on a machine whose values are not recorded is checked by comparing a run of the old code
with a run of the new one there (`digest` and `differences` of the two folders).
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DIGEST_FILE = Path(__file__).parent / "data" / "quickstart_digest.json"
TIMING_KEYS = {"seconds", "items_per_second", "generated_tokens_per_s", "tokens_per_second"}
# What a capture's meta.json records of the environment (library versions): not an output of the job;
# a transformers release changes it and nothing the job computed.
ENVIRONMENT_KEYS = {"versions"}
LEFT_OUT = {"report/report.html", ".evprobe.lock"}
# The CPU flags BLAS and torch kernels choose their code paths by (what else /proc/cpuinfo lists does
# not change a result, and would split one kind into many).
DISPATCH_FLAGS = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni",
                  "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8"}
# | backend | sessions | calls | prompt tokens | generated tokens | seconds in calls | generated tokens/s | ...
THROUGHPUT_ROW = re.compile(r"^\| \S+ \| \d+ \| \d+ \| \d+ \| \d+ \| [\d.]+ \| [\d.]+ \|.*$", re.M)
TEXT = {".json", ".jsonl", ".md", ".csv", ".txt", ".yaml", ".js", ".svg"}
# Module names the outputs cite, read in the spelling they had when the digest was recorded: the
# dose-response modules became the subpackage experiments.dose_response (issue 27), which changed
# only these citations in three files whose digests are recorded per kind of CPU, and a refresh can
# only measure this machine's kind. The citations themselves are checked to name real modules
# (tests/test_cited_modules.py). Drop this when every kind's values are re-recorded.
CITED_BEFORE = (re.compile(r"experiments\.dose_response\.(config|controls|crossfit|formatting|null|plan|readouts"
                           r"|relabel|report|specificity|stats|text|units)\b"),
                lambda m: "experiments.dose_" + ("format" if m[1] == "formatting" else m[1]))


def _canonical(value: Any, parent: dict[str, Any] | None = None) -> Any:
    if isinstance(value, dict):
        return {k: _canonical(v, value) for k, v in value.items()
                if k not in TIMING_KEYS | ENVIRONMENT_KEYS
                and not (k == "sha256" and "file" in value)}  # a hash of a file with timings
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.9g}")
    return value


def file_digest(path: Path, roots: tuple[str, ...]) -> str:
    if path.suffix == ".safetensors":
        import numpy as np
        from safetensors import safe_open

        h = hashlib.sha256()
        with safe_open(str(path), "np") as f:
            meta = json.dumps(f.metadata() or {}, sort_keys=True)
            for root in roots:
                meta = meta.replace(root, "ROOT")
            h.update(meta.encode())
            for key in sorted(f.keys()):
                h.update(key.encode() + np.round(f.get_tensor(key).astype(np.float64), 6).tobytes())
        return h.hexdigest()[:16]
    data = path.read_bytes()
    if path.suffix in TEXT:
        text = data.decode("utf-8")
        for root in roots:
            text = text.replace(root, "ROOT")
        text = CITED_BEFORE[0].sub(CITED_BEFORE[1], text)
        if path.suffix == ".json":
            text = json.dumps(_canonical(json.loads(text)), sort_keys=True)
        elif path.suffix == ".jsonl":
            text = "\n".join(json.dumps(_canonical(json.loads(line)), sort_keys=True)
                             for line in text.splitlines() if line.strip())
        elif path.suffix == ".md":
            text = THROUGHPUT_ROW.sub("| THROUGHPUT |", text)
        data = text.encode("utf-8")
    return hashlib.sha256(data).hexdigest()[:16]


def digest(folder: Path, given_as: str | None = None) -> dict[str, str]:
    """{path relative to folder: digest} of every output file; `given_as` is the folder as the
    command was given it (a relative path is written into some files as given)."""
    roots = tuple(r for r in (str(folder.resolve()), str(folder), given_as) if r)
    roots = tuple(sorted(set(roots), key=len, reverse=True))
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and rel not in LEFT_OUT and path.name not in LEFT_OUT:
            out[rel] = file_digest(path, roots)
    return out


Entry = str | dict[str, str]  # one digest, or {machine kind key: digest}


@dataclass(frozen=True)
class MachineKind:
    key: str  # 12 hex digits
    label: str  # what it was computed from, for people


def _cpu_descriptor() -> str:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    field = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in info.splitlines()) if v}
    flags = sorted(set(field.get("flags", "").split()) & DISPATCH_FLAGS)
    return f"{field.get('vendor_id', platform.processor())} {field.get('model name', platform.machine())} " \
           f"[{' '.join(flags)}]"


def _numerics() -> bytes:
    """The bits of computations shaped like the quickstart's: a float32 Llama forward (weights drawn
    by numpy, whose generator is the same everywhere) and float64 BLAS products and a solve."""
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaModel

    rng = np.random.default_rng(20261206)
    config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    model = LlamaModel(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.from_numpy(rng.normal(0.0, 0.2, tuple(param.shape)).astype(np.float32)))
        ids = torch.from_numpy(rng.integers(0, 64, (6, 24)))
        mask = torch.ones_like(ids)
        mask[:3, :5] = 0  # left padding, as the readouts batch
        states = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    a, b = rng.normal(size=(257, 65)), rng.normal(size=(65, 129))
    gram = a.T @ a + np.eye(65)
    return b"".join(h.numpy().tobytes() for h in states) + (a @ b).tobytes() + np.linalg.solve(gram, a.T[:, :7]).tobytes()


def machine_kind() -> MachineKind:
    """This machine's kind of CPU, as the per-kind entries name it (module docstring)."""
    import numpy as np
    import torch

    label = (f"{_cpu_descriptor()}; torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}); "
             f"numpy {np.__version__}")
    key = hashlib.sha256(label.encode() + _numerics()).hexdigest()[:12]
    return MachineKind(key, label)


def accepted(entry: Entry, kind: str) -> list[str]:
    """The digests an entry accepts on machine kind `kind`: its one digest, or this kind's (none if
    the kind is not recorded for it)."""
    return [entry] if isinstance(entry, str) else [entry[kind]] if kind in entry else []


def unmeasured(expected: dict[str, Entry], kind: str) -> list[str]:
    """The per-kind files with no value for `kind`: not compared here."""
    return sorted(p for p, e in expected.items() if isinstance(e, dict) and kind not in e)


def differences(found: dict[str, str], expected: dict[str, Entry], kind: str = "") -> list[str]:
    """What differs from the recorded entries on machine kind `kind` (a per-kind file this kind has no
    value for is not compared: `unmeasured`)."""
    skip = set(unmeasured(expected, kind))
    return ([f"new file {p}" for p in sorted(found.keys() - expected.keys())]
            + [f"missing file {p}" for p in sorted(expected.keys() - found.keys())]
            + [f"changed {p}" for p in sorted(found.keys() & expected.keys() - skip)
               if found[p] not in accepted(expected[p], kind)])


def rewritten(found: dict[str, str], expected: dict[str, Entry], kind: str) -> dict[str, Entry]:
    """--write: a file whose digest is still accepted keeps its entry (and every kind's value); a
    changed per-kind file gets {kind: what was found}, a changed or new other file what was found."""
    missing = unmeasured(expected, kind)
    if missing:
        raise SystemExit(f"this kind of CPU ({kind}) has no values recorded for {len(missing)} per-kind files: add "
                         "them with --add-machine on unchanged main first")
    out: dict[str, Entry] = {}
    for p, d in found.items():
        old = expected.get(p)
        if old is not None and d in accepted(old, kind):
            out[p] = old
        else:
            out[p] = {kind: d} if isinstance(old, dict) else d
    return out


def with_machine(found: dict[str, str], expected: dict[str, Entry], kind: str, written_on: str) -> dict[str, Entry]:
    """--add-machine: the same files; each per-kind file gains this kind's value, and a single-digest
    file that differs here becomes per kind ({written_on: the recorded digest, kind: this one})."""
    if found.keys() != expected.keys():
        raise SystemExit("the files differ from the recorded ones (" + "; ".join(differences(found, expected, kind)[:5])
                         + "): a new machine's values are added only for unchanged main")
    out: dict[str, Entry] = {}
    for p, d in found.items():
        old = expected[p]
        if isinstance(old, str):
            out[p] = old if d == old else {written_on: old, kind: d}
        elif old.get(kind, d) != d:
            raise SystemExit(f"{p}: this kind's recorded value differs from what was found: main has changed here; "
                             "use --write")
        else:
            out[p] = {**old, kind: d}
    return out


def read_digest(path: Path = DIGEST_FILE) -> dict[str, Any]:
    """The digest file: {"kinds": {key: label}, "written_on": key, "files": {path: entry}}."""
    return json.loads(path.read_text()) if path.exists() else {"kinds": {}, "written_on": "", "files": {}}


def check(folder: Path, given_as: str | None = None) -> tuple[list[str], list[str], MachineKind]:
    """(differences, per-kind files not compared on this kind, the kind) of a quickstart folder."""
    recorded, kind = read_digest(), machine_kind()
    found = digest(folder, given_as)
    return differences(found, recorded["files"], kind.key), unmeasured(recorded["files"], kind.key), kind


def _write_digest(recorded: dict[str, Any], files: dict[str, Entry], kind: MachineKind, written_on: str) -> None:
    used = {k for e in files.values() if isinstance(e, dict) for k in e}
    kinds = {k: v for k, v in {**recorded["kinds"], kind.key: kind.label}.items() if k in used}
    entries = {"kinds": kinds, "written_on": written_on, "files": files}
    DIGEST_FILE.parent.mkdir(exist_ok=True)
    tmp = DIGEST_FILE.with_suffix(".tmp")
    tmp.write_text(json.dumps(entries, indent=0, sort_keys=True) + "\n")
    tmp.replace(DIGEST_FILE)
    print(f"wrote {len(files)} entries to {DIGEST_FILE} (kind {kind.key}: {kind.label})")


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    if "--kind" in sys.argv:
        kind = machine_kind()
        print(kind.key, kind.label)
    elif "--add-machine" in sys.argv or "--write" in sys.argv:
        recorded, kind = read_digest(), machine_kind()
        found = digest(folder, sys.argv[1])
        if "--add-machine" in sys.argv:
            _write_digest(recorded, with_machine(found, recorded["files"], kind.key, recorded["written_on"]), kind,
                          recorded["written_on"])
        else:
            _write_digest(recorded, rewritten(found, recorded["files"], kind.key), kind, kind.key)
    else:
        diff, skipped, kind = check(folder, sys.argv[1])
        print("\n".join(diff) or f"every compared file as recorded ({len(skipped)} not compared)")
        if skipped:
            print(f"{len(skipped)} per-kind files not compared: no values recorded for this kind ({kind.key}: {kind.label})")
        sys.exit(1 if diff else 0)
