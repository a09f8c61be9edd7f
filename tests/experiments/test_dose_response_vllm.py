"""`evprobe dose-response --backend vllm` and steering_dose_response(..., backend="vllm"): the hf path's
curves, nulls and verdicts through a vLLM engine with per-request edits.

vLLM lives in its own environment (`vllm_python`); everything that needs the engine runs in ONE
subprocess there (tests/experiments/dose_vllm_driver.py: one engine start, shared by the full run, a
resumed run, two shards and their merge, the refusals that need a started CLI, and the own-data
function); this module runs the same work on the hf model here and compares.

Tolerances (stated, measured): option log-probs within LOGPROB_TOLERANCE (1e-4; both float32 forwards of
the same weights whose sums run in another order: see tests/bench/test_backend_vllm.py); every
estimate of dose_response.json within ESTIMATE_TOLERANCE (1e-3: intervals amplify the log-probs' noise by
their t quantile); choices, rates and verdicts identical except
where two letters tie within the tolerance (none do on this model: checked below, so they must be
identical).

Generated readouts (`--readout generate` and `both`; a GeneratedReadout on own data): the engine's
greedy replies are hf's rows, so rows' replies, validity, actions and token counts, the generated
estimates and the replies frame must be identical (exact), beside the log-probs' tolerance.

The model: the tiny text Llama (`tiny_text_folder`); the items: the `no_initial_test` select variant
(the only select items without an image); directions fitted per system on a capture of both_given and
no_initial_test items at layers 1 and 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from evprobe.core.errors import InputError
from evprobe.experiments.dose_response import dose_response, load_results
from evprobe.experiments.dose_response.config import LETTERS, RESULTS_FILE, load_dose_response_config

DRIVER = Path(__file__).with_name("dose_vllm_driver.py")
LOGPROB_TOLERANCE = 1e-4
# An estimate moves by at most twice the largest log-prob difference (a log-odds is a difference of two), an
# interval endpoint by that times (1 + its t quantile x the bootstrap's spread of it): at 4-6 families
# t(F-1) is 2.6-3.2. Measured: 1.0e-4 (the command's dose_response.json) and 1.1e-4 (the own-data frames)
# with log-probs within 2.7e-5; 1e-3 is ten times that, far below any difference a verdict reads.
ESTIMATE_TOLERANCE = 1e-3
ARGV = ["--config", "dose_response_tiny", "--requests", "no_initial_test", "--controls", "shuffled",
        "--n-random", "4", "--n-relabel", "2", "--alphas=-1,0,1", "--no-ablation", "--limit", "12", "--n-boot", "50",
        "--quiet"]
OWN = dict(layer=2, candidates=["A", "B", "C"], target="A", alphas=[-1.0, 0.0, 1.0], units="norm", n_random=6,
           n_boot=50)
GENERATED = ("generate", "both")  # the --readout values run through both backends
REFUSALS = {  # what each catches: (extra flags, a phrase of the one line)
    "ablation": (["--ablation"], "backend vllm makes added edits only"),
    "images": (["--requests", "select"], "the vLLM backend steers text-only prompts"),
}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def setup(tiny_text_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A bench with the no_initial_test variant; directions fitted on the text model's capture."""
    from evprobe.bench.generate import GenerateConfig, generate
    from evprobe.experiments.capture import CaptureConfig, capture
    from evprobe.probes.captures import load_captures
    from evprobe.probes.directions import fit_directions, write_directions
    from evprobe.probes.label_sets import labels
    from evprobe.probes.transfer import conditions

    root = tmp_path_factory.mktemp("dose_vllm")
    bench, acts, dirs = root / "bench", root / "acts", root / "dirs"
    generate(bench, GenerateConfig(families_per_system=2, subset_per_cell=1), progress=False)
    capture(CaptureConfig(model=str(tiny_text_folder), bench=str(bench), out=str(acts),
                          requests=("both_given", "no_initial_test"), layers="1,2", batch_size=8), progress=False)
    cs = load_captures([acts])
    ls = labels(cs, "resolved")
    conds = [(f"system={c.name}", c.mask) for c in conditions(cs, ls, "system")]
    write_directions(dirs, fit_directions(cs, ls, [1, 2], "last", "massmean", conds))
    argv = [*ARGV, "--model", str(tiny_text_folder), "--bench", str(bench), "--directions", str(dirs)]
    return {"root": root, "bench": bench, "dirs": dirs, "argv": argv, "model": tiny_text_folder}


def _own_inputs(setup: dict) -> dict:
    """The own-data function's inputs: the no_initial_test prompts, one family each, a random direction."""
    from evprobe.bench.manifest import read_items
    from evprobe.bench.protocols import build_prompt

    items = [it for it in read_items(setup["bench"]) if it.variant == "no_initial_test"][:12]
    rng = np.random.default_rng(3)
    return {**OWN, "prompts": [build_prompt(it, "direct", "standard") for it in items],
            "families": [it.family_id for it in items], "groups": [it.system for it in items],
            "direction": rng.standard_normal(128).tolist()}


@pytest.fixture(scope="module")
def driven(vllm_python: Path, setup: dict) -> dict:
    out = setup["root"] / "vllm"
    out.mkdir()
    spec = {"out": str(out), "argv": setup["argv"], "own": _own_inputs(setup),
            "refusals": {k: v[0] for k, v in REFUSALS.items()}, "generated": list(GENERATED)}
    (setup["root"] / "spec.json").write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    t = time.perf_counter()
    proc = subprocess.run([str(vllm_python), str(DRIVER), str(setup["root"] / "spec.json")], capture_output=True,
                          text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    result = json.loads((out / "driver.json").read_text())
    result["wall_s"], result["out"] = time.perf_counter() - t, out
    return result


@pytest.fixture(scope="module")
def hf_run(setup: dict) -> Path:
    """The same command on the hf model."""
    from evprobe.experiments.cli import main

    out = setup["root"] / "hf"
    assert main(["dose-response", *setup["argv"], "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def hf_generated(setup: dict) -> dict[str, Path]:
    """The same command with each generated readout on the hf model."""
    from evprobe.experiments.cli import main

    out = {}
    for readout in GENERATED:
        out[readout] = setup["root"] / f"hf_{readout}"
        assert main(["dose-response", *setup["argv"], "--readout", readout, "--out", str(out[readout])]) == 0
    return out


def _logprob_rows(folder: Path) -> dict:
    return load_results(folder / RESULTS_FILE)


def _same_rows(a: dict, b: dict) -> float:
    """Rows equal except log-probs and log-odds (within tolerance, returned: the largest difference); the
    generated readouts (gen, gen_set: replies, actions, token counts) exactly."""
    assert a.keys() == b.keys()
    worst = 0.0
    for key, x in a.items():
        y = b[key]
        if "lp_set" in x:
            assert x["lp_set"]["choice"] == y["lp_set"]["choice"], key
            worst = max(worst, float(np.abs(np.subtract(x["lp_set"]["log_odds"], y["lp_set"]["log_odds"])).max()))
        elif "lp" in x or "lp" in y:
            assert {k: v for k, v in x["lp"].items() if k != "log_odds"} == \
                   {k: v for k, v in y["lp"].items() if k != "log_odds"}, key
            worst = max(worst, *(abs(x["logprobs"][c] - y["logprobs"][c]) for c in LETTERS),
                        abs(x["lp"]["log_odds"] - y["lp"]["log_odds"]))
        assert {k: v for k, v in x.items() if k not in ("logprobs", "lp", "lp_set")} == \
               {k: v for k, v in y.items() if k not in ("logprobs", "lp", "lp_set")}
    return worst


def _numbers(obj, path=""):
    """Every number of a JSON tree by its path (booleans and text separately)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{path}/{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{path}/{i}")
    else:
        yield path, obj


def _compare_json(a: dict, b: dict, tolerance: float = ESTIMATE_TOLERANCE) -> float:
    """Equal trees except floats (within ESTIMATE_TOLERANCE; returns the largest difference)."""
    na, nb = dict(_numbers(a)), dict(_numbers(b))
    assert na.keys() == nb.keys()
    worst = 0.0
    for k, x in na.items():
        y = nb[k]
        if isinstance(x, float) or isinstance(y, float):
            if x is None or y is None or np.isnan(x) or np.isnan(y):
                assert x is y or (x is not None and y is not None and np.isnan(x) and np.isnan(y)), (k, x, y)
                continue
            worst = max(worst, abs(x - y))
            assert abs(x - y) <= tolerance, (k, x, y)
        elif k.split("/")[-1] not in ("out", "seconds"):
            assert x == y, (k, x, y)
    return worst


def test_the_engine_run_equals_hf(driven: dict, hf_run: Path) -> None:
    assert driven["full_status"] == [0, ""] or driven["full_status"][0] == 0
    assert driven["engine_starts"] == 1
    v, h = driven["out"] / "full", hf_run
    rows = _same_rows(_logprob_rows(v), _logprob_rows(h))
    assert rows <= LOGPROB_TOLERANCE
    # no two letters within the tolerance on this model: the choices cannot flip by float noise
    gaps = [sorted(r["logprobs"].values())[-1] - sorted(r["logprobs"].values())[-2]
            for r in _logprob_rows(h).values() if "logprobs" in r]
    assert min(gaps) > 2 * LOGPROB_TOLERANCE
    est = _compare_json(json.loads((v / "dose_response.json").read_text()),
                        json.loads((h / "dose_response.json").read_text()))
    mv, mh = (json.loads((f / "meta.json").read_text()) for f in (v, h))
    assert (mv["backend"], mh["backend"]) == ("vllm", None)
    assert mv["engine"] == "vllm" and mv["vllm_version"] and mv["model_dtype"] == "float32"
    assert mv["alpha_units"].keys() == mh["alpha_units"].keys()
    for layer, u in mh["alpha_units"].items():
        assert abs(mv["alpha_units"][layer]["unit_norm"] - u["unit_norm"]) <= 1e-5 * u["unit_norm"]
    # one engine call per batch of items: every condition (baseline, probe x doses, the sets) in it
    n_items = len({k[0] for k in _logprob_rows(h)})
    assert driven["engine_calls"] == -(-n_items // 8)
    print(f"\nvLLM vs hf: rows {rows:.2e}, estimates {est:.2e}; {driven['engine_calls']} engine calls; "
          f"driver {driven['wall_s']:.0f} s, engine start {driven['engine_start_s']:.0f} s, full run {driven['full_s']:.0f} s")


def test_resume_and_shards(driven: dict) -> None:
    full = _logprob_rows(driven["out"] / "full")
    assert driven["resume_status"][0] == 0
    resumed = _logprob_rows(driven["out"] / "resume")
    assert resumed.keys() == full.keys()
    assert _same_rows(resumed, full) <= LOGPROB_TOLERANCE
    assert driven["resume_calls"] >= 1
    assert driven["shard0_status"][0] == driven["shard1_status"][0] == driven["merge_status"][0] == 0
    merged = _logprob_rows(driven["out"] / "merged")
    assert merged.keys() == full.keys()
    assert _same_rows(merged, full) <= LOGPROB_TOLERANCE


def test_refusals_are_one_line_before_the_engine(driven: dict) -> None:
    for name, (_, phrase) in REFUSALS.items():
        status, line = driven["refusals"][name]
        assert status == 2 and phrase in line, (name, status, line)
        assert not (driven["out"] / f"refused_{name}" / RESULTS_FILE).exists()


def test_another_backend_cannot_resume_a_folder(driven: dict, setup: dict) -> None:
    cfg = replace(load_dose_response_config("dose_response_tiny", {"bench": str(setup["bench"]),
                                                                   "directions": str(setup["dirs"])}),
                  model=str(setup["model"]), requests=("no_initial_test",), controls=("shuffled",), n_random=4,
                  n_relabel=2, alphas=(-1.0, 0.0, 1.0), ablation=False, limit=12, n_boot=50,
                  out=str(driven["out"] / "full"))
    with pytest.raises(InputError, match="backend='vllm', this run has backend=None"):
        dose_response(cfg, progress=False)


def test_own_data_function_equals_hf(driven: dict, setup: dict) -> None:
    from evprobe import hooks
    from evprobe.analysis.dose_response import steering_dose_response

    own = _own_inputs(setup)
    handle = hooks.load(str(setup["model"]), dtype="float32")
    res = steering_dose_response(handle, own["prompts"], None, direction=np.asarray(own["direction"]),
                                 layer=own["layer"], candidates=own["candidates"], target=own["target"],
                                 families=own["families"], groups=own["groups"], alphas=own["alphas"],
                                 units=own["units"], n_random=own["n_random"], n_relabel=0, n_boot=own["n_boot"])
    got = driven["own"]
    worst = 0.0
    for name in ("effects", "null", "crossfit", "items"):
        ours = json.loads(res.to_dataframe(name).to_json(orient="records"))
        worst = max(worst, _compare_json({"rows": ours}, {"rows": got["frames"][name]}))
    for layer, u in res.units.items():
        assert abs(got["units"][str(layer)] - u.norm) <= 1e-5 * u.norm
    assert got["verdict"] == (None if res.verdict is None else res.verdict.specific)
    print(f"\nown-data vLLM vs hf: largest difference {worst:.2e}; engine {got['seconds']:.1f} s")
    with pytest.raises(InputError, match="backend='vllm' steers through an engine"):
        steering_dose_response(handle, own["prompts"], None, direction=np.asarray(own["direction"]), layer=2,
                               candidates=["A", "B"], target="A", families=own["families"], backend="vllm")


def test_generated_readouts_equal_hf(driven: dict, hf_generated: dict[str, Path]) -> None:
    """--readout generate and both through the engine: hf's rows (replies exactly), rates and verdicts."""
    n_items = 12
    for readout in GENERATED:
        assert driven[f"gen_{readout}_status"][0] == 0, driven[f"gen_{readout}_status"]
        v, h = driven["out"] / f"gen_{readout}", hf_generated[readout]
        rows_v, rows_h = _logprob_rows(v), _logprob_rows(h)
        worst = _same_rows(rows_v, rows_h)  # gen / gen_set compared exactly
        assert worst <= LOGPROB_TOLERANCE
        replies = [r["gen"] for r in rows_h.values() if "gen" in r]
        sets = sum(len(r["gen_set"]["action"]) for r in rows_h.values() if "gen_set" in r)
        base = {r["item_id"]: r["gen"]["reply"] for r in rows_h.values() if r["kind"] == "baseline"}
        moved = sum(r["gen"]["reply"] != base[r["item_id"]] for r in rows_h.values() if "gen" in r)
        assert moved > 0  # the edits change replies: equal rows are not unsteered ones
        # generated estimates read replies only: identical; both's log-prob estimates within the tolerance
        est = _compare_json(json.loads((v / "dose_response.json").read_text()),
                            json.loads((h / "dose_response.json").read_text()),
                            0.0 if readout == "generate" else ESTIMATE_TOLERANCE)
        # one engine call per batch of items and readout
        assert driven[f"gen_{readout}_calls"] == -(-n_items // 8) * (1 if readout == "generate" else 2)
        print(f"\n--readout {readout}: {len(rows_h)} rows equal, {len(replies)} replies identical ({moved} moved "
              f"by their edit), {sets} set replies' actions identical; log-probs {worst:.2e}, estimates {est:.2e}; "
              f"{driven[f'gen_{readout}_calls']} engine calls, {driven[f'gen_{readout}_s']:.0f} s")


def test_own_data_generated_readout_equals_hf(driven: dict, setup: dict) -> None:
    from evprobe import hooks
    from evprobe.analysis.dose_response import steering_dose_response
    from tests.experiments.dose_vllm_driver import own_readout

    own = _own_inputs(setup)
    handle = hooks.load(str(setup["model"]), dtype="float32")
    res = steering_dose_response(handle, own["prompts"], None, direction=np.asarray(own["direction"]),
                                 layer=own["layer"], **own_readout(own, True), families=own["families"],
                                 groups=own["groups"], alphas=own["alphas"], units=own["units"],
                                 n_random=own["n_random"], n_relabel=0, n_boot=own["n_boot"])
    got = driven["own_gen"]
    replies = json.loads(res.to_dataframe("replies").to_json(orient="records"))
    assert replies == got["frames"]["replies"]
    for name in ("effects", "null", "crossfit", "items"):  # read from identical replies: identical
        _compare_json({"rows": json.loads(res.to_dataframe(name).to_json(orient="records"))},
                      {"rows": got["frames"][name]}, 0.0)
    assert got["verdict"] == (None if res.verdict is None else res.verdict.specific)
    print(f"\nown-data generated: {len(replies)} replies identical; engine {got['seconds']:.1f} s")


def test_an_engine_reply_hf_would_not_end_is_one_line() -> None:
    """analysis.engine_model.hf_reply: hf's row (cut after its first EOS), and a reply the engine ended
    early at a token hf does not stop at (vLLM also stops at the tokenizer's EOS) refused."""
    from evprobe.analysis.engine_model import hf_reply

    assert hf_reply([5, 7, 2, 9], {2}, 8) == [5, 7, 2]
    assert hf_reply([5, 7, 9], {2}, 3) == [5, 7, 9]  # cut off by max_new_tokens
    with pytest.raises(RuntimeError, match="stopped after 2 of 8 tokens at token \\[7\\]"):
        hf_reply([5, 7], {2}, 8)
