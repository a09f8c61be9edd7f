"""A capture by information-injection level (`evprobe capture --injection`): rows of the named
levels only, each index row carrying its level (written only when not 0, so a level-0 row is the
row written before levels existed), read back by both index readers; a bad level in an index
line is refused; merging shards keeps the levels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evprobe.bench.generate import GenerateConfig, generate
from evprobe.bench.manifest import read_items
from evprobe.core.errors import InputError
from evprobe.experiments.capture import CaptureConfig, CaptureJob, capture
from evprobe.experiments.capture.store import INDEX_FILE, load_index
from evprobe.probes.captures import CaptureError, load_capture

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ladder") / "bench"
    generate(out, GenerateConfig(families_per_system=1, subset_per_cell=0, injection_levels=(2, 3)), progress=False)
    return out


@pytest.fixture(scope="module")
def acts(bench: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("acts") / "acts"
    summary = capture(CaptureConfig(model="tiny:llava", bench=str(bench), out=str(out), requests=("select",),
                                    injection=(0, 3), layers="0", batch_size=12), progress=False)
    assert summary.complete and summary.n_done == 24
    return out


def test_index_rows_carry_their_level(bench: Path, acts: Path) -> None:
    items = {it.item_id: it for it in read_items(bench)}
    lines = [json.loads(line) for line in (acts / INDEX_FILE).read_text().splitlines()]
    assert sorted(items[r["item_id"]].injection for r in lines) == [0] * 12 + [3] * 12
    for row in lines:
        level = items[row["item_id"]].injection
        assert row.get("injection", 0) == level
        assert ("injection" in row) == (level != 0)  # level 0 lines are byte for byte the old format
    assert json.loads((acts / "meta.json").read_text())["injection"] == [0, 3]
    assert len(load_index(acts / INDEX_FILE)) == 24
    assert sorted(r.get("injection", 0) for r in load_capture(acts).index) == [0] * 12 + [3] * 12


def test_the_default_captures_level_0_only(bench: Path) -> None:
    job = CaptureJob(CaptureConfig(model="tiny:llava", bench=str(bench), out="/nonexistent/never-written"))
    assert job.selected and all(it.injection == 0 for it in job.selected)
    with pytest.raises(InputError, match="no injection level 1 items"):
        CaptureJob(CaptureConfig(model="tiny:llava", bench=str(bench), out="/nonexistent/x", injection=(1,)))


@pytest.mark.parametrize("value", ["3", -1, 1.0, True, None])
def test_a_bad_level_in_the_index_is_refused(acts: Path, tmp_path: Path, value) -> None:
    copy = tmp_path / "acts"
    copy.mkdir()
    for name in ("acts.npy", "meta.json"):
        (copy / name).write_bytes((acts / name).read_bytes())
    lines = (acts / INDEX_FILE).read_text().splitlines()
    row = json.loads(lines[0])
    row["injection"] = value
    (copy / INDEX_FILE).write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    with pytest.raises(InputError, match="field 'injection' must be a non-negative integer"):
        load_index(copy / INDEX_FILE)
    with pytest.raises(CaptureError, match="field 'injection' must be a non-negative integer"):
        load_capture(copy)


def test_a_shard_merge_keeps_the_levels(acts: Path) -> None:
    meta = json.loads((acts / "meta.json").read_text())
    job = CaptureJob.from_meta(meta, acts)
    assert job.config.injection == (0, 3) and [it.item_id for it in job.items] == [
        json.loads(line)["item_id"] for line in sorted((acts / INDEX_FILE).read_text().splitlines(),
                                                      key=lambda x: json.loads(x)["row"])]
