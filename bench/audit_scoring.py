"""The human audit of the judge panel, scored once filled (seed 002, appendix O.3): `evprobe judge --score-audit FILE`.

`evprobe judge` writes RUN/judged/audit.csv, a stratified sample of the panel's decisions with an
empty `human` column. A person writes in that column what the reply says: `yes`, `no`,
`undetermined` (it abstains: says the answer cannot be determined) or `unclear` (none of these
clearly), the panel's own categories; an empty cell is "not audited", left out of every denominator
but counted and printed.

Scored as O.3 scores its judge against the human labels: accuracy, precision, recall and F1 for
one binary class, and Cohen's kappa. The class is the **abstention** (the seed's abstention judge
decides "abstained" true or false, D.2): positive where the human wrote `undetermined` (truth) and
where the panel decided `undetermined` (prediction); a panel left undecided (split, or a majority
for D) is no abstention, as `bench.judges` scores it. Precision is the share of the panel's
abstentions that the human calls abstentions; recall the share of the human's abstentions that the
panel found. Beside them, the agreement of the whole decision (the panel's yes / no / undetermined,
undecided read as `unclear`, equal to the human's label) and the human x panel counts.

The point values are scikit-learn's (`accuracy_score`, `precision_recall_fscore_support`,
`cohen_kappa_score`). Their intervals are the family bootstrap's (`core.bootstrap`) over the audited
replies' families, read from judgments.jsonl beside the audit: accuracy, precision, recall and the
decision agreement are proportions (percentile interval hulled with the cluster interval, never a
point); F1 and kappa are recomputed on every resample from its confusion shares by the few lines
below (scikit-learn's functions take one sample at a time, too slow for thousands of resamples),
and a value every resample reproduces gets no interval and says why (`bench.pecs.combined_estimate`).
Their percentile interval alone is too narrow with few families (87.0-89.4% coverage at 8 families
in `benchmarks/coverage_audit_scoring.py`), so it is hulled with a delete-one-family jackknife t
interval on F - 1 degrees of freedom, clipped to [0, 1] (F1) and [-1, 1] (kappa):
`core.cluster_t.jackknife_interval`, whose docstring says why the jackknife and not the bootstrap
standard error. Measured: where an interval is given, 94.0-99.3% at 8 families and 92.6-96.9% at 24
and 72 (the one row under 93%, kappa at 72 families in the strong setting, is within 1 Monte Carlo
s.e. of the target, its misses mostly intervals above the truth); the mean width grows by 11-33% at
8 families and by 4-11% at 24 and 72.
An undefined statistic (no abstention predicted or labelled; one class only for kappa) says why.

The file is hostile input, all checked before any scoring: at most `MAX_AUDIT_BYTES` and
`MAX_ROWS` rows, UTF-8 (a spreadsheet's byte-order mark allowed), comma-separated, the header evprobe
wrote, every row as wide as the header, each item once and a reply of judgments.jsonl beside it
(itself at most `MAX_JUDGMENTS_BYTES`, each line checked), the panel column as judged, the human
column one of the categories or empty. Each fault is one InputError line naming the file, line,
column and fix. Writes `<stem>_score.json` and `<stem>_score.md` beside the audit (atomic), under
the folder's lock (`core.lock`).
"""

from __future__ import annotations

import csv
import io
import os
import stat
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from evprobe.bench.pecs import combined_estimate
from evprobe.core.bootstrap import (
    DEFAULT_N_BOOT,
    DEFAULT_SEED,
    Estimate,
    FamilyBootstrap,
)
from evprobe.core import cluster_t
from evprobe.core.json_files import parse_json
from evprobe.core.errors import InputError, shown
from evprobe.core.files import atomic_write_bytes, atomic_write_json
from evprobe.core.json_types import JsonObject
from evprobe.core.lock import folder_lock

LABELS = ("yes", "no", "undetermined", "unclear")  # bench.judges.CATEGORIES
PANEL = ("yes", "no", "undetermined", "")  # audit.csv's panel column: "" is a panel left undecided
ABSTAIN = "undetermined"
FIXED = ("stratum", "item_id", "reply_to", "rule")
MAX_AUDIT_BYTES = 8 * 2**20
MAX_ROWS = 100_000
MAX_JUDGMENTS_BYTES = 512 * 2**20
POSITIVE = ("abstained: the human's label, and the panel's decision, is undetermined (seed 002 O.3 scores its "
            "judge on one binary class; D.2's abstention judge decides abstained true or false); an undecided "
            "panel is no abstention")


@dataclass(frozen=True)
class AuditScore:
    """The panel against the human column (module docstring)."""

    audit: Path
    n_rows: int
    n_audited: int
    n_families: int
    confusion: tuple[int, int, int, int]  # tp, fp, fn, tn (abstention)
    accuracy: Estimate
    precision: Estimate
    recall: Estimate
    f1: Estimate
    cohen_kappa: Estimate
    decision_agreement: Estimate
    decisions: tuple[tuple[str, int], ...]  # ("human|panel", count)
    files: tuple[str, ...]

    def to_json(self, n_boot: int, seed: int) -> JsonObject:
        tp, fp, fn, tn = self.confusion
        return {"audit": str(self.audit), "positive_class": POSITIVE, "n_rows": self.n_rows,
                "n_audited": self.n_audited, "n_not_audited": self.n_rows - self.n_audited,
                "n_families": self.n_families, "confusion": {"tp": tp, "fp": fp, "fn": fn, "tn": tn},
                "accuracy": self.accuracy.to_json(), "precision": self.precision.to_json(),
                "recall": self.recall.to_json(), "f1": self.f1.to_json(), "cohen_kappa": self.cohen_kappa.to_json(),
                "decision_agreement": self.decision_agreement.to_json(), "decisions": dict(self.decisions),
                "n_boot": n_boot, "seed": seed}


def _regular(path: Path, limit: int, fix: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (a FIFO or device is never opened)."""
    try:
        info = os.stat(path)
    except OSError as err:
        raise InputError(f"{path}: cannot be read ({err.strerror}); fix: {fix}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path}: not a regular file; fix: {fix}")
    if info.st_size > limit:
        raise InputError(f"{path}: {info.st_size:,} bytes, more than the {limit:,} allowed; fix: {fix}")
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{path}: more than the {limit:,} bytes allowed; fix: {fix}")
    return data


def _judgments(path: Path) -> dict[str, tuple[str, str]]:
    """item_id -> (family_id, the panel column as audit.csv writes it) from judgments.jsonl."""
    fix = "score the audit.csv in the judged folder evprobe judge wrote, beside its judgments.jsonl"
    data = _regular(path, MAX_JUDGMENTS_BYTES, fix)
    out: dict[str, tuple[str, str]] = {}
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:  # core's one JSON parser: nesting bounded before parsing (json.loads recursed into a RecursionError)
            row = parse_json(line, path, fix, line=number)
        except InputError:
            row = None
        if not (isinstance(row, dict) and isinstance(row.get("item_id"), str)
                and isinstance(row.get("family_id"), str) and row.get("panel") in (*LABELS[:3], None)):
            raise InputError(f"{path}, line {number}: not a judgments row (item_id, family_id, panel); fix: {fix}")
        out[row["item_id"]] = row["family_id"], row["panel"] or ""
    return out


def read_audit(path: Path, judged: dict[str, tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(family_id, panel, human) of every row of a filled audit.csv, checked (module docstring)."""
    fix = "restore the file evprobe judge wrote and write only the human column"
    data = _regular(path, MAX_AUDIT_BYTES, fix)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text (byte {err.start:,}); fix: save it as UTF-8 CSV") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: list[tuple[str, str, str]] = []
    seen: dict[str, int] = {}
    header: list[str] | None = None
    try:
        for cells in reader:
            line = reader.line_num
            if not cells or cells == [""]:
                continue
            if header is None:
                if (len(cells) < len(FIXED) + 4 or tuple(cells[:len(FIXED)]) != FIXED
                        or cells[-2:] != ["panel", "human"]):
                    raise InputError(f"{path}, line {line}: the header is {shown(','.join(cells))}, not "
                                     f"{','.join(FIXED)},<judge>,<judge>...,panel,human; fix: {fix} (comma-separated)")
                header = cells
                continue
            if len(rows) >= MAX_ROWS:
                raise InputError(f"{path}, line {line}: more than {MAX_ROWS:,} rows; fix: score the audit sample "
                                 "evprobe judge wrote (--per-stratum replies a cell)")
            if len(cells) != len(header):
                raise InputError(f"{path}, line {line}: {len(cells)} fields, the header has {len(header)}; fix: "
                                 f"{fix} (quote a label holding a comma)")
            item, panel, human = cells[1], cells[-2], cells[-1].strip().lower()
            if item not in judged:
                raise InputError(f"{path}, line {line}, column item_id: {shown(item)} is no reply of judgments.jsonl "
                                 f"beside it; fix: {fix}")
            if item in seen:
                raise InputError(f"{path}, line {line}, column item_id: {shown(item)} again (first on line "
                                 f"{seen[item]}); fix: keep one row per reply")
            if panel != judged[item][1]:
                raise InputError(f"{path}, line {line}, column panel: {shown(panel)}, but the panel decided "
                                 f"{shown(judged[item][1])} (judgments.jsonl); fix: {fix}")
            if human and human not in LABELS:
                raise InputError(f"{path}, line {line}, column human: {shown(cells[-1])} is not one of "
                                 f"{', '.join(LABELS)}; fix: write one of them, or leave the cell empty (not audited)")
            seen[item] = line
            rows.append((judged[item][0], panel, human))
    except csv.Error as err:
        raise InputError(f"{path}, line {reader.line_num}: not CSV ({err}); fix: {fix}") from None
    if header is None:
        raise InputError(f"{path}: no header; fix: {fix}")
    return rows


def _f1(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
    # one resample at a time through scikit-learn is too slow for n_boot resamples: the formula on shares
    return 2 * tp / (2 * tp + fp + fn)


def _kappa(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray, tn: np.ndarray) -> np.ndarray:
    # Cohen's kappa from the confusion shares (summing to 1), vectorised over resamples (as _f1)
    observed = tp + tn
    chance = (tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)
    return (observed - chance) / (1.0 - chance)


def _with(est: Estimate, value: float) -> Estimate:
    """The bootstrap's estimate carrying scikit-learn's point value (the same number by construction)."""
    return est if est.value is None else replace(est, value=float(value))


def _widened(est: Estimate, fn: Callable[..., np.ndarray], num: np.ndarray, ones: np.ndarray,
             bounds: tuple[float, float]) -> Estimate:
    """F1's or kappa's percentile interval hulled with its jackknife t interval (`core.cluster_t`)."""
    if est.value is None:
        return est
    den = np.stack([ones] * num.shape[1], axis=1)
    return replace(est, ci=cluster_t.jackknife_interval(fn, num, den, est.value, est.ci, bounds))


def score(rows: list[tuple[str, str, str]], n_boot: int, seed: int) -> tuple[Estimate, ...]:
    """accuracy, precision, recall, F1, Cohen's kappa (abstention) and decision agreement of the
    audited rows (family, panel, human); module docstring."""
    from sklearn.metrics import (
        accuracy_score,
        cohen_kappa_score,
        precision_recall_fscore_support,
    )

    audited = [r for r in rows if r[2]]
    if not audited:
        return tuple(Estimate.empty("no row audited: the human column is empty") for _ in range(6))
    truth = np.array([h == ABSTAIN for _, _, h in audited])
    guess = np.array([p == ABSTAIN for _, p, _ in audited])
    families = [f for f, _, _ in audited]
    boot = FamilyBootstrap(sorted(set(families)), n_boot, seed)
    fidx = boot.family_index(families)
    cells = [truth & guess, ~truth & guess, truth & ~guess, ~truth & ~guess]  # tp fp fn tn
    num = np.stack([boot.per_family(fidx, c.astype(float)) for c in cells], axis=1)
    ones = boot.per_family(fidx, np.ones(len(audited)))
    tp, fp, fn, _ = num.T

    def rate(n: np.ndarray, d: np.ndarray, empty: str) -> Estimate:
        return Estimate.empty(empty) if d.sum() == 0 else boot.rate(n, d, binary=True).in_families(int((d > 0).sum()))

    agree = np.array([h == (p or "unclear") for _, p, h in audited], dtype=float)
    prec, rec, f1, _ = precision_recall_fscore_support(truth, guess, average="binary", pos_label=True,
                                                       zero_division=np.nan)
    accuracy = _with(rate(tp + num[:, 3], ones, "no row audited"), accuracy_score(truth, guess))
    precision = _with(rate(tp, tp + fp, "the panel called no audited reply an abstention"), prec)
    recall = _with(rate(tp, tp + fn, "the human labelled no audited reply an abstention"), rec)
    shares = boot.resample_many(num, np.stack([ones] * 4, axis=1))
    if tp.sum() + fp.sum() + fn.sum() == 0:
        f1_est = Estimate.empty("no abstention predicted or labelled: F1 undefined")
    else:
        f1_est = _with(_widened(combined_estimate(_f1, shares[:3], len(audited)), _f1, num[:, :3], ones, (0.0, 1.0)), f1)
    if truth.all() == truth.any() and guess.all() == guess.any() and truth[0] == guess[0]:
        kappa = Estimate.empty("panel and human each give one class, the same: kappa undefined (chance agreement 1)")
    else:
        kappa = _with(_widened(combined_estimate(_kappa, shares, len(audited)), _kappa, num, ones, (-1.0, 1.0)),
                      cohen_kappa_score(truth, guess))
    decision = rate(boot.per_family(fidx, agree), ones, "no row audited")
    return accuracy, precision, recall, f1_est, kappa, decision


def score_audit(audit: str | Path, *, n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED) -> AuditScore:
    """Score a filled audit.csv against judgments.jsonl beside it; writes `<stem>_score.json` / `.md`."""
    path = Path(audit)
    with folder_lock(path.parent, "evprobe judge --score-audit", fix="wait for the judge to finish, then score"):
        rows = read_audit(path, _judgments(path.parent / "judgments.jsonl"))  # every check before any work
        accuracy, precision, recall, f1, kappa, decision = score(rows, n_boot, seed)
        audited = [r for r in rows if r[2]]
        counts = Counter((h == ABSTAIN, p == ABSTAIN) for _, p, h in audited)
        confusion = (counts[True, True], counts[False, True], counts[True, False], counts[False, False])
        pairs = sorted(Counter(f"{h}|{p or 'undecided'}" for _, p, h in audited).items())
        names = (f"{path.stem}_score.json", f"{path.stem}_score.md")
        result = AuditScore(path, len(rows), len(audited), len({f for f, _, _ in audited}), confusion, accuracy,
                            precision, recall, f1, kappa, decision, tuple(pairs), names)
        payload = result.to_json(n_boot, seed)
        atomic_write_json(path.parent / names[0], payload)
        atomic_write_bytes(path.parent / names[1], markdown(payload).encode("utf-8"))
    return result


def summary_line(s: AuditScore) -> str:
    """The printed summary."""
    return (f"audit: {s.n_audited} of {s.n_rows} rows labelled ({s.n_rows - s.n_audited} not audited) in "
            f"{s.n_families} families; abstention: accuracy {s.accuracy.text(3)}, precision {s.precision.text(3)}, "
            f"recall {s.recall.text(3)}, F1 {s.f1.text(3)}, Cohen's kappa {s.cohen_kappa.text(3)}")


def markdown(result: JsonObject) -> str:
    from evprobe.bench.score_cells import plain, table_text

    c = result["confusion"]
    rows = [[label, plain(result[key])] for key, label in (
        ("accuracy", "accuracy"), ("precision", "precision (panel abstentions the human confirms)"),
        ("recall", "recall (human abstentions the panel found)"), ("f1", "F1"), ("cohen_kappa", "Cohen's kappa"),
        ("decision_agreement", "whole decision agrees (yes / no / undetermined / unclear)"))]
    return "\n".join([
        "# The judge panel against the human audit (seed 002, appendix O.3)", "",
        (f"- {result['audit']}: {result['n_audited']} of {result['n_rows']} rows labelled, {result['n_not_audited']} "
        f"not audited (left out of every denominator), in {result['n_families']} families"),
        f"- positive class: {result['positive_class']}",
        f"- abstention confusion: tp {c['tp']}, fp {c['fp']}, fn {c['fn']}, tn {c['tn']}",
        (f"- intervals: family bootstrap over the audited replies' families ({result['n_boot']} resamples, seed "
        f"{result['seed']})"), "", table_text(["measure", "value"], rows), "",
        "Human | panel (counts): " + ", ".join(f"{k} {v}" for k, v in result["decisions"].items())]) + "\n"


__all__ = ["ABSTAIN", "LABELS", "MAX_AUDIT_BYTES", "MAX_JUDGMENTS_BYTES", "MAX_ROWS", "AuditScore", "markdown",
           "read_audit", "score", "score_audit", "summary_line"]
