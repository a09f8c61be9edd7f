"""The human audit scored (bench.audit_scoring; seed 002, O.3): a filled audit with a hand-counted
confusion matrix, every refusal of a damaged file (one line naming file, line, column and fix, and
nothing written), and `evprobe judge --score-audit` on an audit the judge command wrote."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from evprobe.bench import audit_scoring
from evprobe.bench.audit_scoring import read_audit, score_audit
from evprobe.experiments.cli import main

from tests.bench import test_judges
from tests.intervals import zero_width

free_run = test_judges.free_run  # the module-scoped free-protocol run of the judge tests
HEADER = ["stratum", "item_id", "reply_to", "rule", "j0", "j1", "j2", "panel", "human"]
# (family, panel, human): abstention tp, tp | tp, fn | fp, tn | tn, tn (an undecided panel vs unclear) |
# tn, tn; then two rows nobody labelled
ROWS = [("f0", "undetermined", "undetermined"), ("f0", "undetermined", "undetermined"),
        ("f1", "undetermined", "undetermined"), ("f1", "yes", "undetermined"),
        ("f2", "undetermined", "no"), ("f2", "yes", "yes"),
        ("f3", "no", "no"), ("f3", "", "unclear"),
        ("f4", "no", "yes"), ("f4", "yes", "yes"),
        ("f0", "no", ""), ("f5", "yes", "")]


def _folder(tmp_path: Path, rows=ROWS, header=HEADER) -> Path:
    """A judged folder: judgments.jsonl and a filled audit.csv (item i{k} in the row's family)."""
    judged = tmp_path / "judged"
    judged.mkdir(parents=True)
    (judged / "judgments.jsonl").write_text("".join(
        json.dumps({"item_id": f"i{k}", "family_id": f, "request": "answer_initial", "rule": None,
                    "judges": {}, "panel": p or None}) + "\n" for k, (f, p, _) in enumerate(rows)))
    with open(judged / "audit.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for k, (_, p, h) in enumerate(rows):
            w.writerow(["answer_initial|x|y", f"i{k}", "answer_initial", "", "yes", "yes", "yes", p, h])
    return judged / "audit.csv"


def test_a_filled_audit_gives_the_hand_counted_scores(tmp_path: Path) -> None:
    # tp 3, fp 1, fn 1, tn 5: accuracy 8/10, precision 3/4, recall 3/4, F1 0.75; Cohen's kappa:
    # p_o = 0.8, p_e = 0.4 * 0.4 + 0.6 * 0.6 = 0.52, kappa = (0.8 - 0.52) / 0.48 = 7/12
    s = score_audit(_folder(tmp_path), n_boot=500, seed=3)
    assert (s.n_rows, s.n_audited, s.n_families) == (12, 10, 5) and s.confusion == (3, 1, 1, 5)
    assert s.accuracy.value == pytest.approx(0.8) and s.accuracy.n == 10
    assert s.precision.value == pytest.approx(0.75) and s.precision.n == 4
    assert s.recall.value == pytest.approx(0.75) and s.recall.n == 4
    assert s.f1.value == pytest.approx(0.75) and s.cohen_kappa.value == pytest.approx(7 / 12)
    assert s.decision_agreement.value == pytest.approx(0.7)  # 7 of 10 whole decisions agree
    for est in (s.accuracy, s.precision, s.recall, s.f1, s.cohen_kappa):
        assert est.ci[0] < est.value < est.ci[1]
    assert s.accuracy.n_families == s.cohen_kappa.n_families == 5 and s.precision.n_families == 3  # f0 f1 f2
    out = json.loads((tmp_path / "judged" / "audit_score.json").read_text())
    assert out["n_not_audited"] == 2 and out["confusion"] == {"tp": 3, "fp": 1, "fn": 1, "tn": 5}
    assert zero_width(out) == [] and out["cohen_kappa"]["value"] == pytest.approx(7 / 12)
    md = (tmp_path / "judged" / "audit_score.md").read_text()
    assert "2 not audited" in md and "Cohen's kappa" in md


def test_the_bootstrap_formulas_match_scikit_learn_on_the_observed_sample() -> None:
    import numpy as np
    from sklearn.metrics import cohen_kappa_score, f1_score

    rng = np.random.default_rng(0)
    truth, guess = rng.random(200) < 0.3, rng.random(200) < 0.4
    shares = [np.mean(truth & guess), np.mean(~truth & guess), np.mean(truth & ~guess), np.mean(~truth & ~guess)]
    assert audit_scoring._kappa(*shares) == pytest.approx(cohen_kappa_score(truth, guess))
    assert audit_scoring._f1(*shares[:3]) == pytest.approx(f1_score(truth, guess))


def test_undefined_statistics_say_why(tmp_path: Path) -> None:
    rows = [(f"f{k}", "yes", "no") for k in range(6)] + [("f9", "no", "")]
    s = score_audit(_folder(tmp_path, rows), n_boot=200, seed=1)
    assert s.precision.value is None and "no audited reply an abstention" in s.precision.reason
    assert s.recall.value is None and s.f1.value is None and s.cohen_kappa.value is None
    assert "chance agreement 1" in s.cohen_kappa.reason and s.accuracy.value == 1.0 and s.accuracy.ci[0] < 1.0
    empty = score_audit(_folder(tmp_path / "e", [("f0", "yes", ""), ("f1", "no", "")]), n_boot=200, seed=1)
    assert empty.n_audited == 0 and "human column is empty" in empty.accuracy.reason


def _damaged(path: Path, old: str, new: str) -> None:
    path.write_bytes(path.read_bytes().replace(old.encode(), new.encode(), 1))


@pytest.mark.parametrize("old, new, expected", [
    ("i2,answer_initial,,yes,yes,yes,undetermined,undetermined", "i2,answer_initial,yes,yes,undetermined",
     "line 4: 6 fields, the header has 9"),
    ("stratum,item_id", "stratum,item", "line 1: the header is"),
    ("i3,answer_initial,,yes,yes,yes,yes,undetermined", "i3,answer_initial,,yes,yes,yes,yes,maybe",
     "line 5, column human: 'maybe' is not one of yes, no, undetermined, unclear"),
    ("i3,answer_initial,,yes,yes,yes,yes,", "i3,answer_initial,,yes,yes,yes,no,", "line 5, column panel: 'no'"),
    ("i4,", "i99,", "line 6, column item_id: 'i99' is no reply"),
    ("i4,", "i3,", "line 6, column item_id: 'i3' again (first on line 5)"),
    ("i5,answer_initial", 'i5,"answer_initial', "line "),
    ("i6,", "i6\xff,", "not UTF-8 text"),
])
def test_a_damaged_audit_is_one_line_naming_the_place_and_the_fix(tmp_path: Path, old: str, new: str,
                                                                   expected: str) -> None:
    audit = _folder(tmp_path)
    if "\xff" in new:
        audit.write_bytes(audit.read_bytes().replace(old.encode(), b"i6\xff,", 1))
    else:
        _damaged(audit, old, new)
    with pytest.raises(audit_scoring.InputError) as err:
        score_audit(audit, n_boot=50)
    message = str(err.value)
    assert expected in message and str(audit) in message and "fix:" in message and "\n" not in message
    assert not (audit.parent / "audit_score.json").exists()  # nothing written


def test_an_oversized_audit_or_judgments_file_is_refused_unread(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    audit = _folder(tmp_path)
    monkeypatch.setattr(audit_scoring, "MAX_AUDIT_BYTES", 100)
    with pytest.raises(audit_scoring.InputError, match=r"audit\.csv: [\d,]+ bytes, more than the 100 allowed; fix:"):
        score_audit(audit, n_boot=50)
    monkeypatch.setattr(audit_scoring, "MAX_AUDIT_BYTES", 2**20)
    monkeypatch.setattr(audit_scoring, "MAX_ROWS", 5)
    with pytest.raises(audit_scoring.InputError, match="line 7: more than 5 rows"):
        score_audit(audit, n_boot=50)
    monkeypatch.setattr(audit_scoring, "MAX_JUDGMENTS_BYTES", 10)
    with pytest.raises(audit_scoring.InputError, match=r"judgments\.jsonl: [\d,]+ bytes, more than the 10 allowed"):
        score_audit(audit, n_boot=50)
    assert not (audit.parent / "audit_score.json").exists()


def test_a_damaged_judgments_file_is_refused(tmp_path: Path) -> None:
    audit = _folder(tmp_path)
    judgments = audit.parent / "judgments.jsonl"
    judgments.write_text(judgments.read_text().replace('"family_id": "f1"', '"family_id": 1', 1))
    with pytest.raises(audit_scoring.InputError, match=r"judgments\.jsonl, line 3: not a judgments row"):
        read_audit(audit, audit_scoring._judgments(judgments))


def test_score_audit_on_the_judge_commands_own_audit(free_run: Path, tmp_path: Path, capsys) -> None:
    """`evprobe judge RUN ...`, a person fills some of audit.csv's human column (here: the rule's reading,
    one label changed), then `evprobe judge --score-audit RUN/judged/audit.csv`."""
    right = test_judges._planned(free_run, lambda it, rec: test_judges.LETTER[rec.answer])
    assert test_judges._judge(free_run, tmp_path, [right, right, {}], name="audit") == 0
    audit = free_run / "judged" / "audit.csv"
    with open(audit, newline="") as fh:
        rows = list(csv.reader(fh))
    for k, row in enumerate(rows[1:], 1):
        row[-1] = "" if k % 4 == 0 else row[3] or "unclear"  # every fourth row not audited
    first_void = next(k for k, row in enumerate(rows) if row[-1] == "undetermined")
    rows[first_void][-1] = "no"  # the human disagrees once: a missed abstention
    with open(audit, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    capsys.readouterr()
    assert main(["judge", "--score-audit", str(audit), "--n-boot", "200"]) == 0
    printed = capsys.readouterr().out
    out = json.loads((audit.parent / "audit_score.json").read_text())
    audited = sum(1 for row in rows[1:] if row[-1])
    assert out["n_audited"] == audited and out["n_not_audited"] == len(rows) - 1 - audited
    assert out["confusion"]["fp"] == 1 and out["confusion"]["fn"] == 0 and out["recall"]["value"] == 1.0
    assert printed.startswith(f"audit: {audited} of {len(rows) - 1} rows labelled") and "Cohen's kappa" in printed
    assert main(["judge", str(free_run), "--score-audit", str(audit)]) == 2
    assert "give no RUN and no --judge" in capsys.readouterr().err
    assert main(["judge"]) == 2 and "--score-audit FILE alone" in capsys.readouterr().err


def test_a_deeply_nested_judgments_line_is_one_line_not_a_recursion_error(tmp_path: Path) -> None:
    """json.loads recursed into a RecursionError traceback on 200,000 nested brackets; the line is now
    read by core.json_files.parse_json (nesting checked before parsing) and refused like any bad row."""
    audit = _folder(tmp_path)
    judgments = audit.parent / "judgments.jsonl"
    judgments.write_text(judgments.read_text() + "[" * 200_000 + "]" * 200_000 + "\n")
    with pytest.raises(audit_scoring.InputError, match=r"judgments\.jsonl, line \d+: not a judgments row"):
        audit_scoring._judgments(judgments)
