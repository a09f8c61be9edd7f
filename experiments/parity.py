"""`evprobe parity RUN_A RUN_B`: do two runs of the same items give the same records?

Built to compare backends (hf vs vllm vs openai) and settings that must not change a greedy record
(batch size, prefetch, sort by length), but it compares any two run folders:

    evprobe run --model M --bench B --out runs/hf   --requests both_given --option-logprobs
    evprobe run --model M --bench B --out runs/vllm --requests both_given --option-logprobs --backend vllm
    evprobe parity runs/hf runs/vllm [--tolerance 1e-4] [--out parity.md | parity.json]

For every item both runs recorded it counts agreement field by field (the reply text, valid, the
parser's route, the decoded decision: choice, action, answer, value, and the token counts) and the
largest |option log-prob difference| (`--option-logprobs` runs; letters both records have), with
the item and letter where it is. An item disagrees when any field differs, or its log-probs differ
by more than the tolerance, or the two records' log-probs name different letters (with tolerance
None, log-probs are reported but never judged). Log-probs in one record only (a server that
returns none: `logprobs_missing` says so; a run without `--option-logprobs`) cannot be compared:
they are counted and noted with the record's reason, not a disagreement. Exit status 1 when any
item disagrees, so a CI script can use it; 0 when every item agrees; 2 for refused input.

Refused in one line (the runs are not comparable): different benchmarks (items or images hash),
protocol, regime, prompt template or max_new_tokens; different model weights where both runs pin
them; item sets that differ (unless `common`/`--common`: then the items both have, with the others
counted); sampled runs (a temperature pinned: sampled records agree only by chance), unless
`sampled`/`--sampled`, which compares them anyway and says so. Every other pin or setting that
differs (backend, dtype, batch size, chat template, ...) is listed in the result's notes.

Writes nothing unless `--out FILE` (JSON when FILE ends in .json, else Markdown; atomic).

In Python (other benchmarks and tests use this):

    from evprobe.experiments.parity import parity
    result = parity(Path("runs/hf"), Path("runs/vllm"), 1e-4)
    result.ok, result.agree["decision"], result.max_logprob_diff, result.disagreements[:3]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evprobe.bench.records import RECORDS_FILE, RUN_META_FILE, Record
from evprobe.core.errors import InputError
from evprobe.core.json_types import JsonObject

# Log-prob units (nats). Measured in float32 on a CPU (hooks.tiny_text, both_given items, log-probs of
# -7 to -13): hf batch 1 vs batch 4, up to 6e-6 (tests/experiments/test_parity.py); hf vs the vllm
# backend, 2.9e-5 over 48 items (benchmarks/backends.py). The cause is the order of float32 sums
# (padding, batch shape, another kernel), not a different computation; it grows with the logits'
# size, so 1e-4 is a float32 tolerance with a margin of about 3 over the largest seen. Half
# precision (bfloat16 on a GPU) rounds a thousand times coarser: pass a tolerance measured there.
DEFAULT_TOLERANCE = 1e-4
# Record fields compared item by item; "decision" is the decoded decision as a whole.
FIELDS = ("reply", "valid", "route", "choice", "action", "answer", "value", "n_prompt_tokens", "n_new_tokens")
DECISION = ("valid", "choice", "action", "answer", "value")
LOGPROBS = "option_logprobs"
# run.json pins two runs must share to be compared: the same prompts, read the same way.
REQUIRED = {
    "items_sha256": "benchmarks (items hash)",
    "images_sha256": "benchmark images (images hash)",
    "protocol": "protocols",
    "regime": "regimes",
    "prompt_template_sha256": "prompt templates",
    "max_new_tokens": "max_new_tokens",
}
# run.json keys that say where or how much, not what: never compared.
UNPINNED = {"bench", "config", "shard", "kind", "n_selected", "n_records", "last_session", "resources"}
# RunConfig settings never noted (the run's own folders and shard).
UNNOTED_CONFIG = {"out", "bench", "shard", "http_cache"}
SHOWN_DIFFERENCES = 20  # disagreeing items listed in the Markdown (all of them in the JSON)


@dataclass(frozen=True)
class Difference:
    """One disagreeing item: the fields that differ, with each run's values of them
    (`option_logprobs`: the two letter -> log p maps; `logprob_diff`: their largest |difference|)."""

    item_id: str
    fields: tuple[str, ...]
    a: JsonObject
    b: JsonObject
    logprob_diff: float | None = None


@dataclass(frozen=True)
class Parity:
    """Two runs compared item by item (`parity`).

    n_common: items both runs recorded (every count below is over these); only_a / only_b: item
        ids one run has and the other lacks (empty unless compared with common=True).
    agree: field -> items on which it agrees (FIELDS, "decision" for DECISION together), of
        n_common each; and "option_logprobs" when log-probs are judged, of n_logprobs.
    n_logprobs: items with option log-probs in both records (compared); n_logprobs_one_side: items
        with them in one record only (not compared: the notes say why). max_logprob_diff: the
        largest |log p_a - log p_b| over shared letters (None without any), at max_logprob_item,
        letter max_logprob_letter.
    tolerance: the log-prob tolerance judged (None: reported, not judged).
    disagreements: every item that disagrees, in run A's record order.
    notes: pins and settings that differ between the runs (allowed), and what was relaxed."""

    run_a: str
    run_b: str
    backend_a: str
    backend_b: str
    n_common: int
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    agree: dict[str, int]
    n_logprobs: int
    n_logprobs_one_side: int
    max_logprob_diff: float | None
    max_logprob_item: str | None
    max_logprob_letter: str | None
    tolerance: float | None
    disagreements: tuple[Difference, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Every common item agrees (log-probs within the tolerance)."""
        return not self.disagreements

    def summary(self) -> str:
        """One line: the verdict, the decision agreement and the largest log-prob difference."""
        verdict = "agree" if self.ok else f"DISAGREE on {len(self.disagreements)} of {self.n_common} items"
        lp = ("no option log-probs in both runs to compare" if self.max_logprob_diff is None else
              f"largest |option log-prob difference| {self.max_logprob_diff:.3g} at {self.max_logprob_item}")
        return (f"{self.backend_a} vs {self.backend_b}: {verdict}; decisions {self.agree['decision']}/{self.n_common}, "
                f"replies {self.agree['reply']}/{self.n_common}; {lp}")

    def to_json(self) -> JsonObject:
        return {**asdict(self), "ok": self.ok}

    def markdown(self) -> str:
        n = self.n_common
        tol = "not judged" if self.tolerance is None else f"tolerance {self.tolerance:g}"
        lines = [f"# Parity: {self.run_a} ({self.backend_a}) vs {self.run_b} ({self.backend_b})", "",
                 f"{self.summary()}.", "",
                 f"{n} items in both runs ({len(self.only_a)} only in A, {len(self.only_b)} only in B); "
                 f"option log-probs: {tol}, {self.n_logprobs} items with log-probs in both records.", "",
                 "| field | agree | of |", "|---|---|---|"]
        lines += [f"| {name} | {count} | {self.n_logprobs if name == LOGPROBS else n} |"
                  for name, count in self.agree.items()]
        if self.max_logprob_diff is not None:
            lines += ["", f"Largest |option log-prob difference|: {self.max_logprob_diff:.3g} "
                          f"(item {self.max_logprob_item}, letter {self.max_logprob_letter})."]
        if self.notes:
            lines += ["", "Notes:", ""] + [f"- {note}" for note in self.notes]
        if self.disagreements:
            lines += ["", f"## Disagreements ({len(self.disagreements)})", "", "| item | field | A | B |",
                      "|---|---|---|---|"]
            for d in self.disagreements[:SHOWN_DIFFERENCES]:
                lines += [f"| {d.item_id} | {f} | {_cell(d.a.get(f))} | {_cell(d.b.get(f))} |" for f in d.fields]
            if len(self.disagreements) > SHOWN_DIFFERENCES:
                lines += ["", f"... and {len(self.disagreements) - SHOWN_DIFFERENCES} more items (all in the JSON)."]
        return "\n".join(lines) + "\n"


def parity(run_a: Path, run_b: Path, tolerance: float | None = DEFAULT_TOLERANCE, *, common: bool = False,
           sampled: bool = False) -> Parity:
    """Compare two run folders item by item (the module's docstring says what and what is refused).

    tolerance: the largest |option log-prob difference| (nats) that still agrees; None reports the
        differences without judging them. common: compare the items both runs have instead of
        refusing runs whose item sets differ. sampled: compare runs with a temperature pinned.
    Reads only; a refusal is one `InputError` line naming both runs and the fix."""
    from evprobe.bench.records import load_records

    run_a, run_b = Path(run_a), Path(run_b)
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance)
                                      and tolerance >= 0):
        raise InputError(f"--tolerance must be a number >= 0 (or none), got {tolerance!r}")
    meta_a, meta_b = _meta(run_a), _meta(run_b)
    notes = _check_pins(run_a, run_b, meta_a, meta_b, sampled)
    recs_a, recs_b = (_records(run, load_records) for run in (run_a, run_b))
    only_a = tuple(k for k in recs_a if k not in recs_b)
    only_b = tuple(k for k in recs_b if k not in recs_a)
    if (only_a or only_b) and not common:
        first = f"first: {only_a[0]} only in {run_a}" if only_a else f"first: {only_b[0]} only in {run_b}"
        raise InputError(f"{run_a} has {len(recs_a)} records and {run_b} {len(recs_b)}; {len(only_a)} items only in "
                         f"the first, {len(only_b)} only in the second ({first}): finish both runs on the same items "
                         "(--requests, --limit), or pass --common to compare the items both have")
    ids = [k for k in recs_a if k in recs_b]
    if not ids:
        raise InputError(f"{run_a} and {run_b} have no item in common; run both on the same items")
    if only_a or only_b:
        notes.append(f"compared the {len(ids)} items both runs have ({len(only_a)} only in {run_a}, "
                     f"{len(only_b)} only in {run_b})")
    errors = [(run, sum(1 for r in recs.values() if r.error is not None))
              for run, recs in ((run_a, recs_a), (run_b, recs_b))]
    notes += [f"{run}: {n} records with a backend error (invalid, reply '')" for run, n in errors if n]

    judged = FIELDS + ("decision",) + ((LOGPROBS,) if tolerance is not None else ())
    agree = dict.fromkeys(judged, 0)
    diffs: list[Difference] = []
    n_lp, best = 0, (None, None, None)  # best: (diff, item, letter)
    one_side: dict[str, dict[str, int]] = {}  # the run lacking log-probs another has -> its reasons, counted
    for item_id in ids:
        a, b = recs_a[item_id], recs_b[item_id]
        differ = [name for name in FIELDS if getattr(a, name) != getattr(b, name)]
        for name in FIELDS:
            agree[name] += name not in differ
        agree["decision"] += not any(name in differ for name in DECISION)
        lp_a, lp_b = a.option_logprobs, b.option_logprobs
        item_diff = None
        if (lp_a is None) != (lp_b is None):
            run, lacking = (run_a, a) if lp_a is None else (run_b, b)
            reasons = one_side.setdefault(str(run), {})
            why = lacking.logprobs_missing or "none recorded"
            reasons[why] = reasons.get(why, 0) + 1
        if lp_a is not None and lp_b is not None:
            n_lp += 1
            shared = [x for x in lp_a if x in lp_b]
            for letter in shared:
                d = abs(lp_a[letter] - lp_b[letter])
                if item_diff is None or d > item_diff:
                    item_diff = d
                if best[0] is None or d > best[0]:
                    best = (d, item_id, letter)
        if tolerance is not None and lp_a is not None and lp_b is not None:
            lp_bad = set(lp_a) != set(lp_b) or (item_diff is not None and item_diff > tolerance)
            agree[LOGPROBS] += not lp_bad
            if lp_bad:
                differ.append(LOGPROBS)
        if differ:
            diffs.append(Difference(item_id, tuple(differ), {f: getattr(a, f) for f in differ},
                                    {f: getattr(b, f) for f in differ}, item_diff))
    for run, reasons in one_side.items():
        said = "; ".join(f"{count}: {why}" for why, count in reasons.items())
        notes.append(f"{sum(reasons.values())} items have option log-probs only in the other run, not in {run} "
                     f"(not compared; {said})")
    return Parity(run_a=str(run_a), run_b=str(run_b), backend_a=_backend(meta_a), backend_b=_backend(meta_b),
                  n_common=len(ids), only_a=only_a, only_b=only_b, agree=agree, n_logprobs=n_lp,
                  n_logprobs_one_side=sum(sum(r.values()) for r in one_side.values()), max_logprob_diff=best[0],
                  max_logprob_item=best[1], max_logprob_letter=best[2],
                  tolerance=None if tolerance is None else float(tolerance), disagreements=tuple(diffs),
                  notes=tuple(notes))


def write_parity(result: Parity, path: Path) -> None:
    """`result` to `path`, atomically: JSON when the name ends in .json, else Markdown."""
    from evprobe.core.files import atomic_write_bytes, atomic_write_json

    path = Path(path)
    if path.suffix.lower() == ".json":
        atomic_write_json(path, result.to_json())
    else:
        atomic_write_bytes(path, result.markdown().encode("utf-8"))


def _meta(run: Path) -> JsonObject:
    from evprobe.bench.json_schema import RUN_FIX, RunMeta, read_model

    return read_model(run / RUN_META_FILE, RunMeta, RUN_FIX,
                      missing=f"{run} is not a run folder; create it with `evprobe run`")[1]


def _records(run: Path, load: Callable[[Path], dict[str, Record]]) -> dict[str, Record]:
    path = run / RECORDS_FILE
    if not path.is_file():
        raise InputError(f"{path} not found; run `evprobe run` into {run} first")
    records = load(path)
    if not records:
        raise InputError(f"{path} has no records; run `evprobe run` into {run} first")
    return records


def _backend(meta: JsonObject) -> str:
    if str(meta.get("model", "")).startswith("policy:"):
        return str(meta["model"])
    from evprobe.bench.backends.registry import DEFAULT_BACKEND

    return meta.get("backend") or DEFAULT_BACKEND  # pinned None at the default


def _check_pins(run_a: Path, run_b: Path, a: JsonObject, b: JsonObject, sampled: bool) -> list[str]:
    """Refuse runs that are not of the same prompts (REQUIRED, the model weights) or that sampled;
    the notes: every other pin and setting that differs."""
    for key, what in REQUIRED.items():
        if a.get(key) != b.get(key):
            raise InputError(f"{run_a} and {run_b} are runs of different {what} ({key} {_short(a.get(key))} vs "
                             f"{_short(b.get(key))}); parity compares the same prompts: run both with the same "
                             "benchmark, --protocol and --regime")
    key = "model_weights_sha256"
    if a.get(key) and b.get(key) and a[key] != b[key]:
        raise InputError(f"{run_a} and {run_b} ran different model weights ({key} {_short(a[key])} vs "
                         f"{_short(b[key])}); parity compares one model across backends or settings")
    notes = []
    temps = [m.get("temperature") for m in (a, b)]
    if any(t is not None for t in temps):
        if not sampled:
            raise InputError(f"{run_a if temps[0] is not None else run_b} sampled (temperature {temps[0] or temps[1]}): "
                             "sampled records agree only by chance, so parity compares greedy runs; pass --sampled "
                             "to compare them anyway")
        notes.append(f"sampled runs (temperature {temps[0] or 0} vs {temps[1] or 0}): disagreement is expected and "
                     "says nothing about the backends by itself")
    for run, meta in ((run_a, a), (run_b, b)):
        if meta.get("model_source") == "served":
            notes.append(f"{run}: a served model (its weights are not pinned; parity assumes the server serves "
                         "the same model)")
    keys = [k for k in dict.fromkeys([*a, *b]) if k not in REQUIRED and k not in UNPINNED]
    for key in keys:  # pinned (not null) by both runs, differently
        if a.get(key) is not None and b.get(key) is not None and a[key] != b[key]:
            notes.append(f"{key}: {_short(a[key])} vs {_short(b[key])}")
    for run, meta, other in ((run_a, a, b), (run_b, b, a)):  # pinned by one run only (its backend's pins)
        alone = [f"{k} {_short(meta[k])}" for k in keys if meta.get(k) is not None and other.get(k) is None]
        if alone:
            notes.append(f"pinned by {run} only: {', '.join(alone)}")
    config_a, config_b = _flat_config(a.get("config")), _flat_config(b.get("config"))
    from evprobe.bench.backends.registry import DEFAULT_BACKEND, backend_only

    # a backend's own settings are noted only when both runs are of that backend (else one is at its default, unused)
    backends = (config_a.get("backend", DEFAULT_BACKEND), config_b.get("backend", DEFAULT_BACKEND))
    unused = {k for backend, names in backend_only().items() if backends != (backend, backend) for k in names}
    for key in [k for k in dict.fromkeys([*config_a, *config_b])
                if k not in UNNOTED_CONFIG and k not in unused and k not in a and k not in b]:
        if config_a.get(key) is not None and config_b.get(key) is not None and config_a[key] != config_b[key]:
            notes.append(f"--{key.replace('_', '-')}: {_short(config_a[key])} vs {_short(config_b[key])}")
    return notes


def _flat_config(config: Any) -> JsonObject:
    """A run.json's config with its model's flag keys (dtype, device_map, ...) beside the run's own
    keys, as its flags spell them; a run.json written before the model was one key is flat already."""
    from evprobe.bench.model_config import ModelConfig

    config = dict(config or {})
    model = config.get("model")
    if isinstance(model, dict):
        config.update({k: model.get(k) for k in ModelConfig.FLAGS})
    return config


def _short(value: Any) -> str:
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12]  # a hash
    from evprobe.core.errors import shown

    return shown(value)


def _cell(value: Any) -> str:
    text = json.dumps(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return text.replace("|", "\\|")


def _tolerance(text: str) -> float | None:
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (or none)") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0 (or none), got {text}")
    return value


def add_parity_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "parity",
        help="compare two runs of the same items record by record (backends, batch sizes): exit 1 if they disagree",
        description="Compare the records of two runs of the same items (e.g. --backend hf vs vllm vs openai, or "
        "batch size 1 vs 8): per-field agreement of replies, decoded decisions and token counts, and the largest "
        "option log-prob difference. Exit status 1 when any item disagrees beyond the tolerance. Refuses runs of "
        "different benchmarks, protocols, regimes or models, and sampled runs.",
    )
    p.add_argument("run_a", metavar="RUN_A", type=Path, help="run folder written by `evprobe run`")
    p.add_argument("run_b", metavar="RUN_B", type=Path, help="run folder of the same items")
    p.add_argument("--tolerance", type=_tolerance, default=DEFAULT_TOLERANCE, metavar="NATS",
                   help=f"largest |option log-prob difference| that still agrees (default {DEFAULT_TOLERANCE:g}); "
                        "none = report it without judging")
    p.add_argument("--common", action="store_true",
                   help="compare the items both runs have instead of refusing runs whose item sets differ")
    p.add_argument("--sampled", action="store_true",
                   help="compare runs with a temperature above 0 anyway (they agree only by chance)")
    p.add_argument("--out", type=Path, default=None, help="also write the result (FILE.json: JSON, else Markdown)")
    p.set_defaults(run=run_parity)
    return p


def run_parity(args: argparse.Namespace) -> int:
    result = parity(args.run_a, args.run_b, args.tolerance, common=args.common, sampled=args.sampled)
    print(result.markdown(), end="")
    if args.out is not None:
        write_parity(result, args.out)
        print(f"wrote {args.out}")
    return 0 if result.ok else 1
