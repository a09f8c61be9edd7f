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
figures) differs in 32 files between the two kinds measured (the machine the digest was first recorded
on, and an AMD EPYC with AVX-512, 2026-12-03, where CI also ran that day); the records, the benchmark
and the known-answer pages are the same on both. So an entry is one digest, or the list of digests
main gave on each kind measured, and a file passes when it equals one of them. An entry is refreshed
only with what is measured: after an intended change, rewrite the entries (the alternatives of a
file that did not change are kept):

    evprobe quickstart --out out/quickstart && python -m tests.quickstart_digest out/quickstart --write

and, on a new kind of machine, with main unchanged, add its values as alternatives:

    evprobe quickstart --out out/quickstart && python -m tests.quickstart_digest out/quickstart --add-machine

A refactor on a machine whose values are not recorded is checked by comparing a run of the old code
with a run of the new one there (`digest` and `differences` of the two folders).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

DIGEST_FILE = Path(__file__).parent / "data" / "quickstart_digest.json"
TIMING_KEYS = {"seconds", "items_per_second", "generated_tokens_per_s", "tokens_per_second"}
# What a capture's meta.json records of the environment (library versions): not an output of the job;
# a transformers release changes it and nothing the job computed.
ENVIRONMENT_KEYS = {"versions"}
LEFT_OUT = {"report/report.html", ".evprobe.lock"}
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


def accepted(entry: str | list[str]) -> list[str]:
    """The digests an entry accepts: one, or one per kind of machine measured."""
    return [entry] if isinstance(entry, str) else list(entry)


def differences(found: dict[str, str], expected: dict[str, str | list[str]]) -> list[str]:
    return ([f"new file {p}" for p in sorted(found.keys() - expected.keys())]
            + [f"missing file {p}" for p in sorted(expected.keys() - found.keys())]
            + [f"changed {p}" for p in sorted(found.keys() & expected.keys()) if found[p] not in accepted(expected[p])])


def rewritten(found: dict[str, str], expected: dict[str, str | list[str]]) -> dict[str, str | list[str]]:
    """--write: a file whose digest is still accepted keeps its entry (and every machine's value);
    a changed or new file gets what was found."""
    return {p: expected[p] if p in expected and d in accepted(expected[p]) else d for p, d in found.items()}


def with_machine(found: dict[str, str], expected: dict[str, str | list[str]]) -> dict[str, str | list[str]]:
    """--add-machine: the same files, each value found here added to the ones already accepted."""
    if found.keys() != expected.keys():
        raise SystemExit("the files differ from the recorded ones (" + "; ".join(differences(found, expected)[:5])
                         + "): a new machine's values are added only for unchanged main")
    out: dict[str, str | list[str]] = {}
    for p, d in found.items():
        values = accepted(expected[p]) + [v for v in [d] if v not in accepted(expected[p])]
        out[p] = values[0] if len(values) == 1 else values  # recorded order, a new kind's value last
    return out


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    found = digest(folder, sys.argv[1])
    expected = json.loads(DIGEST_FILE.read_text()) if DIGEST_FILE.exists() else {}
    if "--write" in sys.argv or "--add-machine" in sys.argv:
        entries = with_machine(found, expected) if "--add-machine" in sys.argv else rewritten(found, expected)
        DIGEST_FILE.parent.mkdir(exist_ok=True)
        tmp = DIGEST_FILE.with_suffix(".tmp")
        tmp.write_text(json.dumps(entries, indent=0, sort_keys=True) + "\n")
        tmp.replace(DIGEST_FILE)
        print(f"wrote {len(entries)} entries to {DIGEST_FILE}")
    else:
        diff = differences(found, expected)
        print("\n".join(diff) or f"all {len(found)} files as recorded")
        sys.exit(1 if diff else 0)
