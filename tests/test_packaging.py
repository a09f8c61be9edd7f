"""Packaging: one installed name, `evprobe`, with its package data, in a wheel and in editable mode.

- The wheel is built once per module (pip, offline, no build isolation) from a copy of the tree,
  so setuptools' `build/` and `*.egg-info` land in the copy, never in the repository.
- The wheel holds nothing but `evprobe/` and its dist-info, plus the organism checkpoint and the
  YAML configs; installed with `pip install --target` it runs from outside the repository, ahead
  of the venv's editable finder.
- The editable install still runs from the repository folders.
- No code spells a part by its bare folder name (`import bench`, `from hooks import ...`,
  "bench.runner" as a module path, `-m experiments`): every part is `evprobe.<name>`.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PARTS = ("core", "bench", "hooks", "probes", "experiments", "organism")
SCANNED = (*PARTS, "evprobe", "tests", "benchmarks")
CHECKPOINT_FILES = ("config.json", "generation_config.json", "model.safetensors", "organism.json",
                    "processor_config.json", "tokenizer.json", "tokenizer_config.json")
# Not copied into the build tree (at its top level): the venvs (.venv, and .venv-vllm and .venv-video that .ci/run
# makes: 3.8 GB, which took 90 s to copy), git, and what builds and runs write.
_TOP_IGNORED = {".git", "build", "dist", "out", "runs", ".pytest_cache", ".hypothesis", ".ruff_cache"}


# ------------------------------------------------------------------------------------------------
# helpers


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_INPUT="1", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: int = 180) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{cmd} exited {out.returncode}\nstdout:\n{out.stdout[-3000:]}\nstderr:\n{out.stderr[-3000:]}"
    return out


def _repo_junk() -> set[str]:
    """Build leftovers that a build run in the repository would leave (build/, dist/, *.egg-info)."""
    found = {p for p in ("build", "dist") if (REPO / p).exists()}
    for folder in (REPO, *(REPO / part for part in (*PARTS, "evprobe", "configs"))):
        found |= {str(p.relative_to(REPO)) for p in folder.glob("*.egg-info")}
    return found


def _copy_ignore(folder: str, names: list[str]) -> set[str]:
    top = Path(folder).resolve() == REPO
    return {n for n in names
            if n == "__pycache__" or n.endswith((".pyc", ".egg-info"))
            or (top and (n in _TOP_IGNORED or n.startswith(".venv")))}


def _editable_install() -> bool:
    """Whether this interpreter has evprobe installed in editable mode (PEP 660). Every `evprobe`
    distribution is looked at: run from the repository, its evprobe.egg-info comes first."""
    for dist in metadata.distributions(name="evprobe"):
        text = dist.read_text("direct_url.json")
        if text and json.loads(text).get("dir_info", {}).get("editable"):
            return True
    return False


def _under(path: str | Path, folder: Path) -> bool:
    return Path(path).resolve().is_relative_to(folder.resolve())


# ------------------------------------------------------------------------------------------------
# the wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built once from a copy of the tree (so the repository gets no build junk)."""
    tmp = tmp_path_factory.mktemp("wheel")
    junk_before = _repo_junk()
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=_copy_ignore)
    out = tmp / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(out), str(src)], cwd=tmp, env=_env(), timeout=300)
    assert _repo_junk() == junk_before, "building the wheel left build/ or *.egg-info in the repository"
    wheels = list(out.glob("evprobe-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def site(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A regular (non-editable) install of the wheel: pip install --target SITE."""
    site = tmp_path_factory.mktemp("install") / "site"
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile", "-q",
          "--target", str(site), str(wheel)], cwd=site.parent, env=_env(), timeout=300)
    return site


def test_wheel_installs_only_evprobe(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        dist_info = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        assert len(dist_info) == 1 and next(iter(dist_info)).startswith("evprobe-"), dist_info
        (dist_info,) = dist_info
        stray = [n for n in names if not (n.startswith("evprobe/") or n.startswith(dist_info + "/"))]
        assert not stray, f"files outside evprobe/ in the wheel: {stray}"
        if f"{dist_info}/top_level.txt" in names:
            assert zf.read(f"{dist_info}/top_level.txt").decode().split() == ["evprobe"]
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode()
    targets = [line.split("=", 1)[1].strip() for line in entry_points.splitlines() if "=" in line]
    assert targets and all(t.startswith("evprobe.") for t in targets), targets
    # every part is a package in the wheel; no tests, benchmarks or notebooks ship
    for part in PARTS:
        assert f"evprobe/{part}/__init__.py" in names, part
    assert "evprobe/__init__.py" in names and "evprobe/__main__.py" in names
    # and every subpackage: a folder of a part with an __init__.py (evprobe.bench.backends was once missing)
    for init in sorted(p for part in PARTS for p in (REPO / part).rglob("__init__.py")):
        assert f"evprobe/{init.relative_to(REPO).as_posix()}" in names, init


def test_wheel_has_package_data(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for name in CHECKPOINT_FILES:
            assert f"evprobe/organism/checkpoint/{name}" in names, name
        size = zf.getinfo("evprobe/organism/checkpoint/model.safetensors").file_size
        assert size == (REPO / "organism" / "checkpoint" / "model.safetensors").stat().st_size
    for kind in ("models", "experiments"):
        expected = {p.name for p in (REPO / "configs" / kind).glob("*.yaml")}
        assert expected, kind
        shipped = {n.rsplit("/", 1)[1] for n in names if n.startswith(f"evprobe/configs/{kind}/") and n.endswith(".yaml")}
        assert shipped == expected, (kind, expected ^ shipped)


def test_build_junk_is_ignored_by_git() -> None:
    """Should a build run in the repository, its leftovers are not files git would track."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("no git checkout")
    paths = ["build/lib/x.py", "dist/evprobe.whl", "evprobe.egg-info/PKG-INFO"]
    out = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=REPO, capture_output=True, text=True)
    assert sorted(out.stdout.split()) == sorted(paths), out.stdout + out.stderr


# ------------------------------------------------------------------------------------------------
# a regular install, run from outside the repository

_CHILD = r"""
import importlib.metadata as md, json, sys
import evprobe, evprobe.bench.generate, evprobe.experiments.cli, evprobe.organism.checkpoint, evprobe.hooks
import evprobe.experiments.config
from evprobe.organism.checkpoint import checkpoint_path
from evprobe.experiments.config import CONFIGS_DIR

modules = ["evprobe", "evprobe.bench", "evprobe.bench.generate", "evprobe.experiments.cli",
           "evprobe.experiments.config", "evprobe.organism.checkpoint", "evprobe.hooks", "evprobe.core"]
ep = next(e for e in md.entry_points(group="evprobe.models") if e.name == "organism")
print(json.dumps({
    "files": {m: sys.modules[m].__file__ for m in modules},
    "path": list(evprobe.__path__),
    "checkpoint": checkpoint_path(),
    "configs": str(CONFIGS_DIR),
    "entry_point": sys.modules[ep.load().__module__].__file__,
    "editable_finder": any(getattr(f, "__module__", "").startswith("__editable__") for f in sys.meta_path),
    "bare": sorted(m for m in sys.modules if m.split(".")[0] in %r),
}))
""" % (PARTS,)


def test_regular_install_runs_outside_the_repo(site: Path, tmp_path: Path) -> None:
    env = _env(PYTHONPATH=str(site))
    out = _run([sys.executable, "-c", _CHILD], cwd=tmp_path, env=env)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    for module, file in got["files"].items():
        assert _under(file, site), f"{module} imported from {file}, not from the wheel's copy in {site}"
    assert [Path(p).resolve() for p in got["path"]] == [(site / "evprobe").resolve()]
    if _editable_install():
        # the venv's editable finder is on sys.meta_path too; PYTHONPATH's copy still wins
        assert got["editable_finder"]
    assert got["bare"] == [], f"bare top-level modules imported: {got['bare']}"

    checkpoint = Path(got["checkpoint"])
    assert _under(checkpoint, site) and (checkpoint / "model.safetensors").is_file()
    assert _under(got["entry_point"], site)
    configs = Path(got["configs"])
    assert configs.resolve() == (site / "evprobe" / "configs").resolve()
    for kind in ("models", "experiments"):
        assert {p.name for p in (configs / kind).glob("*.yaml")} == {p.name for p in (REPO / "configs" / kind).glob("*.yaml")}


def test_regular_install_cli(site: Path, tmp_path: Path) -> None:
    env = _env(PYTHONPATH=str(site))
    out = _run([sys.executable, "-m", "evprobe", "--help"], cwd=tmp_path, env=env)
    assert "generate" in out.stdout and "usage:" in out.stdout

    bench = tmp_path / "bench"
    # -v: the interpreter names every file it loads, so we can see which copy ran
    out = _run([sys.executable, "-v", "-m", "evprobe", "generate", "--out", str(bench), "--pilot", "--quiet"],
               cwd=tmp_path, env=env, timeout=300)
    loaded = out.stderr
    assert str(site / "evprobe" / "bench" / "generate.py") in loaded
    from_repo = sorted({m.group(0) for part in (*PARTS, "evprobe", "configs")
                        for m in re.finditer(re.escape(str(REPO / part)) + r"/[\w/.]+", loaded)})
    assert not from_repo, f"the wheel's CLI loaded repository files: {from_repo[:10]}"
    for name in ("bench.json", "families.jsonl", "items.jsonl"):
        assert (bench / name).is_file() and (bench / name).stat().st_size > 0, name
    assert any((bench / "images").iterdir())
    families = (bench / "families.jsonl").read_text().splitlines()
    meta = json.loads((bench / "bench.json").read_text())
    assert families and isinstance(meta, dict)


# ------------------------------------------------------------------------------------------------
# the editable install


def test_editable_install_still_runs_from_the_repo(wheel: Path, tmp_path: Path) -> None:
    """After the wheel build (the `wheel` fixture), the venv's editable install is intact."""
    if not _editable_install():
        pytest.skip("evprobe is not installed in editable mode in this interpreter")
    script = Path(sys.executable).parent / "evprobe"
    assert script.is_file(), f"no console script at {script}"
    out = _run([str(script), "--help"], cwd=tmp_path, env=_env())
    assert "generate" in out.stdout and "usage:" in out.stdout
    code = ("import json, evprobe, evprobe.bench, evprobe.experiments.config as c; "
            "print(json.dumps([evprobe.__file__, evprobe.bench.__file__, str(c.CONFIGS_DIR)]))")
    out = _run([sys.executable, "-c", code], cwd=tmp_path, env=_env())
    top, bench, configs = json.loads(out.stdout.strip().splitlines()[-1])
    assert _under(top, REPO / "evprobe")
    assert _under(bench, REPO / "bench"), bench
    assert Path(configs).resolve() == (REPO / "configs").resolve()


# ------------------------------------------------------------------------------------------------
# no bare top-level imports

_NAMES = "|".join(PARTS)
_MODULE_PATH = re.compile(rf"(?:{_NAMES})(?:\.[A-Za-z_]\w*)*")
_DASH_M = re.compile(rf"(?:^|\s)-m\s+((?:{_NAMES})(?:\.[A-Za-z_]\w*)*)(?=$|[\s'\";])")
_IMPORT_CALLS = {"import_module", "__import__", "find_spec", "resolve_name", "run_module"}


def _bare(module: str | None) -> bool:
    return bool(module) and module.split(".")[0] in PARTS


def _names_repo_module(text: str, root: Path | None) -> bool:
    """'bench.runner' or 'bench.runner:run' or 'bench.runner.PINNED' naming a module in the repo."""
    module = text.split(":", 1)[0]
    if not _MODULE_PATH.fullmatch(module) or "." not in module or root is None:
        return False
    first, second = module.split(".")[:2]
    return (root / first / f"{second}.py").is_file() or (root / first / second / "__init__.py").is_file()


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _string_text(node: ast.AST) -> str | None:
    """A constant string, or an f-string's leading constant part (enough to see 'bench.' in it)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)
    return None


def _code_lines(text: str) -> list[tuple[int, str]]:
    """Lines of a string that read as one import statement (docstring examples, >>> sessions)."""
    found = []
    for i, line in enumerate(text.splitlines()):
        s = line.strip()
        for prefix in (">>> ", "... ", "$ "):
            s = s.removeprefix(prefix)
        if s.startswith(("import ", "from ")):
            found.append((i, s))
    return found


def scan_source(source: str, filename: str = "<string>", *, root: Path | None = REPO, line_offset: int = 0,
                _depth: int = 0) -> list[str]:
    """'file:line: what' for every bare import of a part (bench, hooks, probes, experiments, organism,
    core) in `source`: import statements, import strings (importlib, entry points, mock targets naming
    a repository module, `-m NAME`), and the same inside code and docstrings held in strings."""
    tree = ast.parse(source, filename)
    found: list[str] = []

    def report(lineno: int, what: str) -> None:
        found.append(f"{filename}:{lineno + line_offset}: {what}")

    def check_string(node: ast.AST, text: str) -> None:
        if _names_repo_module(text.strip(), root):
            report(node.lineno, f"module path string {text.strip()!r}")
        for m in _DASH_M.finditer(text):
            report(node.lineno, f"'-m {m.group(1)}' in a string")
        if "import" not in text or _depth > 3:
            return
        # code in a string (python -c, child scripts): parse it whole, else line by line
        try:
            nested = ast.parse(textwrap.dedent(text))
        except SyntaxError:
            nested = None
        if nested is not None and any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(nested)):
            found.extend(scan_source(textwrap.dedent(text), filename, root=root,
                                     line_offset=line_offset + node.lineno - 1, _depth=_depth + 1))
            return
        for i, line in _code_lines(text):
            try:
                found.extend(scan_source(line, filename, root=root,
                                         line_offset=line_offset + node.lineno + i - 1, _depth=_depth + 1))
            except SyntaxError:
                continue

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _bare(alias.name):
                    report(node.lineno, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and _bare(node.module):
                report(node.lineno, f"from {node.module} import ...")
        elif isinstance(node, ast.Call) and _call_name(node) in _IMPORT_CALLS and node.args:
            text = _string_text(node.args[0])
            if text is not None and _MODULE_PATH.match(text) and _bare(re.split(r"[.:]", text)[0]):
                report(node.lineno, f"{_call_name(node)}({text!r})")
        elif isinstance(node, (ast.List, ast.Tuple)):
            elts = node.elts
            for a, b in zip(elts, elts[1:]):
                if _string_text(a) == "-m" and (t := _string_text(b)) is not None and _bare(t):
                    report(b.lineno, f"'-m', {t!r}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            check_string(node, node.value)
    return sorted(set(found), key=lambda s: (s.split(":")[0], int(s.split(":")[1]), s))


def _scan_notebook(path: Path) -> list[str]:
    found = []
    cells = json.loads(path.read_text())["cells"]
    rel = path.relative_to(REPO)
    for k, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        lines = src.splitlines()
        # IPython magics and shell lines are not Python: blank them (keeping line numbers) and look
        # for `-m NAME` in them
        for i, line in enumerate(lines):
            if line.lstrip().startswith(("%", "!")):
                for m in _DASH_M.finditer(line):
                    found.append(f"{rel}:cell {k}:{i + 1}: '-m {m.group(1)}'")
                lines[i] = ""
        for hit in scan_source("\n".join(lines), f"{rel}:cell {k}"):
            found.append(hit)
    return found


def _python_files() -> list[Path]:
    files = []
    for folder in SCANNED:
        files += [p for p in sorted((REPO / folder).rglob("*.py")) if "__pycache__" not in p.parts]
    return files


def test_scanner_reports_bare_imports() -> None:
    # "@" keeps this file's own scan clean; it is removed before scanning
    bad = textwrap.dedent('''\
        """Usage:

            from @probes.sweep import sweep
        """
        import os
        import @bench
        import evprobe.hooks, @core.errors
        from @experiments.config import load_config
        import importlib
        importlib.import_module("@organism.checkpoint")
        importlib.import_module(f"@hooks.{os.name}")
        CHILD = "import sys; from @bench.generate import generate"
        CMD = [sys.executable, "-m", "@experiments", "run"]
        TARGET = "@bench.runner.run_items"
        SHELL = "python -m @probes.cli sweep"
        ''').replace("@", "")
    hits = scan_source(bad, "bad.py")
    lines = sorted({int(h.split(":")[1]) for h in hits})
    assert lines == [3, 6, 7, 8, 10, 11, 12, 13, 14, 15], hits
    assert "bad.py:6: import bench" in hits
    assert "bad.py:7: import core.errors" in hits and not any("evprobe.hooks" in h for h in hits)

    good = textwrap.dedent('''\
        """from evprobe.bench import generate"""
        import evprobe
        import evprobe.bench as bench
        from evprobe import hooks, probes
        from evprobe.experiments.config import load_config
        from . import core
        from .bench import x
        import importlib
        importlib.import_module("evprobe.organism.checkpoint")
        META = "bench.json"
        NAME = "organism"
        CMD = [sys.executable, "-m", "evprobe", "run"]
        CHILD = "from evprobe.bench.generate import generate"
        SECTION = "experiments"
        ''')
    assert scan_source(good, "good.py") == []


def test_no_bare_imports_of_the_parts() -> None:
    offenders: list[str] = []
    files = _python_files()
    assert len(files) > 50
    for path in files:
        offenders += scan_source(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        offenders += _scan_notebook(path)
    assert not offenders, "bare imports of the parts (spell them evprobe.<name>):\n" + "\n".join(offenders)


def test_pyproject_names_only_evprobe() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    targets = dict(project["project"].get("scripts", {}))
    targets.update(project["project"].get("gui-scripts", {}))
    for group, eps in project["project"].get("entry-points", {}).items():
        targets.update({f"{group}:{k}": v for k, v in eps.items()})
    assert targets
    bad = {k: v for k, v in targets.items() if not v.startswith("evprobe.")}
    assert not bad, f"entry points outside evprobe: {bad}"
    setuptools = project["tool"]["setuptools"]
    packages = setuptools["packages"]
    assert all(p == "evprobe" or p.startswith("evprobe.") for p in packages), packages
    dirs = setuptools.get("package-dir", {})
    assert set(dirs) <= set(packages)
    for part in PARTS:
        assert f"evprobe.{part}" in packages and dirs.get(f"evprobe.{part}") == part
