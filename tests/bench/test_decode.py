"""Decoding with limits (bench.decode): the pixel budget per image and per file read from the header
before any pixel is decoded, the benchmark's frame count, and one line naming the file for anything
Pillow cannot read; on real files written to disk (tests.bench.hostile_images makes the hostile ones)."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from evprobe.bench.clips import ClipSpec, frame_pngs, read_frames, sheet_view
from evprobe.bench.decode import CLIP_ENV, IMAGE_ENV, PixelBudget, check_files, decode, read_bytes, read_header
from evprobe.bench.generate import GenerateConfig, generate
from evprobe.bench.manifest import load_images
from evprobe.core.errors import ConfigError, InputError
from evprobe.experiments.cli import main

from tests.bench.edits import check_rows, copy_bench
from tests.bench.hostile_images import apng, frame_outside, gif, huge_png, restated_frames


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _one_line(err: pytest.ExceptionInfo[BaseException], path: Path) -> str:
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{path}: "), text
    return text


def test_a_20000_pixel_square_png_is_refused_from_its_header_naming_the_file_and_the_fix(tmp_path: Path) -> None:
    path = _write(tmp_path, "huge.png", huge_png(20000, 20000))  # 146 bytes on disk
    for read in (lambda: read_frames(path), lambda: load_images([path]), lambda: sheet_view(path),
                 lambda: frame_pngs(path.read_bytes(), str(path)), lambda: check_files([path], 1)):
        with pytest.raises(InputError) as err:
            read()
        text = _one_line(err, path)
        assert "20000x20000 pixels, over the pixel budget of 16,777,216 per image" in text and IMAGE_ENV in text


def test_eight_frames_of_12000_pixels_are_refused_before_any_is_decoded(tmp_path: Path) -> None:
    path = _write(tmp_path, "big.clip.png", huge_png(12000, 12000, frames=8))
    start = time.perf_counter()
    with pytest.raises(InputError) as err:
        read_frames(path, ClipSpec(frames=8))
    assert "12000x12000 pixels, over the pixel budget" in _one_line(err, path)
    assert time.perf_counter() - start < 1.0  # decoding 8 x 144 Mpx as RGB would take GBs and seconds
    # within the per-image budget, but not all frames together
    many = _write(tmp_path, "many.clip.png", huge_png(4000, 4000, frames=8))
    with pytest.raises(InputError) as err:
        read_frames(many)
    text = _one_line(err, many)
    assert "8 frames of 4000x4000 pixels, over the pixel budget of 67,108,864 per file" in text and CLIP_ENV in text


def test_the_benchmarks_frame_count_is_read_from_the_header(tmp_path: Path) -> None:
    clip = ClipSpec(frames=8, fps=2.0)
    # a real 10,000-frame clip where the benchmark's have 8: refused before one frame is decoded
    long = _write(tmp_path, "long.clip.png", apng(10_000, size=2))
    with pytest.raises(InputError, match=r"10,000 frames, but the benchmark's clips have 8 frames") as err:
        read_frames(long, clip)
    _one_line(err, long)
    with pytest.raises(InputError, match=r"10,000 frames, but the benchmark's clips have 8 frames"):
        check_files([long], 8)
    # a clip in a benchmark of sheets, and a still in a benchmark of clips
    with pytest.raises(InputError, match="12 frames, but the benchmark's images are still sheets"):
        check_files([_write(tmp_path, "twelve.png", apng(12))], 1)
    still = io.BytesIO()
    Image.new("RGB", (8, 8)).save(still, "PNG")
    with pytest.raises(InputError, match="1 frame, but the benchmark's clips have 8 frames"):
        check_files([_write(tmp_path, "still.clip.png", still.getvalue())], 8)
    # a header that says fewer frames than the file holds (Pillow would read 3 of 8)
    with pytest.raises(InputError, match="3 frames, but the benchmark's clips have 8"):
        check_files([_write(tmp_path, "three.clip.png", restated_frames(apng(8), 3))], 8)
    assert check_files([_write(tmp_path, "ok.clip.png", apng(8))] * 2, 8) == 1  # each file once


@pytest.mark.parametrize("make, why", [
    (lambda: frame_outside(apng(8)), "APNG contains invalid frames"),
    (lambda: restated_frames(apng(8), 10_000), "Truncated File Read"),
    (lambda: apng(8)[:-200], "truncated"),
    (lambda: huge_png(64, 64)[:-12], "truncated"),  # cut before IEND
    (lambda: gif(6)[:-20], "a GIF cut short"),
    (lambda: b"GIF89a" + b"\0" * 20, "not an image Pillow reads"),
    (lambda: b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\n", "not an image Pillow reads as PNG, JPEG"),
    (lambda: b"", "not an image Pillow reads"),
])
def test_a_file_pillow_cannot_read_is_one_line_naming_it(tmp_path: Path, make, why: str) -> None:
    path = _write(tmp_path, "bad.png", make())
    for read in (lambda: check_files([path], None), lambda: decode(path.read_bytes(), str(path))):
        with pytest.raises(InputError) as err:
            read()
        text = _one_line(err, path)
        assert why.lower() in text.lower() and "regenerate the benchmark" in text and "BytesIO" not in text


def test_the_budget_is_raised_in_the_environment_and_a_bad_value_is_one_line(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, "wide.png", huge_png(5000, 5000))
    with pytest.raises(InputError, match="over the pixel budget"):
        check_files([path], 1)
    monkeypatch.setenv(IMAGE_ENV, "30_000_000")
    with pytest.raises(InputError, match="truncated"):  # past the budget: now its (cut) pixel data speaks
        decode(path.read_bytes(), str(path))
    assert PixelBudget.from_env() == PixelBudget(image=30_000_000)
    for bad in ("-1", "0", "many", "1e9"):
        monkeypatch.setenv(CLIP_ENV, bad)
        with pytest.raises(ConfigError, match=f"{CLIP_ENV}='{bad}': not a positive whole number of pixels"):
            PixelBudget.from_env()


def test_a_file_larger_than_any_image_within_the_budget_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "sparse.png"
    with path.open("wb") as f:  # a sparse file: its size costs no disk
        f.truncate(PixelBudget().max_bytes + 1)
    with pytest.raises(InputError, match="bytes, more than an image within the pixel budget can take"):
        read_bytes(path)
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)  # reading it would block forever
    with pytest.raises(InputError, match=f"{fifo}: not a regular file"):
        read_frames(fifo)
    with pytest.raises(InputError, match="cannot be read"):
        read_bytes(tmp_path / "missing.png")


_CLIP = apng(4, size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, len(_CLIP)), flips=st.lists(st.tuples(st.integers(0, len(_CLIP) - 1), st.integers(1, 255)),
                                                      max_size=4))
def test_any_damage_to_a_clip_is_read_whole_or_refused_in_one_line(tmp_path: Path, cut: int,
                                                                   flips: list[tuple[int, int]]) -> None:
    data = bytearray(_CLIP[:cut])
    for at, x in flips:
        if at < len(data):
            data[at] ^= x
    path = _write(tmp_path, "fuzz.clip.png", bytes(data))
    for read in (lambda: check_files([path], 4), lambda: read_frames(path, None), lambda: read_frames(path, ClipSpec(4))):
        try:
            frames = read()
        except InputError as err:
            assert "\n" not in str(err) and str(err).startswith(f"{path}: ")
        else:
            assert isinstance(frames, (int, list))


# -- the commands: check reports it, run refuses it before a model loads or a request is sent -------------


@pytest.fixture(scope="module")
def clip_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("decode") / "bench"
    generate(out, GenerateConfig(families_per_system=1, subset_per_cell=0, clip=ClipSpec(8, 2.0)), progress=False)
    return out


@pytest.fixture(scope="module")
def sheet_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("decode") / "bench"
    generate(out, GenerateConfig(families_per_system=1, subset_per_cell=0), progress=False)
    return out


def _replaced(source: Path, tmp_path: Path, rel: str, data: bytes) -> Path:
    bench = copy_bench(source, tmp_path)
    (bench / rel).write_bytes(data)
    return bench


def _run(bench: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "--bench", str(bench), "--out", str(out), "--no-progress", *extra]


def test_check_reports_a_huge_clip_as_a_failed_row_naming_it(clip_bench: Path, tmp_path: Path, capsys) -> None:
    rel = "images/sliding-000/mass_1.clip.png"
    bench = _replaced(clip_bench, tmp_path, rel, huge_png(12000, 12000, frames=8))
    code, failed, out = check_rows(bench, capsys)
    assert code == 1 and "Clips: frames, size and rate" in failed
    assert f"failure: {bench / rel}: 12000x12000 pixels, over the pixel budget" in out


def test_check_reports_a_huge_or_cut_sheet_without_a_traceback(sheet_bench: Path, tmp_path: Path, capsys) -> None:
    rel = "images/sliding-000/mass_1.png"
    for data, words in ((huge_png(20000, 20000), "20000x20000 pixels, over the pixel budget"),
                        ((sheet_bench / rel).read_bytes()[:-100], "not a readable image")):
        bench = _replaced(sheet_bench, tmp_path / words[:3], rel, data)
        code, failed, out = check_rows(bench, capsys)
        assert code == 1 and f"failure: {bench / rel}: {words}" in out


def test_run_refuses_a_clip_of_another_frame_count_before_the_server_is_asked(clip_bench: Path, tmp_path: Path,
                                                                              capsys) -> None:
    """The issue's case: a 10,000-frame clip in an 8-frame benchmark went to the server as 10,000 images."""
    rel = "images/sliding-000/mass_1.clip.png"
    bench = _replaced(clip_bench, tmp_path, rel, apng(10_000, size=2))
    out = tmp_path / "run"
    # nothing listens on port 9: a request would fail otherwise, and records.jsonl would hold it
    code = main(_run(bench, out, "--model", "m", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1",
                     "--max-retries", "0"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == (f"evprobe: error: {bench / rel}: 10,000 frames, but the benchmark's clips have 8 "
                                 "frames; regenerate the benchmark (evprobe generate) or replace the file")
    assert not (out / "records.jsonl").is_file() or not (out / "records.jsonl").read_text()


def test_a_bad_budget_in_the_environment_is_one_line_before_any_work(sheet_bench: Path, tmp_path: Path, capsys,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(IMAGE_ENV, "lots")
    for argv in (["check", str(sheet_bench)], _run(sheet_bench, tmp_path / "run", "--model", "policy:exact-reader")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"evprobe: error: {IMAGE_ENV}='lots': not a positive whole number") and "\n" not in err


def test_run_refuses_a_huge_sheet_before_a_policy_reads_it(sheet_bench: Path, tmp_path: Path, capsys) -> None:
    rel = "images/sliding-000/mass_1.png"
    bench = _replaced(sheet_bench, tmp_path, rel, huge_png(20000, 20000))
    code = main(_run(bench, tmp_path / "run", "--model", "policy:exact-reader"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"evprobe: error: {bench / rel}: 20000x20000 pixels") and "\n" not in err


def test_capture_refuses_a_cut_clip_before_the_model_loads(clip_bench: Path, tmp_path: Path, capsys) -> None:
    rel = "images/sliding-000/other_0.clip.png"  # shown by the select items capture reads
    bench = _replaced(clip_bench, tmp_path, rel, (clip_bench / rel).read_bytes()[:-300])
    start = time.perf_counter()
    code = main(["capture", "--model", "tiny:qwen2_5_vl", "--bench", str(bench), "--out", str(tmp_path / "acts"),
                 "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"evprobe: error: {bench / rel}: not a readable image") and "\n" not in err
    assert time.perf_counter() - start < 20  # refused before the tiny model is built
