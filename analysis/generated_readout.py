"""Generated free-form replies as the dose-response's readout (seed 002, section 5.5 and appendix I:
steered greedy replies, the vector added at every position and every autoregressive step, each reply
judged).

    readout = GeneratedReadout(("abstained", "invalid"), read=my_reader, max_new_tokens=32,
                               rates=("abstained", "invalid"))
    evprobe.steering_dose_response(handle, prompts, images, direction=d, families=fam, readout=readout, ...)

`read(item, reply)` turns one reply (the item's index among the prompts and the decoded text) into
one number per measure, in `measures` order; a rate's number is 0 or 1. The judge is yours: the
analysis knows no benchmark (`evprobe void-transfer` passes the benchmark's rule reader, seed 002's
rubric). An invalid reply is still an item: give it numbers (e.g. abstained 0, invalid 1), so it
stays in every denominator; a reader returning NaN, a number of the wrong count, or a rate other
than 0/1 is refused in one line naming the item and the reply.

Generation is greedy (hooks.generation.generate, do_sample off): the unsteered prompts once, with
no hook at all (alpha = 0), then every direction x dose through hooks.steer_rows (one vector per
batch row; positions as given, schedule every-step) in forwards of at most max(max_rows, prompts in
the batch) rows, whole directions per forward. The replies equal one-prompt-at-a-time generation
under hooks.steering.steer with the same vector (tests/analysis/test_generated_readout.py).
The replies come back beside the numbers (`DoseResponseResult.replies`), so a panel of judges can
read them later.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evprobe.analysis.dose_grid import ChoiceRule, Readout
from evprobe.core.errors import InputError, shown


@dataclass(frozen=True)
class GeneratedReadout:
    """Greedy free-form replies read by `read` (module docstring). measures: the numbers `read`
    returns, in order; rates: those that are 0/1 shares (a proportion's interval); max_new_tokens:
    each reply's budget."""

    measures: tuple[str, ...]
    read: Callable[[int, str], Sequence[float]]
    max_new_tokens: int = 32
    rates: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        m = self.measures
        if isinstance(m, str) or not isinstance(m, tuple) or not m or not all(isinstance(x, str) and x for x in m) \
                or len(set(m)) != len(m):
            raise InputError(f"GeneratedReadout measures must be a tuple of distinct names, e.g. ('abstained', "
                             f"'invalid'), got {shown(m, 40)}")
        if isinstance(self.rates, str) or not set(self.rates) <= set(m):
            raise InputError(f"GeneratedReadout rates must be a tuple of its measures ({', '.join(m)}), got "
                             f"{shown(self.rates, 40)}")
        if not callable(self.read):
            raise InputError(f"GeneratedReadout read must be a function (item index, reply) -> one number per measure, "
                             f"got {shown(self.read, 40)}")
        n = self.max_new_tokens
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InputError(f"GeneratedReadout max_new_tokens must be an integer >= 1, got {n!r}")

    @property
    def readout(self) -> Readout:
        return Readout(tuple(self.measures), rates=tuple(self.rates))

    @property
    def choice(self) -> ChoiceRule:
        """The default cross-fit rule: the first measure moved furthest toward the goal."""
        return ChoiceRule(self.measures[0])

    def values(self, items: Sequence[int], replies: Sequence[str]) -> np.ndarray:
        """(len(replies), M) the reader's numbers; a bad answer is one InputError line."""
        out = np.empty((len(replies), len(self.measures)))
        for r, (i, text) in enumerate(zip(items, replies, strict=True)):
            got = self.read(int(i), text)
            try:
                row = np.asarray(got, dtype=np.float64).reshape(-1)
            except (TypeError, ValueError):
                row = np.zeros(0)
            if isinstance(got, str) or row.size != len(self.measures) or not np.isfinite(row).all():
                raise InputError(f"the reader returned {shown(got, 40)} for item {int(i)}'s reply {shown(text, 40)}; "
                                 f"return {len(self.measures)} finite numbers ({', '.join(self.measures)}), an "
                                 "invalid reply's too (it stays in the denominators)")
            bad = next((m for m, v in zip(self.measures, row) if m in self.rates and v not in (0.0, 1.0)), None)
            if bad is not None:
                raise InputError(f"the reader gave rate {bad!r} the value {float(row[self.measures.index(bad)])!r} for item "
                                 f"{int(i)}; a rate is 0 or 1")
            out[r] = row
        return out


@dataclass(frozen=True)
class Replies:
    """Generated replies and their readouts: texts (..., n) object array, values (..., n, M)."""

    texts: np.ndarray
    values: np.ndarray

    def split(self, layer: int, steps: Sequence[float], sizes: dict[str, int]) -> dict[Key, np.ndarray]:
        """steered()'s (rows, n) texts, rows dose-major then direction-kind-major (sizes: directions per
        kind, in row order), as {(kind, layer, alpha): (directions, n) texts}."""
        a, n = len(steps), self.texts.shape[-1]
        out, lo = {}, 0
        for kind, size in sizes.items():
            block = self.texts[lo:lo + a * size].reshape(a, size, n)
            out.update({(kind, layer, alpha): block[ai] for ai, alpha in enumerate(steps)})
            lo += a * size
        return out


Key = tuple[str, int | None, float | None]  # (kind, layer, alpha) of a set of replies


def reply_frame(texts: dict[Key, np.ndarray], names: Sequence[str], fam: np.ndarray, group_of: np.ndarray) -> Any:
    """Every generated reply, one row each (a DataFrame): direction (unsteered, the named ones, random,
    label-free, ablation), index (within a null's directions; 0 otherwise), layer, alpha, item, family,
    group, reply."""
    import pandas as pd

    rows = []
    for (kind, layer_, alpha), said in texts.items():  # said: (directions, n)
        for j, row in enumerate(said):
            for i, text in enumerate(row):
                rows.append({"direction": names[j] if kind == "named" else kind, "index": 0 if kind == "named" else j,
                             "layer": layer_, "alpha": alpha, "item": i, "family": fam[i], "group": group_of[i],
                             "reply": text})
    return pd.DataFrame(rows)


def unsteered(handle: Any, prompts: Sequence[str], images: Sequence[Any], spec: GeneratedReadout,
              batch_size: int) -> Replies:
    """Each prompt's greedy reply with no hook at all (alpha = 0), read: (n,) texts, (n, M) values."""
    from evprobe.hooks.generation import generate

    gens = generate(handle, list(prompts), list(images), max_new_tokens=spec.max_new_tokens, batch_size=batch_size)
    texts = np.array([g.text for g in gens], dtype=object)
    return Replies(texts, spec.values(range(len(prompts)), list(texts)))


def steered(handle: Any, prompts: Sequence[str], images: Sequence[Any], spec: GeneratedReadout, layer: int,
            deltas: np.ndarray, *, positions: Any, max_rows: int, batch_size: int) -> Replies:
    """The greedy replies of every prompt under each raw vector of `deltas` (K, d_model) added at
    `layer`, read: (K, n) texts, (K, n, M) values (module docstring: rows per forward)."""
    from evprobe.hooks.generation import generate
    from evprobe.hooks.steer_rows import steer_rows

    K, n = len(deltas), len(prompts)
    texts = np.empty((K, n), dtype=object)
    for s in range(0, n, batch_size):
        chunk, pics = list(prompts[s:s + batch_size]), list(images[s:s + batch_size])
        per = max(1, max_rows // len(chunk))  # whole directions per forward
        for start in range(0, K, per):
            k = min(start + per, K) - start
            # direction-major rows (prompts * k), as steer_rows' deltas are repeated
            with steer_rows(handle, layer, np.repeat(deltas[start:start + k], len(chunk), axis=0), positions=positions):
                gens = generate(handle, chunk * k, pics * k, max_new_tokens=spec.max_new_tokens,
                                batch_size=k * len(chunk))
            texts[start:start + k, s:s + len(chunk)] = np.array([g.text for g in gens], dtype=object).reshape(
                k, len(chunk))
    items = np.broadcast_to(np.arange(n), (K, n)).reshape(-1)
    return Replies(texts, spec.values(items, list(texts.reshape(-1))).reshape(K, n, len(spec.measures)))


def ablated(handle: Any, prompts: Sequence[str], images: Sequence[Any], spec: GeneratedReadout, vector: np.ndarray,
            layer: int, batch_size: int) -> Replies:
    """The greedy replies with the direction projected out of `layer`'s output (hooks.ablation.ablate)."""
    from evprobe.hooks.ablation import ablate

    with ablate(handle, vector, layers=[layer]):
        return unsteered(handle, prompts, images, spec, batch_size)


__all__ = ["GeneratedReadout", "Key", "Replies", "ablated", "reply_frame", "steered", "unsteered"]
