"""The relabelled-direction null of dose-response: directions the data itself produces.

Isotropic random directions (hooks.steer.random_directions) say whether a push of the probe's size
in *any* direction moves the model as far. They do not say the push is specific to sufficiency: a
direction fitted by the same method on a meaningless label lands along the data's dominant axes
(a difference of class means over random halves of the rows is a random vector shaped like the
rows' covariance), and on the organism such a direction sat at cosine +0.83 with the probe and
moved items 80% as far. So beside the random band, each steered layer gets `n_relabel` directions
fitted exactly like the named one on *relabelled* rows:

- the same rows (the items the named direction was fitted on, from the captures in its
  provenance), the same probe (its provenance's `probe`), the same layer and position;
- the label permuted within families (each family keeps its number of positives, so a direction
  fitted on it sees the same family structure as the probe's; for sufficiency, balanced within
  every family, the relabelled label is balanced within every family too). Permutation r is the
  same at every layer (seeded by `random_seed`, stream [seed, 3]), as the probe's label is, so a
  relabelled direction can be chosen across layers exactly as the probe is;
- no sign is chosen for it: a permuted label's "positive" class means nothing, so the direction
  is used as fitted (pointing toward the permuted positives), each unit-normalised and steered
  at the probe's raw doses.

Under "the probe's label carries nothing the design does not" the probe direction is one more
such relabelled direction, exchangeable with them; experiments.dose_response.specificity turns that into
the specificity verdict and measures its false-verdict rate (benchmarks/steering_null_verdicts.py).
The named controls (history, threshold level: labels the design says are irrelevant) are placed
in the same band (experiments.dose_response.null.control_rows).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from evprobe.experiments.config import ConfigError

if TYPE_CHECKING:
    from evprobe.probes.directions import Direction

DEFAULT_N_RELABEL = 50


@dataclass(frozen=True, eq=False)
class RelabelSet:
    """The relabelled directions at one layer: unit rows (K, d_model) float64 and their cosines
    with the probe direction (K,)."""

    layer: int
    vectors: np.ndarray = field(repr=False)
    cosines: np.ndarray = field(repr=False)
    source: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(np.ascontiguousarray(self.vectors, dtype="<f8").tobytes()).hexdigest()


def within_family_permutations(y: np.ndarray, families: np.ndarray, n: int, seed: int) -> np.ndarray:
    """(n, rows) int8: n labels, each y permuted uniformly within every family (seeded [seed, 3])."""
    rng = np.random.default_rng([seed, 3])  # a stream of its own, apart from the random directions and shuffles
    _, inverse = np.unique(np.asarray(families, dtype=object), return_inverse=True)
    members = [np.flatnonzero(inverse == f) for f in range(inverse.max() + 1)] if len(y) else []
    out = np.empty((n, len(y)), dtype=np.int8)
    for r in range(n):
        lab = np.asarray(y, dtype=np.int8).copy()
        for idx in members:
            lab[idx] = lab[idx][rng.permutation(len(idx))]
        out[r] = lab
    return out


def relabel_directions(n: int, named: Direction, chosen: dict[int, Direction],
                       probe_vectors: dict[int, np.ndarray], seed: int) -> dict[int, RelabelSet]:
    """Per steered layer, n relabelled unit directions (module docstring); {} when n is 0. The
    captures named in the direction's provenance are read (numpy only, no model)."""
    if n <= 0:
        return {}
    from evprobe.probes.captures import CaptureError, labels, load_captures
    from evprobe.probes.directions import check_width
    from evprobe.probes.registry import ProbeSpec

    prov = named.provenance
    paths = [Path(c) for c in prov.get("captures") or ()]
    fix = (f"set n_relabel: 0 (--n-relabel 0) to run without the relabelled null, or keep the capture "
           f"{named.name} was fitted on where its provenance says")
    try:
        if not paths:
            raise CaptureError("the direction names no captures")
        cs = load_captures(paths)
        for d in chosen.values():  # each relabelled direction is compared with d by a product
            check_width(d, cs.d_model, f"its capture {paths[0]}")
        ls = labels(cs, prov["label"], positive=prov.get("positive"))
    except (CaptureError, OSError, KeyError) as e:
        raise ConfigError(f"relabelled null: cannot read the rows {named.name} was fitted on ({e}); {fix}") from None
    out: dict[int, RelabelSet] = {}
    for layer, d in sorted(chosen.items()):
        # the same probe with the same parameters the direction was fitted with (its provenance)
        refit = ProbeSpec.of(d.provenance.get("probe", "massmean"), d.provenance.get("probe_params") or {})
        fit_items = set(d.provenance.get("items") or ())
        mask = np.array([cs.index[r]["item_id"] in fit_items for r in ls.rows], dtype=bool)
        if mask.sum() < 4 or ls.y[mask].min() == ls.y[mask].max():
            raise ConfigError(f"relabelled null at layer {layer}: {int(mask.sum())} of {d.name}'s fit rows carry "
                              f"its label with both classes; {fix}")
        rows = ls.rows[mask]
        X = cs.block(cs.layer_index(layer), rows, [cs.position_index(d.provenance["position"])])[:, 0]  # (m, d)
        families = np.asarray(ls.families, dtype=object)[mask]
        labels_r = within_family_permutations(ls.y[mask], families, n, seed)  # (n, m)
        vecs = []
        for lab in labels_r:
            v = np.asarray(refit.make().fit(X, lab).direction_, np.float64)
            norm = float(np.linalg.norm(v))
            if not np.isfinite(norm) or norm == 0:
                raise ConfigError(f"relabelled null at layer {layer}: a relabelled fit gave a zero vector; {fix}")
            vecs.append(v / norm)
        V = np.stack(vecs)  # (n, d_model)
        out[layer] = RelabelSet(layer, V, V @ probe_vectors[layer],
                                f"{n} x {d.provenance.get('probe', 'massmean')} on {int(mask.sum())} fit rows of "
                                f"{d.name}, {prov['label']} permuted within families (seed {seed})")
    return out


def relabel_record(sets: dict[int, RelabelSet]) -> dict[str, dict[str, Any]]:
    """JSON-able: per layer, the set's size, source, sha256 and its cosines with the probe (range)."""
    return {str(layer): {"n": int(s.vectors.shape[0]), "source": s.source, "sha256": s.sha256,
                         "cosine_with_probe": {"min": round(float(s.cosines.min()), 6),
                                               "max": round(float(s.cosines.max()), 6),
                                               "mean_abs": round(float(np.abs(s.cosines).mean()), 6)}}
            for layer, s in sets.items()}


__all__ = ["DEFAULT_N_RELABEL", "RelabelSet", "relabel_directions", "relabel_record", "within_family_permutations"]
