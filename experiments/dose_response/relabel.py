"""The label-free null of dose-response, fitted from the capture the direction was fitted on.

Isotropic random directions (hooks.direction_vectors.random_directions) say whether a push of the probe's size
in *any* direction moves the model as far. They do not say the push has to do with the label: a
direction the data produce without the label could move it as far. So beside the random band, each
steered layer gets `n_relabel` label-free directions (analysis.label_null: fitted with the named
direction's probe on its own rows, the label's line removed from every row and each family's labels
kept or flipped at random), read from the capture in the direction's provenance:

- the same rows (the items the named direction was fitted on), the same probe (its provenance's
  `probe` and `probe_params`), the same layer and position;
- one sign pattern per null direction, the same at every layer (seeded by `random_seed`), as the
  probe's label is the same, so a null direction can be chosen across layers exactly as the probe is;
- each unit-normalised and steered at the probe's raw doses, as fitted.

(The relabelled null it replaced permuted the label within families; for matched pairs that gives
back +- the probe, and on the organism it lay at mean |cos| 0.74 with the probe: the stronger the
effect, the less it could be shown. benchmarks/steering_null_power.py measures both.)
experiments.dose_response.crossfit gives every null direction the probe's cross-fitted choice and
analysis.specificity makes the verdict. The named controls (history, threshold level: labels the
design says are irrelevant) are placed in the same band (experiments.dose_response.null.control_rows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from evprobe.core.json_types import JsonObject
from evprobe.analysis.label_null import DEFAULT_N_NULL, LabelFreeNull, direction_rows, fit_rows_null
from evprobe.core.errors import InputError
from evprobe.experiments.config import ConfigError

if TYPE_CHECKING:
    from evprobe.probes.directions import Direction

DEFAULT_N_RELABEL = DEFAULT_N_NULL


def relabel_directions(n: int, named: Direction, chosen: dict[int, Direction],
                       probe_vectors: dict[int, np.ndarray], seed: int) -> dict[int, LabelFreeNull]:
    """Per steered layer, n label-free unit directions (module docstring); {} when n is 0. The
    captures named in each direction's provenance are read (numpy only, no model)."""
    if n <= 0:
        return {}
    fix = (f"set n_relabel: 0 (--n-relabel 0) to run without the label-free null, or keep the capture "
           f"{named.name} was fitted on where its provenance says")
    out: dict[int, LabelFreeNull] = {}
    for layer, d in sorted(chosen.items()):
        try:  # the same rows and probe (with its parameters) the direction was fitted on (its provenance)
            out[layer] = fit_rows_null(direction_rows(d), probe_vectors[layer], n=n, seed=seed)
        except InputError as e:
            raise ConfigError(f"label-free null at layer {layer}: {e}; {fix}") from None
    return out


def relabel_record(sets: dict[int, LabelFreeNull]) -> JsonObject:
    """JSON-able: per layer, the set's size, source, sha256, its cosines with the probe and the share
    within |cos| 0.9 (analysis.label_null.LabelFreeNull.record)."""
    return {str(layer): s.record() for layer, s in sets.items()}


__all__ = ["DEFAULT_N_RELABEL", "relabel_directions", "relabel_record"]
