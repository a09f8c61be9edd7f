"""docs/howto/own-data.md runs as written, top to bottom, in a scratch folder: its Python blocks in
one namespace, its evprobe commands through the CLI, as a reader would, on the three models the page
names: the tiny LLaVA as written, a text-only base LM (GPT-2, built offline) and the LLaVA wrapped in
nnsight, each by changing only the page's `handle = ...` line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from evprobe.experiments.cli import main

PAGE = Path(__file__).parents[2] / "docs" / "howto" / "own-data.md"
HANDLE_LINE = 'handle = evprobe.tiny("llava")\n'
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def base_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from evprobe.hooks.tiny_text import save_tiny_base_model

    return save_tiny_base_model(tmp_path_factory.mktemp("gpt2") / "gpt2", arch="gpt2")


def _handle_line(model: str, base_lm: Path) -> str:
    if model == "llava":
        return HANDLE_LINE
    if model == "gpt2":
        return f"handle = evprobe.load({str(base_lm)!r})\n"
    return ("from nnsight import NNsight\n_tiny = evprobe.tiny('llava')\n"
            "handle = evprobe.wrap(NNsight(_tiny.model), _tiny.processor)\n")


@pytest.mark.parametrize("model", ["llava", "gpt2", "nnsight-llava"])
def test_the_page_runs_as_written(model: str, base_lm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = PAGE.read_text()
    assert text.count(HANDLE_LINE) == 1  # the one line a reader changes
    text = text.replace(HANDLE_LINE, _handle_line(model, base_lm))
    namespace: dict = {}
    blocks = re.findall(r"```(python|bash)\n(.*?)```", text, re.S)
    assert [kind for kind, _ in blocks].count("python") >= 8
    for kind, code in blocks:
        if kind == "python":
            exec(compile(code, str(PAGE), "exec"), namespace)  # noqa: S102 (the repository's own page)
        else:
            for line in code.splitlines():
                if line.startswith("evprobe "):
                    assert main(shlex.split(line)[1:]) == 0, line
    handle = namespace["handle"]
    assert (model == "gpt2") == (not any(namespace["images"]))  # the text-only model read no images
    assert (tmp_path / "out" / "mine" / "dose_response.png").stat().st_size > 10_000
    assert (tmp_path / "out" / "mine" / "patching.png").stat().st_size > 10_000
    dose = namespace["dose"]
    assert set(dose.crossfit["group"]) == {"all", "enough", "not enough"}
    assert set(dose.crossfit["null"]) == {"random", "label-free"}  # the direction's own fit rows, from its capture
    assert dose.verdict.specific in (True, False) and not dose.notes
    patched = namespace["patched"]
    assert len(patched.rows) == 8  # 4 pairs, both ways
    assert patched.frame.query("measure == 'mean_change'")["value"].notna().all()
    effects = namespace["effects"]  # paired_effects on the page's own steered readouts
    assert set(effects["condition"]) == {"unsteered", "L3 +0.5"}
    assert set(effects.query("condition == 'L3 +0.5'")["measure"]) == {"log_odds", "chose_A", "log_odds_change",
                                                                          "chose_A_change"}
    mine = namespace["mine"]  # fitted from arrays: the command's vector, and it carries its rows
    assert mine.name == "enough.massmean.L3.last" and mine.fit_rows.acts.shape == (32, handle.d_model)
    tables = namespace["tables"]
    assert all(len(frame) > 0 for frame in tables.values())
    assert set(tables["null"]["null"]) == {"random", "label-free"}
