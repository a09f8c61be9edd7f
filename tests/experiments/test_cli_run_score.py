"""What must hold on the full main set, through `evprobe run` and `evprobe score` (issue 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evprobe.bench.records import Record
from evprobe.experiments.cli import main


@pytest.fixture(scope="module")
def scored(main_bench: Path, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("runs")
    cache: dict[str, dict] = {}

    def get(policy: str) -> dict:
        if policy not in cache:
            out = root / policy
            assert main(["run", "--model", f"policy:{policy}", "--bench", str(main_bench), "--out", str(out), "--quiet"]) == 0
            assert main(["score", str(out), "--quiet"]) == 0
            cache[policy] = json.loads((out / "scores.json").read_text())
        return cache[policy]

    get.root = root  # type: ignore[attr-defined]
    return get


def test_reference_is_perfect(scored) -> None:
    s = scored("reference")
    for key in ("min_cost_choice", "both_correct_image_pairs", "both_correct_threshold_pairs", "resolved_and_correct",
                "stop_if_enough", "test_if_needed", "enough_evidence", "validity_select", "pecs"):
        assert s[key]["value"] == 1.0, key
    assert s["min_cost_choice"]["n"] == 576 and s["both_correct_image_pairs"]["n"] == 288
    assert s["mean_cost"]["value"] == 0.5  # appendix F: the exact selector's mean cost


def test_always_stop_matches_figure_3s_note(scored) -> None:
    s = scored("always-stop")
    assert s["min_cost_choice"]["value"] == 0.5
    assert s["same_choice_image_pairs"]["value"] == 1.0
    assert s["both_correct_image_pairs"]["value"] == 0.0
    assert s["mean_cost"]["value"] == 0.0


def test_test_missing_costs_one(scored) -> None:
    assert scored("test-missing")["mean_cost"]["value"] == 1.0
    assert scored("test-missing")["resolved_and_correct"]["value"] == 1.0  # with an exact reader


def test_random_lands_within_its_interval_of_the_analytic_expectation(scored) -> None:
    s = scored("random")
    lo, hi = s["min_cost_choice"]["ci"]
    assert lo <= 1 / 5 <= hi  # one of five letters is the reference action
    lo, hi = s["mean_cost"]["ci"]
    assert lo <= (0 + 1 + 1 + 1 + 2) / 5 <= hi


def test_hidden_alternatives_average_exactly_one_half(scored) -> None:
    """Appendix D: identical inputs, opposite truths; a deterministic replier scores exactly 50%."""
    h = scored("random")["hidden_alternatives"]
    definite = next(v for k, v in h.items() if isinstance(v, dict) and k.startswith("definite"))
    assert definite["n"] > 0 and definite["value"] == 0.5


def test_invalid_replies_stay_in_the_denominators(scored, main_bench: Path) -> None:
    scored("reference")
    run_dir = scored.root / "reference"  # type: ignore[attr-defined]
    broken = scored.root / "broken"  # type: ignore[attr-defined]
    broken.mkdir()
    (broken / "run.json").write_text((run_dir / "run.json").read_text())
    lines, spoiled = [], 0
    for line in (run_dir / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["request"] == "select" and r["variant"] is None and spoiled < 36:
            r.update(reply="zzz", valid=False, route="invalid:no_option", choice=None, action=None)
            spoiled += 1
        lines.append(json.dumps(Record.from_json(r).to_json()))
    (broken / "records.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["score", str(broken), "--quiet"]) == 0
    s = json.loads((broken / "scores.json").read_text())
    assert s["min_cost_choice"]["n"] == 576 and s["min_cost_choice"]["value"] == pytest.approx(1 - 36 / 576)
    assert s["validity_select"]["value"] == pytest.approx(1 - 36 / 576)


def test_compare_puts_runs_side_by_side(scored, capsys: pytest.CaptureFixture) -> None:
    scored("reference")
    scored("always-stop")
    root = scored.root  # type: ignore[attr-defined]
    capsys.readouterr()
    assert main(["compare", str(root / "reference"), str(root / "always-stop")]) == 0
    table = capsys.readouterr().out
    assert "policy:reference" in table and "policy:always-stop" in table and "(n=576)" in table


def test_score_refuses_the_wrong_benchmark(scored, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    scored("reference")
    other = tmp_path / "other"
    assert main(["generate", "--out", str(other), "--families-per-system", "1", "--subset-per-cell", "0", "--quiet"]) == 0
    assert main(["score", str(scored.root / "reference"), "--bench", str(other)]) == 2  # type: ignore[attr-defined]
    assert "items hash differs" in capsys.readouterr().err
