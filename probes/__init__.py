"""probes: linear probes on captured activations (reads capture files; never a live model, no torch).

Does the model linearly encode sufficiency, R(H, q) (`resolved`), and related variables, layer by
layer? One concept per module:

- `captures`: load a capture folder safely (`load_capture`, `load_captures` -> `CaptureSet`);
  `label_sets`: a run's records (`load_records`), binary labels (`labels` -> `LabelSet`: any index field,
  `missing_property`, `initial`, and from records `stopped`, `committed`, `chose_reference`,
  `valid`), and the confabulation restriction (`restrict_wrong`, TRAPS's Cf -> Cf).
- `protocol`: `LinearProbe`, the probe protocol (scikit-learn shape, a unit `direction_` in the
  residual basis, parameters on `__init__`), and `ProbeCapabilities`.
- `estimators`: `LogisticProbe` (StandardScaler + L2 logistic,
  C = 1), `MassMeanProbe`, `NearestCentroidProbe`; `solvers`: the math under them.
- `registry`: every probe registered once (`register_probe`, `probe_names`), and `ProbeSpec`, a
  probe's name with its parameters, what every sweep, control, refit, transfer and direction fit
  receives; `probe_checks.check_probe`: the contract a new probe is tested against.
- `splits`: folds of whole families (`family_folds`), `check_grouped`.
- `metrics`: AUROC and accuracy with family-bootstrap intervals on `core.bootstrap`.
- `engine`: fit on a training set and score every row, Gram matrix shared by real and control
  labels, warm starts across layers, layers in threads (`cv_scores`, `map_layers`).
- `controls`: within-family shuffled labels, input-only baselines, within-family variance.
- `nested`: the best layer chosen on validation folds only.
- `chance`: the per-row test against chance behind "decodable" (the whole per-row pipeline refitted
  on relabellings under chance, step-down maxT over the rows); `factors`: the label against the design's
  own factors (the cell fields decoded beside it).
- `sweep`: every layer x position (`sweep` -> `SweepResult`, `SweepConfig`; one row: `sweep_row`).
- `transfer`: train on one condition, test on another (`transfer`, `conditions`).
- `directions`, `geometry`: named unit directions with provenance for steering; cosine matrices.
- `report`: sweep.md / sweep.png, transfer-KIND.md / .png. `cli`: `evprobe sweep`, `evprobe directions`.
- `runs`: a sweep (`sweep_to_folder`) or directions (`directions_to_folder`) written to a folder: what
  `evprobe sweep` / `evprobe directions`, quickstart, layer-sweep and gating call.
- `synthetic`: capture folders with a known answer (tests, benchmark, examples).
"""

from importlib import import_module
from typing import Any

# Imported on first use, so `import probes` (and building the CLI parser) stays cheap: the
# estimators pull in scikit-learn and SciPy.
_LAZY = {
    "CaptureSet": "evprobe.probes.captures",
    "LabelSet": "evprobe.probes.label_sets",
    "labels": "evprobe.probes.label_sets",
    "load_capture": "evprobe.probes.captures",
    "load_captures": "evprobe.probes.captures",
    "load_records": "evprobe.probes.label_sets",
    "restrict_wrong": "evprobe.probes.label_sets",
    "LinearProbe": "evprobe.probes.protocol",
    "ProbeCapabilities": "evprobe.probes.protocol",
    "LogisticProbe": "evprobe.probes.estimators",
    "MassMeanProbe": "evprobe.probes.estimators",
    "NearestCentroidProbe": "evprobe.probes.estimators",
    "ProbeSpec": "evprobe.probes.registry",
    "register_probe": "evprobe.probes.registry",
    "probe_names": "evprobe.probes.registry",
    "check_probe": "evprobe.probes.probe_checks",
    "SweepConfig": "evprobe.probes.sweep",
    "SweepResult": "evprobe.probes.sweep",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'probes' has no attribute {name!r}")
