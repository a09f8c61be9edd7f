"""`evprobe parity`: two runs of the same items compared record by record.

The real check: the tiny text Llama on 8 both_given items (float32, greedy, --option-logprobs), run
once in batches of 1 and once in batches of 4 on the hf backend, agrees on every field, with the
option log-probs within parity's default tolerance, 1e-4 (padding changes the order of float32 sums:
a few 1e-6 are measured).
Then a planted disagreement in a copy (a changed choice; a log-prob moved beyond the tolerance) is
caught and named, and runs that are not comparable are refused in one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evprobe.bench.model_config import ModelConfig
from evprobe.bench.runner import RunConfig, run
from evprobe.core.errors import InputError
from evprobe.experiments.cli import main
from evprobe.experiments.parity import DECISION, DEFAULT_TOLERANCE, FIELDS, parity

pytestmark = pytest.mark.usefixtures("one_torch_thread")
N = 8


@pytest.fixture(scope="module")
def hf_runs(small_bench: Path, tiny_text_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(batch size 1, batch size 4): the same 8 items, float32 greedy with option log-probs."""
    root = tmp_path_factory.mktemp("parity")
    out = []
    for batch_size in (1, 4):
        folder = root / f"bs{batch_size}"
        run(RunConfig(model=ModelConfig.of(str(tiny_text_folder), dtype="float32"), bench=str(small_bench),
                      out=str(folder), requests=("both_given",), limit=N, batch_size=batch_size, option_logprobs=True),
            progress=False)
        out.append(folder)
    return out[0], out[1]


def _copy(run_dir: Path, tmp_path: Path, name: str = "copy") -> Path:
    dst = tmp_path / name
    shutil.copytree(run_dir, dst)
    return dst


def _edit_record(run_dir: Path, index: int, **changes) -> str:
    """Change fields of the index-th record line in place; returns its item id."""
    path = run_dir / "records.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[index])
    for key, value in changes.items():
        row[key] = value(row[key]) if callable(value) else value
    lines[index] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")
    return row["item_id"]


def _edit_meta(run_dir: Path, **changes) -> None:
    path = run_dir / "run.json"
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta, indent=2))


def test_batched_and_single_hf_runs_agree_on_every_record(hf_runs, tmp_path, capsys) -> None:
    single, batched = hf_runs
    result = parity(single, batched)
    assert result.ok, result.markdown()
    assert result.n_common == N and not result.only_a and not result.only_b
    assert result.agree == {**dict.fromkeys(FIELDS, N), "decision": N, "option_logprobs": N}
    assert result.n_logprobs == N and result.backend_a == result.backend_b == "hf"
    assert 0 <= result.max_logprob_diff <= DEFAULT_TOLERANCE and result.max_logprob_item is not None
    assert result.tolerance == DEFAULT_TOLERANCE
    assert "--batch-size: 1 vs 4" in result.notes
    # the command: exit 0, the table on stdout, the JSON written only where asked
    out = tmp_path / "parity.json"
    assert main(["parity", str(single), str(batched), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "hf vs hf: agree" in printed and "| decision | 8 | 8 |" in printed
    written = json.loads(out.read_text())
    assert written["ok"] is True and written["n_common"] == N and written["disagreements"] == []
    assert not list(single.glob("parity*")) and not list(batched.glob("parity*"))
    assert main(["parity", str(single), str(batched), "--out", str(tmp_path / "parity.md")]) == 0
    assert (tmp_path / "parity.md").read_text().startswith("# Parity: ")


def test_a_changed_choice_is_caught_and_named(hf_runs, tmp_path, capsys) -> None:
    single, batched = hf_runs
    planted = _copy(batched, tmp_path)
    before = json.loads((planted / "records.jsonl").read_text().splitlines()[3])["choice"]
    letter = "A" if before == "B" else "B"
    item = _edit_record(planted, 3, choice=letter)
    result = parity(single, planted)
    assert not result.ok and [d.item_id for d in result.disagreements] == [item]
    diff = result.disagreements[0]
    assert diff.fields == ("choice",) and diff.a["choice"] == before and diff.b["choice"] == letter
    assert result.agree["decision"] == N - 1 and result.agree["choice"] == N - 1 and result.agree["reply"] == N
    assert main(["parity", str(single), str(planted)]) == 1
    printed = capsys.readouterr().out
    assert f"| {item} | choice | {json.dumps(before)} | \"{letter}\" |" in printed
    assert "DISAGREE on 1 of 8 items" in printed


def test_a_log_prob_beyond_the_tolerance_is_caught_at_its_item_and_letter(hf_runs, tmp_path) -> None:
    single, batched = hf_runs
    planted = _copy(batched, tmp_path)
    item = _edit_record(planted, 5, option_logprobs=lambda lp: {**lp, "C": lp["C"] - 1e-3})
    result = parity(single, planted, 1e-4)
    assert [d.item_id for d in result.disagreements] == [item]
    assert result.disagreements[0].fields == ("option_logprobs",)
    assert result.max_logprob_item == item and result.max_logprob_letter == "C"
    assert result.max_logprob_diff == pytest.approx(1e-3, rel=1e-2)
    assert result.agree["option_logprobs"] == N - 1 and result.agree["decision"] == N
    assert parity(single, planted, 1e-2).ok  # within a looser tolerance
    unjudged = parity(single, planted, None)  # reported, not judged
    assert unjudged.ok and "option_logprobs" not in unjudged.agree and unjudged.max_logprob_item == item
    # log-probs in one record only (a server that returns none): not compared, counted and noted with the reason
    missing = _copy(batched, tmp_path, "missing")
    _edit_record(missing, 0, option_logprobs=None, logprobs_missing="the server returned none")
    item = _edit_record(missing, 1, option_logprobs=lambda lp: {k: v for k, v in lp.items() if k != "A"})
    result = parity(single, missing)
    assert result.n_logprobs == N - 1 and result.n_logprobs_one_side == 1 and result.agree["option_logprobs"] == N - 2
    assert any("1 items have option log-probs only in the other run" in n and "the server returned none" in n
               for n in result.notes)
    # ... but two records naming different letters disagree
    assert [d.item_id for d in result.disagreements] == [item]


def test_runs_that_are_not_comparable_are_refused_in_one_line(hf_runs, tmp_path, capsys) -> None:
    single, batched = hf_runs
    cases = [
        ({"protocol": "brief"}, "different protocols"),
        ({"regime": "guided"}, "different regimes"),
        ({"items_sha256": "0" * 64}, "different benchmarks (items hash)"),
        ({"model_weights_sha256": "1" * 64}, "ran different model weights"),
        ({"temperature": 0.7}, "sampled records agree only by chance"),
    ]
    for i, (changes, words) in enumerate(cases):
        other = _copy(batched, tmp_path, f"case{i}")
        _edit_meta(other, **changes)
        with pytest.raises(InputError) as err:
            parity(single, other)
        assert words in str(err.value) and "\n" not in str(err.value), changes
        assert main(["parity", str(single), str(other)]) == 2
        assert words in capsys.readouterr().err
    # sampled runs compare with --sampled, and say so
    result = parity(single, other, sampled=True)
    assert result.ok and any(n.startswith("sampled runs") for n in result.notes)
    # different items: refused, or the common ones with --common
    fewer = _copy(batched, tmp_path, "fewer")
    lines = (fewer / "records.jsonl").read_text().splitlines()
    (fewer / "records.jsonl").write_text("\n".join(lines[:6]) + "\n")
    with pytest.raises(InputError, match=r"2 items only in the first, 0 only in the second .*pass --common"):
        parity(single, fewer)
    result = parity(single, fewer, common=True)
    assert result.ok and result.n_common == 6 and len(result.only_a) == 2 and not result.only_b
    assert main(["parity", str(single), str(fewer), "--common"]) == 0
    # not a run folder, a bad tolerance
    with pytest.raises(InputError, match="is not a run folder"):
        parity(single, tmp_path / "nothing")
    assert main(["parity", str(single), str(batched), "--tolerance", "-1"]) == 2
    assert "must be a number >= 0" in capsys.readouterr().err


def test_the_decision_is_what_the_parser_decoded() -> None:
    assert set(DECISION) <= set(FIELDS) and {"choice", "action", "answer", "value", "valid"} == set(DECISION)
