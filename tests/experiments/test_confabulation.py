"""`evprobe confabulation` (experiments.confabulation; seed 002, appendix O.1-O.2): the prompt is O.1's
text, the classifier's JSON is read strictly, and end to end against a scripted classifier served over
HTTP whose labels are planted per reply, so every rate is known; unclassified replies stay in the
denominators."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from evprobe.bench.manifest import read_items
from evprobe.bench.protocols import build_prompt
from evprobe.bench.records import load_records
from evprobe.experiments.cli import main
from evprobe.experiments.confabulation import classify as cf

from tests.bench.scripted_judge import ScriptedJudge, free_run

SEED = Path("/work/shared/seeds/002_9a822cb4fffae59b.txt")
# Appendix O.1 as the seed's extraction prints it ("1." on a line of its own, curly quotes).
SEED_O1 = (
    "We define three independent boolean axes, each targeting a distinct failure mode. Because they are independent, "
    "a single response can exhibit any combination.\n\n1.\n\nHallucinated Premise (HP). The model asserts a factual "
    "observation that is not supported by the visual evidence. Formally, the model claims premise $p$ when the "
    "evidence $E$ does not entail $p$ ( $E\\not\\models p$ ). Example: “The ball bounces off the left wall at 00:02.4” "
    "when no ball motion is visible in the video.\n2.\n\nInvalid Inference (II). The model’s conclusion does not follow "
    "from its stated premises, even if those premises were true. Formally, the premises $p_{1},\\ldots,p_{n}$ do not "
    "entail the conclusion $q$ ( $p_{1},\\ldots,p_{n}\\not\\models q$ ). Example: “The seesaw tilts slightly right, "
    "therefore the ball ends up in the left bin.”\n3.\n\nEpistemic Surrender (ES). The model explicitly acknowledges "
    "that it cannot determine the answer ( $\\neg K(q)$ ) but then asserts $q$ anyway, a form of Moore’s Paradox (“I "
    "don’t know, but the answer is X”). Example: “It’s impossible to tell from this angle, but based on the trajectory "
    "the die shows green.”\n\nAdditionally, for models with reasoning traces (thinking-enabled variants), we annotate "
    "a fourth axis:\n\n4.\n\nDoubt in Reasoning (Doubt). The model’s internal reasoning trace expresses uncertainty, "
    "hedging, or doubt about the visual evidence, but the final output does not reflect this doubt. For models with "
    "explicit reasoning traces (Gemini Flash, Gemini 3.1 Pro, Qwen3-VL Think) this axis is assessed on the trace; for "
    "the remaining variants it is assessed on the visible output.")


def _typeset(text: str) -> str:
    text = re.sub(r"(?m)^(\d)\.\n\n", r"\1. ", text)
    return text.replace("“", '"').replace("”", '"').replace("‘", "'").replace("’", "'")


def test_the_taxonomy_is_the_seeds_text() -> None:
    assert cf.TAXONOMY == _typeset(SEED_O1)
    if SEED.is_file():
        assert f"O.1 Taxonomy Definition\n\n{SEED_O1}\n\nO.2 Classification Method" in SEED.read_text(encoding="utf-8")
    prompt = cf.classifier_prompt("Q?", "R.")
    assert prompt.startswith(cf.TAXONOMY + "\n\n") and "<<<\nQ?\n>>>" in prompt and "<<<\nR.\n>>>" in prompt
    assert prompt.endswith('"doubt_in_reasoning": true/false, "reasoning": "one sentence"}')


def _reply(hp: bool, ii: bool, es: bool, doubt: bool) -> str:
    return json.dumps({"hallucinated_premise": hp, "invalid_inference": ii, "epistemic_surrender": es,
                       "doubt_in_reasoning": doubt, "reasoning": "one sentence"})


@pytest.mark.parametrize("reply, axes", [
    (_reply(True, False, False, True), (True, False, False, True)),
    (" " + _reply(False, False, True, False) + "\n", (False, False, True, False)),
    ("```json\n" + _reply(True, True, True, True) + "\n```", None),
    (_reply(True, True, True, True).replace("true", '"true"', 1), None),
    (_reply(True, True, True, True).replace(', "reasoning": "one sentence"', ""), None),
    (_reply(True, True, True, True)[:-1] + ', "extra": 1}', None),
    ('{"hallucinated_premise": 1, "invalid_inference": true, "epistemic_surrender": true, "doubt_in_reasoning": true, '
     '"reasoning": "r"}', None),
    ("HP, II", None),
])
def test_a_classification_is_the_schema_or_unclassified(reply: str, axes: tuple | None) -> None:
    got = cf.read_classification(reply)
    assert (None if got is None else tuple(got[a] for a in cf.AXES)) == axes


@pytest.fixture(scope="module")
def random_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The random policy's free-form replies: some voids answered yes or no (the failures)."""
    return free_run(tmp_path_factory.mktemp("confab"), "random", families_per_system=2)


def _failures(run: Path) -> dict[str, tuple[str, str]]:
    """item_id -> (system, the classifier prompt) of every void failure of the run."""
    items = {it.item_id: it for it in read_items(json.loads((run / "run.json").read_text())["bench"])}
    return {k: (items[k].system, cf.classifier_prompt(build_prompt(items[k], "free"), r.reply))
            for k, r in load_records(run / "records.jsonl").items()
            if items[k].resolved is False and r.answer in ("yes", "no")}


def _planted(run: Path) -> tuple[dict[str, tuple[bool, bool, bool, bool] | None], dict[str, str]]:
    """Planted labels per failure (None: an unclassifiable reply) and prompt -> reply. HP on all; II on
    bouncing and spring systems; ES on none; Doubt on sliding; every fifth failure answered in prose."""
    labels, plan, by_prompt = {}, {}, {}
    for key, (system, prompt) in sorted(_failures(run).items()):
        if prompt not in by_prompt:  # two hidden worlds' items ask in the same words: the same text, one label
            n = len(by_prompt)
            by_prompt[prompt] = None if n % 5 == 4 else (True, system != "sliding", False, system == "sliding")
            plan[prompt] = "It shows a hallucinated premise." if by_prompt[prompt] is None else _reply(*by_prompt[prompt])
        labels[key] = by_prompt[prompt]
    return labels, plan


def _classify(run: Path, model: str, plan: dict[str, str], *extra: str) -> tuple[int, ScriptedJudge]:
    with ScriptedJudge(model, lambda text: plan.get(text, "no plan")) as judge:
        return main(["confabulation", str(run), "--judge", f"{model}@{judge.url}", "--n-boot", "200", *extra]), judge


def test_the_rates_are_the_planted_shares_and_the_unclassified_stay_in(random_run: Path) -> None:
    labels, plan = _planted(random_run)
    rc, judge = _classify(random_run, "classifier-a", plan)
    assert rc == 0
    out = random_run / "confabulation"
    result = json.loads((out / "confabulation.json").read_text())
    n = len(labels)
    assert result["n_failures"] == result["n_sampled"] == n > 10  # fewer failures than --sample: all of them
    unread = sum(v is None for v in labels.values())
    assert result["n_unclassified"] == unread > 0 and result["unclassified"]["value"] == pytest.approx(unread / n)
    axes = {a["axis"]: a for a in result["axes"]}
    for k, axis in enumerate(cf.AXES):
        positive = sum(bool(v and v[k]) for v in labels.values())
        assert axes[axis]["positive"] == positive
        assert axes[axis]["rate"]["value"] == pytest.approx(positive / n)  # unclassified in the denominator
        assert axes[axis]["rate"]["n"] == n
        assert axes[axis]["rate_if_unclassified_positive"]["value"] == pytest.approx((positive + unread) / n)
    both = sum(bool(v and v[0] and v[1]) for v in labels.values())
    assert axes["hp_and_ii"]["rate"]["value"] == pytest.approx(both / n)
    hp = axes["hallucinated_premise"]["rate"]
    assert hp["ci"][0] < hp["value"] < hp["ci"][1]  # a proportion's interval, never a point
    rows = [json.loads(x) for x in (out / "classifications.jsonl").read_text().splitlines()]
    assert len(rows) == n and sum("unclassified" in r for r in rows) == unread
    assert all((r["axes"] is None) == (labels[r["item_id"]] is None) for r in rows)
    assert all(b["temperature"] == 0.8 and b["max_tokens"] == 512
               and b["response_format"]["json_schema"]["schema"] == cf.SCHEMA for b in judge.bodies)
    assert "| HP |" in (out / "confabulation.md").read_text()


def test_the_sample_is_seeded_and_bounded(random_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(random_run, run, ignore=shutil.ignore_patterns("confabulation"))
    _, plan = _planted(run)

    def sampled(seed: int, model: str) -> list[str]:
        rc, judge = _classify(run, model, plan, "--sample", "5", "--seed", str(seed))
        assert rc == 0 and len(judge.bodies) == 5
        return [json.loads(x)["item_id"] for x in (run / "confabulation" / "classifications.jsonl").read_text()
                .splitlines()]

    first = sampled(1, "classifier-b")
    assert len(first) == 5 and sampled(1, "classifier-c") == first and sampled(2, "classifier-d") != first
    assert json.loads((run / "confabulation" / "confabulation.json").read_text())["sample_seed"] == 2


def test_no_failures_or_no_panel_is_one_line(random_run: Path, tmp_path: Path, capsys) -> None:
    assert main(["confabulation", str(random_run), "--judge", "x@http://127.0.0.1:1/v1", "--judged"]) == 2
    assert "judged/records.jsonl not found" in capsys.readouterr().err
    run = tmp_path / "exact"
    bench = json.loads((random_run / "run.json").read_text())["bench"]
    assert main(["run", "--model", "policy:exact-reader", "--bench", bench, "--out", str(run), "--protocol", "free",
                 "--requests", "answer_initial,answer_after_test", "--quiet"]) == 0
    assert main(["confabulation", str(run), "--judge", "x@http://127.0.0.1:1/v1"]) == 2
    assert "no void failures" in capsys.readouterr().err
