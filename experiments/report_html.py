"""`report.html`: the report's pages as one self-contained HTML file beside the Markdown.

Page one (report.md) comes first, then every detail page as a section of its own; a link to a
detail page (`details-behaviour.md`) becomes a link to its section (`#details-behaviour`), and
every image is inlined as a base64 data URI, so the file can be mailed or opened anywhere with
nothing beside it. Markdown is rendered with markdown-it-py (CommonMark plus tables; raw HTML in
the parts is escaped, not passed through). A missing image is an error naming the page and the
file, never a broken picture in the output.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from evprobe.core.errors import InputError

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 72rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
img { max-width: 100%; }
section { border-top: 2px solid #ddd; margin-top: 2rem; }
blockquote { border-left: 4px solid #c60; margin: 1rem 0; padding: 0.2rem 1rem; background: #fff7ef; }
nav a { margin-right: 1rem; }
"""
MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}


def _renderer():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _inline_images(body: str, folder: Path, page: str) -> str:
    def data_uri(match: re.Match[str]) -> str:
        src = html.unescape(match.group(1))
        if src.startswith("data:"):
            return match.group(0)
        from urllib.parse import unquote

        path = folder / unquote(src)
        if not path.is_file():
            raise InputError(f"{folder / page}: image {src} not found in {folder}; rerun `evprobe report`")
        mime = MIME.get(path.suffix.lower(), "application/octet-stream")
        return f'src="data:{mime};base64,{base64.b64encode(path.read_bytes()).decode("ascii")}"'

    return re.sub(r'src="([^"]*)"', data_uri, body)


def _anchor(page: str) -> str:
    return Path(page).stem


def render_html(folder: Path, title: str, pages: list[str]) -> str:
    """One HTML document of `pages` (file names in `folder`, page one first)."""
    md = _renderer()
    names = set(pages)
    sections = []
    for page in pages:
        body = md.render((folder / page).read_text(encoding="utf-8"))
        # links between pages become links between sections
        body = re.sub(r'href="([^"#]+\.md)"', lambda m: f'href="#{_anchor(m.group(1))}"'
                      if m.group(1) in names else m.group(0), body)
        sections.append(f'<section id="{_anchor(page)}">\n{_inline_images(body, folder, page)}</section>')
    nav = " ".join(f'<a href="#{_anchor(p)}">{html.escape(_anchor(p).replace("details-", ""))}</a>' for p in pages)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
            f"<style>{STYLE}</style>\n</head>\n<body>\n<nav>{nav}</nav>\n" + "\n".join(sections) + "\n</body>\n</html>\n")


def write_html(folder: Path, title: str, pages: list[str]) -> Path:
    from evprobe.core.files import atomic_write_bytes

    path = folder / "report.html"
    atomic_write_bytes(path, render_html(folder, title, pages).encode("utf-8"))
    return path


__all__ = ["render_html", "write_html"]
