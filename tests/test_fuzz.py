"""Fuzz every reader and the reply parser with hypothesis (issue 14, item 9).

Readers. A valid file is mutated once (a byte flipped, inserted or deleted, a digit changed to
another digit, the file cut at any position, a line repeated or removed, a JSON/YAML value
replaced by one of another type, a non-UTF-8 byte inserted, a key renamed) and read again. The
reader must either raise its one-line error (exactly its documented type: `InputError`, its
subclass `CaptureError` for capture folders, `ConfigError` for configs; all ValueErrors) whose
message names the file, or return a result that is not a silent change:

- benchmark manifests (items.jsonl, families.jsonl) are hashed in bench.json: every byte change
  is an error, full stop;
- bench.json is not hashed: the result is the original one (a change inside JSON whitespace), or
  exactly the mutated file's JSON object and that object still obeys the documented bench.json
  format (an independent check here, not the reader's schema); the manifests read through a
  mutated bench.json are either an error or exactly the originals;
- append-only logs (records.jsonl via `load_records` and via the runner's `JsonlRows`, a capture's
  index.jsonl via `load_index` and `load_capture`) have no hash: a log cut at a line boundary or
  missing a line is a shorter valid log and a changed reply text is a different valid reply. So
  the result must be exactly what an independent strict reading of the mutated file gives (every
  complete line, nothing coerced: a field the format types, e.g. a record's `valid`, keeps its
  JSON type, and nothing dropped or invented), and a left-out unterminated last line must be
  announced with `IncompleteLineWarning` naming the file;
- a capture folder (acts.npy, index.jsonl, meta.json) likewise: the index as above (but an
  unterminated last line is an error: no capture writes the folder, so its index must be complete), meta.json's
  `layers` / `positions` / `d_model` with their documented types, and acts.npy a float16 array of
  exactly the size its header declares, matching meta.json;
- an experiment YAML: the config equals the original, or every field equals the mutated file's
  value with the field's declared type (an int where a float is declared is JSON's one widening).

Anything else (another exception type, a multi-line message, a message that does not name the
file, a warning missing) fails. The reply parser must give a `Parsed` for any text, with a valid
reading naming one of the item's options (a finite value in [0, RULER_MAX] for read_ruler), and be
deterministic. `evprobe check` on a mutated benchmark folder returns 0, 1 or 2 and never raises.

Every property runs derandomized with a bounded number of examples (no example database), so the
file gives the same examples on every run.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import math
import os
import re
import shutil
import types
import typing
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, Union

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, note, settings
from hypothesis import strategies as st
from numpy.lib import format as npformat

from evprobe.bench.items import Item
from evprobe.bench.manifest import FAMILIES_FILE, ITEMS_FILE, META_FILE, read_families, read_items, read_meta
from evprobe.bench.parse import ANSWERS, RULER_MAX, Parsed, parse_reply
from evprobe.bench.records import RECORDS_FILE, Record, load_records
from evprobe.core.errors import IncompleteLineWarning, InputError
from evprobe.core.jobs import JsonlRows
from evprobe.experiments.capture.store import load_index
from evprobe.experiments.cli import main
from evprobe.experiments.config import CONFIGS_DIR, ConfigError, ModelConfig, load_config, resolve_model
from evprobe.experiments.dose_response.config import DoseResponseConfig
from evprobe.experiments.gating import GatingConfig
from evprobe.experiments.void_transfer import VoidTransferConfig
from evprobe.experiments.layer_sweep import LayerSweepConfig
from evprobe.experiments.patching.job import PatchingConfig
from evprobe.probes import load_capture
from evprobe.probes.captures import CaptureError
from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

FUZZ = settings(
    derandomize=True,
    database=None,  # derandomized: the same examples every run, and nothing written into the tree
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def fuzz(max_examples: int) -> settings:
    return settings(FUZZ, max_examples=max_examples)


INCOMPLETE = "its last line is incomplete and was left out"

# ---------------------------------------------------------------- mutations

BYTE_KINDS = ("flip", "insert", "delete", "truncate", "non_utf8")
DIGIT_KINDS = ("digit",)  # a byte flip that keeps a number a number: reaches the checks past the schema
LINE_KINDS = ("dup_line", "del_line")
TREE_KINDS = ("retype", "rename_key", "deepen")
RENAMED = "__fuzz_renamed_key__"  # placeholder, replaced in the serialized text (allows duplicate keys)
DEEPENED = "__fuzz_deep_value__"  # placeholder for a value nested 3,000 deep (json.dumps cannot write one)
DEEP = "[" * 3000 + "]" * 3000  # the line: a RecursionError traceback in readers without a depth limit


def dump_jsonl_line(obj: Any) -> str:
    return json.dumps(obj)  # core.files.append_log_lines / atomic_write_jsonl


def dump_json_doc(obj: Any) -> str:
    return json.dumps(obj, indent=2) + "\n"  # core.files.atomic_write_json, bench.json, meta.json


def dump_yaml_doc(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False)


FORMATS: dict[str, tuple[tuple[str, ...], Callable[[Any], str] | None]] = {
    "bytes": (BYTE_KINDS, None),
    "jsonl": (BYTE_KINDS + DIGIT_KINDS + LINE_KINDS + TREE_KINDS, dump_jsonl_line),
    "json": (BYTE_KINDS + DIGIT_KINDS + LINE_KINDS + TREE_KINDS, dump_json_doc),
    "yaml": (BYTE_KINDS + DIGIT_KINDS + LINE_KINDS + TREE_KINDS, dump_yaml_doc),
}


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every value in a JSON tree, the root included."""
    yield prefix
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _paths(value, (*prefix, i))


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        obj = obj[part]
    return obj


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    _get(obj, path[:-1])[path[-1]] = value
    return obj


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _kind(x: Any) -> str:
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "bool"
    if _is_number(x):
        return "number"
    return {str: "string", list: "list", dict: "object"}[type(x)]


def _as_number(x: Any) -> int | float:
    if isinstance(x, str):
        try:
            value = float(x)
        except ValueError:
            return len(x)
        return value if math.isfinite(value) else len(x)
    if isinstance(x, bool):
        return int(x)  # true -> 1: a number for a bool
    return len(x) if isinstance(x, (list, dict)) else 0


# What a value of another type looks like: the old value spelled as a string ("false" for false,
# "1.5" for 1.5), as a number, a bool, null, wrapped in a list or in an object.
RETYPE: dict[str, Callable[[Any], Any]] = {
    "string": lambda x: json.dumps(x),
    "number": _as_number,
    "bool": lambda x: not bool(x),
    "null": lambda x: None,
    "list": lambda x: [x],
    "object": lambda x: {"value": x},
}


class Mutation(tuple):
    """(what was done, the mutated bytes); shown by its label alone in hypothesis' reports."""

    def __repr__(self) -> str:
        return repr(self[0])


@st.composite
def mutations(draw: st.DrawFn, data: bytes, fmt: str, only: tuple[str, ...] = ()) -> Mutation:
    """(what was done, the mutated bytes) of one mutation of `data` (of a kind in `only`, if
    given); always different bytes."""
    kinds, dump = FORMATS[fmt]
    kind = draw(st.sampled_from(only or kinds))
    event(f"mutation: {kind}")
    n = len(data)
    if kind == "flip":
        i, x = draw(st.integers(0, n - 1)), draw(st.integers(1, 255))
        label, new = f"byte {i}: {data[i]:#04x} -> {data[i] ^ x:#04x}", data[:i] + bytes([data[i] ^ x]) + data[i + 1 :]
    elif kind == "insert":
        i, b = draw(st.integers(0, n)), draw(st.integers(0, 255))
        label, new = f"insert {b:#04x} at {i}", data[:i] + bytes([b]) + data[i:]
    elif kind == "non_utf8":
        i, b = draw(st.integers(0, n)), draw(st.integers(0x80, 0xFF))
        label, new = f"insert non-UTF-8 byte {b:#04x} at {i}", data[:i] + bytes([b]) + data[i:]
    elif kind == "digit":
        digits = [m.start() for m in re.finditer(rb"[0-9]", data)]
        i = digits[draw(st.integers(0, len(digits) - 1))]
        d = draw(st.sampled_from([c for c in b"0123456789" if c != data[i]]))
        label, new = f"digit {i}: {chr(data[i])} -> {chr(d)}", data[:i] + bytes([d]) + data[i + 1 :]
    elif kind == "delete":
        i = draw(st.integers(0, n - 1))
        label, new = f"delete byte {i} ({data[i]:#04x})", data[:i] + data[i + 1 :]
    elif kind == "truncate":
        i = draw(st.integers(0, n - 1))
        label, new = f"truncate to {i} bytes", data[:i]
    elif kind in LINE_KINDS:
        lines = data.splitlines(keepends=True)
        k = draw(st.integers(0, len(lines) - 1))
        kept = lines[: k + 1] + [lines[k]] if kind == "dup_line" else lines[:k]
        label, new = f"{kind} {k + 1}", b"".join(kept + lines[k + 1 :])
    else:
        assert dump is not None
        label, new = draw(_tree_mutation(data, fmt, dump, kind))
    assert new != data, label
    return Mutation((label, new))


@st.composite
def _tree_mutation(draw: st.DrawFn, data: bytes, fmt: str, dump: Callable[[Any], str],
                   kind: str) -> tuple[str, bytes]:
    """Replace a value by one of another type, or rename a key, in one JSON line (jsonl) or in the
    whole document (json, yaml); everything else of the file is kept byte for byte (JSON)."""
    text = data.decode("utf-8")
    if fmt == "jsonl":
        lines = text.split("\n")
        numbers = [i for i, line in enumerate(lines) if line.strip()]
        k = draw(st.sampled_from(numbers))
        doc, where = json.loads(lines[k]), f"line {k + 1}"
        assert dump(doc) == lines[k], "the writer's format is not reproduced"
    else:
        doc, where = (json.loads(text) if fmt == "json" else yaml.safe_load(text)), "document"
        if fmt == "json":
            assert dump(doc) == text, "the writer's format is not reproduced"
    if kind == "retype":
        path = draw(st.sampled_from(list(_paths(doc))))
        old = _get(doc, path)
        to = draw(st.sampled_from([k for k in RETYPE if k != _kind(old)]))
        new_value = RETYPE[to](old)
        out = dump(_set(copy.deepcopy(doc), path, new_value))
        label = f"{where} {list(path)}: {old!r:.40} -> {to} {new_value!r:.40}"
    elif kind == "deepen":
        path = draw(st.sampled_from(list(_paths(doc))))
        out = dump(_set(copy.deepcopy(doc), path, DEEPENED)).replace(json.dumps(DEEPENED), DEEP)
        if fmt == "yaml":
            out = out.replace(DEEPENED, DEEP)  # a flow sequence is a YAML value too
        label = f"{where} {list(path)}: nested 3,000 lists deep"
    else:
        keyed = [p for p in _paths(doc) if p and isinstance(p[-1], str)]
        path = draw(st.sampled_from(keyed))
        parent, key = _get(doc, path[:-1]), path[-1]
        names = [key + "_", key.upper(), key[:-1], "", *(k for k in parent if k != key)]
        name = draw(st.sampled_from([n for n in dict.fromkeys(names) if n != key]))
        renamed = {(RENAMED if k == key else k): v for k, v in parent.items()}
        out = dump(_set(copy.deepcopy(doc), path[:-1], renamed)).replace(json.dumps(RENAMED), json.dumps(name))
        if fmt == "yaml":
            out = out.replace(RENAMED, json.dumps(name))  # a JSON string is a YAML scalar
        label = f"{where} key {list(path)} renamed {name!r}"
    if fmt == "jsonl":
        lines[k] = out
        out = "\n".join(lines)
    return f"{kind} {label}", out.encode("utf-8")


# ---------------------------------------------------------------- running a reader


@dataclasses.dataclass
class Outcome:
    result: Any = None
    error: Exception | None = None
    warned: list[str] = dataclasses.field(default_factory=list)  # IncompleteLineWarning messages


def attempt(read: Callable[[], Any], allowed: tuple[type[Exception], ...]) -> Outcome:
    """Run a reader; an exception of another type than `allowed` propagates (a traceback is a bug)."""
    out = Outcome()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out.result = read()
        except allowed as err:
            out.error = err
    out.warned = [str(w.message) for w in caught if issubclass(w.category, IncompleteLineWarning)]
    event("error" if out.error is not None else "read, warned" if out.warned else "read")
    return out


def check_error(err: Exception, allowed: tuple[type[Exception], ...], *names: str) -> None:
    """A reader's error: exactly one of its documented types, one line, naming the file."""
    assert type(err) in allowed, f"{type(err).__name__}: {err}"
    msg = str(err)
    assert msg.strip() and len(msg.splitlines()) == 1, f"not one line: {msg!r}"
    assert any(name in msg for name in names), f"names none of {names}: {msg}"


@contextlib.contextmanager
def written(path: Path, data: bytes, *also_remove: Path) -> Iterator[Path]:
    """`path` holding `data` for the duration; its original bytes restored after (and any file
    the code under test wrote in `also_remove` deleted). Both swaps are renames, so a memmap a
    reader still holds keeps its own file (truncating a mapped file would kill the process)."""
    original = path.read_bytes()
    _replace(path, data)
    try:
        yield path
    finally:
        _replace(path, original)
        for extra in also_remove:
            extra.unlink(missing_ok=True)


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.fuzz")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class Invalid(Exception):
    """The independent reading rejects the file."""


def complete_lines(data: bytes) -> list[str]:
    """The non-blank complete lines of a JSONL log (an unterminated last line is not one)."""
    complete = data[: data.rfind(b"\n") + 1]
    try:
        text = complete.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid("not UTF-8") from None
    return [line for line in text.split("\n") if line.strip()]


def json_object(line: str) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        raise Invalid("not JSON") from None
    if not isinstance(obj, dict):
        raise Invalid("not an object")
    return obj


def torn(data: bytes) -> bool:
    return bool(data) and not data.endswith(b"\n")


def check_announced(outcome: Outcome, data: bytes, path: Path) -> None:
    """A reader that returned a result from a log with an unterminated last line said so."""
    if torn(data):
        assert any(m.startswith(f"{path}: {INCOMPLETE}") for m in outcome.warned), outcome.warned
    else:
        assert not outcome.warned, outcome.warned


# ---------------------------------------------------------------- types, independently


def conforms(value: Any, hint: Any) -> bool:
    """Whether `value` has type `hint` without conversion: bool is no int, an int is a float (JSON's
    widening), a tuple annotation holds a tuple, a Literal holds one of its values of that type."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if hint is type(None) or hint is None:
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return _is_number(value) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if origin in (Union, types.UnionType):
        return any(conforms(value, a) for a in args)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(conforms(v, args[0]) for v in value)
        return len(value) == len(args) and all(map(conforms, value, args))
    if origin is list:
        return isinstance(value, list) and all(conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(conforms(k, args[0]) and conforms(v, args[1]) for k, v in value.items())
    if dataclasses.is_dataclass(hint):
        return isinstance(value, hint)
    raise AssertionError(f"no rule for {hint}")


def same_value(value: Any, raw: Any) -> bool:
    """A config field's value is what the file wrote: lists become tuples, an int where a float is
    declared is that number; nothing else is converted."""
    if isinstance(raw, list):
        return isinstance(value, (tuple, list)) and len(value) == len(raw) and all(map(same_value, value, raw))
    if dataclasses.is_dataclass(value):
        return isinstance(raw, dict) and all(same_value(getattr(value, k), v) for k, v in raw.items())
    if isinstance(raw, int) and not isinstance(raw, bool) and isinstance(value, float):
        return value == raw
    return type(value) is type(raw) and value == raw


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def bench(small_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the small benchmark: each example writes one mutated file into it and
    restores the file afterwards (the session's small_bench stays read-only)."""
    out = tmp_path_factory.mktemp("fuzz") / "bench"
    shutil.copytree(small_bench, out)
    return out


@pytest.fixture(scope="module")
def originals(bench: Path) -> dict[str, Any]:
    return {"meta": read_meta(bench), "families": read_families(bench), "items": read_items(bench)}


@pytest.fixture(scope="module")
def run_dir(small_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished scripted-policy run of every request of the small benchmark (312 records)."""
    out = tmp_path_factory.mktemp("fuzz-run") / "run"
    assert main(["run", "--model", "policy:random", "--bench", str(small_bench), "--out", str(out), "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A small valid capture folder (probes.synthetic): 8 rows, 2 layers x 3 positions x 4 dims."""
    rows = reference_rows(2, seed=1)
    acts, _ = planted_acts(np.arange(len(rows)) % 2, 2, 3, 4, signal_layers=[1], seed=2)
    folder = write_capture(tmp_path_factory.mktemp("fuzz-capture") / "acts", acts, rows)
    return folder, [r["item_id"] for r in rows]


# ---------------------------------------------------------------- benchmark manifests (hashed)

INPUT_ERRORS = (InputError,)  # exactly InputError: a subclass such as a raw decoder error would not do


@fuzz(100)
@pytest.mark.parametrize("name", [ITEMS_FILE, FAMILIES_FILE])
@given(data=st.data())
def test_manifest_byte_changes_are_one_line_errors(bench: Path, originals: dict[str, Any], name: str,
                                                   data: st.DataObject) -> None:
    """items.jsonl and families.jsonl are hashed in bench.json: any change is an InputError naming
    the file, whether the schema, the hash or the count catches it."""
    path = bench / name
    label, new = data.draw(mutations(path.read_bytes(), "jsonl"), label="mutation")
    note(label)
    read = read_items if name == ITEMS_FILE else read_families
    with written(path, new):
        got = attempt(lambda: read(bench), INPUT_ERRORS)
    assert got.error is not None, f"{label}: read without an error"
    check_error(got.error, INPUT_ERRORS, str(path))
    assert not got.warned


BENCH_SYSTEMS = ("sliding", "bouncing", "spring")
SHA256 = re.compile(r"[0-9a-f]{64}")


def bench_meta_conforms(meta: Any, original: dict[str, Any]) -> bool:
    """bench.json's documented format (bench.generate, README), written out independently."""
    if not isinstance(meta, dict):
        return False
    if set(meta) not in (set(original), set(original) - {"format_version"}):
        return False

    def count(key: str, least: int) -> bool:
        return conforms(meta[key], int) and meta[key] >= least

    def amount(x: Any) -> bool:
        return conforms(x, float) and x >= 0

    return (
        ("format_version" not in meta or conforms(meta["format_version"], Literal[1]))
        and meta["split"] in ("main", "pilot") and isinstance(meta["split"], str)
        and all(count(k, 0) for k in ("seed", "subset_seed", "subset_per_cell", "n_images"))
        and all(count(k, 1) for k in ("families_per_system", "n_families", "n_items"))
        and isinstance(meta["systems"], list) and len(meta["systems"]) > 0
        and all(isinstance(s, str) and s in BENCH_SYSTEMS for s in meta["systems"])
        and len(set(meta["systems"])) == len(meta["systems"])
        and isinstance(meta["prices"], dict) and set(meta["prices"]) == set(original["prices"])
        and all(amount(v) for v in meta["prices"].values())
        and all(isinstance(meta[k], str) and SHA256.fullmatch(meta[k]) for k in ("families_sha256", "items_sha256"))
        and amount(meta["seconds"])
        and meta["n_families"] == meta["families_per_system"] * len(meta["systems"])
    )


@fuzz(150)
@given(data=st.data())
def test_bench_json_mutations(bench: Path, originals: dict[str, Any], data: st.DataObject) -> None:
    """bench.json has no hash of its own: read_meta gives an error naming it, or exactly the mutated
    object when that still obeys the format; the manifests read through it are an error or
    exactly the originals (bench.json only verifies them)."""
    path = bench / META_FILE
    label, new = data.draw(mutations(path.read_bytes(), "json"), label="mutation")
    note(label)
    with written(path, new):
        meta = attempt(lambda: read_meta(bench), INPUT_ERRORS)
        families = attempt(lambda: read_families(bench), INPUT_ERRORS)
        items = attempt(lambda: read_items(bench), INPUT_ERRORS)
    if meta.error is not None:
        check_error(meta.error, INPUT_ERRORS, str(path))
    elif meta.result != originals["meta"]:
        assert meta.result == json.loads(new.decode("utf-8")), label
        assert bench_meta_conforms(meta.result, originals["meta"]), f"{label}: accepted {meta.result}"
    for got, name in ((families, "families"), (items, "items")):
        if got.error is not None:
            check_error(got.error, INPUT_ERRORS, str(path))
        else:
            assert got.result == originals[name], f"{label}: {name} changed without an error"
            assert meta.error is None, f"{label}: {name} read through a bench.json that read_meta refuses"


# ---------------------------------------------------------------- a run's records (append-only)

RECORD_HINTS = typing.get_type_hints(Record)
RECORD_OPTIONAL = {f.name: f.default for f in dataclasses.fields(Record) if f.default is not dataclasses.MISSING}
RECORD_ERRORS = (InputError,)


def expected_records(data: bytes) -> dict[str, Record]:
    """records.jsonl read independently: every complete line a JSON object with every Record field
    of its declared type (nothing converted; a field with a default, one a record has only when
    set, may be absent), item ids unique."""
    out: dict[str, Record] = {}
    for line in complete_lines(data):
        obj = json_object(line)
        if not all(name in obj for name in RECORD_HINTS if name not in RECORD_OPTIONAL):
            raise Invalid("missing field")
        obj = {**RECORD_OPTIONAL, **obj}
        if not all(conforms(obj[name], hint) for name, hint in RECORD_HINTS.items()):
            raise Invalid("wrong type")
        if obj["item_id"] in out:
            raise Invalid("repeated item")
        out[obj["item_id"]] = Record(**{name: obj[name] for name in RECORD_HINTS})
    return out


@fuzz(200)
@given(data=st.data())
def test_records_mutations(run_dir: Path, data: st.DataObject) -> None:
    """bench.records.load_records on a run's records.jsonl (312 records of every request type)."""
    path = run_dir / RECORDS_FILE
    original = path.read_bytes()
    label, new = data.draw(mutations(original, "jsonl"), label="mutation")
    note(label)
    with written(path, new):
        got = attempt(lambda: load_records(path), RECORD_ERRORS)
    if got.error is not None:
        check_error(got.error, RECORD_ERRORS, str(path))
        return
    try:
        want = expected_records(new)
    except Invalid as why:
        raise AssertionError(f"{label}: load_records read a file with a bad line ({why})") from None
    assert got.result == want, label
    for record in got.result.values():  # == alone would take 1 for true
        bad = [n for n, h in RECORD_HINTS.items() if not conforms(getattr(record, n), h)]
        assert not bad, f"{label}: {record.item_id} has {bad} of the wrong type"
    check_announced(got, new, path)


def _runner_key(row: dict[str, Any]) -> tuple[str, str]:
    return row["item_id"], ""  # bench.runner.RunJob.store_at: the store `evprobe run` resumes from


@fuzz(200)
@given(data=st.data())
def test_results_rows_mutations(run_dir: Path, data: st.DataObject) -> None:
    """core.jobs.JsonlRows.done() on the runner's row store: rows keyed by key_of, exactly as written."""
    path = run_dir / RECORDS_FILE
    label, new = data.draw(mutations(path.read_bytes(), "jsonl"), label="mutation")
    note(label)
    with written(path, new):
        got = attempt(lambda: JsonlRows(path, _runner_key, what="record").done(), INPUT_ERRORS)
    if got.error is not None:
        check_error(got.error, INPUT_ERRORS, str(path))
        return
    want: dict[Any, dict[str, Any]] = {}
    try:
        for line in complete_lines(new):
            row = json_object(line)
            if "item_id" not in row:
                raise Invalid("no key")
            key = _runner_key(row)
            hash(key)
            if key in want:
                raise Invalid("repeated key")
            want[key] = row
    except (Invalid, TypeError) as why:
        raise AssertionError(f"{label}: JsonlRows read a file with a bad line ({why})") from None
    assert got.result == want, label
    check_announced(got, new, path)


# ---------------------------------------------------------------- a capture folder


def expected_index(data: bytes, item_ids: list[str] | None) -> dict[int, dict[str, Any]]:
    """index.jsonl as load_index documents it: objects with a new integer `row` and an `item_id`
    (with a selection: the item of that row)."""
    out: dict[int, dict[str, Any]] = {}
    for line in complete_lines(data):
        row = json_object(line)
        if "row" not in row or "item_id" not in row or not conforms(row["row"], int) or row["row"] in out:
            raise Invalid("no new row number")
        if item_ids is not None and not (0 <= row["row"] < len(item_ids) and item_ids[row["row"]] == row["item_id"]):
            raise Invalid("not that row of the selection")
        out[row["row"]] = row
    return out


@fuzz(200)
@given(data=st.data())
def test_capture_index_mutations(capture: tuple[Path, list[str]], data: st.DataObject) -> None:
    """experiments.capture.store.load_index, without and with the folder's selection."""
    folder, item_ids = capture
    path = folder / "index.jsonl"
    label, new = data.draw(mutations(path.read_bytes(), "jsonl"), label="mutation")
    note(label)
    for ids in (None, item_ids):
        with written(path, new):
            got = attempt(lambda: load_index(path, ids), INPUT_ERRORS)
        if got.error is not None:
            check_error(got.error, INPUT_ERRORS, str(path))
            continue
        try:
            want = expected_index(new, ids)
        except Invalid as why:
            raise AssertionError(f"{label}: load_index read a file with a bad line ({why})") from None
        assert got.result == want, label
        check_announced(got, new, path)


CAPTURE_ERRORS = (CaptureError, InputError)


def expected_capture(folder: Path) -> tuple[tuple[dict[str, Any], ...], dict[str, Any], np.ndarray]:
    """A capture folder read independently by its documented rules (probes.captures)."""
    try:
        meta = json.loads((folder / "meta.json").read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise Invalid("meta.json is not JSON") from None
    if not isinstance(meta, dict) or not all(k in meta for k in ("layers", "positions", "d_model")):
        raise Invalid("meta.json lacks layers, positions or d_model")
    if not (conforms(meta["layers"], list[int]) and conforms(meta["positions"], list[str])
            and conforms(meta["d_model"], int)):
        raise Invalid("meta.json's layers, positions or d_model have the wrong type")
    raw = (folder / "acts.npy").read_bytes()
    try:  # the .npy format: magic, version, header dict, then exactly the array's bytes
        fh = io.BytesIO(raw)
        version = npformat.read_magic(fh)
        read_header = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
        shape, fortran_order, dtype = read_header(fh)
        offset = fh.tell()
    except Exception as err:  # noqa: BLE001 - the oracle only asks "readable or not"
        raise Invalid(f"acts.npy header unreadable ({type(err).__name__})") from None
    if dtype != np.dtype(np.float16) or len(shape) != 4:
        raise Invalid("acts.npy is not a 4-d float16 array")
    if len(raw) != offset + math.prod(shape) * dtype.itemsize:
        raise Invalid("acts.npy is not exactly as long as its header says")
    acts = np.frombuffer(raw, dtype, offset=offset).reshape(shape, order="F" if fortran_order else "C")
    if acts.shape[1:] != (len(meta["layers"]), len(meta["positions"]), meta["d_model"]):
        raise Invalid("acts.npy does not match meta.json")
    seen_rows, seen_ids, rows = set(), set(), []
    for line in complete_lines((folder / "index.jsonl").read_bytes()):
        row = json_object(line)
        r, item_id = row.get("row"), row.get("item_id")
        if not (conforms(r, int) and 0 <= r < acts.shape[0] and isinstance(item_id, str) and "family_id" in row):
            raise Invalid("bad index row")
        if r in seen_rows or item_id in seen_ids:
            raise Invalid("repeated row")
        seen_rows.add(r)
        seen_ids.add(item_id)
        rows.append(row)
    if not rows:
        raise Invalid("no rows")
    if not np.isfinite(acts[sorted(seen_rows)]).all():  # a flipped byte may make a NaN or inf: refused at read
        raise Invalid("a committed row holds NaN or inf")
    return tuple(sorted(rows, key=lambda x: x["row"])), meta, acts


@fuzz(100)
@pytest.mark.parametrize("name", ["index.jsonl", "meta.json", "acts.npy"])
@given(data=st.data())
def test_capture_folder_mutations(capture: tuple[Path, list[str]], name: str, data: st.DataObject) -> None:
    """probes.load_capture: a one-line error naming a file of the folder, or exactly what the folder holds."""
    folder, _ = capture
    path = folder / name
    fmt = {"index.jsonl": "jsonl", "meta.json": "json", "acts.npy": "bytes"}[name]
    label, new = data.draw(mutations(path.read_bytes(), fmt), label="mutation")
    note(label)
    with written(path, new):
        got = attempt(lambda: load_capture(folder), CAPTURE_ERRORS)
        if got.error is not None:  # it may name another file of the folder ("acts.npy ... does not match meta.json")
            check_error(got.error, CAPTURE_ERRORS, *(str(folder / n) for n in ("acts.npy", "index.jsonl", "meta.json")))
            return
        try:
            index, meta, acts = expected_capture(folder)
        except Invalid as why:
            raise AssertionError(f"{label}: load_capture read a folder it should refuse ({why})") from None
        cap = got.result
        assert cap.index == index and cap.meta == meta, label
        assert cap.acts.dtype == acts.dtype and cap.acts.shape == acts.shape, label
        assert cap.acts.tobytes() == acts.tobytes(), label  # bytes: a flipped byte may make a NaN
        index_bytes = (folder / "index.jsonl").read_bytes()
        # no process writes the folder: a torn index is refused, never read one row short
        assert not torn(index_bytes) and cap.n_torn == 0, label
        check_announced(got, index_bytes, folder / "index.jsonl")
        del cap, got  # the memmap, before the file is restored


# ---------------------------------------------------------------- experiment configs

CONFIG_CLASSES = {"dose_response": DoseResponseConfig, "gating": GatingConfig, "layer_sweep": LayerSweepConfig,
                  "patching": PatchingConfig, "void_transfer": VoidTransferConfig}
CONFIG_FILES = sorted(p.name for p in (CONFIGS_DIR / "experiments").glob("*.yaml"))


def _config_class(name: str) -> type:
    return CONFIG_CLASSES[name.removesuffix(".yaml").removesuffix("_tiny")]


def test_every_experiment_config_is_fuzzed() -> None:
    assert len(CONFIG_FILES) == 9
    for name in CONFIG_FILES:
        assert dataclasses.is_dataclass(load_config(_config_class(name), CONFIGS_DIR / "experiments" / name))


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fuzz-configs")
    for name in CONFIG_FILES:
        shutil.copyfile(CONFIGS_DIR / "experiments" / name, out / name)
    return out


@fuzz(50)
@pytest.mark.parametrize("name", CONFIG_FILES)
@given(data=st.data())
def test_config_mutations(config_dir: Path, name: str, data: st.DataObject) -> None:
    """load_config: a ConfigError naming the file, or the original config, or a config whose every
    field is the mutated file's value with the field's declared type."""
    cls, path = _config_class(name), config_dir / name
    original = load_config(cls, path)
    label, new = data.draw(mutations(path.read_bytes(), "yaml"), label="mutation")
    note(label)
    with written(path, new):
        got = attempt(lambda: load_config(cls, path), (ConfigError,))
    if got.error is not None:
        check_error(got.error, (ConfigError,), str(path))
        return
    if got.result == original and all(
        type(getattr(got.result, f.name)) is type(getattr(original, f.name)) for f in dataclasses.fields(cls)
    ):
        return
    raw = yaml.safe_load(new.decode("utf-8")) or {}
    assert isinstance(raw, dict), label
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        value = getattr(got.result, f.name)
        assert conforms(value, hints[f.name]), f"{label}: {f.name} = {value!r} is not {hints[f.name]}"
        if f.name in raw and isinstance(value, ModelConfig) and isinstance(raw[f.name], str):
            # a model named by a string: the ModelConfig the name resolves to (a model config's file, or the defaults)
            assert value == resolve_model(raw[f.name]), f"{label}: {f.name} = {value!r}, the file says {raw[f.name]!r}"
        elif f.name in raw:
            assert same_value(value, raw[f.name]), f"{label}: {f.name} = {value!r}, the file says {raw[f.name]!r}"
        else:  # a key the file lacks: its default, if it has one
            assert f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING, label
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            assert value == default and type(value) is type(default), f"{label}: {f.name} = {value!r}"
    assert set(raw) <= {f.name for f in dataclasses.fields(cls)}, label


# ---------------------------------------------------------------- the reply parser

REGIMES = ("standard", "guided", "json")
ROUTES = ("json", "answer_line", "direct", "letter", "name", "number")


@pytest.fixture(scope="module")
def items(originals: dict[str, Any]) -> list[Item]:
    return originals["items"]


def check_parsed(item: Item, text: str, regime: str) -> Parsed:
    p = parse_reply(item, text, regime)
    event(f"route: {p.route}")
    assert isinstance(p, Parsed)
    assert parse_reply(item, text, regime) == p, "not deterministic"
    if not p.valid:
        assert p.route.startswith("invalid:") and (p.choice, p.action, p.answer, p.value) == (None,) * 4, p
        return p
    assert p.route in ROUTES and (p.route != "json" or regime == "json"), p
    if item.request == "read_ruler":
        assert p.choice is None and p.action is None and p.answer is None, p
        assert isinstance(p.value, float) and math.isfinite(p.value) and 0.0 <= p.value <= RULER_MAX, p
        return p
    assert item.options and p.choice in item.options, p
    meaning = item.options[p.choice]
    if item.request == "select":
        assert p.action == meaning and p.answer is None and p.value is None, p
    elif meaning in ANSWERS:
        assert p.answer == meaning and p.action is None and p.value is None, p
    else:  # recover_property: the chosen candidate value
        assert p.action is None and p.answer is None and p.value == float(meaning) and math.isfinite(p.value), p
    return p


DEEP_JSON = '{"final_answer": ' + "[" * 100_000 + "]" * 100_000 + "}"
HUGE_INT_JSON = '{"final_answer": 1' + "0" * 5000 + "}"


@fuzz(500)
@given(i=st.integers(0, 10**6), text=st.text(), regime=st.sampled_from(REGIMES))
@example(i=0, text=HUGE_INT_JSON, regime="json")
@example(i=0, text=DEEP_JSON, regime="json")
@example(i=0, text="ANSWER: 1e999", regime="standard")
def test_parser_any_text(items: list[Item], i: int, text: str, regime: str) -> None:
    check_parsed(items[i % len(items)], text, regime)


def _words(item: Item) -> list[str]:
    """Pieces a reply to `item` is made of: its letters, option names, numbers, cues and markup."""
    base = ["A", "B", "C", "D", "E", "(B)", "**C**", "D.", "a", "stop", "answer now", "mass test", "friction test",
            "restitution test", "stiffness test", "free fall", "free-fall", "combined report", "both tests", "yes",
            "no", "undetermined", "cannot be determined", "I don't know", "not", "never", "no need to", "instead of",
            "or", "/", "vs", "maybe", "probably", "I think", "not sure", "ANSWER:", "Answer:", "**Answer**:", "\n",
            ".", ",", ";", "-", "->", "0", "0.5", "-0.45", "1e999", "inf", "nan", "∞", "2000", "2000.1", "E =",
            "A mass test", "A quick look", "the", "test", "{", "}", '"final_answer":', '"', "'", "—", "’"]
    extra = list(item.options or {}) + [str(v) for v in (item.options or {}).values()]
    if item.reference_value is not None:
        extra.append(f"{item.reference_value:g}")
    return base + extra


@fuzz(600)
@given(data=st.data(), regime=st.sampled_from(REGIMES))
def test_parser_token_soup(items: list[Item], data: st.DataObject, regime: str) -> None:
    """Replies assembled from the words the parser reacts to (letters, names, negation, hedges,
    alternatives, ANSWER lines, JSON braces, numbers)."""
    item = data.draw(st.sampled_from(items), label="item")
    pieces = data.draw(st.lists(st.sampled_from(_words(item)), max_size=14), label="pieces")
    seps = data.draw(st.lists(st.sampled_from([" ", "", "\n", ", ", ". "]), min_size=len(pieces),
                              max_size=len(pieces)), label="separators")
    text = "".join(s + p for s, p in zip(seps, pieces))
    if regime == "json" and data.draw(st.booleans(), label="as json"):
        text = json.dumps({"reasoning": "working", "final_answer": text})
    check_parsed(item, text, regime)


def valid_replies(item: Item) -> list[str]:
    """Replies the parser reads as the reference, in every shape the runner sees."""
    if item.request == "read_ruler":
        value = repr(item.reference_value)
        return [value, f"ANSWER: {value}", f"The marker is at {value} m.\nANSWER: {value}",
                json.dumps({"reasoning": "read the ruler", "final_answer": value})]
    letter = item.reference_option
    menu = dict(re.findall(r"^([A-E])\. (.+)$", item.prompt, re.M))
    return [letter, f"{letter}. {menu.get(letter, '')}", f"ANSWER: {letter}",
            f"The evidence is as shown.\nANSWER: {letter}", json.dumps({"reasoning": "...", "final_answer": letter})]


@st.composite
def mutated_reply(draw: st.DrawFn, text: str) -> str:
    kind = draw(st.sampled_from(["insert", "delete", "replace", "truncate", "dup_line", "del_line", "non_utf8",
                                 "twice"]))
    n = len(text)
    if kind == "insert":
        i = draw(st.integers(0, n))
        return text[:i] + draw(st.characters()) + text[i:]
    if kind in ("delete", "replace", "truncate"):
        i = draw(st.integers(0, n - 1))
        middle = draw(st.characters()) if kind == "replace" else ""
        return text[:i] + middle + ("" if kind == "truncate" else text[i + 1 :])
    if kind in ("dup_line", "del_line"):
        lines = text.splitlines(keepends=True)
        k = draw(st.integers(0, len(lines) - 1))
        return "".join(lines[: k + 1] + [lines[k]] + lines[k + 1 :] if kind == "dup_line" else lines[:k] + lines[k + 1 :])
    if kind == "non_utf8":  # a reply decoded from bytes that are not UTF-8, both ways a runner might
        raw, i = text.encode("utf-8"), draw(st.integers(0, len(text.encode("utf-8"))))
        bad = raw[:i] + bytes([draw(st.integers(0x80, 0xFF))]) + raw[i:]
        return bad.decode("utf-8", errors=draw(st.sampled_from(["replace", "surrogateescape"])))
    return text + draw(st.sampled_from(["\n", " ", "\n\n"])) + text


@fuzz(600)
@given(data=st.data(), regime=st.sampled_from(REGIMES))
def test_parser_mutated_valid_replies(items: list[Item], data: st.DataObject, regime: str) -> None:
    item = data.draw(st.sampled_from(items), label="item")
    reply = data.draw(st.sampled_from(valid_replies(item)), label="valid reply")
    original = check_parsed(item, reply, regime)
    if not reply.startswith("{") or regime == "json":  # the valid reply reads as the reference
        assert original.valid, original
        if item.request == "read_ruler":
            assert original.value == item.reference_value, original
        else:
            assert original.choice == item.reference_option, original
    text = data.draw(mutated_reply(reply), label="mutated")
    check_parsed(item, text, regime)


# ---------------------------------------------------------------- `evprobe check` on a mutated folder


@fuzz(40)
@given(data=st.data())
def test_check_cli_on_mutated_bench(bench: Path, data: st.DataObject) -> None:
    """`evprobe check DIR` returns 0, 1 or 2 and never raises; a changed manifest never passes (its
    hash differs from bench.json's), and an error is one stderr line."""
    name = data.draw(st.sampled_from([ITEMS_FILE, FAMILIES_FILE, META_FILE]), label="file")
    path = bench / name
    only = DIGIT_KINDS if data.draw(st.booleans(), label="a digit") else ()  # half: values the schema admits
    label, new = data.draw(mutations(path.read_bytes(), "json" if name == META_FILE else "jsonl", only),
                           label="mutation")
    note(label)
    out, err = io.StringIO(), io.StringIO()
    with written(path, new, bench / "checks.json"), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["check", str(bench)])
    assert rc in (0, 1, 2), label
    event(f"{name}: exit {rc}")
    if name != META_FILE:
        assert rc != 0, f"{label}: check passed a changed {name}"
    if rc == 2:
        lines = err.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith("evprobe: error: "), err.getvalue()
