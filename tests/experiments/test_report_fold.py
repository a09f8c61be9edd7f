"""report.html taken in at a glance (experiments.report.fold, report.html.compact_png, the band's
name, the headline panel's dropped layers)."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from evprobe.analysis.specificity import FULL_BAND, band_name
from evprobe.experiments.report.fold import fold_page, page_blocks
from evprobe.experiments.report.html import _renderer, compact_png
from evprobe.experiments.report.summary import dropped_layers, summary_png
from tests.bench.hostile_images import huge_png

PAGE = """# Report

[Back](report.md)

## Dose-response

*From `dose/dose_response.md`.*

### Dose-response: d on m

- Sign: positive

#### Headline

| a | b |
|---|---|
| 1 | 2 |

Long paragraph.

#### Controls

| c | d |
|---|---|
| 3 | 4 |

##### Sub

More text.

### Plots: dose

![one](one.png)

*Caption one.*

![two](two.png)

*Caption two.*
"""


def fold(text: str) -> str:
    md = _renderer()
    return fold_page(page_blocks(md, text))


def test_a_page_is_led_by_its_first_table_and_figure_and_the_rest_is_folded() -> None:
    out = fold(PAGE)
    lead = out[:out.index("<details>")]
    # the lead: the title, the part heading, the first table and the first figure with its caption
    assert "<h1>Report</h1>" in lead and "<h2>Dose-response</h2>" in lead
    assert "<td>1</td>" in lead and 'src="one.png"' in lead and "Caption one." in lead
    assert "From <em>Headline</em>" in lead and "From <em>Plots: dose</em>" in lead
    assert "<td>3</td>" not in lead and 'src="two.png"' not in lead and "Long paragraph." not in lead
    # every block is in the page once: moved, not copied
    for needle in ("<td>1</td>", "<td>3</td>", 'src="one.png"', 'src="two.png"', "Caption one.", "Long paragraph."):
        assert out.count(needle) == 1, needle
    assert "(this table is shown at the top of the page)" in out and "(this figure is shown at the top" in out
    # folds nest like the headings, and each summary counts what it holds (less what moved to the lead)
    assert out.count("<details>") == out.count("</details>") == 5
    assert re.search(r'<summary><span class="h4">Controls</span> <small>\(1 table\)</small></summary>', out)
    assert re.search(r'<span class="h3">Plots: dose</span> <small>\(1 figure\)</small>', out)
    sub = out.index('<span class="h5">Sub</span>')
    assert out.index('<span class="h4">Controls</span>') < sub < out.index('<span class="h3">Plots: dose</span>')
    depth, deepest = 0, 0
    for tag in re.findall(r"</?details>", out):
        depth += 1 if tag == "<details>" else -1
        deepest = max(deepest, depth)
    assert depth == 0 and deepest == 3  # Dose-response: d > Controls > Sub


def test_pages_without_a_table_or_a_figure_and_an_introduction_that_has_one() -> None:
    assert "<details>" not in fold("# T\n\nOnly text.\n")
    out = fold("# T\n\n| a |\n|---|\n| 1 |\n\n## P\n\n### S\n\n| b |\n|---|\n| 2 |\n")
    assert out.index("<td>1</td>") < out.index("<details>") < out.index("<td>2</td>")  # the intro's table leads
    assert "shown at the top" not in out


def test_the_fold_check_catches_a_copied_block() -> None:
    """The once-each assertion above can fail: a fold that copies the lead's table shows it twice."""
    out = fold(PAGE)
    broken = out.replace('<p class="moved"><em>(this table is shown at the top of the page)</em></p>',
                         "<table><td>1</td></table>")
    assert broken.count("<td>1</td>") == 2


def _plot_png() -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.linspace(0, 1, 50)
    ax.fill_between(x, x - 0.2, x + 0.2, alpha=0.3)
    ax.plot(x, x, "o-", label="probe")
    ax.legend()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def test_compact_png_is_smaller_and_looks_the_same() -> None:
    from PIL import Image

    raw = _plot_png()
    small = compact_png(raw)
    assert len(small) < 0.6 * len(raw)
    a = np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"), dtype=float)
    b = np.asarray(Image.open(io.BytesIO(small)).convert("RGB"), dtype=float)
    assert a.shape == b.shape and np.abs(a - b).mean() < 2.0 and np.abs(a - b).max() < 64


def test_compact_png_keeps_transparency_and_what_it_cannot_read() -> None:
    from PIL import Image

    im = Image.new("RGBA", (20, 20), (255, 0, 0, 0))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    assert compact_png(buf.getvalue()) == buf.getvalue()
    assert compact_png(b"not a png") == b"not a png"
    huge = huge_png(20000, 20000)  # was a DecompressionBombError traceback in `evprobe report`
    assert compact_png(huge) == huge


@pytest.mark.parametrize(("k", "text"), [
    (50, "central 95% of 50 random directions"), (FULL_BAND, f"central 95% of {FULL_BAND} random directions"),
    (2, "spread of 2 random directions (too few for a 95% band)"), (1, "1 random direction (no band)"),
])
def test_a_band_is_named_by_how_many_directions_made_it(k: int, text: str) -> None:
    assert band_name(k, "random directions") == text


SWEEP = {"label": "resolved", "best": {"layer": 2, "position": "last", "auroc": 0.9, "ci": [0.8, 0.95], "n": 40},
         "rows": [{"layer": 0, "position": "last", "auroc": None, "degenerate": True,
                   "reason": "identical within families"},
                  {"layer": 1, "position": "last", "auroc": 0.7, "ci": [0.6, 0.8]},
                  {"layer": 2, "position": "last", "auroc": 0.9, "ci": [0.8, 0.95]},
                  {"layer": 3, "position": "last", "auroc": None, "degenerate": False, "skipped": "too few rows"},
                  {"layer": 0, "position": "text_mean", "auroc": None, "degenerate": True}]}


def test_the_headline_panel_names_every_layer_it_cannot_score(tmp_path) -> None:
    assert dropped_layers(SWEEP) == [(0, ("degenerate", "identical within families")),
                                     (3, ("skipped", "too few rows"))]
    assert dropped_layers({"best": {}, "rows": SWEEP["rows"]}) == []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seen = {}
    original = plt.Axes.legend

    def legend(self, *args, **kwargs):  # the legend's texts, as drawn
        seen[id(self)] = [t for t in self.get_legend_handles_labels()[1]]
        return original(self, *args, **kwargs)

    plt.Axes.legend = legend
    try:
        assert summary_png(SWEEP, None, tmp_path / "s.png") is not None
    finally:
        plt.Axes.legend = original
    (labels,) = seen.values()
    assert "not scored: L0 (degenerate), L3 (skipped)" in labels
