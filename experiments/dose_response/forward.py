"""The forward behind dose-response's readouts: the hf model with hooks (`HFForward`) or a vLLM engine with
per-request edits (`EngineForward`). Everything else (prompts, conditions, doses, rows, aggregates) is
shared: readouts.rows_for asks a Forward for one condition's option-letter log-probs, (K, n, letters),
and its greedy replies, (K, n) hooks.generation.Generation, and writes the same rows from either.

The engine reads every pending condition of a batch (baseline, the probe at each layer x dose, the
random, relabelled and control sets) as ONE engine call of per-request edits, the first time the
runner asks for one of them, and serves the batch's other conditions from that call: a whole null band
and the curve it is drawn around are one batched call (one for the log-probs, one for the replies).
Which rows are pending is what results.jsonl lacks (`pending`), so a resumed run recomputes nothing it
keeps. The replies are hf's rows: the prompts as hooks.generation.generate encodes them, greedy, the
model's max_new_tokens_direct, cut after hf's first EOS token and decoded by the same tokenizer
(analysis.engine_model.engine_generate).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from evprobe.bench.items import Item
from evprobe.core.errors import InputError
from evprobe.experiments.dose_response.config import LETTERS
from evprobe.experiments.dose_response.plan import Condition, Plan
from evprobe.experiments.dose_response.units import AlphaUnits, unit_of


def set_vectors(plan: Plan, cond: Condition) -> np.ndarray:
    """The unit directions of a set condition: (K, d_model) float64 (random rows, the layer's relabelled
    set or its controls)."""
    if cond.kind == "random":
        return plan.random
    assert cond.layer is not None
    if cond.kind == "relabel":
        return plan.relabel[cond.layer].vectors
    return np.stack([c.vector for c in plan.controls[cond.layer]])


def condition_deltas(plan: Plan, cond: Condition, units: AlphaUnits) -> np.ndarray | None:
    """The raw vectors a condition adds at its layer, (K, d_model) float64 (K = 1 for the probe; a
    set's K directions); None for the baseline (no edit). Ablation is no added vector (refused here)."""
    if cond.kind == "baseline":
        return None
    if cond.kind == "ablation":
        raise ValueError("ablation projects the direction out; it adds no vector")
    assert cond.layer is not None and cond.alpha is not None
    dose = unit_of(units, cond.layer).dose(cond.alpha)
    if dose.unit.positions not in (None, plan.config.positions):  # None: a raw unit, measured nowhere
        raise RuntimeError(f"unit norm of L{cond.layer} was measured at {dose.unit.positions}, the edit is at "
                           f"{plan.config.positions}")
    vectors = set_vectors(plan, cond) if cond.is_set else plan.directions[cond.layer].vector[None, :]
    return dose.raw * vectors


@contextmanager
def _intervention(handle: Any, plan: Plan, cond: Condition, units: AlphaUnits) -> Iterator[None]:
    """The hooks of one single-direction condition around the readout calls (nothing for the baseline)."""
    from evprobe.hooks.ablation import ablate
    from evprobe.hooks.steering import Steering, steer

    if cond.kind == "baseline":
        yield
        return
    assert cond.layer is not None and cond.alpha is not None or cond.kind == "ablation"
    d = plan.directions[cond.layer]  # type: ignore[index]
    if cond.kind == "ablation":
        with ablate(handle, d.vector, layers=[cond.layer]):
            yield
        return
    dose = unit_of(units, cond.layer).dose(cond.alpha)  # type: ignore[arg-type]
    spec = Steering.from_dose(d.vector, dose, positions=plan.config.positions, schedule="every-step")
    with steer(handle, spec):
        yield


class HFForward:
    """The hf model with hooks (hooks.steer_rows, hooks.ablation): what dose-response ran before engines."""

    name = "hf"

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self._enc: dict[tuple, Any] = {}  # the last batch's encoded prompts, shared by its conditions

    def encoded(self, prompts: list[str], images: list[list[Any]], batch: list[Item]) -> Any:
        """build_inputs of one batch, computed once for all its conditions (the runner asks for every
        condition of a batch in turn; on the organism encoding costs more than the forward)."""
        from evprobe.hooks.inputs import build_inputs

        key = (tuple(it.item_id for it in batch), tuple(prompts))
        if key not in self._enc:
            self._enc.clear()
            self._enc[key] = build_inputs(self.handle, prompts, images)
        return self._enc[key]

    def logprobs(self, plan: Plan, cond: Condition, batch: list[Item], images: list[list[Any]], prompts: list[str],
                 units: AlphaUnits) -> np.ndarray:
        """(K, n, letters) option log-probs of one condition (K = 1 unless a set)."""
        from evprobe.hooks.generation import answer_logprobs, candidate_token_ids
        from evprobe.hooks.steer_rows import option_logprobs_rows

        if cond.kind == "ablation":
            from evprobe import hooks
            from evprobe.hooks.ablation import ablate

            assert cond.layer is not None
            with ablate(self.handle, plan.directions[cond.layer].vector, layers=[cond.layer]):
                return hooks.next_token_logprobs(self.handle, prompts, images, list(LETTERS),
                                                 batch_size=len(batch))[None]  # (1, n, 5)
        enc = self.encoded(prompts, images, batch)
        deltas = condition_deltas(plan, cond, units)
        if deltas is None:  # alpha 0: the readout with no hook at all
            return answer_logprobs(self.handle, enc, candidate_token_ids(self.handle, list(LETTERS)))[None]
        max_rows = max(plan.config.null_batch_rows or plan.batch_size, len(batch)) if cond.is_set else 256
        return option_logprobs_rows(self.handle, prompts, images, LETTERS, cond.layer,  # type: ignore[arg-type]
                                    deltas, positions=plan.config.positions, max_rows=max_rows, enc=enc)

    def generations(self, plan: Plan, cond: Condition, batch: list[Item], images: list[list[Any]], prompts: list[str],
                    units: AlphaUnits) -> list[list[Any]]:
        """(K, n) greedy replies (hooks.generation.Generation) of one condition: a single direction under
        hooks.steering.steer (or ablate), a set's K directions through hooks.steer_rows in forwards of up to
        null_batch_rows rows."""
        from evprobe import hooks
        from evprobe.hooks.steer_rows import steer_rows

        n, max_new = len(batch), plan.model.max_new_tokens_direct
        if not cond.is_set:
            with _intervention(self.handle, plan, cond, units):
                return [hooks.generate(self.handle, prompts, images, max_new_tokens=max_new, batch_size=n)]
        deltas = condition_deltas(plan, cond, units)  # (K, d_model)
        assert deltas is not None
        K = deltas.shape[0]
        per = max(1, max(plan.config.null_batch_rows or plan.batch_size, n) // n)
        out: list[list[Any]] = []
        for start in range(0, K, per):
            k = min(start + per, K) - start
            with steer_rows(self.handle, cond.layer, np.repeat(deltas[start:start + k], n, axis=0),  # type: ignore[arg-type]
                            positions=plan.config.positions):
                gens = hooks.generate(self.handle, prompts * k, images * k, max_new_tokens=max_new, batch_size=k * n)
            out.extend(gens[j * n:(j + 1) * n] for j in range(k))  # direction-major rows
        return out

    def norms(self, prompts: list[str], images: list[list[Any]], layers: list[int], positions: str,
              batch_size: int) -> dict[int, tuple[float, int]]:
        """Per layer, the mean residual norm at `positions` and the tokens averaged
        (hooks.steer_rows.residual_norms_at)."""
        from evprobe.hooks.steer_rows import residual_norms_at

        return residual_norms_at(self.handle, prompts, images, layers, positions, batch_size=batch_size)

    def close(self) -> None:
        """Nothing to shut down: the model is this process's."""


class EngineForward:
    """A vLLM engine (analysis.engine_model.EngineModel): each batch's pending conditions in one call."""

    name = "vllm"

    def __init__(self, engine: Any, pending: Callable[[str, str], bool]) -> None:
        self.engine = engine
        self.pending = pending  # (item_id, condition key) -> whether results.jsonl still lacks that row
        self.letter_ids = engine.letter_ids(LETTERS)
        # (readout, item_id, condition) -> (K, letters) log-probs or K Generations
        self._read: dict[tuple[str, str, str], Any] = {}
        self.calls = 0  # engine calls made (the benchmark and tests read it)

    def logprobs(self, plan: Plan, cond: Condition, batch: list[Item], images: list[list[Any]], prompts: list[str],
                 units: AlphaUnits) -> np.ndarray:
        """(K, n, letters) option log-probs of one condition, from the batch's one engine call."""
        return np.stack(self._served("logprobs", plan, cond, batch, prompts, units), axis=1)

    def generations(self, plan: Plan, cond: Condition, batch: list[Item], images: list[list[Any]], prompts: list[str],
                    units: AlphaUnits) -> list[list[Any]]:
        """(K, n) greedy replies (hooks.generation.Generation) of one condition, from the batch's one
        generate call."""
        got = self._served("generate", plan, cond, batch, prompts, units)  # n lists of K
        return [list(row) for row in zip(*got, strict=True)]

    def _served(self, readout: str, plan: Plan, cond: Condition, batch: list[Item], prompts: list[str],
                units: AlphaUnits) -> list[Any]:
        """Each item's reads of `cond` (K each), reading the batch in one engine call the first time."""
        if any((readout, it.item_id, cond.key) not in self._read for it in batch):
            self._read_batch(plan, batch, prompts, units, readout)
        return [self._read.pop((readout, it.item_id, cond.key)) for it in batch]

    def _read_batch(self, plan: Plan, batch: list[Item], prompts: list[str], units: AlphaUnits,
                    readout: str = "logprobs") -> None:
        """Every condition some item of `batch` still lacks and `readout` reads (config.reads_sets), for
        the whole batch, in one engine call."""
        from evprobe.analysis.engine_model import edit_rows, engine_generate
        from evprobe.hooks.vllm_engine.steering import option_logprobs

        self._read = {k: v for k, v in self._read.items() if k[0] != readout}
        conds = [c for c in plan.conditions if any(self.pending(it.item_id, c.key) for it in batch)
                 and (not c.is_set or plan.config.reads_sets(readout))]
        n = len(batch)
        rows: list[Any] = []
        sizes = []
        for c in conds:
            deltas = condition_deltas(plan, c, units)
            rows.extend([None] * n if deltas is None else edit_rows(c.layer, deltas, n,  # type: ignore[arg-type]
                                                                    plan.config.positions))
            sizes.append(1 if deltas is None else len(deltas))
        if readout == "generate":  # replies, hf's ids and text (analysis.engine_model.engine_generate)
            ids = self.engine.prompt_ids(prompts, for_generation=True)
            out: Any = engine_generate(self.engine, ids * (len(rows) // n), rows,
                                       max_new_tokens=plan.model.max_new_tokens_direct)
        else:
            ids = self.engine.prompt_ids(prompts)
            out = np.asarray(option_logprobs(self.engine.llm, ids * (len(rows) // n), self.letter_ids, rows),
                             dtype=np.float64)  # (sum K x n, letters), condition- then direction-major
        self.calls += 1
        start = 0
        for c, k in zip(conds, sizes, strict=True):
            for i, it in enumerate(batch):  # direction j of item i: row start + j * n + i
                self._read[(readout, it.item_id, c.key)] = [out[start + j * n + i] for j in range(k)]
            start += k * n

    def norms(self, prompts: list[str], images: list[list[Any]], layers: list[int], positions: str,
              batch_size: int) -> dict[int, tuple[float, int]]:
        from evprobe.analysis.engine_model import engine_norms

        return engine_norms(self.engine, self.engine.prompt_ids(prompts), layers, positions)

    def close(self) -> None:
        self.engine.close()


def check_engine_items(items: Sequence[Item]) -> None:
    """What the engine cannot honour in this run beyond the config (DoseResponseConfig refuses the rest),
    one line before any model call: an item with images."""
    bad = next((it for it in items if it.images), None)
    if bad is not None:
        raise InputError(f"item {bad.item_id} has {len(bad.images)} image(s); the vLLM backend steers text-only "
                         "prompts: select text-only items (e.g. --requests no_initial_test) or use --backend hf")


__all__ = ["EngineForward", "HFForward", "check_engine_items", "condition_deltas", "set_vectors"]
