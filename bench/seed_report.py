"""scores_seed000.md: a run scored as seed 000 scored it, beside evprobe's score (`bench.seed_scoring`).

One table of measures (evprobe's estimate and interval, the seed mode's, and how many of the replies
each measure reads the two readers read differently) and one of seed 000's control requirements (B.3),
each with its verdict under both scores. A seed-mode interval of zero width is printed as the seed
printed it and marked `(degenerate: every resample agrees, B.4)`: the seed's rule, not a certainty.
"""

from __future__ import annotations

from evprobe.bench.score_cells import cost, pct, section_text, table_text
from evprobe.bench.seed_scoring import PERCENTILE_METHOD, Reproduction, degenerate
from evprobe.core.bootstrap import Estimate

DEGENERATE = "(degenerate: every resample agrees, B.4)"


def _cell(e: Estimate, is_cost: bool) -> str:
    text = (cost if is_cost else pct)(e.to_json())
    return f"{text} {DEGENERATE}" if degenerate(e) else text


def seed_markdown(rep: Reproduction, title: str) -> str:
    """The side-by-side tables of `rep` as Markdown."""
    differ = ", ".join(f"{name} {count}" for name, count in rep.read_differently.items()) or "none"
    parts = [
        f"# {title} as {rep.seed}\n",
        f"evprobe's score beside the run scored as seed 000 scored it: the same {rep.n_read} replies read by "
        "seed 000's parser (appendix B.2, `bench.seed_readers`) and intervals by its rule ("
        f"{PERCENTILE_METHOD}), on the same {rep.n_boot} family resamples (seed {rep.boot_seed}). "
        "evprobe's intervals hull the percentile interval with a cluster Clopper-Pearson one for rates. "
        f"Replies read differently by the two readers, per request: {differ}. "
        "docs/reference/scoring.md lists each departure and why.\n",
    ]
    parts.append(section_text(
        "Measures",
        "`read differently`: the replies the measure reads whose validity or reading differs between the readers.",
        table_text(["measure", "evprobe", rep.seed, "read differently"],
                   [[r.name, _cell(r.evprobe, r.cost), _cell(r.seed, r.cost), str(r.read_differently)]
                    for r in rep.rows]),
    ))
    parts.append(section_text(
        "Control requirements (seed 000, B.3)",
        "The study plan's requirements, checked on this run whatever its model (the plan set them for the "
        "models named). A requirement passes when the point estimate reaches it, as the seed judged; "
        "where the interval holds the threshold the verdict says so. Validity is checked on every request "
        "type the run has.",
        table_text(["requirement", "evprobe", "verdict", rep.seed, "verdict"],
                   [[q.plan, _cell(q.evprobe, False), q.verdict(q.evprobe, q.threshold), _cell(q.seed, False),
                     q.verdict(q.seed, q.threshold)] for q in rep.requirements]),
    ))
    return "\n".join(parts)


__all__ = ["DEGENERATE", "seed_markdown"]
