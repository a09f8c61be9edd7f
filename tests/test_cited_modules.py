"""Every module evprobe's text cites (in a docstring, comment or message: `experiments.dose_response.null`,
`hooks.sites.SiteMap`, ...) and every one the docs cite exists: a citation is how a reader finds
the code behind a number, and one left stale by a move (issue 27's subpackages) sends them nowhere.
The outputs cite modules too (dose_response.json's rules), so this also keeps reports honest."""

from __future__ import annotations

import importlib
import importlib.util
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("core", "bench", "hooks", "probes", "analysis", "experiments", "organism")
CITE = re.compile(rf"(?<![\w./-])(?:evprobe\.)?(?:{'|'.join(PARTS)})(?:\.[A-Za-z_]\w*)+")
FILE_NAME = re.compile(r"\.(json|jsonl|md|png|py|yaml|npy|safetensors|html|csv|txt|ipynb)$")


def resolves(ref: str) -> bool:
    """Whether `ref` ("experiments.dose_response.null.null_stats") names a module and, after the
    longest module prefix, attributes (or dataclass fields) of it."""
    parts = ref.removeprefix("evprobe.").split(".")
    for i in range(len(parts), 0, -1):
        name = "evprobe." + ".".join(parts[:i])
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            continue
        obj = importlib.import_module(name)
        for attr in parts[i:]:
            if attr in getattr(obj, "__dataclass_fields__", {}):
                return attr == parts[-1]
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def citations(text: str) -> list[str]:
    return [m.group(0).rstrip(".") for m in CITE.finditer(text) if not FILE_NAME.search(m.group(0).rstrip("."))]


def python_text(path: Path) -> list[tuple[int, str]]:
    """(line, text) of the strings and comments of a source file: its code is not a citation."""
    kinds = {tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    return [(t.start[0], t.string) for t in tokens if t.type in kinds]


def stale(paths: list[Path]) -> list[str]:
    out = []
    for path in paths:
        chunks = python_text(path) if path.suffix == ".py" else enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        out += [f"{path.relative_to(ROOT)}:{line}: {ref}" for line, text in chunks for ref in citations(text)
                if not resolves(ref)]
    return out


def test_every_module_the_code_and_docs_cite_exists() -> None:
    paths = sorted(p for part in PARTS for p in (ROOT / part).rglob("*.py"))
    paths += sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
    bad = stale(paths)
    assert not bad, "stale citations (name the module where the code now lives):\n" + "\n".join(bad)


@pytest.mark.parametrize("ref, ok", [
    ("evprobe.experiments.dose_response", True),
    ("evprobe.experiments.dose_response.null.null_stats", True),
    ("evprobe.hooks.spans.Spans.last", True),  # a dataclass field
    ("experiments.dose_null", False),  # the module before the move
    ("evprobe.experiments.steering_conventions.LETTERS", False),  # no such name there
    ("hooks.layers.COMPONENTS", False),
])
def test_a_stale_citation_is_caught(ref: str, ok: bool) -> None:
    assert resolves(ref) is ok
    assert citations(f"the band (see {ref}).") == [ref]


def test_a_stale_citation_in_a_file_is_named_with_its_line(tmp_path: Path) -> None:
    planted = ROOT / "tests" / "_planted_citation.py"  # under ROOT: the message names the path from there
    planted.write_text('x = bench.items.get  # code, not a citation\n"""cites experiments.dose_plan"""\n')
    try:
        assert stale([planted]) == ["tests/_planted_citation.py:2: experiments.dose_plan"]
    finally:
        planted.unlink()
