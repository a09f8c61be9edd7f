"""Confabulation types of void failures (seed 002, section 5.3, appendix O.1-O.2): `evprobe confabulation RUN`.

A void failure is a reply to a void (an unresolved answer request: the evidence leaves the answer
undetermined) that did not abstain but gave a definitive answer (O.2), here yes or no: as the rule
read it (RUN/records.jsonl), or with `--judged` as the judge panel decided it (RUN/judged/records.jsonl,
`evprobe judge`). Up to `--sample` of them (default 100, the seed's "~100 per model") are drawn at
random, seeded (`--seed`, numpy's default_rng, without replacement), and one served classifier
(`--judge MODEL@URL`, through `bench.judge_server`: the openai backend's bounded concurrency, retries,
request cache and key from the environment only, the server checked before the first request)
classifies each on O.1's independent boolean axes, with structured JSON output (the schema sent as
response_format; temperature 0.8 and 512 tokens, the seed's judge calls of Table 8, since O.2 gives
none of its own):

- HP, hallucinated premise; II, invalid inference; ES, epistemic surrender; Doubt, doubt in
  reasoning (assessed on the trace where the reply has one, else on the visible output, as O.1 says).

The prompt is O.1's text verbatim (`TAXONOMY`: the seed's "1." lines joined to their items, its curly
quotes typeset as ASCII), then instructions and the inputs that evprobe writes, since the seed gives
none (`INSTRUCTIONS`): that the scenario is a void, the question as the model was asked it, and the
whole reply (a thinking model's <think> block included: O.2 gives the classifier the full trace).
The classifier's reply is read strictly (`bench.seed002_judges.strict_object`: one JSON object of
exactly the schema's keys, each a boolean, and a string `reasoning`); anything else is unclassified,
kept with its words.

Per axis (and HP and II together, Table 35's HP ∩ II), over the n sampled failures: `rate`, the
share the classifier marked positive, unclassified replies in the denominator and counted neither
positive nor negative, so a lower bound; `rate_if_unclassified_positive`, the upper bound; and the
unclassified share, each a proportion with the family bootstrap's interval over the sampled
replies' families (`bench.judge_agreement.family_rate`; coverage where the truth is known,
benchmarks/coverage_confabulation_rates.py: 94.2-97.2% for both bounds at 12-60 families, no
interval a point). With no unclassified reply the two bounds are the one rate. Writes RUN/confabulation/ (under the folder locks of RUN and of it):
`classifications.jsonl` (every sampled failure and its classification), `confabulation.json` and
`confabulation.md`.
"""

from __future__ import annotations

import argparse
import json
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from evprobe.bench.judge_agreement import family_rate
from evprobe.bench.judge_inputs import Judge, checked_inputs, key_envs
from evprobe.bench.judge_server import Calls, ask, open_backends, secrets_of
from evprobe.bench.seed002_judges import MAX_TOKENS, TEMPERATURE, strict_object
from evprobe.core.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED, Estimate
from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_bytes, atomic_write_json
from evprobe.core.json_types import JsonObject
from evprobe.core.lock import folder_lock

OUT = "confabulation"
TASK = "confabulation"
AXES = ("hallucinated_premise", "invalid_inference", "epistemic_surrender", "doubt_in_reasoning")
SHORT = {"hallucinated_premise": "HP", "invalid_inference": "II", "epistemic_surrender": "ES",
         "doubt_in_reasoning": "Doubt", "hp_and_ii": "HP and II"}
TAXONOMY = (
    "We define three independent boolean axes, each targeting a distinct failure mode. Because they are independent, "
    "a single response can exhibit any combination.\n\n"
    "1. Hallucinated Premise (HP). The model asserts a factual observation that is not supported by the visual "
    "evidence. Formally, the model claims premise $p$ when the evidence $E$ does not entail $p$ ( $E\\not\\models p$ ). "
    'Example: "The ball bounces off the left wall at 00:02.4" when no ball motion is visible in the video.\n'
    "2. Invalid Inference (II). The model's conclusion does not follow from its stated premises, even if those "
    "premises were true. Formally, the premises $p_{1},\\ldots,p_{n}$ do not entail the conclusion $q$ "
    "( $p_{1},\\ldots,p_{n}\\not\\models q$ ). Example: \"The seesaw tilts slightly right, therefore the ball ends up "
    'in the left bin."\n'
    "3. Epistemic Surrender (ES). The model explicitly acknowledges that it cannot determine the answer "
    "( $\\neg K(q)$ ) but then asserts $q$ anyway, a form of Moore's Paradox (\"I don't know, but the answer is X\"). "
    "Example: \"It's impossible to tell from this angle, but based on the trajectory the die shows green.\"\n\n"
    "Additionally, for models with reasoning traces (thinking-enabled variants), we annotate a fourth axis:\n\n"
    "4. Doubt in Reasoning (Doubt). The model's internal reasoning trace expresses uncertainty, hedging, or doubt "
    "about the visual evidence, but the final output does not reflect this doubt. For models with explicit "
    "reasoning traces (Gemini Flash, Gemini 3.1 Pro, Qwen3-VL Think) this axis is assessed on the trace; for the "
    "remaining variants it is assessed on the visible output."
)
INSTRUCTIONS = (  # evprobe's words: the seed gives the definitions only
    "\n\nYou are classifying one model response with this taxonomy. The scenario is unanswerable: the evidence the "
    "model was shown does not determine the answer, yet the model gave a definitive answer. Classify the response "
    "on each axis independently. If the response begins with a reasoning trace (inside <think> and </think>), "
    "assess Doubt in Reasoning on that trace; otherwise assess it on the visible output.\n\n"
    "Question, as the model was asked it:\n<<<\n{question}\n>>>\n\nModel response:\n<<<\n{response}\n>>>\n\n"
    "Respond with ONLY a JSON object:\n"
    '{{"hallucinated_premise": true/false, "invalid_inference": true/false, "epistemic_surrender": true/false, '
    '"doubt_in_reasoning": true/false, "reasoning": "one sentence"}}'
)
SCHEMA: JsonObject = {"type": "object", "additionalProperties": False, "required": [*AXES, "reasoning"],
                      "properties": {**{a: {"type": "boolean"} for a in AXES}, "reasoning": {"type": "string"}}}
CALLS = Calls(temperature=TEMPERATURE, max_tokens=MAX_TOKENS, schemas={TASK: SCHEMA})
LOCK_FIX = "wait for it to finish, then classify the run"


def classifier_prompt(question: str, response: str) -> str:
    return TAXONOMY + INSTRUCTIONS.format(question=question, response=response)


def read_classification(reply: str) -> dict[str, bool] | None:
    """The classifier's reply read strictly (module docstring): axis -> bool, or None."""
    v = strict_object(reply, (*AXES, "reasoning"))
    if v is None or not isinstance(v["reasoning"], str) or any(type(v[a]) is not bool for a in AXES):
        return None
    return {a: v[a] for a in AXES}


@dataclass(frozen=True)
class AxisRate:
    """One axis over the sampled failures: positives, the unclassified, and the rate's two bounds."""

    axis: str
    positive: int
    rate: Estimate  # unclassified in the denominator, counted neither way: a lower bound
    rate_if_unclassified_positive: Estimate  # the upper bound

    def to_json(self) -> JsonObject:
        return {"axis": self.axis, "short": SHORT[self.axis], "positive": self.positive, "rate": self.rate.to_json(),
                "rate_if_unclassified_positive": self.rate_if_unclassified_positive.to_json()}


@dataclass(frozen=True)
class Confabulation:
    """What `classify_failures` wrote (module docstring)."""

    out: Path
    n_failures: int  # void failures in the run
    n_sampled: int
    n_unclassified: int
    unclassified: Estimate
    axes: tuple[AxisRate, ...]
    sample_seed: int
    source: str  # records.jsonl read: the rule's or the panel's

    def to_json(self) -> JsonObject:
        return {"source": self.source, "n_failures": self.n_failures, "n_sampled": self.n_sampled,
                "sample_seed": self.sample_seed, "n_unclassified": self.n_unclassified,
                "unclassified": self.unclassified.to_json(), "axes": [a.to_json() for a in self.axes]}


def classify_failures(run_dir: str | Path, judge: Judge, *, bench: str | Path | None = None,
                      api_key_env: str | None = None, sample: int = 100, judged: bool = False, concurrency: int = 4,
                      n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED) -> Confabulation:
    """Sample the run's void failures and classify them (module docstring); writes RUN/confabulation/."""
    from evprobe.bench.json_schema import read_run_meta
    from evprobe.bench.protocols import build_prompt
    from evprobe.bench.records import load_records

    run = Path(run_dir)
    if sample < 1:
        raise InputError(f"--sample must be a positive integer, got {sample}")
    envs = key_envs(None if api_key_env is None else [api_key_env], 1)
    read_run_meta(run)  # a folder that is no run is refused before a lock would make a folder in it
    out = run / OUT
    with folder_lock(run, "evprobe confabulation", fix=LOCK_FIX), \
            folder_lock(out, "evprobe confabulation", fix=LOCK_FIX):
        meta, every, records = checked_inputs(run, None if bench is None else Path(bench))
        source = run / "records.jsonl"
        if judged:
            source = run / "judged" / "records.jsonl"
            if not source.is_file():
                raise InputError(f"{source} not found; judge the run first (evprobe judge RUN --judge ...), or drop "
                                 "--judged to read the rule's answers")
            records = load_records(source)
        failures = [(it, records[it.item_id]) for it in every if it.resolved is False and it.item_id in records
                    and records[it.item_id].answer in ("yes", "no")]
        if not failures:
            raise InputError(f"{source}: no void failures (void replies answered yes or no) to classify")
        rng = np.random.default_rng(seed)
        picked = sorted(rng.choice(len(failures), size=min(sample, len(failures)), replace=False))
        chosen = [failures[i] for i in picked]
        prompts = [(f"{TASK}:{it.item_id}", classifier_prompt(build_prompt(it, "free", meta.regime), r.reply))
                   for it, r in chosen]
        with ExitStack() as stack:
            backend = open_backends([judge], envs, out, concurrency, stack, CALLS)[0]
            said = ask(backend, prompts, secrets_of(envs), lambda _, text: read_classification(text))
        rows = []
        for it, r in chosen:
            a = said[f"{TASK}:{it.item_id}"]
            rows.append({"item_id": it.item_id, "family_id": it.family_id, "request": it.request, "answer": r.answer,
                         "axes": a.decision, **({"unclassified": a.words} if a.words else {})})
        result = _summary(out, rows, len(failures), seed, str(source.relative_to(run)), n_boot)
        payload = {**result.to_json(), "classifier": {"model": judge.model, "base_url": judge.shown_url,
                                                      "api_key_env": envs[0]},
                   "prompt": TAXONOMY + INSTRUCTIONS, "schema": SCHEMA,
                   "calls": {"temperature": CALLS.temperature, "max_tokens": CALLS.max_tokens,
                             "response_format": "json_schema"}, "n_boot": n_boot}
        atomic_write_bytes(out / "classifications.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8"))
        atomic_write_json(out / "confabulation.json", payload)
        atomic_write_bytes(out / "confabulation.md", markdown(payload).encode("utf-8"))
        return result


def _summary(out: Path, rows: list[JsonObject], n_failures: int, seed: int, source: str, n_boot: int) -> Confabulation:
    families = [str(r["family_id"]) for r in rows]
    unread = [r["axes"] is None for r in rows]

    def positive(r: JsonObject, axis: str) -> bool:
        axes = r["axes"]
        if axes is None:
            return False
        return bool(axes["hallucinated_premise"] and axes["invalid_inference"]) if axis == "hp_and_ii" else axes[axis]

    axes = []
    for axis in (*AXES, "hp_and_ii"):
        hits = [positive(r, axis) for r in rows]
        axes.append(AxisRate(axis, sum(hits), family_rate(hits, families, n_boot, seed),
                             family_rate([h or u for h, u in zip(hits, unread)], families, n_boot, seed)))
    return Confabulation(out, n_failures, len(rows), sum(unread), family_rate(unread, families, n_boot, seed),
                         tuple(axes), seed, source)


def markdown(result: JsonObject) -> str:
    from evprobe.bench.score_cells import pct, table_text

    rows = [[a["short"], str(a["positive"]), pct(a["rate"]), pct(a["rate_if_unclassified_positive"])]
            for a in result["axes"]]
    return "\n".join([
        "# Confabulation types of void failures (seed 002, appendix O)", "",
        f"- {result['n_sampled']} of {result['n_failures']} void failures (void replies answered yes or no, read from "
        f"{result['source']}) sampled with seed {result['sample_seed']}; classifier {result['classifier']['model']} "
        f"(temperature {result['calls']['temperature']}, JSON schema)",
        f"- unclassified (the reply was not the schema): {result['n_unclassified']}, {pct(result['unclassified'])}%; "
        "they stay in every denominator, counted neither positive nor negative: the rate is a lower bound and the "
        "last column the upper", "",
        table_text(["axis", "positive", "rate (%)", "rate if the unclassified were positive (%)"], rows)]) + "\n"


def add_confabulation_parser(sub: argparse._SubParsersAction) -> None:
    from evprobe.core.argtypes import positive_int

    p = sub.add_parser(
        "confabulation",
        help="classify a free run's void failures into seed 002's confabulation types (HP, II, ES, Doubt)",
        description="Sample up to --sample void failures of RUN (void replies answered yes or no; --judged: as the "
        "judge panel decided) and ask one served classifier (an OpenAI-compatible server) to mark each on seed 002's "
        "axes (appendix O.1: hallucinated premise, invalid inference, epistemic surrender, doubt in reasoning) as "
        "JSON. Writes RUN/confabulation/: classifications.jsonl, confabulation.json and confabulation.md (per axis "
        "the rate among the sampled failures with a family-bootstrap interval; unclassified replies stay in the "
        "denominators and are reported).")
    p.add_argument("run_dir", metavar="RUN", type=Path, help="run folder written by `evprobe run --protocol free`")
    p.add_argument("--judge", required=True, metavar="MODEL@URL", help="the classifier: a served model and its base URL")
    p.add_argument("--api-key-env", default=None, metavar="NAME",
                   help="the environment variable holding the classifier's API key (never the key itself)")
    p.add_argument("--bench", type=Path, default=None, help="benchmark folder (default: the one in RUN/run.json)")
    p.add_argument("--sample", type=positive_int, default=100, help="void failures sampled (default 100, as the seed)")
    p.add_argument("--judged", action="store_true",
                   help="read the failures from RUN/judged/records.jsonl (the panel's answers) instead of the rule's")
    p.add_argument("--concurrency", type=positive_int, default=4, help="requests in flight")
    p.add_argument("--n-boot", type=positive_int, default=2000, help="bootstrap resamples of whole families")
    p.add_argument("--seed", type=int, default=20260905, help="sample and bootstrap seed")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    result = classify_failures(args.run_dir, Judge.parse(args.judge), bench=args.bench, api_key_env=args.api_key_env,
                               sample=args.sample, judged=args.judged, concurrency=args.concurrency,
                               n_boot=args.n_boot, seed=args.seed)
    rates = ", ".join(f"{SHORT[a.axis]} {a.rate.text(2)}" for a in result.axes)
    print(f"{result.n_sampled} of {result.n_failures} void failures classified ({result.n_unclassified} "
          f"unclassified): {rates}")
    print(f"wrote classifications.jsonl, confabulation.json, confabulation.md in {result.out}")
    return 0


__all__ = ["AXES", "INSTRUCTIONS", "SCHEMA", "TAXONOMY", "AxisRate", "Confabulation", "add_confabulation_parser",
           "classifier_prompt", "classify_failures", "markdown", "read_classification"]
