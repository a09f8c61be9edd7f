"""`report.html`: the report's pages as one self-contained HTML file beside the Markdown.

Page one (report.md) comes first, then every detail page as a section of its own; a link to a
detail page (`details-behaviour.md`) becomes a link to its section (`#details-behaviour`), and
every image is inlined as a base64 data URI, so the file can be mailed or opened anywhere with
nothing beside it. Only files inside the report's own folder tree are inlined (symlinks resolved): an
image that points anywhere else (an absolute path, `../`, a link leading out, a URL) is left out with
one warning line, so a report never carries a file its user did not put in it. Markdown is rendered with markdown-it-py (CommonMark plus tables; raw HTML in
the parts is escaped, not passed through). A missing image is an error naming the page and the
file, never a broken picture in the output.
"""

from __future__ import annotations

import base64
import html
import re
import warnings
from pathlib import Path

from evprobe.core.errors import InputError, OneLineWarning
from evprobe.experiments.report.fold import fold_page, page_blocks

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 72rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
img { max-width: 100%; }
section { border-top: 2px solid #ddd; margin-top: 2rem; }
blockquote { border-left: 4px solid #c60; margin: 1rem 0; padding: 0.2rem 1rem; background: #fff7ef; }
nav a { margin-right: 1rem; }
details { margin: 0.3rem 0 0.3rem 0.8rem; }
summary { cursor: pointer; }
summary .h1, summary .h2, summary .h3 { font-size: 1.15rem; font-weight: 600; }
summary .h4, summary .h5, summary .h6 { font-size: 1rem; font-weight: 600; }
.lead-from { margin-bottom: 0.2rem; color: #555; }
"""
MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}


def _renderer():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _local_file(src: str, folder: Path) -> Path | None:
    """The file `src` names inside `folder`'s tree (symlinks resolved), or None when it names anything
    else: a URL, an absolute path, a path climbing out with `..`, a link leading outside."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(src)
    if parts.scheme or parts.netloc or src.startswith(("/", "\\")):
        return None
    path = (folder / unquote(parts.path)).resolve()
    root = folder.resolve()
    return path if path == root or root in path.parents else None


def _inline_images(body: str, folder: Path, page: str) -> str:
    """Every <img> of `body` with its file inlined; an image from outside the report folder is left out
    (its alt text kept) with one warning line: a report is mailed around and must carry only its own files."""

    def inline(match: re.Match[str]) -> str:
        tag = match.group(0)
        found = re.search(r'src="([^"]*)"', tag)
        if found is None:
            return tag
        src = html.unescape(found.group(1))
        if src.startswith("data:"):
            return tag
        path = _local_file(src, folder)
        if path is None:
            warnings.warn(f"{folder / page}: image {src} is outside the report folder {folder}; left out of "
                          "report.html (put the file in the folder to include it)", OneLineWarning, stacklevel=2)
            alt = re.search(r'alt="([^"]*)"', tag)
            return f'<em>[image left out: {alt.group(1) if alt else "outside the report folder"}]</em>'
        if not path.is_file():
            raise InputError(f"{folder / page}: image {src} not found in {folder}; rerun `evprobe report`")
        mime = MIME.get(path.suffix.lower(), "application/octet-stream")
        raw = path.read_bytes()
        data = base64.b64encode(compact_png(raw) if mime == "image/png" else raw).decode("ascii")
        return tag[: found.start(1)] + f"data:{mime};base64,{data}" + tag[found.end(1):]

    return re.sub(r"<img\b[^>]*>", inline, body)


def compact_png(raw: bytes) -> bytes:
    """`raw` as a 256-colour palette PNG when that is smaller (the report's plots are flat colours on
    white: about a quarter of the bytes, the same picture to the eye); the part's own PNG file on disk
    keeps its full colour. Anything Pillow cannot read, or over the pixel budget (bench.decode: its
    header is read first, so no large plot is decoded here), is kept as it is (the browser test
    catches a broken image)."""
    import io

    from PIL import Image, UnidentifiedImageError

    from evprobe.bench.decode import read_header

    try:
        read_header(raw, "plot")
        with Image.open(io.BytesIO(raw)) as im:
            im.load()
            has_alpha = im.mode in ("RGBA", "LA", "PA") and im.getextrema()[-1][0] < 255
            if has_alpha or im.mode == "P":
                return raw  # transparency or a palette already: keep it exact
            small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
            buf = io.BytesIO()
            small.save(buf, format="PNG", optimize=True)
    except (UnidentifiedImageError, OSError, ValueError):  # InputError (bench.decode) is a ValueError
        return raw
    return buf.getvalue() if len(buf.getvalue()) < len(raw) else raw


def _anchor(page: str) -> str:
    return Path(page).stem


def render_html(folder: Path, title: str, pages: list[str], explorer: str | None = None) -> str:
    """One HTML document of `pages` (file names in `folder`, page one first), then `explorer` (an HTML
    section: experiments.report.explorer) when given."""
    md = _renderer()
    names = set(pages)
    sections = []
    for n, page in enumerate(pages):
        text = (folder / page).read_text(encoding="utf-8")
        # page one is already one figure and one table; a detail page is folded (experiments.report.fold)
        body = md.render(text) if n == 0 else fold_page(page_blocks(md, text))
        # links between pages become links between sections
        body = re.sub(r'href="([^"#]+\.md)"', lambda m: f'href="#{_anchor(m.group(1))}"'
                      if m.group(1) in names else m.group(0), body)
        sections.append(f'<section id="{_anchor(page)}">\n{_inline_images(body, folder, page)}</section>')
    sections += [explorer] if explorer else []
    nav = " ".join(f'<a href="#{_anchor(p)}">{html.escape(_anchor(p).replace("details-", ""))}</a>' for p in pages)
    nav += ' <a href="#explorer">explorer</a>' if explorer else ""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
            f"<style>{STYLE}</style>\n</head>\n<body>\n<nav>{nav}</nav>\n" + "\n".join(sections) + "\n</body>\n</html>\n")


def write_html(folder: Path, title: str, pages: list[str], explorer: str | None = None) -> Path:
    from evprobe.core.files import atomic_write_bytes

    path = folder / "report.html"
    atomic_write_bytes(path, render_html(folder, title, pages, explorer).encode("utf-8"))
    return path


__all__ = ["compact_png", "render_html", "write_html"]
