"""evprobe.pair_patching: the pipeline's pair patching on a user's own pairs, and `evprobe patching`
computing its rows with the same function. Known answers on the model organism: the last layer at
the answer position carries the whole difference (every pair flips, all of the gap recovered),
layer 0's heads carry nothing (their weights are zero), and the job's rows are the library's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evprobe
from evprobe.bench.generate import GenerateConfig, generate
from evprobe.bench.manifest import load_item_images, read_items
from evprobe.bench.protocols import build_prompt
from evprobe.core.errors import InputError
from evprobe.experiments.cli import main
from evprobe.experiments.patching.job import image_pairs

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    bench = tmp_path_factory.mktemp("own_patch") / "bench"
    generate(bench, GenerateConfig(families_per_system=1, subset_per_cell=0), progress=False)
    chosen = image_pairs(read_items(bench))[:3]

    def member(it):
        return build_prompt(it, "direct", "standard"), load_item_images(bench, it.images)

    pairs = [(member(a), member(b)) for a, b in chosen]
    return evprobe.load("organism"), bench, chosen, pairs


def test_the_last_layer_carries_the_whole_difference_and_layer_0_heads_nothing(setup, tmp_path: Path) -> None:
    handle, bench, chosen, pairs = setup
    answers = [(a.reference_option, b.reference_option) for a, b in chosen]
    result = evprobe.pair_patching(handle, pairs, families=[a.family_id for a, _ in chosen], candidates=list("ABCDE"),
                                   answers=answers, sites=["resid_post.L0", "resid_post.L4", "attn_head.L0.H0",
                                                           "attn_head.L0.H3"], n_boot=200)
    assert len(result.rows) == 6  # 3 pairs, both ways
    f = result.frame.set_index(["site", "position_set", "measure"])
    assert f.loc[("resid_post.L4", "last", "decoded_flip"), "value"] == 1.0
    assert f.loc[("resid_post.L4", "last", "share_of_gap"), "value"] == pytest.approx(1.0, abs=1e-4)
    for site in ("resid_post.L0", "attn_head.L0.H0", "attn_head.L0.H3"):  # the last token alone at L0: nothing
        row = f.loc[(site, "last", "mean_change")]
        assert row["identical"] and row["value"] == 0.0 and row[["lo", "hi"]].isna().all()
    flips = f.xs("decoded_flip", level="measure")
    assert (flips["lo"] < flips["hi"]).all()  # proportions: never a point
    assert result.plot(tmp_path / "heat.png").stat().st_size > 10_000


def test_the_job_rows_are_the_library_rows(setup, tmp_path: Path) -> None:
    handle, bench, chosen, pairs = setup
    out = tmp_path / "job"
    assert main(["patching", "--model", "organism", "--bench", str(bench), "--out", str(out), "--limit-pairs", "3",
                 "--layers", "1,3", "--positions", "last", "--n-boot", "200", "--quiet"]) == 0
    job = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    result = evprobe.pair_patching(handle, pairs, families=[a.family_id for a, _ in chosen], candidates=list("ABCDE"),
                                   answers=[(a.reference_option, b.reference_option) for a, b in chosen],
                                   sites=["resid_post.L1", "resid_post.L3"], n_boot=200)
    library = {(chosen[r["pair"]][int(r["direction"][0])].item_id, chosen[r["pair"]][int(r["direction"][2])].item_id): r
               for r in result.rows}
    assert len(job) == len(library) == 6
    for row in job:
        mine = library[(row["source"], row["target"])]
        for key in ("ld_source", "ld_target", "ld_patched", "top_source", "top_target", "top_patched"):
            assert row[key] == mine[key], key
    summary = json.loads((out / "patching.json").read_text())
    for measure in ("mean_change", "share_of_gap", "decoded_flip"):  # the same aggregate (rows in another order)
        for job_row, lib_row in zip(summary[measure], result.summary.to_json()[measure], strict=True):
            for a, b in zip(job_row, lib_row, strict=True):
                assert a["n"] == b["n"] and a["value"] == pytest.approx(b["value"], rel=1e-12)
                assert a["ci"] == pytest.approx(b["ci"], rel=1e-12)


def test_bad_input_is_one_line(setup) -> None:
    handle, bench, chosen, pairs = setup
    kw = dict(families=["a", "b", "c"], candidates=list("ABCDE"))
    for change, message in ((dict(families=["a"]), "3 pairs but 1 family ids"),
                            (dict(answers=[("A", "Z")] * 3), "answer 'Z' is not a candidate"),
                            (dict(sites=["attn_head.L0.H9"]), "head 9 is out of range")):
        with pytest.raises((InputError, ValueError), match=message) as err:
            evprobe.pair_patching(handle, pairs, **{**kw, **change})
        assert "\n" not in str(err.value)


def test_pairs_whose_members_share_an_answer_are_refused_before_any_patch(setup) -> None:
    """On main, answers=None on pairs whose members share their top candidate gave mean_change 0.0 at
    every site: LD = log p(a) - log p(a). Now one line names the pairs; given answers that differ run."""
    handle, bench, chosen, pairs = setup
    same = [(p[0], p[0]) for p in pairs]  # each member patched into itself: the same top candidate
    kw = dict(families=["a", "b", "c"], candidates=list("ABCDE"), sites=["resid_post.L4"], n_boot=50)
    with pytest.raises(InputError, match=r"^3 of 3 pairs have members with the same top candidates \(unpatched\): "
                                         r"pairs 0, 1, 2 \('[A-E]' for both\), .* give answers=") as err:
        evprobe.pair_patching(handle, same, **kw)
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match=r"^1 of 3 pairs have members with the same answers: pair 1 \('C' for both\)"):
        evprobe.pair_patching(handle, pairs, answers=[("A", "B"), ("C", "C"), ("A", "B")], **kw)
    result = evprobe.pair_patching(handle, same, answers=[("A", "B")] * 3, **kw)  # declared answers: LD is defined
    assert result.frame.query("measure == 'mean_change'")["value"].notna().all()


def test_the_figure_draws_the_mean_change_and_every_result_is_a_table(setup, tmp_path: Path) -> None:
    import matplotlib.image

    handle, bench, chosen, pairs = setup
    result = evprobe.pair_patching(handle, pairs, families=["a", "b", "c"], candidates=list("ABCDE"),
                                   answers=[(a.reference_option, b.reference_option) for a, b in chosen],
                                   sites=["resid_post.L1", "resid_post.L4"], n_boot=50)
    path = result.plot(tmp_path / "three.png")
    width = matplotlib.image.imread(path).shape[1]
    from evprobe.analysis.patching_figures import heatmap_png

    heatmap_png(result.summary.to_json(), tmp_path / "two.png")  # the benchmark's two panels
    assert width > 1.3 * matplotlib.image.imread(tmp_path / "two.png").shape[1]  # a third panel: the mean change
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # the figures' words as text
        yours = result.plot(tmp_path / "three.svg").read_text()
        heatmap_png(result.summary.to_json(), tmp_path / "two.svg")
    assert "Decoded flips: how often the" in yours and "top candidate becomes the source" in yours
    assert "IIA" not in yours and "letter" not in yours  # the benchmark's words stay on its own figure:
    assert "Top letter becomes the source" in (tmp_path / "two.svg").read_text()
    frame = evprobe.to_dataframe(result)
    assert set(frame["measure"]) == {"mean_change", "share_of_gap", "decoded_flip"}
    assert len(evprobe.to_dataframe(result, table="rows")) == 6
    summary = result.summary  # typed: an Estimate per site x set and measure; patching.json's tables from to_json()
    assert summary.grid("mean_change")[1][0].value == frame.query("measure == 'mean_change'")["value"].iloc[1]
    assert summary.to_json()["mean_change"][1][0] == summary.mean_change[1][0].to_json()
    with pytest.raises(InputError, match="measure 'share' is not one of pair patching's: mean_change, share_of_gap"):
        summary.grid("share")
    with pytest.raises(InputError, match="table 'null' is not one of PairPatchingResult's: frame, rows"):
        evprobe.to_dataframe(result, table="null")
    for extra in ("layer", "position"):  # position= was let through: ignored on a result, now refused like layer=
        with pytest.raises(InputError, match=f"^to_dataframe: {extra} apply to a capture or an array, not to "
                                             "PairPatchingResult; choose one of its tables with table=$"):
            evprobe.to_dataframe(result, **{extra: 3})
