"""The organism across information-injection levels (seed 003, section 4.6): its front end reads
the same facts from a level-L prompt as from the level-0 prompt (the guidance paragraph and the
readings block add nothing it parses: it reads the sheets' values itself), so its replies are the
same at every level. This is the known-answer prediction for the ladder on the organism: flat."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evprobe.bench.generate import GenerateConfig, generate
from evprobe.bench.manifest import load_item_images, read_items
from evprobe.bench.runner import RunConfig, run
from evprobe.organism.reader import read_facts

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ladder") / "bench"
    generate(out, GenerateConfig(families_per_system=1, subset_per_cell=0, injection_levels=(1, 2, 3)), progress=False)
    return out


def test_the_reader_reads_the_same_facts_at_every_level(bench: Path) -> None:
    items = read_items(bench)
    by_id = {it.item_id: it for it in items}
    level_items = [it for it in items if it.injection]
    # every selection and initial answer; every fourth answer after a test (time: the eye reads each sheet)
    chosen = [it for i, it in enumerate(level_items) if it.request != "answer_after_test" or i % 4 == 0]
    for it in chosen:
        base = by_id[it.item_id.removesuffix(f".L{it.injection}")]
        images = load_item_images(bench, it.images)
        facts = read_facts(it.prompt, images)
        assert facts is not None and facts == read_facts(base.prompt, images), it.item_id
    checked = len(chosen)
    assert checked > 100


def test_a_broken_level_would_change_the_facts(bench: Path) -> None:
    """The comparison above can fail: a level that changed a number the reader parses does."""
    it = next(x for x in read_items(bench) if x.injection == 3 and x.request == "select")
    images = load_item_images(bench, it.images)
    broken = it.prompt.replace("Take g = ", "Take g = 1", 1)
    assert read_facts(broken, images) != read_facts(it.prompt, images)


def test_the_organism_replies_alike_at_every_level(bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(RunConfig(model="organism", bench=str(bench), out=str(out), requests=("select",),
                  injection=(0, 1, 2, 3)), progress=False)
    records = {r["item_id"]: r for r in map(json.loads, (out / "records.jsonl").read_text().splitlines())}
    assert len(records) == 48
    for item_id, rec in records.items():
        if ".L" in item_id:
            assert rec["reply"] == records[item_id.rsplit(".L", 1)[0]]["reply"], item_id
