"""`evprobe score RUN --as seed000` (bench.seed_scoring): known answers from scripted policy runs, the
seed's percentile interval against an independent computation, replies the two readers read apart,
B.3's control requirements failing and passing, refusals in one line, and scores.* left as they were."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from evprobe.bench.items import Item
from evprobe.bench.manifest import read_items
from evprobe.bench.parse import parse_reply
from evprobe.experiments.cli import main


@pytest.fixture(scope="module")
def runs(small_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    root = tmp_path_factory.mktemp("seed_runs")

    def get(policy: str) -> Path:
        out = root / policy
        if not out.is_dir():
            assert main(["run", "--model", f"policy:{policy}", "--bench", str(small_bench), "--out", str(out),
                         "--quiet"]) == 0
        return out

    return get


def _seed(run_dir: Path) -> dict:
    assert main(["score", str(run_dir), "--as", "seed000", "--quiet"]) == 0
    return json.loads((run_dir / "scores_seed000.json").read_text())


def _measure(rep: dict, key: str) -> dict:
    return next(m for m in rep["measures"] if m["measure"] == key)


def _requirement(rep: dict, key: str) -> dict:
    return next(q for q in rep["requirements"] if q["measure"] == key)


def _edited(src: Path, dst: Path, bench: Path, reply_for: Callable[[Item, int], str | None]) -> Path:
    """A copy of run `src` whose replies `reply_for(item, edits of its request so far)` rewrites (None:
    kept), each edited record read again by evprobe's parser, as `evprobe run` would have read it."""
    items = {it.item_id: it for it in read_items(bench, validate_images=False)}
    dst.mkdir()
    shutil.copy(src / "run.json", dst / "run.json")
    lines: list[str] = []
    edits: Counter[str] = Counter()
    for line in (src / "records.jsonl").read_text().splitlines():
        row = json.loads(line)
        item = items[row["item_id"]]
        reply = reply_for(item, edits[item.request])
        if reply is not None:
            edits[item.request] += 1
            p = parse_reply(item, reply)
            row.update(reply=reply, valid=p.valid, route=p.route, choice=p.choice, action=p.action,
                       answer=p.answer, value=p.value)
        lines.append(json.dumps(row))
    (dst / "records.jsonl").write_text("\n".join(lines) + "\n")
    return dst


def _digest(run_dir: Path) -> dict[str, str]:
    """Hashes of the files `--as` must leave as they were: the run's own and evprobe's scores."""
    paths = [*sorted(run_dir.glob("scores.*")), run_dir / "records.jsonl", run_dir / "run.json"]
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def test_reference_known_answer_and_scores_untouched(runs) -> None:
    run_dir = runs("reference")
    assert main(["score", str(run_dir), "--quiet"]) == 0
    before = _digest(run_dir)
    rep = _seed(run_dir)
    assert len(before) == 4 and _digest(run_dir) == before  # scores.*, records, run.json as they were
    assert rep["read_differently"] == {} and rep["n_read"] == 312
    for key in ("min_cost_choice", "both_correct_image_pairs", "resolved_and_correct", "controls.both_given",
                "validity.validity_select"):
        m = _measure(rep, key)
        assert m["evprobe"]["value"] == m["seed"]["value"] == 1.0, key
        assert m["seed"]["ci"] == [1.0, 1.0] and m["seed"]["degenerate"] is True  # the seed's 100 [100, 100]
        assert m["evprobe"]["ci"][0] < 1.0 and "degenerate" not in m["evprobe"]  # evprobe's hull has width
    assert _measure(rep, "mean_cost")["seed"]["value"] == 0.5
    md = (run_dir / "scores_seed000.md").read_text()
    assert "(degenerate: every resample agrees, B.4)" in md and "## Control requirements (seed 000, B.3)" in md


def test_seed_interval_is_the_plain_percentile_interval(runs, small_bench: Path) -> None:
    """The seed column of a random run is np.percentile over the family resamples, computed here from
    the records and the multinomial draw core.bootstrap documents."""
    run_dir = runs("random")
    rep = _seed(run_dir)
    items = read_items(small_bench, validate_images=False)
    families = list(dict.fromkeys(it.family_id for it in items))
    ref = {it.item_id: (families.index(it.family_id), it.reference_action) for it in items
           if it.request == "select" and it.variant is None}
    num, den = np.zeros(len(families)), np.zeros(len(families))
    for line in (run_dir / "records.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["item_id"] in ref:
            f, action = ref[row["item_id"]]
            num[f] += row["action"] == action
            den[f] += 1
    counts = np.random.default_rng(20260905).multinomial(len(families), [1 / len(families)] * len(families), size=2000)
    lo, hi = np.percentile((counts @ num) / (counts @ den), [2.5, 97.5], method="linear")
    m = _measure(rep, "min_cost_choice")
    assert m["seed"]["value"] == pytest.approx(num.sum() / den.sum())
    assert m["seed"]["ci"] == pytest.approx([lo, hi])
    assert m["evprobe"]["value"] == m["seed"]["value"]
    assert m["evprobe"]["ci"][0] <= lo and m["evprobe"]["ci"][1] >= hi  # the hull holds the percentile interval


def test_answer_stop_after_a_standalone_letter_is_read_apart(runs, small_bench: Path, tmp_path: Path) -> None:
    """B.2's first misread on 3 stop decisions of the reference run: evprobe reads stop, the seed the mass test."""
    def reply(item: Item, done: int) -> str | None:
        if item.request == "select" and item.variant is None and item.reference_action == "stop" and done < 3:
            mass = next(k for k, v in (item.options or {}).items() if v == "test_mass")
            return f"Option {mass} is not needed: the answer is known.\nANSWER: STOP"
        return None

    rep = _seed(_edited(runs("reference"), tmp_path / "misread", small_bench, reply))
    assert rep["read_differently"] == {"select": 3}
    m = _measure(rep, "min_cost_choice")
    assert m["evprobe"]["value"] == 1.0 and m["seed"]["value"] == pytest.approx(21 / 24) and m["read_differently"] == 3
    assert _measure(rep, "stop_if_enough")["seed"]["value"] == pytest.approx(9 / 12)
    assert _measure(rep, "useful_test_supplied")["read_differently"] == 0


def test_control_requirements_fail_on_random_and_pass_on_reference(runs) -> None:
    bad, good = _seed(runs("random")), _seed(runs("reference"))
    for key, threshold in (("controls.both_given", 0.75), ("controls.read_ruler", 0.80)):
        q = _requirement(bad, key)
        assert q["threshold"] == threshold and q["seed"]["value"] < threshold and q["seed_verdict"].startswith("fail")
        assert _requirement(good, key)["seed_verdict"].startswith("pass")
    assert all(q["seed_verdict"].startswith("pass") for q in good["requirements"])
    assert len(good["requirements"]) == 2 + 6  # both given, ruler, validity on each of the 6 requests


def test_validity_requirement_fails_on_invalid_replies_and_follows_the_reader(runs, small_bench: Path,
                                                                             tmp_path: Path) -> None:
    """3 of 24 selections unreadable to both readers (87.5% < 95%), and hedged answers that only evprobe
    refuses: evprobe's validity fails where the seed's passes."""
    def reply(item: Item, done: int) -> str | None:
        if item.request == "select" and item.variant is None and done < 3:
            return "zzz"
        if item.request == "answer_initial" and item.variant is None and done < 6:
            letter = next(k for k, v in (item.options or {}).items() if v == item.reference_answer)
            return f"Probably {letter}"
        return None

    rep = _seed(_edited(runs("reference"), tmp_path / "invalid", small_bench, reply))
    q = _requirement(rep, "validity.validity_select")
    assert q["seed"]["value"] == q["evprobe"]["value"] == pytest.approx(21 / 24)
    assert q["seed_verdict"].startswith("fail") and q["evprobe_verdict"].startswith("fail")
    q = _requirement(rep, "validity.validity_answer_initial")
    assert q["evprobe"]["value"] == pytest.approx(18 / 24) and q["evprobe_verdict"].startswith("fail")
    assert q["seed"]["value"] == 1.0 and q["seed_verdict"] == "pass"
    assert rep["read_differently"] == {"answer_initial": 6}


@pytest.mark.parametrize("value,words", [
    ("seed002", "seed 002 has no reproduction mode"),
    ("seed003", "seed 003 has no reproduction mode"),
    ("seed001", "is not a seed with a reproduction mode; choose seed000"),
])
def test_bad_as_values_are_refused_in_one_line(runs, capsys, value: str, words: str) -> None:
    run_dir = runs("reference")
    assert main(["score", str(run_dir), "--as", value]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
    assert not (run_dir / f"scores_{value}.json").exists()


@pytest.mark.parametrize("field,value,words", [
    ("protocol", "free", "protocol 'free': --as seed000 reads seed 000's letter protocols"),
    ("regime", "json", "regime 'json': --as seed000 has no reading of a json final_answer"),
])
def test_runs_the_reader_cannot_read_are_refused(runs, tmp_path: Path, capsys, field: str, value: str,
                                                 words: str) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(runs("reference"), run_dir, ignore=shutil.ignore_patterns("scores_seed000.*"))
    meta = json.loads((run_dir / "run.json").read_text())
    meta[field] = value
    (run_dir / "run.json").write_text(json.dumps(meta))
    assert main(["score", str(run_dir), "--as", "seed000"]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "run.json" in err and len(err.splitlines()) == 1
    assert not (run_dir / "scores_seed000.json").exists()


def test_a_folder_of_runs_is_refused(small_bench: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "runs"
    assert main(["run", "--model", "policy:random", "--bench", str(small_bench), "--out", str(out), "--runs", "2",
                 "--quiet"]) == 0
    assert main(["score", str(out), "--as", "seed000"]) == 2
    assert "is a folder of runs; --as seed000 scores one run folder" in capsys.readouterr().err


def test_free_runs_name_their_rubric_in_scores_md(small_bench: Path, runs, tmp_path: Path) -> None:
    free = tmp_path / "free"
    assert main(["run", "--model", "policy:reference", "--protocol", "free", "--requests",
                 "answer_initial,answer_after_test,both_given", "--bench", str(small_bench), "--out", str(free),
                 "--quiet"]) == 0
    assert main(["score", str(free), "--quiet"]) == 0
    lines = (free / "scores.md").read_text().splitlines()
    assert lines[2] == "Replies read by rubric seed002 (bench.parse; pinned in run.json)."
    assert "rubric" not in (runs("reference") / "scores.md").read_text().lower()  # letter runs: as before
    meta = json.loads((free / "run.json").read_text())
    del meta["rubric"]  # a free run read before the pin existed was read strict
    (free / "run.json").write_text(json.dumps(meta))
    assert main(["score", str(free), "--quiet"]) == 0
    assert (free / "scores.md").read_text().splitlines()[2].startswith("Replies read by rubric strict")


def test_the_documented_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command of docs/reference/scoring.md's "Reproducing a seed's tables" block, as written."""
    import re
    import shlex

    text = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "scoring.md").read_text()
    section = text[text.index("## Reproducing a seed's tables"):]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)  # type: ignore[union-attr]
    commands = [line for line in block.splitlines() if line.strip()]
    assert commands[-1] == "evprobe score runs/random --as seed000"
    monkeypatch.chdir(tmp_path)
    for command in commands:
        assert command.startswith("evprobe ") and main(shlex.split(command)[1:]) == 0, command
    rep = json.loads((tmp_path / "runs" / "random" / "scores_seed000.json").read_text())
    assert rep["n_read"] > 0 and _measure(rep, "min_cost_choice")["seed"]["value"] is not None


def test_the_coverage_benchmark_runs_quick(capsys) -> None:
    """benchmarks/coverage_seed_percentile.py (the docs quote its table) measures the seed mode's own
    interval class, at 8 families, beside evprobe's."""
    import runpy

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "coverage_seed_percentile.py"
    assert runpy.run_path(str(script))["main"](["--quick"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("8 ")]
    assert len(rows) == 6
    seed_cov, own_cov = [float(r[4]) for r in rows], [float(r[-1]) for r in rows]
    assert min(seed_cov) < 0.9 and min(own_cov) >= 0.9  # the seed's rule under-covers near the boundary


def test_backend_errors_and_other_requests_keep_evprobes_reading(runs, small_bench: Path) -> None:
    """A record whose backend returned no reply has nothing to re-read: it stays as recorded, and is
    neither read nor counted as read differently."""
    from dataclasses import replace

    from evprobe.bench.records import load_records
    from evprobe.bench.seed_scoring import reread

    items = {it.item_id: it for it in read_items(small_bench, validate_images=False)}
    records = list(load_records(runs("reference") / "records.jsonl").values())
    first = next(r for r in records if r.request == "select")
    failed = replace(first, reply="", valid=False, route="invalid:backend", choice=None, action=None,
                     error="HTTP 500")
    out, differ = reread(items, [failed if r is first else r for r in records])
    assert out[records.index(first)] == failed and differ == {}
    out, differ = reread(items, [replace(failed, error=None) if r is first else r for r in records])
    assert out[records.index(first)].route == "invalid:no_option" and differ == {}  # re-read: invalid both ways
