"""report.html inlines only files inside the report's own folder tree: an image reference that
points anywhere else (absolute path, `../`, a symlink leading out, a URL) is left out with one
warning line, and the outside file's bytes never reach the HTML. The parts' own folders are held
to the same rule when `evprobe report` copies their plots."""

from __future__ import annotations

import base64
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evprobe.core.errors import InputError, OneLineWarning
from evprobe.experiments.report.build import build_report
from evprobe.experiments.report.html import render_html

SECRET = b"\x89PNG\r\n\x1a\n secret bytes that must never be mailed"


def _folder(tmp_path: Path, ref: str) -> Path:
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "own.png").write_bytes(b"\x89PNG\r\n\x1a\n own")
    (folder / "report.md").write_text(f"# T\n\n![own](own.png)\n\n![leak]({ref})\n")
    return folder


def _render(folder: Path) -> tuple[str, list[str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        text = render_html(folder, "T", ["report.md"])
    return text, [str(w.message) for w in seen if issubclass(w.category, OneLineWarning)]


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "secret.png"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    return path


@pytest.mark.parametrize("route", ["absolute", "dotdot", "encoded-dotdot", "symlink", "file-url", "http-url",
                                   "symlinked-folder"])
def test_an_image_outside_the_folder_is_left_out_with_one_warning(tmp_path: Path, secret: Path, route: str) -> None:
    refs = {
        "absolute": str(secret),
        "dotdot": "../outside/secret.png",
        "encoded-dotdot": "%2E%2E/outside/secret.png",
        "symlink": "link.png",
        "file-url": secret.as_uri(),
        "http-url": "https://example.org/track.png",
        "symlinked-folder": "sub/secret.png",
    }
    folder = _folder(tmp_path, refs[route])
    if route == "symlink":
        (folder / "link.png").symlink_to(secret)
    if route == "symlinked-folder":
        (folder / "sub").symlink_to(secret.parent, target_is_directory=True)
    text, lines = _render(folder)
    assert base64.b64encode(SECRET).decode()[:40] not in text
    assert text.count("<img") == 1 and text.count("data:image/png;base64,") == 1  # its own image still inlined
    if route == "file-url":  # markdown-it itself refuses file: links: the reference stays text, no <img>
        assert lines == []
        return
    assert "[image left out: leak]" in text and "example.org" not in text
    assert len(lines) == 1 and "outside the report folder" in lines[0] and "report.md" in lines[0]


def test_an_image_in_a_subfolder_of_the_report_is_inlined(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "plots/inner.png")
    (folder / "plots").mkdir()
    (folder / "plots" / "inner.png").write_bytes(b"\x89PNG\r\n\x1a\n inner")
    text, lines = _render(folder)
    assert lines == [] and text.count("data:image/png;base64,") == 2


def test_report_leaves_out_a_plot_that_links_outside_its_folder(tmp_path: Path, secret: Path) -> None:
    """A part's folder holding a PNG symlink to a file elsewhere: `evprobe report` copies only the
    part's own plots."""
    root = tmp_path / "pipeline"
    part = root / "acts" / "probes"
    part.mkdir(parents=True)
    (part / "sweep.md").write_text("# sweep\n\nA sweep.\n")
    (part / "curve.png").write_bytes(b"\x89PNG\r\n\x1a\n curve")
    (part / "stolen.png").symlink_to(secret)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        report = build_report(root, title="T").parent
    messages = [str(w.message) for w in seen if issubclass(w.category, OneLineWarning)]
    assert any("stolen.png" in m and "left out of the report" in m for m in messages)
    html = (report / "report.html").read_bytes()
    assert base64.b64encode(SECRET)[:40] not in html
    assert not any(p.read_bytes() == SECRET for p in report.glob("*.png"))


SEGMENTS = ["..", ".", "sub", "%2E%2E", "%2e.", "outside", "secret.png", "own.png", "", "%2F", "sub%2F.."]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=6), lead=st.sampled_from(["", "/", "./"]))
def test_any_relative_route_inlines_only_files_inside_the_folder(tmp_path: Path, parts: list[str], lead: str) -> None:
    """Fuzz: whatever mix of `..`, `.`, percent-escapes and names an image reference is made of, the file
    outside the folder never reaches the HTML, and a reference is inlined exactly when it resolves inside."""
    from urllib.parse import unquote

    root = tmp_path / f"case{abs(hash((lead, *parts)))}"
    secret = root / "outside" / "secret.png"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_bytes(SECRET)
    folder = root / "report"
    (folder / "sub").mkdir(parents=True, exist_ok=True)
    (folder / "own.png").write_bytes(b"\x89PNG\r\n\x1a\n own")
    (folder / "sub" / "own.png").write_bytes(b"\x89PNG\r\n\x1a\n own")
    ref = lead + "/".join(parts)
    (folder / "report.md").write_text(f"# T\n\n![x]({ref})\n")
    target = (folder / unquote(ref.lstrip("/") if not lead == "/" else ref)).resolve()
    # an absolute reference ("/x", also from an empty first segment) is never inlined
    inside = not ref.startswith("/") and (target == folder.resolve() or folder.resolve() in target.parents)
    try:
        text, _ = _render(folder)
    except InputError as err:  # a reference inside the folder to no file: the missing-image error
        assert inside and not target.is_file() and "not found" in str(err)
        return
    assert base64.b64encode(SECRET).decode()[:40] not in text
    if inside and target.is_file():
        assert "data:image/png;base64," in text
    else:
        assert "data:image/png;base64," not in text
