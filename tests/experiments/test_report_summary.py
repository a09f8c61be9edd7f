"""Page one's sentences read the steering effect against both nulls honestly: the label-free
directions (the claim about the label) and the isotropic random band, each a named statement, each
a rank test against null directions that went through the same cross-fitted choice, and the claim
both together allow. The headline figure draws both bands (its artists are read back)."""

from __future__ import annotations

import numpy as np

from evprobe.analysis.specificity import joint_verdict, specificity_stats
from evprobe.experiments.report.summary import _dose_panel, headline_rows, sentences

RNG = np.random.default_rng(0)
RANDOM = RNG.normal(-3.0, 1.0, 50)  # isotropic directions: a small push
RELABEL = RNG.normal(-7.0, 1.5, 50)  # label-free directions: along the data's own axes


def dose(value: float, lo: float, hi: float) -> dict:
    est = {"value": value, "ci": [lo, hi], "n": 144}
    null = {"random": {"log_odds": specificity_stats(value, RANDOM, sign=+1, near_share=0.0)},
            "relabel": {"log_odds": specificity_stats(value, RELABEL, sign=+1, near_share=0.0)}}
    joint = {"log_odds": joint_verdict({k: v["log_odds"] for k, v in null.items()}).to_json()}
    return {"headline": [{"readout": "logprobs", "goal": "induce measuring", "group": "resolved",
                          "choices": [{"layer": 3, "alpha": 0.875}],
                          "target": {"log_odds_change": est, "change": {"value": -0.4, "ci": [-0.5, -0.3], "n": 144},
                                     "null": null, "specific": joint}}]}


def test_the_steering_sentence_names_both_nulls_and_their_verdicts() -> None:
    (beyond,) = sentences(None, None, dose(-14.0, -15.0, -13.0))
    assert "-14.00 nats [-15.00, -13.00] (n=144)" in beyond
    assert "beyond 50 of 50 label-free directions" in beyond and "margin over the nearest +" in beyond
    assert "0% of them within |cos| 0.9 of the probe" in beyond
    assert "larger than a push of this size in a random direction" in beyond
    assert beyond.endswith("So the effect is specific to this direction: beyond both nulls.")
    (between,) = sentences(None, None, dose(-7.5, -8.5, -6.5))  # beyond the random band, inside the label-free one
    assert "not more than directions fitted without the label do" in between
    assert "larger than a push of this size in a random direction" in between
    assert between.endswith("So the effect is not shown to be specific to this direction.")
    assert between.index("label-free") < between.index("random directions")  # the claim about the label first
    (inside,) = sentences(None, None, dose(-3.0, -4.0, -2.0))
    assert "not more than a random direction of the same size does" in inside
    rows = headline_rows(None, None, dose(-5.0, -6.0, -4.0), None)
    assert rows[0] == ("steering: induce measuring, stop log-odds change (nats)", "-5.00 [-6.00, -4.00] (n=144)",
                       "resolved items, cross-fitted at L3 alpha +0.875")


def test_without_null_directions_nothing_is_called_specific() -> None:
    d = dose(-14.0, -15.0, -13.0)
    d["headline"][0]["target"]["null"] = {}
    (text,) = sentences(None, None, d)
    assert "no null directions were run, so nothing says the direction is special" in text


def test_page_one_selectivity_says_what_was_shown() -> None:
    from evprobe.probes.control_tasks import selectivity

    many = np.linspace(0.85, 0.99, 39)
    for target, selective in ((1.0, True), (0.97, False)):
        _, sel = selectivity(target, many, n=1152)
        sweep = {"label": "resolved", "best": {"layer": 3, "position": "last", "auroc": target, "ci": [0.97, 1.0],
                                               "n": 1152},
                 "rows": [{"layer": 3, "position": "last", "selectivity": sel.to_json()}]}
        (row,) = [r for r in headline_rows(None, sweep, None, None) if r[0].startswith("selectivity")]
        assert row[1].endswith(f"(beats {sel.beaten} of 39 control tasks)")
        assert "own spread" in row[2] and "1 time in 40" in row[2]
        (text,) = sentences(None, sweep, None)
        if selective:
            assert "decoded better than every one of the 39 random functions of the cell" in text
            assert "1 time in 40" in text
        else:
            assert "it is not selective: some random function of the cell is decoded as well" in text


def test_the_headline_figure_draws_both_bands_with_visible_legend_swatches() -> None:
    """The label-free band is hatched and visible (it was drawn at alpha 0: no band, legend entries
    without a swatch), the random band shaded; both reach the legend. Read from the drawn artists."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [{"readout": "logprobs", "system": "all", "measure": "log_odds", "kind": kind, "layer": layer,
             "alpha": a, "group": g, "delta_vs_0": {"value": -a, "ci": [-a - 0.2, -a + 0.2], "n": 24}}
            for g in ("resolved", "unresolved") for kind, layer, a in (("baseline", None, 0.0), ("probe", 3, 0.5),
                                                                       ("probe", 3, 1.0))]
    band = [{"readout": "logprobs", "layer": 3, "system": "all", "measure": "log_odds", "group": g, "alpha": a,
             "effect_lo": -0.5 * a, "effect_hi": 0.5 * a} for g in ("resolved", "unresolved") for a in (0.5, 1.0)]
    dose_json = {"rows": rows, "null_band": band, "relabel_band": band,
                 "meta": {"n_random": 50, "n_relabel": 50}}
    fig, ax = plt.subplots()
    _dose_panel(ax, dose_json, 3)
    fig.canvas.draw()
    hatched = [c for c in ax.collections if c.get_hatch()]
    shaded = [c for c in ax.collections if not c.get_hatch() and len(c.get_facecolor())
              and 0 < c.get_facecolor()[0][3] < 1]
    assert len(hatched) == 2 and len(shaded) == 2  # one of each per group
    for c in hatched:  # the hatch is drawn in an opaque edge colour, the band has an area
        assert c.get_edgecolor()[0][3] > 0.5 and c.get_hatch() == "///"
        xs, ys = np.concatenate([p.vertices for p in c.get_paths()]).T
        assert np.ptp(xs) > 0 and np.ptp(ys) > 0
    legend = {t.get_text(): h for t, h in zip(ax.get_legend().get_texts(), ax.get_legend().legend_handles,
                                              strict=True)}
    free = [h for t, h in legend.items() if "label-free" in t]
    assert len(free) == 2 and all(h.get_hatch() == "///" and h.get_edgecolor()[3] > 0.5 for h in free)
    plt.close(fig)
    # pixels: the same panel drawn with and without the label-free band (legends removed, so only the bands
    # can differ): the hatch changes a visible share of the plot (at alpha 0 it changed nothing)
    def drawn(with_band: bool) -> np.ndarray:
        f, a = plt.subplots()
        _dose_panel(a, {**dose_json, "relabel_band": band if with_band else []}, 3)
        a.get_legend().remove()
        f.canvas.draw()
        out = np.asarray(f.canvas.buffer_rgba())[..., :3].astype(int)
        plt.close(f)
        return out

    changed = (np.abs(drawn(True) - drawn(False)).sum(axis=-1) > 60).mean()
    assert changed > 0.005, changed
