"""Binary labels from capture folders: item fields, derived labels and a run's behaviour.

Labels are binary: a `LabelSet` holds the rows whose label is known, y in {0, 1} with 1 meaning
`value == positive`, and counts of the rows dropped and why (null field, no record, invalid
reply, not that request type). Any index field is a label; derived labels:

- `missing_property`: the property the initial test did not measure, i.e. the test that
  resolves an unresolved decision: `mass` when the initial test measured the other property,
  else `other`.
- `initial`: `mass` or `other` (initial_property collapsed over systems).
- from a run's records (joined by item_id): `stopped` (select records: action == "stop"),
  `committed` (select: stopped; answer requests: a definite yes/no instead of undetermined),
  `chose_reference` (select: action == reference_action; answer requests: answer ==
  reference_answer), `valid` (the reply parsed). Invalid replies carry no behaviour, so every
  behavioural label except `valid` is null on them (dropped and counted).

Records (a run's records.jsonl, joined by item_id) are read here too (`load_records`), and the
confabulation restriction (TRAPS's Cf -> Cf: `restrict_wrong`; `confabulated_twin` pairs each
confabulated void with exactly its twin, `restrict_twins`). Captures themselves: probes.captures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from evprobe.core.errors import shown
from evprobe.core.json_types import JsonObject
from evprobe.probes.captures import Capture, CaptureError, CaptureSet, read_json_rows
from evprobe.probes.user_words import unknown_own_label

RECORDS_FILE = "records.jsonl"

BEHAVIOUR_LABELS = ("stopped", "committed", "chose_reference", "valid")
DERIVED_LABELS = ("missing_property", "initial", *BEHAVIOUR_LABELS)
ANSWER_REQUESTS = ("answer_initial", "answer_after_test", "both_given")
# The class called 1 when a label has two values and none is named: the reading "the thing
# happened" (resolved, stopped, ...); for the others, the first-listed value.
DEFAULT_POSITIVE: dict[str, bool | int | str] = {
    "resolved": True,
    "stopped": True,
    "committed": True,
    "chose_reference": True,
    "valid": True,
    "history": 1,
    "threshold_level": "high",
    "missing_property": "mass",
    "initial": "mass",
    "initial_property": "mass",
}
WRONG_RULES = ("confabulated", "overcautious", "not_reference")
# TRAPS's Cf -> Cf as the seed pairs it: each confabulated void with exactly its twin (`restrict_twins`).
TWIN_RULE = "confabulated_twin"
RESTRICTIONS = (*WRONG_RULES, TWIN_RULE)
# LabelSet.dropped's reasons under the twin pairing (tests and reports read them).
TWIN_NOT_CAPTURED = "confabulated void whose twin is not among the labelled rows"
NOT_A_VOID = "confabulated but not a void (no twin_id)"
NOT_PAIRED = "not a confabulated void nor its twin"
NONFINITE_DROPPED = "non-finite activations (family left out at read)"  # LabelSet.dropped's reason
FIX_RECORDS = "move the file aside and run again (`evprobe run`), or fix the line"


# -- records ----------------------------------------------------------------------------------


def load_records(path: str | Path) -> dict[str, JsonObject]:
    """A run's records by item_id, read-only. `path` is a RUN folder or a records.jsonl file;
    a torn last line is ignored, a duplicate id is an error naming the line.

    Checks the fields probes use (`record_problem`); `evprobe score` reads the whole record with
    bench.records' schema (probes may not import bench)."""
    path = Path(path)
    if path.is_dir():
        path = path / RECORDS_FILE
    if not path.is_file():
        raise CaptureError(f"{path} not found; give a RUN folder written by `evprobe run`")
    lines, _ = read_json_rows(path, FIX_RECORDS)
    out: dict[str, JsonObject] = {}
    lines_of: dict[str, int] = {}
    for number, row in lines:
        bad = record_problem(row)
        if bad:
            raise CaptureError(f"{path}:{number}: {bad}; {FIX_RECORDS}")
        item_id = row["item_id"]
        if item_id in out:
            raise CaptureError(f"{path}:{number}: duplicate record for {item_id} (first on line "
                               f"{lines_of[item_id]}); {FIX_RECORDS}")
        out[item_id] = row
        lines_of[item_id] = number
    return out


# The record fields probes read, and what each must be (bench.records.Record has them all).
RECORD_FIELDS: dict[str, tuple[Callable[[Any], bool], str, bool]] = {  # name -> (test, must be, required)
    "item_id": (lambda v: type(v) is str and v != "", "must be a non-empty string", True),
    "valid": (lambda v: type(v) is bool, "must be true or false", True),
    "action": (lambda v: v is None or type(v) is str, "must be a string or null", False),
    "answer": (lambda v: v is None or type(v) is str, "must be a string or null", False),
}


def record_problem(row: Mapping[str, Any]) -> str | None:
    """What is wrong with the fields probes use of one parsed records.jsonl line, or None."""
    for name, (test, must, required) in RECORD_FIELDS.items():
        if name not in row:
            if required:
                return f"missing field {name!r}"
            continue
        if not test(row[name]):
            return f"field {name!r} {must}, got {shown(row[name])}"
    return None


# -- labels -----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class LabelSet:
    """A binary label on the rows of a CaptureSet where it is known."""

    name: str
    positive: Any  # y == 1 means value == positive
    values: tuple[Any, ...]  # the distinct values seen (before binarising)
    rows: np.ndarray  # (n,) int64, pooled CaptureSet rows, ascending
    y: np.ndarray  # (n,) int8 in {0, 1}
    families: np.ndarray  # (n,) str family ids of those rows
    dropped: dict[str, int]  # reason -> rows left out
    restriction: str | None = None  # e.g. "confabulated + image/threshold partners"

    @property
    def n(self) -> int:
        return len(self.rows)

    @property
    def n_dropped(self) -> int:
        return sum(self.dropped.values())

    @property
    def title(self) -> str:
        return f"{self.name}={self.positive}"

    @property
    def varies_within_families(self) -> bool:
        """True when some family has rows of both classes (then a within-family shuffle moves
        labels and a family-constant representation cannot separate them)."""
        _, inv = np.unique(self.families, return_inverse=True)
        lo = np.full(inv.max() + 1, 2)
        hi = np.full(inv.max() + 1, -1)
        np.minimum.at(lo, inv, self.y)
        np.maximum.at(hi, inv, self.y)
        return bool((lo != hi).any())

    def subset(self, keep: np.ndarray, restriction: str | None = None, reason: str = "restricted") -> LabelSet:
        keep = np.asarray(keep, dtype=bool)
        dropped = dict(self.dropped)
        if (~keep).sum():
            dropped[reason] = dropped.get(reason, 0) + int((~keep).sum())
        return LabelSet(self.name, self.positive, self.values, self.rows[keep], self.y[keep], self.families[keep],
                        dropped, restriction if restriction is not None else self.restriction)


def _missing_property(row: Mapping[str, Any]) -> str | None:
    initial = row.get("initial_property")
    if initial is None:
        return None
    return "other" if initial == "mass" else "mass"


def _initial(row: Mapping[str, Any]) -> str | None:
    initial = row.get("initial_property")
    return None if initial is None else ("mass" if initial == "mass" else "other")


def _behaviour(name: str, row: Mapping[str, Any], record: Mapping[str, Any] | None) -> tuple[Any, str | None]:
    """(value, None) or (None, why it is unknown)."""
    if record is None:
        return None, "no record"
    if name == "valid":
        return bool(record["valid"]), None
    if not record["valid"]:
        return None, "invalid reply"
    request = row.get("request")
    if request == "select":
        action = record.get("action")
        if name in ("stopped", "committed"):
            return action == "stop", None
        return action == row.get("reference_action"), None  # chose_reference
    if request in ANSWER_REQUESTS and name in ("committed", "chose_reference"):
        answer = record.get("answer")
        if name == "committed":
            return answer in ("yes", "no"), None
        return answer == row.get("reference_answer"), None
    return None, f"not defined for {request}"


def _matches(value: Any, positive: Any) -> bool:
    if value == positive and type(value) is type(positive):
        return True
    return str(value).lower() == str(positive).lower()


def select_requests(row: Mapping[str, Any], requests: Sequence[str] | None) -> bool:
    """True when the row's request type is wanted: tokens name request types (`select` means
    the base selections) or variant names, as `evprobe run --requests`."""
    if not requests:
        return True
    key = row.get("variant") or row.get("request")
    return key in requests


def labels(
    captures: Capture | CaptureSet,
    name: str,
    records: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Mapping[str, Any]]] | None = None,
    positive: Any = None,
    requests: Sequence[str] | None = None,
) -> LabelSet:
    """The label `name` on every row where it is known (see the module docstring).

    `name` may carry its positive class, `system=sliding`. `records` is one item_id -> record
    mapping for all captures, or one per capture (regimes come from different runs).
    A label with more than two values needs `positive` (one-vs-rest); with one value it is an
    error, since there is nothing to probe.
    """
    cs = captures if isinstance(captures, CaptureSet) else CaptureSet.of(captures)
    if "=" in name and positive is None:
        name, positive = name.split("=", 1)
    if name in BEHAVIOUR_LABELS and records is None:
        raise CaptureError(f"label {name!r} comes from a run's replies; pass the run with --records RUN")
    per_source: list[Mapping[str, Mapping[str, Any]]] | None = None
    if records is not None:
        if isinstance(records, Mapping):
            per_source = [records] * len(cs.captures)
        else:
            per_source = list(records)
            if len(per_source) == 1:
                per_source = per_source * len(cs.captures)
            if len(per_source) != len(cs.captures):
                raise CaptureError(f"{len(per_source)} record sets for {len(cs.captures)} captures; give one "
                                   "--records RUN for all captures or one per capture, in the same order")
    known = set().union(*(r.keys() for r in cs.index))
    if name not in DERIVED_LABELS and name not in known:
        raise CaptureError(unknown_own_label(cs, name) or f"unknown label {name!r}; use an index field "
                           f"({', '.join(sorted(known))}) or one of {', '.join(DERIVED_LABELS)}")
    dropped: Counter[str] = Counter()
    for cap in cs.captures:  # rows left out at read (nonfinite="drop") are counted, never silently gone
        if cap.nonfinite is not None:
            dropped[NONFINITE_DROPPED] += cap.nonfinite.n_dropped
    kept_rows, kept_values, kept_families = [], [], []
    for i, row in enumerate(cs.index):
        if not select_requests(row, requests):
            dropped["other request type"] += 1
            continue
        why = None
        if name == "missing_property":
            value = _missing_property(row)
        elif name == "initial":
            value = _initial(row)
        elif name in BEHAVIOUR_LABELS:
            assert per_source is not None
            value, why = _behaviour(name, row, per_source[row["source"]].get(row["item_id"]))
        else:
            value = row.get(name)
        if value is None:
            dropped[why or f"{name} is null"] += 1
            continue
        if isinstance(value, (list, dict)):
            raise CaptureError(f"label {name!r} has non-scalar values ({value!r}); pick a scalar field")
        kept_rows.append(i)
        kept_values.append(value)
        kept_families.append(row["family_id"])
    distinct = sorted(set(kept_values), key=lambda v: (str(type(v)), str(v)))
    if not kept_rows:
        raise CaptureError(f"label {name!r} is null on every selected row ({dict(dropped)}); pick another "
                           "label or other --requests")
    if positive is None:
        if len(distinct) == 1:
            raise CaptureError(f"label {name!r} has one value ({distinct[0]!r}) on all {len(kept_rows)} rows; "
                               "nothing to probe")
        if len(distinct) > 2:
            raise CaptureError(f"label {name!r} has {len(distinct)} values ({', '.join(map(str, distinct))}); "
                               f"name the positive class (one-vs-rest), e.g. --label {name}={distinct[0]}")
        default = DEFAULT_POSITIVE.get(name)
        positive = next((v for v in distinct if default is not None and _matches(v, default)), distinct[-1])
    else:
        hit = [v for v in distinct if _matches(v, positive)]
        if not hit:
            raise CaptureError(f"label {name!r} never equals {positive!r} (values: {', '.join(map(str, distinct))})")
        positive = hit[0]
    y = np.fromiter((_matches(v, positive) for v in kept_values), dtype=np.int8, count=len(kept_values))
    if y.min() == y.max():
        raise CaptureError(f"label {name}={positive} has one class on all {len(y)} rows; nothing to probe")
    return LabelSet(name, positive, tuple(distinct), np.asarray(kept_rows, dtype=np.int64), y,
                    np.asarray(kept_families, dtype=object), dict(dropped))


# -- the confabulation restriction (TRAPS "Cf -> Cf") -------------------------------------------


def _is_wrong(rule: str, row: Mapping[str, Any], record: Mapping[str, Any] | None) -> bool:
    if record is None or not record.get("valid"):
        return False  # no behaviour to be wrong about
    committed, _ = _behaviour("committed", row, record)
    if committed is None:
        return False
    if rule == "confabulated":  # answered (stopped) although the evidence was not enough
        return row.get("resolved") is False and committed
    if rule == "overcautious":  # measured / abstained although the evidence was enough
        return row.get("resolved") is True and not committed
    chose, _ = _behaviour("chose_reference", row, record)
    return chose is False  # not_reference


def restrict_wrong(
    captures: CaptureSet,
    labelset: LabelSet,
    records: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Mapping[str, Any]]],
    rule: str = "confabulated",
    partners: Sequence[str] = ("image_pair_id", "threshold_pair_id"),
) -> LabelSet:
    """Keep the rows whose behaviour was wrong under `rule` and their matched partners.

    `confabulated` (default, TRAPS's Cf): unresolved and the model committed (stopped, or a
    definite answer). `overcautious`: resolved and it did not commit. `not_reference`: any
    action/answer other than the reference. Partners are the rows that share a pair id with a
    wrong row (`image_pair_id`: same question, other history; `threshold_pair_id`: same image,
    other threshold), whatever their own behaviour, as TRAPS pairs each confabulated void sample
    with its matched control. Partners are looked up within the same capture. On the main set a
    confabulated row has up to two partners (1:2); `rule="confabulated_twin"` is the seed's 1:1
    pairing of voids with their twins instead (`restrict_twins`).
    """
    if rule == TWIN_RULE:
        return restrict_twins(captures, labelset, records)
    if rule not in WRONG_RULES:
        raise CaptureError(f"unknown restriction {rule!r}; use one of {', '.join(RESTRICTIONS)}")
    per_source = _per_source(captures, records)
    wrong_keys: set[tuple[int, str, str]] = set()
    wrong_rows: set[int] = set()
    for k, r in enumerate(labelset.rows):
        row = captures.index[r]
        if _is_wrong(rule, row, per_source[row["source"]].get(row["item_id"])):
            wrong_rows.add(int(r))
            for key in partners:
                if row.get(key) is not None:
                    wrong_keys.add((row["source"], key, row[key]))
    keep = np.zeros(labelset.n, dtype=bool)
    for k, r in enumerate(labelset.rows):
        row = captures.index[r]
        keep[k] = int(r) in wrong_rows or any(
            (row["source"], key, row.get(key)) in wrong_keys for key in partners if row.get(key) is not None
        )
    if not wrong_rows:
        raise CaptureError(f"no {rule} rows among the {labelset.n} labelled rows; the restriction is empty")
    names = "/".join(p.removesuffix("_pair_id") for p in partners)
    out = labelset.subset(keep, restriction=f"{rule} ({len(wrong_rows)} rows) + {names} partners",
                          reason=f"not {rule} nor a partner")
    if out.y.min() == out.y.max():
        raise CaptureError(f"the {rule} restriction leaves one class only ({out.n} rows); nothing to probe")
    return out


def _per_source(captures: CaptureSet, records: Mapping[str, Mapping[str, Any]]
                | Sequence[Mapping[str, Mapping[str, Any]]]) -> list[Mapping[str, Mapping[str, Any]]]:
    """One item_id -> record mapping per capture (one given for all is shared)."""
    per_source = [records] * len(captures.captures) if isinstance(records, Mapping) else list(records)
    return per_source * len(captures.captures) if len(per_source) == 1 else per_source


def restrict_twins(
    captures: CaptureSet,
    labelset: LabelSet,
    records: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Mapping[str, Any]]],
) -> LabelSet:
    """TRAPS's Cf -> Cf as seed 002 builds it: every void row the model confabulated on (unresolved
    and committed, as `confabulated`), with exactly its twin, the matched control it was made from
    (index field `twin_id`, bench.voids), whatever the twin's own behaviour.

    A void is paired 1:1 with its twin. A twin that anchors confabulated voids of both void types
    (an occluded and an unstated answer share their twin) is one row, since a row is never counted
    twice: per void type the pairing stays 1:1, pooled over types a twin may stand for two voids
    (the restriction's text says how many voids and twins it kept). The twin is looked up among the
    labelled rows of the same capture; a confabulated void whose twin is not there (not captured,
    or left out by --requests or its label) is dropped and counted (`TWIN_NOT_CAPTURED`), and so is
    a confabulated row that is no void (`NOT_A_VOID`: a main-set item has partners, not a twin).
    """
    per_source = _per_source(captures, records)
    at = {(captures.index[r]["source"], captures.index[r]["item_id"]): k for k, r in enumerate(labelset.rows)}
    keep = np.zeros(labelset.n, dtype=bool)
    n_voids, twins, missing, not_void = 0, set(), 0, 0
    for k, r in enumerate(labelset.rows):
        row = captures.index[r]
        if not _is_wrong("confabulated", row, per_source[row["source"]].get(row["item_id"])):
            continue
        if row.get("twin_id") is None:
            not_void += 1
            continue
        twin = at.get((row["source"], row["twin_id"]))
        if twin is None:
            missing += 1
            continue
        keep[k] = keep[twin] = True
        n_voids += 1
        twins.add(twin)
    if not n_voids:
        why = (f"{missing} confabulated void(s) but none of their twins among the labelled rows; capture the twins "
               "too (--requests answer_initial,select,voids)" if missing else
               "no confabulated void (index field twin_id) among the labelled rows; capture a benchmark generated "
               "with --voids occluded,unstated (--requests answer_initial,select,voids) and give its run's --records")
        raise CaptureError(f"the {TWIN_RULE} restriction is empty: {why}")
    dropped = dict(labelset.dropped)
    others = int((~keep).sum()) - missing - not_void
    for reason, count in ((NOT_PAIRED, others), (TWIN_NOT_CAPTURED, missing), (NOT_A_VOID, not_void)):
        if count:  # one count per reason, so the report says why each row left
            dropped[reason] = dropped.get(reason, 0) + count
    text = (f"{TWIN_RULE} ({n_voids} confabulated voids + {len(twins)} twins, 1:1 per void type; "
            f"{missing} without a captured twin dropped)")
    out = replace(labelset.subset(keep, restriction=text), dropped=dropped)
    if out.y.min() == out.y.max():
        raise CaptureError(f"the {TWIN_RULE} restriction leaves one class only ({out.n} rows); label the rows by "
                           "something that differs between a void and its twin, e.g. --label resolved")
    return out


def field_values(captures: CaptureSet, labelset: LabelSet, key: str | Callable[[Mapping[str, Any]], Any]) -> list[Any]:
    """A field (or a function of the index row) on each labelled row, in label order."""
    get = key if callable(key) else (lambda row: row.get(key))
    return [get(captures.index[r]) for r in labelset.rows]


def iter_rows(captures: CaptureSet, rows: Iterable[int]) -> Iterable[Mapping[str, Any]]:
    return (captures.index[r] for r in rows)
