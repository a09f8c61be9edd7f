"""docs/howto/own-data.md runs as written, top to bottom, in a scratch folder: its Python blocks in
one namespace, its evprobe commands through the CLI, as a reader would on the tiny LLaVA."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from evprobe.experiments.cli import main

PAGE = Path(__file__).parents[2] / "docs" / "howto" / "own-data.md"
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_page_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    blocks = re.findall(r"```(python|bash)\n(.*?)```", PAGE.read_text(), re.S)
    assert [kind for kind, _ in blocks].count("python") >= 6
    for kind, code in blocks:
        if kind == "python":
            exec(compile(code, str(PAGE), "exec"), namespace)  # noqa: S102 (the repository's own page)
        else:
            for line in code.splitlines():
                if line.startswith("evprobe "):
                    assert main(shlex.split(line)[1:]) == 0, line
    assert (tmp_path / "out" / "mine" / "dose_response.png").stat().st_size > 10_000
    assert (tmp_path / "out" / "mine" / "patching.png").stat().st_size > 10_000
    result = namespace["result"]
    assert set(result.crossfit["group"]) == {"all", "enough", "not enough"}
    assert set(result.crossfit["null"]) == {"random", "label-free"}  # the direction's own fit rows, from its capture
    assert result.verdict["specific"] in (True, False) and not result.notes
    assert len(namespace["patched"].rows) == 8  # 4 pairs, both ways
    effects = namespace["effects"]  # paired_effects on the page's own steered readouts
    assert set(effects["condition"]) == {"unsteered", "L3 +0.5"}
    assert set(effects.query("condition == 'L3 +0.5'")["measure"]) == {"log_odds", "chose_A", "log_odds_change",
                                                                          "chose_A_change"}
