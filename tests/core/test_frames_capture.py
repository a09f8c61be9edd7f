"""to_dataframe on activations: a loaded capture, pooled captures, or arrays with their rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import evprobe
from evprobe.core.errors import InputError

pd = pytest.importorskip("pandas")


def _mine(tmp_path: Path, name: str = "mine", n: int = 6) -> tuple[Path, np.ndarray, list[dict]]:
    rng = np.random.default_rng(1)
    acts = rng.normal(size=(n, 2, 3, 4)).astype(np.float32)
    rows = [{"family_id": f"f{i // 2}", "topic": "ab"[i % 2], "speaker": "xyz"[i % 3]} for i in range(n)]
    return evprobe.write_capture(tmp_path / name, acts, rows, layers=[5, 9], positions=["a", "b", "c"]), acts, rows


def test_arrays_with_rows_give_one_row_per_item_layer_position(tmp_path: Path) -> None:
    _, acts, rows = _mine(tmp_path)
    df = evprobe.to_dataframe(acts, rows, layers=[5, 9], positions=["a", "b", "c"])
    assert list(df.columns) == ["family_id", "topic", "speaker", "layer", "position", "acts"]
    assert len(df) == 6 * 2 * 3
    one = df[(df.layer == 9) & (df.position == "b")]
    assert one.topic.tolist() == [r["topic"] for r in rows]
    np.testing.assert_array_equal(np.stack(one.acts), acts[:, 1, 1])
    three = evprobe.to_dataframe(acts[:, :, 0], rows)  # (n, layers, d): one position, default names
    assert sorted(set(three.layer)) == [0, 1] and set(three.position) == {"pos0"} and len(three) == 12


def test_a_loaded_capture_and_pooled_captures(tmp_path: Path) -> None:
    folder, acts, rows = _mine(tmp_path)
    cap = evprobe.load_capture(folder)
    df = evprobe.to_dataframe(cap, layer=9, position="c")
    assert len(df) == 6 and {"row", "item_id", "family_id", "topic", "layer", "position", "acts"} <= set(df.columns)
    np.testing.assert_allclose(np.stack(df.acts), acts[:, 1, 2], atol=2e-3)  # stored as float16
    items = evprobe.to_dataframe(cap, acts=False)  # the index alone
    assert len(items) == 6 and "acts" not in items and items.speaker.tolist() == [r["speaker"] for r in rows]
    other, _, _ = _mine(tmp_path, "other")
    pooled = evprobe.to_dataframe(evprobe.load_captures([folder, other]), layer=[5])
    assert len(pooled) == 2 * 6 * 3 and set(pooled.source_name) == {"mine", "other"}


def test_what_it_refuses(tmp_path: Path) -> None:
    folder, acts, rows = _mine(tmp_path)
    with pytest.raises(InputError, match=r"needs its rows"):
        evprobe.to_dataframe(acts)
    with pytest.raises(InputError, match=r"6 items but 5 rows"):
        evprobe.to_dataframe(acts, rows[:5])
    with pytest.raises(InputError, match=r"\(n, layers, d\)"):
        evprobe.to_dataframe(acts[:, 0, 0], rows)
    with pytest.raises(InputError, match=r"1 layers and 3 positions named for an array of 2 layers"):
        evprobe.to_dataframe(acts, rows, layers=[5])
    with pytest.raises(InputError, match=r"layer 7 not there; the source has 5, 9"):
        evprobe.to_dataframe(evprobe.load_capture(folder), layer=7)
    with pytest.raises(InputError, match=r"rows apply to a capture or an array"):
        evprobe.to_dataframe([{"a": 1}], rows)
