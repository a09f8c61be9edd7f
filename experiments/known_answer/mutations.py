"""Faults injected into the pipeline on purpose, to show that the known-answer checks fail when the
toolkit is wrong (test-only: tests/experiments/test_known_answer_mutations.py and
benchmarks/known_answer_mutations.py use it; nothing else imports it).

Each `Fault` patches one stage the way a plausible bug would (a wrong label, a layer index off by one,
folds that ignore families, ...), names the output folders under the quickstart folder that depend on
that stage, and `run_with_fault` reruns exactly those (the others are copied from a clean run) under
the fault, then the known-answer checks. A fault that no check fails, or a check that no fault fails,
is a defect of the suite (the README's fault x check table; the tests assert both ways).

Not caught (BLIND_SPOTS, measured): none now. Patching at layer l + 1 was (IIA alone is the same at
layers 0 and 1, and at 3 and 4); the interchange check now also reads the exact no-change that the
plant implies before layer 1 (patching the last or text position there moves the log-odds by
nothing), which the shift breaks.

Prompt-only steering (the decode steps left unsteered) is caught because the organism replies
`ANSWER: <letter>`: the letter comes from the state of the generated `ANSWER:` token, which only
decode-step steering reaches; the log-prob readout teacher-forces `ANSWER:` and is steered in its one
forward, so the generated reply and the log-probs part ways.

A span listed out of order (image tokens last to first) leaves every whole-span patch and every
image_mean capture as it was (the same set of tokens); only a partial patch of a sheet's span
(image_first, image_rest) sees it, which the partial image-span check reads.

Three faults an audit found the suite blind to, each caught now. Half the families missing (the
capture holds one of two shards): every rate still passed its bar on the smaller sample (on the main
set 72 families give the planted row an exact lower bound of 0.950); each check now states the n it
expects from the bench (experiments.known_answer.counts) and fails on the sweep's, the transfer cells', the
groups' and the held-out directions' counts. Every mass-initial family flipped: pooled grouped CV
still decodes it at L3; the planted profile now reads each system x initial-test group against the
others (cosines -0.81 to -0.82 for the flipped groups on the reduced run). A direction's sign flipped
after it was written: steering alone saw it; the stored-direction check reads it on held-out
families (AUROC 0.000).
"""

from __future__ import annotations

import importlib
import inspect
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from unittest import mock

import numpy as np

from evprobe.core.json_types import JsonObject

if TYPE_CHECKING:
    from evprobe.experiments.quickstart import QuickstartOptions

# The (system, initial test) groups whose sufficiency label the wrong-label fault flips: 2 of 6, so the
# label agrees with the truth on 2/3 of the rows (the reviewer's fault).
FLIPPED_GROUPS = frozenset({("sliding", "mass"), ("bouncing", "other")})
# The audit's: every mass-initial family flipped (3 of 6 groups, one initial test in every system), which
# pooled grouped CV still decodes at L3 and a probe moved between systems carries along.
MASS_FLIPPED = frozenset({(system, "mass") for system in ("sliding", "bouncing", "spring")})


# The reduced quickstart the mutation runs use (about 45 s clean on 2 cores): 8 families per system,
# steering at the planted layer only with 8 random directions, no refits, permutations or controls.
SMALL_QUICKSTART: QuickstartOptions = {
    "families_per_system": 8, "pairs": 16, "n_boot": 200, "n_random": 8, "permutations": 0, "refits": 0,
    "dose_layers": (3,), "controls": False, "progress": False,
}


@dataclass(frozen=True)
class Fault:
    name: str
    what: str
    redo: tuple[str, ...]  # folders under the quickstart folder recomputed under the fault
    inject: Callable[[Path, ExitStack], None]  # edits files under OUT and/or enters patches


def _wrong_label(flipped: frozenset[tuple[str, str]]) -> Callable[[Path, ExitStack], None]:
    """Sufficiency flipped on the rows of the `flipped` (system, mass | other) groups, wherever the
    probes label a capture (the sweep, the directions, and the checks that read the capture)."""

    def inject(out: Path, stack: ExitStack) -> None:
        runs = importlib.import_module("evprobe.probes.runs")
        from evprobe.probes.label_sets import field_values

        original = runs.labels

        def labels(captures, name, *args, **kwargs):
            ls = original(captures, name, *args, **kwargs)
            if name != "resolved":
                return ls
            groups = field_values(captures, ls, lambda r: (r.get("system"),
                                                          "mass" if r.get("initial_property") == "mass" else "other"))
            flip = np.array([g in flipped for g in groups])
            return replace(ls, y=np.where(flip, 1 - ls.y, ls.y).astype(ls.y.dtype))

        stack.enter_context(mock.patch.object(runs, "labels", labels))

    return inject


def _capture_shard_unmerged(out: Path, stack: ExitStack) -> None:
    """The capture holds shard 0 of 2 (whole families, core.shard: half of every system's): the other
    shard was never merged."""
    capture = importlib.import_module("evprobe.experiments.capture.job")  # where the quickstart imports it from
    original = capture.capture

    def one_shard(config, progress: bool = True):
        return original(replace(config, shard="0/2"), progress=progress)

    stack.enter_context(mock.patch.object(capture, "capture", one_shard))


def _direction_sign_flipped(out: Path, stack: ExitStack) -> None:
    """Every stored direction negated after directions_to_folder wrote it (a sign convention lost on
    the way to disk); its provenance still says it points toward the positive class."""
    runs = importlib.import_module("evprobe.probes.runs")
    from evprobe.probes.directions import read_directions, write_directions

    original = runs.directions_to_folder

    def negated(captures, label, folder, *args, **kwargs):
        result = original(captures, label, folder, *args, **kwargs)
        write_directions(folder, [replace(d, vector=-d.vector) for d in read_directions(folder).values()])
        return result

    stack.enter_context(mock.patch.object(runs, "directions_to_folder", negated))


def _capture_layer_off_by_one(out: Path, stack: ExitStack) -> None:
    """Layer l's row holds layer l's *input* (hidden_states[l], the output of layer l - 1)."""
    import nnsight
    import torch

    capture = importlib.import_module("evprobe.hooks.capture")

    def trace_sites(handle, enc, layers, components, read):
        plan = capture.sites(handle, layers, components)
        envoys = handle.nn_layers
        kwargs = dict(enc)
        if "use_cache" in inspect.signature(handle.model.forward).parameters:
            kwargs["use_cache"] = False
        with torch.no_grad(), handle.nn.trace(**kwargs) as tracer:
            saved = nnsight.save([read(envoys[i].input) for i, _, _ in plan])  # the bug: .input, not .output
            tracer.stop()
        return {(i, c): v for (i, c, _), v in zip(plan, saved, strict=True)}

    stack.enter_context(mock.patch.object(capture, "trace_sites", trace_sites))


def _patch_steering(stack: ExitStack, edit: Callable[[Any], Any]) -> None:
    """Route every additive edit of the residual stream through `edit` (an Add -> the Add run
    instead): the intervention core's entry point is the one place every steering path meets
    (a Steering under hooks.steering.steer, hooks.steer_rows' many rows, both dose-response
    drivers, steered generation), so one patch reaches them all."""
    core = importlib.import_module("evprobe.hooks.intervention")
    original = core.intervene

    def intervene(handle, ops, **kwargs):
        return original(handle, [edit(op) if isinstance(op, core.Add) and op.site.kind == "resid_post" else op
                                 for op in ops], **kwargs)

    stack.enter_context(mock.patch.object(core, "intervene", intervene))


def _steering_layer_off_by_one(out: Path, stack: ExitStack) -> None:
    """Steering asked for at layer l edits layer l + 1's output."""
    _patch_steering(stack, lambda op: replace(op, site=replace(op.site, layer=op.site.layer + 1)))


def _no_op_steering(out: Path, stack: ExitStack) -> None:
    """The hooks are installed but add nothing."""
    _patch_steering(stack, lambda op: replace(op, delta=np.zeros_like(op.delta)))


def _prompt_only_steering(out: Path, stack: ExitStack) -> None:
    """Steering edits the prompt pass only, never a generated token."""
    _patch_steering(stack, lambda op: replace(op, schedule="prompt-only"))


def _random_direction(out: Path, stack: ExitStack) -> None:
    """Each fitted direction is replaced by a random one of the same norm."""
    directions = importlib.import_module("evprobe.probes.directions")

    original = directions.fit_directions

    def fit(*args, **kwargs):
        rng = np.random.default_rng(20261201)
        fitted = original(*args, **kwargs)
        out = []
        for d in fitted:
            v = rng.standard_normal(d.vector.shape)
            out.append(replace(d, vector=(v / np.linalg.norm(v) * np.linalg.norm(d.vector)).astype(d.vector.dtype)))
        return out

    stack.enter_context(mock.patch.object(directions, "fit_directions", fit))


def _families_leak(out: Path, stack: ExitStack) -> None:
    """Folds dealt by row, not by family: the rows of a family land in several folds."""
    refit = importlib.import_module("evprobe.probes.refit")
    sweep = importlib.import_module("evprobe.probes.sweep")
    transfer = importlib.import_module("evprobe.probes.transfer")

    def folds(families: Sequence[str], n_splits: int = 5, seed: int = 0, y: Any = None) -> np.ndarray:
        return np.random.default_rng(seed).permutation(len(families)) % n_splits

    for module in (sweep, transfer, refit):
        stack.enter_context(mock.patch.object(module, "family_folds", folds))


def _swapped_pair_members(out: Path, stack: ExitStack) -> None:
    """Each family's sheets of history 0 and 1 are written under each other's names."""
    for first in sorted((out / "bench" / "images").glob("*/*_0.png")):
        second = first.with_name(first.name[: -len("_0.png")] + "_1.png")
        if second.is_file():
            a, b = first.read_bytes(), second.read_bytes()
            first.write_bytes(b)
            second.write_bytes(a)


def _patching_layer_off_by_one(out: Path, stack: ExitStack) -> None:
    """Patching asked for at layer l patches layer l + 1 (the last layer stays itself)."""
    patching = importlib.import_module("evprobe.hooks.patching")
    site_type = importlib.import_module("evprobe.hooks.sites.vocabulary").Site
    original = patching.patch_sites

    def shifted(handle, source, target, *, sites, **kwargs):
        moved = [site_type.parse(s) for s in sites]
        moved = [replace(s, layer=min(s.layer + 1, handle.n_layers - 1)) if s.layer is not None else s for s in moved]
        return replace(original(handle, source, target, sites=moved, **kwargs), sites=tuple(str(s) for s in sites))

    stack.enter_context(mock.patch.object(patching, "patch_sites", shifted))


def _patching_positions_off_by_one(out: Path, stack: ExitStack) -> None:
    """Every patched token index one before the one asked for (a BOS miscount)."""
    patching = importlib.import_module("evprobe.hooks.patching")
    original = patching.patch_sites

    def shifted(handle, source, target, *, position_sets, **kwargs):
        moved = {name: idx if isinstance(idx, str) else [int(i) - 1 for i in idx] for name, idx in position_sets.items()}
        return original(handle, source, target, position_sets=moved, **kwargs)

    stack.enter_context(mock.patch.object(patching, "patch_sites", shifted))


def _image_span_reversed(out: Path, stack: ExitStack) -> None:
    """hooks.spans lists a row's image tokens last to first: the first image token is a sheet's offset."""
    spans = importlib.import_module("evprobe.hooks.spans")
    original = spans.token_spans

    def reversed_image(*args, **kwargs):
        found = original(*args, **kwargs)
        return replace(found, image=tuple(reversed(found.image)))

    stack.enter_context(mock.patch.object(spans, "token_spans", reversed_image))


_PROBES, _STEER = ("acts/probes", "directions", "dose_response"), ("dose_response",)
FAULTS: tuple[Fault, ...] = (
    Fault("wrong label", "sufficiency flipped for 2 of the 6 system x initial-test groups (agrees on 2/3 of rows)",
          _PROBES, _wrong_label(FLIPPED_GROUPS)),
    Fault("wrong label: every mass-initial family flipped", "sufficiency flipped for the 3 mass-initial groups, "
          "one in every system", _PROBES, _wrong_label(MASS_FLIPPED)),
    Fault("half the families missing (one shard never merged)", "the capture holds one of two shards (half of "
          "every system's families); the other was never merged", ("acts", "directions", "dose_response"),
          _capture_shard_unmerged),
    Fault("capture layer off by one", "layer l's row holds layer l's input (layer l - 1's output)",
          ("acts", "directions", "dose_response"), _capture_layer_off_by_one),
    Fault("steering layer off by one", "steering at layer l edits layer l + 1", _STEER, _steering_layer_off_by_one),
    Fault("no-op steering", "the steering hooks add a zero vector", _STEER, _no_op_steering),
    Fault("prompt-only steering", "steering edits the prompt pass, never a generated token", _STEER,
          _prompt_only_steering),
    Fault("random direction", "a random direction of the probe direction's norm in its place",
          ("directions", "dose_response"), _random_direction),
    Fault("direction sign flipped", "every stored direction negated after it was written",
          ("directions", "dose_response"), _direction_sign_flipped),
    Fault("families leak across splits", "folds dealt by row, not by family", ("acts/probes",), _families_leak),
    Fault("image-pair members swapped", "each family's history-0 and history-1 sheets under each other's names",
          ("run", "acts", "directions", "dose_response", "patching"), _swapped_pair_members),
    Fault("patching positions off by one", "every patched token index one before the one asked for",
          ("patching",), _patching_positions_off_by_one),
    Fault("patching layer off by one", "patching at layer l patches layer l + 1", ("patching",),
          _patching_layer_off_by_one),
    Fault("image span out of order", "a row's image tokens listed last to first (a sheet's offset taken for its "
          "block)", ("patching",), _image_span_reversed),
)
# Faults measured and NOT caught by any check (README): kept out of FAULTS, which the tests require to
# be caught, and run by benchmarks/known_answer_mutations.py so their row stays measured. None now.
BLIND_SPOTS: tuple[Fault, ...] = ()


@contextmanager
def injected(fault: Fault, out: Path) -> Iterator[None]:
    with ExitStack() as stack:
        fault.inject(out, stack)
        yield


R = TypeVar("R")


def run_with_fault(clean: Path, out: Path, fault: Fault, run: Callable[[Path], R]) -> R:
    """Copy the clean quickstart folder `clean` to `out`, delete what the fault's stage feeds, and rerun
    `run(out)` (a quickstart call that reuses finished steps) under the fault; returns its result."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(clean, out)
    for folder in fault.redo:
        shutil.rmtree(out / folder, ignore_errors=True)
    for name in ("known_answer.json", "known_answer.md", "report"):
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    with injected(fault, out):
        return run(out)


def failed_checks(result: JsonObject) -> list[str]:
    """The names of the checks a known-answer result (known_answer.json as read) does not pass (not run
    counts as not passed)."""
    return [c["check"] for c in result["checks"] if c["passed"] is not True]


def fault_table(clean: JsonObject, by_fault: dict[str, JsonObject]) -> str:
    """Markdown: a row per fault, a column per check; FAIL where the fault fails the check (each result
    known_answer.json as read, or KnownAnswerResult.to_json())."""
    names = [c["check"] for c in clean["checks"]]
    lines = ["| fault | " + " | ".join(names) + " |", "|---|" + "---|" * len(names),
             "| (none: clean run) | " + " | ".join("pass" if c["passed"] else "**FAIL**" for c in clean["checks"]) + " |"]
    for fault, result in by_fault.items():
        failed = set(failed_checks(result))
        lines.append(f"| {fault} | " + " | ".join("**FAIL**" if n in failed else "pass" for n in names) + " |")
    return "\n".join(lines) + "\n"
