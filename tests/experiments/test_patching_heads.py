"""`evprobe patching --site attn_head`: a layer x head heatmap on the benchmark's pairs, with
intervals, checked on the model organism, whose layer-0 attention weights are zero by construction
(so every head there is exactly inert, while heads of later layers carry the pair's difference)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from evprobe.bench.generate import GenerateConfig, generate
from evprobe.experiments.cli import main
from evprobe.hooks.sites import Site


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("heads") / "bench"
    generate(out, GenerateConfig(families_per_system=1, subset_per_cell=0), progress=False)
    return out


def _run(bench: Path, out: Path, *extra: str) -> dict:
    args = ["patching", "--model", "organism", "--bench", str(bench), "--out", str(out), "--limit-pairs", "3",
            "--positions", "last,image", "--n-boot", "200", "--quiet", *extra]
    assert main(args) == 0
    return json.loads((out / "patching.json").read_text())


def layer0_heads_inert(summary: dict) -> bool:
    """The organism's planted fact as the heatmap must show it: every head of layer 0 changes
    nothing, in every pair, at every position set."""
    return all(cell.get("identical_units") and cell["value"] == 0.0 for cell in summary["mean_change"][0])


def test_head_heatmap_on_the_organism(bench: Path, tmp_path: Path) -> None:
    summary = _run(bench, tmp_path / "heads", "--site", "attn_head")
    assert summary["site"] == "attn_head" and summary["heads"] == [0, 1, 2, 3]
    assert summary["layers"] == [0, 1, 2, 3, 4] and summary["position_sets"] == ["last", "image"]
    assert summary["positions"][:3] == ["H0 last", "H0 image", "H1 last"] and len(summary["positions"]) == 8
    assert summary["n_rows"] == 6
    assert layer0_heads_inert(summary)
    later = [cell for row in summary["share_of_gap"][1:] for cell in row if cell["value"] is not None]
    assert max(abs(cell["value"]) for cell in later) > 0.1  # some head of a later layer carries the difference
    assert all(cell["ci"][0] < cell["ci"][1] for cell in later)  # intervals, never points
    rows = [json.loads(line) for line in (tmp_path / "heads" / "results.jsonl").read_text().splitlines()]
    assert all(len(r["ld_patched"]) == 5 and len(r["ld_patched"][0]) == 8 for r in rows)
    meta = json.loads((tmp_path / "heads" / "meta.json").read_text())
    assert meta["site"] == "attn_head" and meta["config"]["site"] == "attn_head"
    assert (tmp_path / "heads" / "patching.png").stat().st_size > 0
    text = (tmp_path / "heads" / "patching.md").read_text()
    assert "Site: each attention head alone" in text and "| layer | H0 last | H0 image |" in text


def test_the_check_fails_when_heads_are_patched_one_layer_off(bench: Path, tmp_path: Path, monkeypatch) -> None:
    from evprobe.hooks import patching

    original = patching.patch_sites

    def shifted(handle, source, target, *, sites, **kwargs):
        moved = [Site(s.kind, min(s.layer + 1, handle.n_layers - 1), s.head) for s in sites]
        found = original(handle, source, target, sites=moved, **kwargs)
        return replace(found, sites=tuple(str(s) for s in sites))

    monkeypatch.setattr(patching, "patch_sites", shifted)
    assert not layer0_heads_inert(_run(bench, tmp_path / "shifted", "--site", "attn_head"))


def test_the_default_site_writes_what_it_always_wrote(bench: Path, tmp_path: Path) -> None:
    summary = _run(bench, tmp_path / "resid")
    meta = json.loads((tmp_path / "resid" / "meta.json").read_text())
    assert "site" not in summary and "site" not in meta and "site" not in meta["config"]
    assert summary["positions"] == ["last", "image"]


def test_an_unknown_site_is_refused_in_one_line(bench: Path, tmp_path: Path, capsys) -> None:
    args = ["patching", "--model", "organism", "--bench", str(bench), "--out", str(tmp_path / "x"), "--site",
            "attn_heads", "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("unknown site 'attn_heads'; choose from resid_post, resid_pre, attn_out, mlp_out, attn_head")
    assert not (tmp_path / "x").exists()
