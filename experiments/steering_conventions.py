"""What every steering experiment (dose-response, gating, void-transfer) spells and signs the same way:
a dose's key in condition names, what alpha = 1 adds, and which way a stored direction points.

Units (`alpha_units`): `norm` (the default) makes alpha = 1 one mean residual norm of the steered
layer, so doses compare across layers and models; `raw` makes alpha = 1 the unit direction itself, a
vector of norm 1, as seed 002 states its doses (h <- h + alpha * v with ||v|| = 1, alpha in {0, 2,
5, 10}; section 5.5 and appendix I), so its grid can be run as published.

A stored direction points toward its label's positive class (probes.directions). Doses are stated
toward *measuring* ("the evidence is not enough"), so a direction whose positive class means "the
evidence is enough / the model stops" (`resolved=True`, `stopped=True`, `committed=True`) is negated
and `resolved=False` is used as stored; any other label is refused.
"""

from __future__ import annotations


from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from evprobe.core.errors import ConfigError
from evprobe.core.json_types import JsonObject

if TYPE_CHECKING:
    from evprobe.bench.items import Item

AlphaUnits = Literal["norm", "raw"]
ALPHA_UNITS_HELP = ("what alpha = 1 adds: norm, one mean residual norm of the steered layer, or raw, the unit direction "
                    "itself (a vector of norm 1: seed 002's alpha in {0, 2, 5, 10})")


def check_alpha_units(value: str) -> None:
    """A config's `alpha_units`, one line when it is neither."""
    if value not in ("norm", "raw"):
        raise ValueError(f"key 'alpha_units' is {value!r}; choose from norm, raw")

# Labels whose positive class True means "the evidence is enough / the model stops".
TOWARD_STOP_LABELS = ("resolved", "stopped", "committed")


def alpha_key(alpha: float) -> str:
    """A dose as it appears in condition keys: +0.25, -1, +0 (6 significant digits)."""
    return f"{float(alpha) + 0.0:+g}"  # + 0.0 turns -0.0 into +0


def measure_sign(provenance: JsonObject, name: str) -> int:
    """+1 when the stored direction already points toward measuring, -1 when toward stopping."""
    label, positive = provenance.get("label"), provenance.get("positive")
    if label not in TOWARD_STOP_LABELS:
        raise ConfigError(f"direction {name} is a {label}={positive} direction; dose-response needs one whose label "
                          f"says whether the evidence is enough ({', '.join(TOWARD_STOP_LABELS)})")
    truth = {"true": True, "1": True, "false": False, "0": False}.get(str(positive).lower())
    if truth is None:
        raise ConfigError(f"direction {name}: positive class {positive!r} of {label} is not true/false")
    return -1 if truth else 1



@dataclass(frozen=True)
class FreeReadout:
    """A generated free-form reply read by the rule reader (bench.parse, seed 002's rubric): abstains when its
    answer is undetermined; an invalid reply never abstains and stays in every denominator."""

    reply: str
    valid: bool
    route: str
    answer: str | None

    @property
    def abstain(self) -> bool:
        return self.answer == "undetermined"

    def to_json(self) -> JsonObject:
        return {"reply": self.reply, "valid": self.valid, "route": self.route, "answer": self.answer,
                "abstain": self.abstain}


def free_readout(item: Item, reply: str, regime: str) -> FreeReadout:
    from evprobe.bench.parse import parse_reply

    parsed = parse_reply(item, reply, regime, letters=False)  # the free protocol's reading (FREE_RUBRIC)
    return FreeReadout(reply, parsed.valid, parsed.route, parsed.answer)


__all__ = ["ALPHA_UNITS_HELP", "TOWARD_STOP_LABELS", "AlphaUnits", "FreeReadout", "alpha_key", "check_alpha_units",
           "free_readout", "measure_sign"]
