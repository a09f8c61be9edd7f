"""Every file read and every setting checked before work starts (issue 29, item 5).

For each broken input: one `evprobe: error:` line (an InputError) naming the file, the field and
the fix, raised before a model loads and before anything is written. The measured cases: a damaged
run.json under `evprobe score` / `evprobe compare` (KeyError, TypeError, a JSON error without the
file's name), `evprobe patching --n-boot 0` (the model loaded and every row computed first), and a
capture position the model cannot read (meta.json written first, so the corrected rerun was refused).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evprobe.bench.json_schema import RunMeta, read_run_meta
from evprobe.core.errors import InputError
from evprobe.core.json_files import read_json_object
from evprobe.experiments.cli import main
from evprobe.experiments.scoring_io import compare_runs, score_run
from evprobe.experiments.report.summary_files import DoseSummary, PatchingSummary, SweepSummary, read_summary

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-family benchmark (156 items); read-only."""
    out = tmp_path_factory.mktemp("bench") / "bench"
    assert main(["generate", "--out", str(out), "--families-per-system", "1", "--subset-per-cell", "0",
                 "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def run_dir(bench: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished policy run of every item, unscored; read-only (copy it to damage it)."""
    out = tmp_path_factory.mktemp("run") / "run"
    assert main(["run", "--model", "policy:reference", "--bench", str(bench), "--out", str(out), "--quiet"]) == 0
    return out


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a model fails the test: the refusal must come first."""
    import evprobe.hooks

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr(evprobe.hooks, "load", refuse)


def _one_line(capsys: pytest.CaptureFixture, *parts: str) -> str:
    """The command's error: exactly one `evprobe: error:` line, the last of stderr, holding every one of
    `parts` (a library's own loading bar may come before it when its import outlived --no-progress)."""
    err = capsys.readouterr().err.strip()
    assert err.count("evprobe: error: ") == 1, err
    err = err[err.index("evprobe: error: "):]
    assert "\n" not in err, err
    for part in parts:
        assert part in err, err
    return err


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    return out


def _edit(path: Path, change: Any) -> None:
    meta = json.loads(path.read_text())
    path.write_text(json.dumps(change(meta), indent=2) + "\n")


def _without(key: str):
    return lambda meta: {k: v for k, v in meta.items() if k != key}


def _with(key: str, value: Any):
    return lambda meta: {**meta, key: value}


# -- run.json: one schema, one line ----------------------------------------------------------------

RUN_JSON_FAULTS = [
    ("{bad", ":1: not valid JSON"),
    ("", ":1: not valid JSON"),
    ("[1, 2]", ":1: expected a JSON object, got a list"),
    ("null", ":1: expected a JSON object, got null"),
    (b"\xff{}", ":1: not UTF-8 text"),
    (_without("bench"), "missing field 'bench'"),
    (_without("model"), "missing field 'model'"),
    (_without("protocol"), "missing field 'protocol'"),
    (_without("items_sha256"), "missing field 'items_sha256'"),
    (_with("bench", 5), "field 'bench' must be a string, got 5"),
    (_with("model", ["a"]), "field 'model' must be a string"),
    (_with("model", ""), "field 'model' must be a non-empty string"),
    (_with("items_sha256", "abc"), "field 'items_sha256' must be a sha256 digest"),
    (_with("n_records", "156"), "field 'n_records' must be an integer, got '156'"),
    (_with("config", [1]), "field 'config' must be an object"),
    (_with("kind", "capture"), "field 'kind' must be one of 'run'"),
]


@pytest.mark.parametrize("command", ["score", "compare"])
@pytest.mark.parametrize(("fault", "said"), RUN_JSON_FAULTS, ids=[s for _, s in RUN_JSON_FAULTS])
def test_a_damaged_run_json_is_one_line_naming_file_and_field(run_dir: Path, tmp_path: Path, command: str,
                                                              fault: Any, said: str,
                                                              capsys: pytest.CaptureFixture) -> None:
    run = _copy(run_dir, tmp_path)
    path = run / "run.json"
    if callable(fault):
        _edit(path, fault)
    else:
        path.write_bytes(fault if isinstance(fault, bytes) else fault.encode())
    before = sorted(p.name for p in run.iterdir())
    assert main([command, str(run)]) == 2
    err = _one_line(capsys, str(path), said, "rerun `evprobe run` into a new --out")
    assert "Traceback" not in err
    assert sorted(p.name for p in run.iterdir()) == before  # nothing scored, nothing written


def test_a_missing_run_json_names_the_folder_and_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["score", str(tmp_path)]) == 2
    _one_line(capsys, f"{tmp_path / 'run.json'}: file not found", "is not a run folder", "evprobe run")


def test_a_damaged_bench_json_is_one_line_under_score(run_dir: Path, bench: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    other = tmp_path / "bench"
    shutil.copytree(bench, other)
    _edit(other / "bench.json", _without("prices"))
    run = _copy(run_dir, tmp_path)
    assert main(["score", str(run), "--bench", str(other)]) == 2
    _one_line(capsys, str(other / "bench.json"), "missing field 'prices'")
    assert not (run / "scores.json").exists()


def test_compare_checks_every_run_json_before_it_scores_any(run_dir: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    good = _copy(run_dir, tmp_path / "a")
    bad = _copy(run_dir, tmp_path / "b")
    _edit(bad / "run.json", _without("regime"))
    assert main(["compare", str(good), str(bad)]) == 2
    _one_line(capsys, str(bad / "run.json"), "missing field 'regime'")
    assert not (good / "scores.json").exists()  # the good run, first in line, was not scored either


def test_an_undamaged_run_json_reads_as_written(run_dir: Path) -> None:
    meta = read_run_meta(run_dir)
    raw = json.loads((run_dir / "run.json").read_text())
    assert (meta.model, meta.protocol, meta.regime, meta.bench) == (raw["model"], raw["protocol"], raw["regime"],
                                                                     raw["bench"])
    assert meta.n_records == 156 and meta.title == "policy:reference direct/standard"
    assert meta.model_extra is not None and "prompt_template_sha256" in meta.model_extra  # pins the runner adds
    assert RunMeta.model_validate_json(json.dumps({k: raw[k] for k in ("model", "protocol", "regime",
                                                                       "items_sha256", "bench")}))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_any_damage_to_run_json_is_an_input_error(run_dir: Path, data: st.DataObject) -> None:
    """Random JSON in place of run.json, or run.json with random keys deleted or given random values:
    read_run_meta either reads it or raises InputError (never KeyError, TypeError, AttributeError)."""
    raw = json.loads((run_dir / "run.json").read_text())
    kind = data.draw(st.sampled_from(["value", "edit"]))
    if kind == "value":
        text = json.dumps(data.draw(JSON_VALUES))
    else:
        keys = sorted(raw)
        dropped = data.draw(st.sets(st.sampled_from(keys), max_size=len(keys)))
        changed = data.draw(st.dictionaries(st.sampled_from(keys), JSON_VALUES, max_size=4))
        text = json.dumps({**{k: v for k, v in raw.items() if k not in dropped}, **changed})
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "run.json").write_text(text)
        try:
            meta = read_run_meta(folder)
        except InputError as err:
            assert "\n" not in str(err) and str(folder / "run.json") in str(err)
        else:
            assert isinstance(meta.model, str) and meta.model and isinstance(meta.bench, str)
            assert meta.title


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_score_and_compare_on_a_damaged_run_json_raise_only_input_errors(run_dir: Path, bench: Path,
                                                                              data: st.DataObject) -> None:
    """The same damage through the readers themselves: score and compare end in InputError or a result."""
    raw = json.loads((run_dir / "run.json").read_text())
    keys = sorted(raw)
    dropped = data.draw(st.sets(st.sampled_from(keys), max_size=3))
    changed = data.draw(st.dictionaries(st.sampled_from(keys), JSON_VALUES, max_size=2))
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(run_dir, run)
        (run / "run.json").write_text(json.dumps({**{k: v for k, v in raw.items() if k not in dropped}, **changed}))
        for call in (lambda: score_run(run, n_boot=20), lambda: compare_runs([run])):
            try:
                call()
            except InputError as err:
                assert "\n" not in str(err)


@pytest.mark.parametrize(("damage", "said"), [
    (_without("config"), "run.json:1: missing field 'config'"),
    (_with("config", {"model": "policy:reference", "bench": "b", "out": "o", "colour": "red"}),
     "run.json: its settings do not make a run job"),
    (_with("shard", 7), "run.json:"),
    (_without("items_sha256"), "run.json:1: missing field 'items_sha256'"),
])
def test_merge_reads_each_shards_run_json_through_the_schema(bench: Path, tmp_path: Path, damage: Any, said: str,
                                                             capsys: pytest.CaptureFixture) -> None:
    shards = [tmp_path / f"s{k}" for k in range(2)]
    for k, folder in enumerate(shards):
        assert main(["run", "--model", "policy:reference", "--bench", str(bench), "--out", str(folder),
                     "--shard", f"{k}/2", "--quiet"]) == 0
    _edit(shards[0] / "run.json", damage)
    out = tmp_path / "merged"
    assert main(["merge", str(out), *map(str, shards)]) == 2
    _one_line(capsys, str(shards[0]), said)
    assert not (out / "run.json").exists() and not (out / "records.jsonl").exists()


# -- summary files a later command reads back --------------------------------------------------------


def test_read_json_object_names_the_file_for_each_fault(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    for text, said in (("{", f"{path}:1: not valid JSON"), ('{"a": 1}\n[', f"{path}:2: not valid JSON"),
                       ("3", f"{path}:1: expected a JSON object, got a number; FIX"),
                       ('"s"', f"{path}:1: expected a JSON object, got a string; FIX")):
        path.write_text(text)
        with pytest.raises(InputError) as info:
            read_json_object(path, "FIX")
        assert str(info.value).startswith(said) and str(info.value).endswith("FIX"), str(info.value)
    with pytest.raises(InputError, match="nope: file not found; WHERE$"):
        read_json_object(tmp_path / "nope", "FIX", missing="WHERE")
    path.write_text('{"a": 1}')
    assert read_json_object(path, "FIX") == ({"a": 1}, '{"a": 1}')


SWEEP = {"label": "resolved", "positive": True, "n": 40, "n_families": 6, "degenerate": False, "baselines": {},
         "rows": [{"layer": 0, "position": "last", "n": 40}],
         "best": {"layer": 0, "position": "last", "auroc": 0.9, "ci": [0.8, 1.0], "n": 40, "accuracy": 0.8,
                  "accuracy_ci": [0.7, 0.9]}}
DOSE = {"meta": {"injection": 1}, "headline": [{"goal": "stop", "group": "resolved", "choices": [
    {"layer": 3, "alpha": 1.0}], "target": {"log_odds_change": {}, "change": {}}}]}


@pytest.mark.parametrize(("model", "good", "damage", "said"), [
    (SweepSummary, SWEEP, {**SWEEP, "best": {**SWEEP["best"], "layer": "3"}}, "field 'best.layer' must be an integer"),
    (SweepSummary, SWEEP, {**SWEEP, "rows": [{"layer": 0}]}, "missing field 'rows[0].position'"),
    (SweepSummary, SWEEP, {k: v for k, v in SWEEP.items() if k != "rows"}, "missing field 'rows'"),
    (PatchingSummary, {"layers": [0, 1], "positions": ["last"]}, {"layers": "0,1", "positions": ["last"]},
     "field 'layers' must be a list"),
    (DoseSummary, DOSE, {**DOSE, "meta": {"injection": "1"}}, "field 'meta.injection' must be an integer"),
    (DoseSummary, DOSE, {**DOSE, "headline": [{"goal": "stop"}]}, "missing field 'headline[0].group'"),
])
def test_a_summary_with_a_bad_field_is_one_line_naming_it(tmp_path: Path, model: Any, good: dict, damage: dict,
                                                          said: str) -> None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(good, indent=2))
    assert read_summary(path, model, "FIX") == good  # read as written, extra keys and all
    path.write_text(json.dumps(damage, indent=2))
    with pytest.raises(InputError) as info:
        read_summary(path, model, "FIX")
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}:") and said in message and message.endswith("; FIX")


def test_the_ladder_reads_a_damaged_dose_response_or_scores_json_in_one_line(tmp_path: Path) -> None:
    from evprobe.experiments.ladder import steering_by_level

    folder = tmp_path / "dose"
    folder.mkdir()
    for text, said in (("[]", "expected a JSON object, got a list"), ("{", "not valid JSON"),
                       (json.dumps({**DOSE, "headline": [{"goal": 1}]}), "field 'headline[0].goal' must be a string")):
        (folder / "dose_response.json").write_text(text)
        with pytest.raises(InputError, match="dose_response.json:1: " + said.replace("[", r"\[").replace("]", r"\]")):
            steering_by_level((str(folder),))
    (folder / "dose_response.json").write_text(json.dumps(DOSE))
    assert steering_by_level((str(folder),))[1]["stop"].setting == "L3 alpha +1"


# -- settings refused at config time: no model loads, --out is never made -------------------------

PATCHING_BAD = [
    (["--n-boot", "0"], "key 'n_boot' must be a positive integer, got 0"),
    (["--n-boot", "-5"], "key 'n_boot' must be a positive integer, got -5"),
    (["--limit-pairs", "0"], "key 'limit_pairs' must be a positive integer or null, got 0"),
    (["--limit-pairs", "-1"], "key 'limit_pairs' must be a positive integer or null, got -1"),
    (["--positions", "last,last"], "repeats a position set"),
    (["--positions", "last,middle"], "unknown position set 'middle'"),
    (["--layers", "0,x"], "--layers must be 'all' or comma-separated integers"),
    (["--layers", "-1"], "--layers: -1 is not a layer index"),
    (["--layers", "1,1"], "repeat an index"),
    (["--regime", "loud"], "unknown regime 'loud'"),
    (["--protocol", "long"], "unknown protocol 'long'"),
    (["--dtype", "float64"], "key 'dtype' is 'float64'"),
    (["--attn-implementation", "magic"], "key 'attn_implementation' is 'magic'"),
    (["--max-memory", "0=1GiB"], "need a device map"),
    (["--shard", "2/2"], "shard"),
]


def test_patching_n_boot_in_a_config_file_is_refused_naming_the_file(bench: Path, tmp_path: Path, no_model: None,
                                                                     capsys: pytest.CaptureFixture) -> None:
    cfg = tmp_path / "p.yaml"
    cfg.write_text(f"model: tiny:llava\nbench: {bench}\nout: {tmp_path / 'out'}\nn_boot: 0\n")
    assert main(["patching", "--config", str(cfg)]) == 2
    _one_line(capsys, str(cfg), "key 'n_boot' must be a positive integer, got 0")
    assert not (tmp_path / "out").exists()


CAPTURE_BAD = [
    (["--batch-size", "0"], "--batch-size must be a positive integer, got 0"),
    (["--limit", "0"], "--limit must be a positive integer, got 0"),
    (["--limit", "-2"], "--limit must be a positive integer, got -2"),
    (["--layers", "a"], "--layers must be 'all' or comma-separated integers"),
    (["--layers", "0,-3"], "--layers: -3 is not a layer index"),
    (["--positions", "middle"], "unknown position 'middle'"),
    (["--positions", "marker:NOT IN ANY PROMPT"], "text 'NOT IN ANY PROMPT' does not occur in its prompt"),
    (["--component", "attn"], "unknown component 'attn'"),
    (["--dtype", "float64"], "key 'dtype' is 'float64'"),
    (["--attn-implementation", "magic"], "key 'attn_implementation' is 'magic'"),
    (["--offload-folder", "x"], "need a device map"),
    (["--requests", "selekt"], "unknown request type 'selekt'"),
]


RUN_BAD = [
    (["--dtype", "float64"], "key 'dtype' is 'float64'"),
    (["--attn-implementation", "magic"], "key 'attn_implementation' is 'magic'"),
    (["--limit", "0"], "--limit must be a positive integer, got 0"),
    (["--batch-size", "0"], "--batch-size must be a positive integer, got 0"),
]
BAD_SETTINGS = [(command, flags, said) for command, table in (("patching", PATCHING_BAD), ("capture", CAPTURE_BAD),
                                                               ("run", RUN_BAD)) for flags, said in table]


@pytest.mark.parametrize(("command", "flags", "said"), BAD_SETTINGS,
                         ids=[f"{c} {' '.join(f)}" for c, f, _ in BAD_SETTINGS])
def test_bad_settings_are_refused_before_the_model_loads(bench: Path, tmp_path: Path, no_model: None, command: str,
                                                         flags: list[str], said: str,
                                                         capsys: pytest.CaptureFixture) -> None:
    """patching, capture and run: each bad flag one line, with the model loading patched to fail the test
    and --out never made."""
    out = tmp_path / "out"
    assert main([command, "--model", "tiny:llava", "--bench", str(bench), "--out", str(out), *flags]) == 2
    _one_line(capsys, said)
    assert not out.exists()


# -- what only the loaded model tells: refused in open(), before meta.json -----------------------------

RESULT_FILES = ("meta.json", "acts.npy", "index.jsonl", "results.jsonl")


def _no_results(out: Path) -> None:
    """Nothing a job writes is there (a lock file of the job runner may be)."""
    assert not any((out / name).exists() for name in RESULT_FILES), sorted(p.name for p in out.iterdir())


def test_a_token_position_the_rows_do_not_have_leaves_no_meta_and_the_corrected_rerun_runs(
        bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "acts"
    base = ["capture", "--model", "tiny:llava", "--bench", str(bench), "--out", str(out), "--limit", "2",
            "--layers", "0", "--quiet", "--no-progress"]
    assert main([*base, "--positions", "last,token:99999"]) == 2
    _one_line(capsys, "position 'token[99999]': token index 99999 is out of range", "drop it from --positions")
    if out.exists():
        _no_results(out)
    assert main([*base, "--positions", "last,token:-2"]) == 0  # the folder is not pinned to the bad setting
    assert json.loads((out / "meta.json").read_text())["positions"] == ["last", "token:-2"]


def test_a_marker_on_a_model_that_reads_no_words_leaves_no_meta(bench: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "acts"
    base = ["capture", "--model", "organism", "--bench", str(bench), "--out", str(out), "--limit", "2", "--quiet",
            "--no-progress"]
    assert main([*base, "--positions", "marker:Question"]) == 2
    _one_line(capsys, "organism does not read the prompt's words", "drop it from --positions")
    if out.exists():
        _no_results(out)
    assert main([*base, "--positions", "last"]) == 0


def test_a_position_set_a_late_row_lacks_refuses_patching_before_meta(bench: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture) -> None:
    """A set with no token in one target row (here: the last target of the job) is found in open(),
    by locating every target's sets, so meta.json and results.jsonl are never written."""
    from evprobe.experiments.patching import job as patching

    real = patching.position_sets
    seen: list[str] = []

    def lacking(handle: Any, target: Any, prompt: str, images: list[Any], names: Any) -> dict[str, list[int]]:
        seen.append(target.item_id)
        if len(seen) == 4:  # 2 pairs: 4 targets, each located once before any row is computed
            raise InputError(f"{target.item_id}: position set image has no token in this row (image tokens: 0); "
                             "drop it from --positions")
        return real(handle, target, prompt, images, names)

    monkeypatch.setattr(patching, "position_sets", lacking)
    out = tmp_path / "patch"
    assert main(["patching", "--model", "tiny:llava", "--bench", str(bench), "--out", str(out), "--limit-pairs", "2",
                 "--layers", "0", "--n-boot", "20", "--quiet", "--no-progress"]) == 2
    _one_line(capsys, f"{seen[-1]}: position set image has no token", "drop it from --positions")
    if out.exists():
        _no_results(out)
