"""`evprobe generate` and `evprobe check`: files, checks, atomicity and bad input."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import evprobe.bench.generate as generate_module
from evprobe.bench.generate import GenerateConfig, generate
from evprobe.core.errors import InputError
from evprobe.bench.manifest import read_items, resolve_image
from evprobe.experiments.cli import main

SMALL = ["--families-per-system", "2", "--subset-per-cell", "1", "--quiet"]


@pytest.fixture(scope="module")
def small_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench") / "b"
    assert main(["generate", "--out", str(out), *SMALL]) == 0
    return out


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


def test_generate_writes_the_documented_files(small_bench: Path) -> None:
    names = {p.name for p in small_bench.iterdir()}
    assert {"families.jsonl", "items.jsonl", "bench.json", "images"} <= names
    meta = json.loads((small_bench / "bench.json").read_text())
    assert meta["n_families"] == 6 and meta["n_items"] == 6 * 52 + 6 * 24
    fam = json.loads((small_bench / "families.jsonl").read_text().splitlines()[0])
    for key in ("family_id", "system", "initial_property", "candidates", "constants",
                "calibration", "thresholds", "options"):
        assert key in fam
    item = json.loads((small_bench / "items.jsonl").read_text().splitlines()[0])
    for key in ("item_id", "request", "variant", "family_id", "prompt", "options", "images",
                "image_pair_id", "threshold_pair_id", "history", "threshold_level", "test",
                "hidden_world", "resolved", "reference_action", "reference_answer"):
        assert key in item
    for it in read_items(small_bench):
        for rel in it.images:
            assert not os.path.isabs(rel) and (small_bench / rel).is_file()


def test_check_passes_on_a_fresh_benchmark(small_bench: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["check", str(small_bench), "--rerender"]) == 0
    out = capsys.readouterr().out
    assert "Reported check failures" in out and "FAILED" not in out
    checks = json.loads((small_bench / "checks.json").read_text())
    assert checks["n_failures"] == 0
    assert checks["families"] == 6 and checks["worlds"] == 24
    assert checks["decisions"] == 24 and checks["image_switches"] == checks["threshold_switches"] == 12
    assert checks["identical_hidden_images"] == [48, 48]
    assert checks["max_detector_error_pct"] < 1.0 and checks["min_separation_px"] >= 8
    assert abs(checks["min_threshold_margin_pct"] - 17.2) < 0.05


def test_same_seed_gives_identical_files(small_bench: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    assert main(["generate", "--out", str(again), *SMALL]) == 0
    for name in ("families.jsonl", "items.jsonl"):
        assert (again / name).read_bytes() == (small_bench / name).read_bytes()
    for png in (small_bench / "images").rglob("*.png"):
        assert (again / png.relative_to(small_bench)).read_bytes() == png.read_bytes()


def test_check_fails_on_a_tampered_label(small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = _copy(small_bench, tmp_path)
    lines = (bench / "items.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    row["reference_action"] = "free_fall"
    lines[0] = json.dumps(row)
    (bench / "items.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["check", str(bench)]) == 1
    assert row["item_id"] in capsys.readouterr().out


def test_check_fails_on_swapped_images(small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = _copy(small_bench, tmp_path)
    fam = json.loads((bench / "families.jsonl").read_text().splitlines()[0])["family_id"]
    a, b = bench / "images" / fam / "mass_0.png", bench / "images" / fam / "mass_1.png"
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    assert main(["check", str(bench)]) == 1
    assert "Largest error in extracting the marked position" in capsys.readouterr().out


def test_generate_refuses_a_non_empty_folder_without_force(small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = _copy(small_bench, tmp_path)
    assert main(["generate", "--out", str(bench), *SMALL]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["generate", "--out", str(bench), *SMALL, "--force"]) == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--systems", "sliding,rolling"], "unknown system 'rolling'"),
        (["--families-per-system", "0"], "must be a positive integer"),
        (["--families-per-system", "-3"], "must be a positive integer"),
        (["--families-per-system", "2", "--subset-per-cell", "5"], "--subset-per-cell 5 exceeds"),
        (["--price", "teleport=1"], "bad price 'teleport=1'"),
    ],
)
def test_generate_rejects_bad_input_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str], message: str) -> None:
    code = main(["generate", "--out", str(tmp_path / "x"), "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def _rewrite_first_item(bench: Path, edit) -> None:
    lines = (bench / "items.jsonl").read_text().splitlines()
    lines[0] = edit(lines[0])
    (bench / "items.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda line: line[:-5], "items.jsonl:1: not valid JSON"),
        (lambda line: json.dumps({k: v for k, v in json.loads(line).items() if k != "family_id"}), "items.jsonl:1: missing field 'family_id'"),
        (lambda line: json.dumps({**json.loads(line), "images": ["../../etc/passwd"]}), "escapes the benchmark folder"),
        (lambda line: json.dumps({**json.loads(line), "images": ["/etc/passwd"]}), "is absolute"),
        (lambda line: json.dumps({**json.loads(line), "images": ["images/nope.png"]}), "not found"),
    ],
)
def test_check_rejects_bad_manifests_in_one_line(small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture, edit, message: str) -> None:
    bench = _copy(small_bench, tmp_path)
    _rewrite_first_item(bench, edit)
    assert main(["check", str(bench)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    if "field" in message or "images" in message:
        assert "items.jsonl:1" in err


def test_links_out_of_the_folder_are_rejected(small_bench: Path, tmp_path: Path) -> None:
    bench = _copy(small_bench, tmp_path)
    outside = tmp_path / "outside.png"
    outside.write_bytes(b"png")
    (bench / "images" / "link.png").symlink_to(outside)
    with pytest.raises(InputError, match="outside"):
        resolve_image(bench, "images/link.png")


def test_check_names_a_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["check", str(tmp_path / "nowhere")]) == 2
    assert "evprobe generate" in capsys.readouterr().err


def test_a_killed_generation_leaves_the_old_folder_intact(small_bench: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _copy(small_bench, tmp_path)
    before = (bench / "items.jsonl").read_bytes()
    calls = {"n": 0}
    real = generate_module._render_job

    def dies_midway(job):
        calls["n"] += 1
        if calls["n"] == 10:
            raise KeyboardInterrupt  # stands for a kill between two image writes
        return real(job)

    monkeypatch.setattr(generate_module, "_render_job", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        generate(bench, GenerateConfig(families_per_system=2, subset_per_cell=1), force=True, progress=False)
    assert (bench / "items.jsonl").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left
    fresh = tmp_path / "fresh"
    with pytest.raises(KeyboardInterrupt):
        calls["n"] = 0
        generate(fresh, GenerateConfig(families_per_system=2, subset_per_cell=1), progress=False)
    assert not fresh.exists()


def test_pilot_is_separate_from_the_main_set(tmp_path: Path) -> None:
    assert main(["generate", "--out", str(tmp_path / "p"), "--pilot", "--quiet"]) == 0
    meta = json.loads((tmp_path / "p" / "bench.json").read_text())
    assert meta["split"] == "pilot" and meta["n_families"] == 12 and meta["seed"] == 20260907
    ids = [json.loads(l)["family_id"] for l in (tmp_path / "p" / "families.jsonl").read_text().splitlines()]
    assert all(i.startswith("pilot-") for i in ids)
    assert not any(json.loads(l)["variant"] for l in (tmp_path / "p" / "items.jsonl").read_text().splitlines())


# -- --force replaces only a benchmark; temporary folders never outlive their run -------------------

TINY = ["--families-per-system", "1", "--subset-per-cell", "0", "--quiet"]


def _one_line_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_generate_force_refuses_a_folder_that_holds_no_benchmark(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The broken input: `generate --force` over someone's non-empty folder deleted it."""
    notes = tmp_path / "notes"
    (notes / "drafts").mkdir(parents=True)
    (notes / "thesis.txt").write_text("two years of work")
    (notes / "drafts" / "ch1.txt").write_text("chapter one")
    for force in ([], ["--force"]):
        assert main(["generate", "--out", str(notes), *TINY, *force]) == 2
        err = _one_line_error(capsys)
        assert str(notes) in err and "holds no benchmark" in err and "choose another --out" in err
    assert (notes / "thesis.txt").read_text() == "two years of work"
    assert (notes / "drafts" / "ch1.txt").read_text() == "chapter one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]  # no temporary folder either


def test_generate_force_refuses_a_bench_json_without_the_format_marks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Files named like a benchmark's are not enough: bench.json must carry the format marks."""
    fake = tmp_path / "fake"
    fake.mkdir()
    for name in ("families.jsonl", "items.jsonl"):
        (fake / name).write_text("{}\n")
    (fake / "bench.json").write_text(json.dumps({"title": "my own bench.json"}))
    assert main(["generate", "--out", str(fake), *TINY, "--force"]) == 2
    assert "holds no benchmark" in _one_line_error(capsys)
    assert json.loads((fake / "bench.json").read_text()) == {"title": "my own bench.json"}


def test_generate_force_refuses_a_benchmark_holding_other_things(small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A benchmark folder someone also keeps runs in is not replaced with them."""
    bench = _copy(small_bench, tmp_path)
    (bench / "runs").mkdir()
    (bench / "runs" / "records.jsonl").write_text('{"item_id": "x"}\n')
    before = (bench / "items.jsonl").read_bytes()
    assert main(["generate", "--out", str(bench), *TINY, "--force"]) == 2
    err = _one_line_error(capsys)
    assert str(bench) in err and "runs" in err and "move them out" in err
    assert (bench / "runs" / "records.jsonl").is_file() and (bench / "items.jsonl").read_bytes() == before


@pytest.mark.parametrize("plant", ["file-in-images", "file-in-a-family-folder", "folder-in-images",
                                   "unknown-family-folder", "symlink-in-images", "images-is-a-symlink"])
def test_generate_force_refuses_what_it_did_not_write_inside_images(small_bench: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture, plant: str) -> None:
    """The broken input: `--force` checked top-level names only, so a user's file under images/ was deleted
    with the old benchmark. Only the sheets of the families in families.jsonl are generate's own."""
    bench = _copy(small_bench, tmp_path)
    family = sorted(p for p in (bench / "images").iterdir())[0]
    mine = tmp_path / "mine.txt"
    mine.write_text("a user's notes")
    planted = {
        "file-in-images": bench / "images" / "notes.txt",
        "file-in-a-family-folder": family / "annotated.png",
        "folder-in-images": bench / "images" / "crops" / "c.png",
        "unknown-family-folder": bench / "images" / "family-of-mine" / "select_0.png",
        "symlink-in-images": family / "link.png",
    }.get(plant)
    if plant == "symlink-in-images":
        planted.symlink_to(mine)
    elif plant == "images-is-a-symlink":
        shutil.move(bench / "images", tmp_path / "real-images")
        (bench / "images").symlink_to(tmp_path / "real-images", target_is_directory=True)
    else:
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.write_text("a user's file")
    before = (bench / "items.jsonl").read_bytes()
    assert main(["generate", "--out", str(bench), *TINY, "--force"]) == 2
    err = _one_line_error(capsys)
    assert str(bench) in err and "did not write" in err and "images" in err
    assert (bench / "items.jsonl").read_bytes() == before
    if planted is not None:
        assert planted.exists() or planted.is_symlink()
    assert mine.read_text() == "a user's notes"


def test_generate_force_replaces_a_benchmark_or_an_empty_folder(small_bench: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["generate", "--out", str(empty), *TINY]) == 0
    assert json.loads((empty / "bench.json").read_text())["n_families"] == 3
    bench = _copy(small_bench, tmp_path)
    (bench / "checks.json").write_text("{}")  # what `evprobe check` adds is part of a benchmark
    assert main(["generate", "--out", str(bench), *TINY, "--force"]) == 0
    assert json.loads((bench / "bench.json").read_text())["n_families"] == 3
    assert not (bench / "checks.json").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def _temporaries(out: Path) -> list[Path]:
    return sorted(p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp-"))


def _child_generate(out: Path, families_per_system: int = 48, *, stderr=subprocess.DEVNULL) -> "subprocess.Popen[bytes]":
    """A real generate in another process (the library call: the CLI would import the models)."""
    # SIGINT's default handler first: a process started in the background by a non-interactive
    # shell (`cmd &`) ignores SIGINT, and a child inherits that, so Ctrl-C would be lost.
    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from evprobe.bench.generate import GenerateConfig, generate; "
            "n = int(sys.argv[2]); config = GenerateConfig(families_per_system=n, subset_per_cell=n // 4); "
            "generate(sys.argv[1], config, force=True, progress=False)")
    return subprocess.Popen([sys.executable, "-c", code, str(out), str(families_per_system)],
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL, stderr=stderr)


def _wait_for_rendering(out: Path, child: "subprocess.Popen[bytes]") -> Path:
    """The temporary folder of a generate running in `child`, once it holds rendered images."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert child.poll() is None, "the generate meant to be caught midway ended by itself"
        for tmp in _temporaries(out):
            if any((tmp / "images").rglob("*.png")):
                return tmp
        time.sleep(0.02)
    raise AssertionError("the child generate rendered nothing in 120 s")


def test_stale_temporaries_of_killed_runs_are_removed_by_the_next_generate(tmp_path: Path) -> None:
    """The broken input: a generate killed with SIGKILL (no finally runs) left `.OUT.tmp-*`
    behind for good. The next generate into OUT removes it, never a live run's temporary folder
    nor anything else beside OUT."""
    out = tmp_path / "b"
    decoys = [tmp_path / ".b.tmp-notes", tmp_path / ".other.tmp-abcdefgh", tmp_path / ".b.tmp-abcdefgh.keep"]
    for decoy in decoys:
        decoy.mkdir()
        (decoy / "keep.txt").write_text("not a generate's")
    (tmp_path / ".b.tmp-12345678").write_text("a file, not a folder")
    child = _child_generate(out)  # the full main set: long enough to be caught midway
    try:
        live = _wait_for_rendering(out, child)
        # another generate into the same OUT while the child runs is refused (core.lock: one writer per
        # folder); the child's folder is left alone
        assert main(["generate", "--out", str(out), *TINY]) == 2
        assert child.poll() is None and live.is_dir() and any((live / "images").rglob("*.png"))
    finally:
        child.kill()  # SIGKILL: the child's own clean-up cannot run
        child.wait()
    assert live.is_dir()  # what a killed run leaves
    assert main(["generate", "--out", str(out), *TINY, "--force"]) == 0
    assert not live.exists()
    assert _temporaries(out) == sorted([decoys[0], decoys[2], tmp_path / ".b.tmp-12345678"])
    for decoy in decoys:
        assert (decoy / "keep.txt").read_text() == "not a generate's"
    assert json.loads((out / "bench.json").read_text())["n_families"] == 3


def test_an_interrupted_generation_removes_its_temporary_folder(small_bench: Path, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) in the middle of rendering: the run's finally removes its temporary folder
    and the benchmark it was replacing is untouched."""
    bench = _copy(small_bench, tmp_path)
    before = (bench / "items.jsonl").read_bytes()
    child = _child_generate(bench)
    try:
        tmp = _wait_for_rendering(bench, child)
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=120) != 0
    finally:
        child.kill()
        child.wait()
    assert not tmp.exists() and _temporaries(bench) == []
    assert (bench / "items.jsonl").read_bytes() == before


def test_a_failed_generation_removes_its_temporary_folder(small_bench: Path, tmp_path: Path) -> None:
    """A run that fails after rendering (the folder it would replace stopped being only a
    benchmark meanwhile: checked again just before the swap) leaves no temporary folder and
    replaces nothing."""
    bench = _copy(small_bench, tmp_path)
    before = (bench / "items.jsonl").read_bytes()
    child = _child_generate(bench, 6, stderr=subprocess.PIPE)
    try:
        tmp = _wait_for_rendering(bench, child)
        (bench / "notes.txt").write_text("written while generate ran")
        _, err = child.communicate(timeout=300)
    finally:
        child.kill()
        child.wait()
    assert child.returncode != 0 and b"notes.txt" in err and b"move them out" in err
    assert not tmp.exists() and _temporaries(bench) == []
    assert (bench / "items.jsonl").read_bytes() == before and (bench / "notes.txt").is_file()
