"""`evprobe void-transfer --judged OUT/judged`'s checks (experiments.void_transfer.run.rescore): the
re-scored run's replies are the judged ones, and the run's probe AUROCs read back."""

from __future__ import annotations

import json
from pathlib import Path

from evprobe.core.bootstrap import Estimate
from evprobe.core.errors import InputError
from evprobe.core.json_types import JsonObject
from evprobe.experiments.void_transfer.config import REPLIES_FILE

def same_replies(out: Path, replies: list[JsonObject]) -> None:
    """The re-scored run's replies are the judged ones, row for row (greedy steering reproduces them)."""
    key = ("run", "source", "group", "item_id", "direction", "index", "layer", "alpha")
    before = {tuple(r[k] for k in key): r["reply"] for r in map(json.loads, (out / REPLIES_FILE).read_text().splitlines())}
    now = {tuple(r[k] for k in key): r["reply"] for r in replies}
    differ = next((k for k in now if before.get(k) != now[k]), None)
    if differ is not None or len(now) != len(before):
        raise InputError(f"{out / REPLIES_FILE}: the steering gave other replies now ({dict(zip(key, differ or ()))}); "
                         "the decisions judge the old ones: nothing written")


def estimate_of_json(d: JsonObject) -> Estimate:
    """An Estimate from its JSON (core.bootstrap.Estimate.to_json)."""
    return Estimate(d["value"], tuple(d["ci"]), d["n"], d.get("reason"), bool(d.get("fixed_by_design")),
                    bool(d.get("identical_units")), d.get("n_families"))


