"""A detail page of report.html taken in at a glance: led by one figure and one table, the rest folded.

The lead of a page is its title and introduction (everything before its second heading), then its
first table and its first figure (with the caption paragraph under it), each labelled with the
heading it sits under. Everything else stays in its order: the part headings (`##`) are shown, and
what is under them is folded into `<details>` that nest like the page's `###` and deeper headings; each summary counts the tables and figures inside. The first table and figure
are moved, not copied, so every image is still in the file once; their old place says where they
went. Page one (report.md) is not folded: it already is one figure and one table.

Choices where the issue is silent: the lead's table and figure are the page's first of each in
reading order (on a part's page the headline table and the headline plot come first); a figure is
a paragraph holding only images; a caption is the italic paragraph right after a figure.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Literal

OPEN_LEVEL = 2  # headings down to ## (the page's parts) are shown; ### and deeper fold
Kind = Literal["heading", "table", "figure", "caption", "other"]


@dataclass(frozen=True)
class Block:
    """One top-level block of a rendered page: its kind, heading level (headings only), HTML and text."""

    kind: Kind
    level: int
    html: str
    text: str


def page_blocks(md, markdown: str) -> list[Block]:
    """The page's top-level blocks, rendered one by one with `md` (a markdown_it.MarkdownIt)."""
    tokens = md.parse(markdown)
    out: list[Block] = []
    start = 0
    for i, tok in enumerate(tokens):
        if tok.level != 0 or tok.nesting == 1:
            continue  # a top-level block ends at its level-0 closing token (or is one token: hr, fence)
        block = tokens[start:i + 1]
        start = i + 1
        first = block[0]
        inline = [c for t in block if t.type == "inline" for c in (t.children or [])]
        text = "".join(c.content for c in inline if c.type in ("text", "code_inline"))
        if first.type == "heading_open":
            kind: Kind = "heading"
        elif first.type == "table_open":
            kind = "table"
        elif first.type == "paragraph_open" and inline and all(c.type in ("image", "softbreak", "text")
                                                               and (c.type != "text" or not c.content.strip())
                                                               for c in inline) and any(c.type == "image" for c in inline):
            kind = "figure"
        elif first.type == "paragraph_open" and inline and inline[0].type == "em_open" and inline[-1].type == "em_close":
            kind = "caption"
        else:
            kind = "other"
        level = int(first.tag[1]) if kind == "heading" else 0
        out.append(Block(kind, level, md.renderer.render(block, md.options, {}), text))
    return out


def _label(heading: Block | None) -> str:
    return "" if heading is None else f'<p class="lead-from">From <em>{html.escape(heading.text)}</em>:</p>\n'


def _counts(blocks: list[Block]) -> str:
    tables = sum(b.kind == "table" for b in blocks)
    figures = sum(b.kind == "figure" for b in blocks)
    parts = [f"{n} {w}{'s' if n != 1 else ''}" for n, w in ((tables, "table"), (figures, "figure")) if n]
    return f' <small>({", ".join(parts)})</small>' if parts else ""


def fold_page(blocks: list[Block]) -> str:
    """The page's HTML: the lead, then the rest folded (module docstring)."""
    headings = [i for i, b in enumerate(blocks) if b.kind == "heading"]
    intro_end = headings[1] if len(headings) > 1 else len(blocks)
    lead = blocks[:intro_end]
    rest = list(enumerate(blocks))[intro_end:]
    moved: dict[int, str] = {}  # block index -> what its old place says

    def under(i: int) -> Block | None:
        return next((blocks[j] for j in reversed(headings) if j < i), None)

    # a page whose introduction already holds a table (or a figure) keeps that one as its lead's
    first_table = None if any(b.kind == "table" for b in lead) else next((i for i, b in rest if b.kind == "table"), None)
    first_figure = (None if any(b.kind == "figure" for b in lead)
                    else next((i for i, b in rest if b.kind == "figure"), None))
    parts = [b.html for b in lead]
    for i, what in ((first_table, "table"), (first_figure, "figure")):
        if i is None:
            continue
        taken = [i] + ([i + 1] if what == "figure" and i + 1 < len(blocks) and blocks[i + 1].kind == "caption" else [])
        parts.append(f'<div class="lead-{what}">\n{_label(under(i))}' + "".join(blocks[j].html for j in taken) + "</div>\n")
        for j in taken:
            moved[j] = "" if j != i else f'<p class="moved"><em>(this {what} is shown at the top of the page)</em></p>\n'
    # the rest, folded by heading: a heading opens a <details> closing every open one of its level or deeper
    open_levels: list[int] = []
    for n, (i, b) in enumerate(rest):
        if b.kind == "heading" and b.level <= OPEN_LEVEL:  # a part's own heading stays a heading
            parts += ["</details>\n"] * len(open_levels)
            open_levels.clear()
            parts.append(b.html)
        elif b.kind == "heading":
            while open_levels and open_levels[-1] >= b.level:
                parts.append("</details>\n")
                open_levels.pop()
            inside = []
            for j, c in rest[n + 1:]:
                if c.kind == "heading" and c.level <= b.level:
                    break
                if j not in moved:
                    inside.append(c)
            inner = re.sub(r"^<h(\d)>(.*)</h\1>\s*$", r'<span class="h\1">\2</span>', b.html.strip(), flags=re.S)
            parts.append(f"<details>\n<summary>{inner}{_counts(inside)}</summary>\n")
            open_levels.append(b.level)
        else:
            parts.append(moved.get(i, b.html))
    parts += ["</details>\n"] * len(open_levels)
    return "".join(parts)


__all__ = ["Block", "fold_page", "page_blocks"]
