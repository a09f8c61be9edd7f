"""What must hold on the full main set, through `evprobe run` and `evprobe score` (issue 3)."""

from __future__ import annotations

import hashlib
import json
import shutil
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
    assert "policy:reference" in table and "policy:always-stop" in table and "(n=576 in 144 families)" in table


def test_score_refuses_the_wrong_benchmark(scored, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    scored("reference")
    other = tmp_path / "other"
    assert main(["generate", "--out", str(other), "--families-per-system", "1", "--subset-per-cell", "0", "--quiet"]) == 0
    assert main(["score", str(scored.root / "reference"), "--bench", str(other)]) == 2  # type: ignore[attr-defined]
    assert "items hash differs" in capsys.readouterr().err


# -- scores are tied to the records they scored ------------------------------------------------------


def _run(bench: Path, out: Path, *extra: str) -> None:
    assert main(["run", "--model", "policy:reference", "--bench", str(bench), "--out", str(out), "--quiet", *extra]) == 0


def _scores(run_dir: Path) -> dict:
    return json.loads((run_dir / "scores.json").read_text())


def test_score_records_the_hash_and_count_of_the_records_it_scored(small_bench: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _run(small_bench, run_dir, "--limit", "5")
    assert main(["score", str(run_dir), "--quiet", "--n-boot", "50"]) == 0
    scored = _scores(run_dir)["records"]
    data = (run_dir / "records.jsonl").read_bytes()
    assert scored == {"file": "records.jsonl", "sha256": hashlib.sha256(data).hexdigest(), "n_records": 5}


def test_compare_rescores_a_run_whose_records_changed_since_scoring(small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The broken input: a run scored at n=2, then continued to every item; compare showed the
    stale n=2 scores beside records.jsonl holding all of them."""
    run_dir = tmp_path / "run"
    _run(small_bench, run_dir, "--limit", "2")
    assert main(["score", str(run_dir), "--quiet", "--n-boot", "50", "--seed", "7"]) == 0
    stale = _scores(run_dir)
    _run(small_bench, run_dir)  # the run continues to every item
    n_items = json.loads((small_bench / "bench.json").read_text())["n_items"]
    assert len((run_dir / "records.jsonl").read_text().splitlines()) == n_items
    capsys.readouterr()
    assert main(["compare", str(run_dir)]) == 0
    table = capsys.readouterr().out
    fresh = _scores(run_dir)
    assert fresh["records"]["n_records"] == n_items != stale["records"]["n_records"] == 2
    assert fresh["records"]["sha256"] == hashlib.sha256((run_dir / "records.jsonl").read_bytes()).hexdigest()
    assert fresh["meta"]["n_boot"] == 50 and fresh["meta"]["seed"] == 7  # re-scored as it was scored
    assert fresh["min_cost_choice"]["n"] != stale["min_cost_choice"]["n"]
    assert f"(n={fresh['min_cost_choice']['n']} in " in table
    # the table is what scoring the run anew with the same settings gives
    assert main(["score", str(run_dir), "--quiet", "--n-boot", "50", "--seed", "7"]) == 0
    capsys.readouterr()
    assert main(["compare", str(run_dir)]) == 0
    assert capsys.readouterr().out == table


def test_compare_keeps_fresh_scores_and_rescores_unhashed_ones(small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Fresh scores are read, not recomputed (a torn last line, a run killed mid-append, is not a
    record); scores.json that does not name its records (older files) is recomputed."""
    run_dir = tmp_path / "run"
    _run(small_bench, run_dir, "--limit", "4")
    assert main(["score", str(run_dir), "--quiet", "--n-boot", "50"]) == 0
    with (run_dir / "records.jsonl").open("ab") as fh:
        fh.write(b'{"item_id": "torn')
    inode = (run_dir / "scores.json").stat().st_ino
    assert main(["compare", str(run_dir)]) == 0
    assert (run_dir / "scores.json").stat().st_ino == inode  # not rewritten
    old = _scores(run_dir)
    del old["records"]
    (run_dir / "scores.json").write_text(json.dumps(old))
    assert main(["compare", str(run_dir)]) == 0
    assert _scores(run_dir)["records"]["n_records"] == 4


def test_compare_refuses_stale_scores_it_cannot_recompute(small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Records changed and the run's benchmark is gone: one line naming the stale file and the fix."""
    bench = tmp_path / "bench"
    shutil.copytree(small_bench, bench)
    run_dir = tmp_path / "run"
    _run(bench, run_dir, "--limit", "2")
    assert main(["score", str(run_dir), "--quiet", "--n-boot", "50"]) == 0
    _run(bench, run_dir, "--limit", "6")
    shutil.rmtree(bench)
    before = (run_dir / "scores.json").read_bytes()
    capsys.readouterr()
    assert main(["compare", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(run_dir / "scores.json") in err and "scored 2 records" in err
    assert f"evprobe score {run_dir} --bench DIR" in err
    assert (run_dir / "scores.json").read_bytes() == before
