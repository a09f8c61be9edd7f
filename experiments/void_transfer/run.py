"""`evprobe void-transfer`: the run, the re-score from a panel's decisions and the command
(experiments.void_transfer)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evprobe.analysis.generated_readout import GeneratedReadout
from evprobe.core.bootstrap import Estimate
from evprobe.core.errors import ConfigError, InputError
from evprobe.core.estimate_text import estimate_text
from evprobe.core.files import atomic_write_bytes, atomic_write_json, atomic_write_jsonl
from evprobe.core.json_types import JsonObject
from evprobe.core.lock import folder_lock
from evprobe.experiments.config import (
    ModelConfig,
    add_experiment_parser,
    as_dict,
    check_tiny_layers,
    experiment_config,
    load_config,
    load_model_config,
)
from evprobe.experiments.steering_conventions import free_readout
from evprobe.experiments.void_transfer.config import (FORMAT, FREE_MEASURES, FREE_REGIME, JSON_FILE, JUDGED, MD_FILE,
                                                     POSITION, REPLIES_FILE, VoidTransferConfig)
from evprobe.experiments.void_transfer.judged import estimate_of_json, same_replies
from evprobe.experiments.void_transfer.report import (VoidPath, VoidTransferMeta, VoidTransferReport, markdown,
                                                     steering_effect)


def check_fitted(directions: list[Any], voids: list[str], layers: tuple[int, ...] | list[int]) -> None:
    """Refuse in one line a (void type, layer) that got no direction: fit_directions skips (with a warning)
    one whose resolved and unresolved rows have identical mean states, and steering would miss it later."""
    fitted = {(d.provenance["condition"].removeprefix("void="), d.provenance["layer"]) for d in directions}
    missing = [(void, layer) for void in voids for layer in layers if (void, layer) not in fitted]
    if missing:
        void, layer = missing[0]
        raise ConfigError(f"void-transfer's {void} direction at layer {layer}/{POSITION}: its resolved and unresolved "
                          f"rows in the fitting families have identical mean states ({len(missing)} such void type x "
                          f"layer), so there is no direction to steer; drop layer {layer} from --layers")

def _pairs(items: list[Any]) -> dict[str, list[tuple[Any, Any]]]:
    """Void type -> (void, twin) answer-request pairs of the benchmark."""
    by_id = {it.item_id: it for it in items}
    out: dict[str, list[tuple[Any, Any]]] = {}
    for it in items:
        if it.void is not None and it.request == "answer_initial":
            out.setdefault(it.void, []).append((it, by_id[it.twin_id]))
    return out


def _check(config: VoidTransferConfig) -> tuple[ModelConfig, Path, dict[str, list[tuple[Any, Any]]], list[str], list[str]]:
    """Everything checkable before a model loads: the model config, the benchmark, its voids, the layers, the split."""
    from evprobe.bench.manifest import META_FILE, read_items
    from evprobe.experiments.gating.plan import split_families

    model = load_model_config(config.model)
    bench = Path(config.bench)
    if not (bench / META_FILE).is_file():
        raise ConfigError(f"benchmark {bench} not found (no {META_FILE}); generate it with `evprobe generate --out "
                          f"{bench} --voids occluded,unstated`")
    items = read_items(bench)
    pairs = _pairs(items)
    if len(pairs) < 2:
        raise ConfigError(f"{bench} holds {len(pairs)} void type(s) with answer requests; regenerate it with "
                          "`evprobe generate --voids occluded,unstated`")
    check_tiny_layers(model, config.layers)
    fit, held = split_families([v for p in pairs.values() for v, _ in p], config.split_seed)
    if len(fit) < 2 or len(held) < 2:
        raise ConfigError(f"{bench} has too few families to split (fitting {len(fit)}, held out {len(held)}); "
                          "generate at least 2 families per system")
    return model, bench, pairs, fit, held


def void_transfer(config: VoidTransferConfig, *, progress: bool = True) -> VoidTransferReport:
    """Run the experiment (module docstring) and write its files; returns the path table."""
    model, bench, pairs, fit, held = _check(config)
    out = Path(config.out)
    _check_readout(out, config.readout)
    with folder_lock(out, "evprobe void-transfer"):
        _check_readout(out, config.readout)  # again under the lock: a run that finished meanwhile
        return _run(config, model, bench, pairs, fit, held, out, progress)


def rescore(judged: str | Path, *, progress: bool = True) -> VoidTransferReport:
    """`--judged OUT/judged`: the finished --readout free run OUT steered again with its own config, each greedy reply
    read by the panel's decision (analysis.judged_replies; refused before any work when they do not match) instead
    of the rule reader: the same paths, nulls, cross-fit and intervals. Writes void_transfer.json / .md into
    OUT/judged (the probe AUROCs copied from OUT's, which no reader changes); OUT is not written."""
    from evprobe.analysis.judged_replies import JudgedReplies

    judged = Path(judged)
    out = judged.parent
    done = json.loads((out / JSON_FILE).read_text()) if (out / JSON_FILE).is_file() else {}
    if done.get("format") != FORMAT or (done.get("config") or {}).get("readout") != "free":
        raise InputError(f"--judged {judged}: {out / JSON_FILE} is no finished void-transfer run read with --readout "
                         "free; run it so, judge it (evprobe judge OUT), then re-score")
    config = load_config(VoidTransferConfig, done["config"], where=f"{out / JSON_FILE}'s config")
    model, bench, pairs, fit, held = _check(config)
    with folder_lock(out, "evprobe void-transfer --judged"), folder_lock(judged, "evprobe void-transfer --judged"):
        reader = JudgedReplies.read(out, judged)  # every refusal before any work
        return _run(config, model, bench, pairs, fit, held, out, progress, (reader, done))


def _check_readout(out: Path, readout: str) -> None:
    """A folder keeps one readout (module docstring): a finished run's void_transfer.json names it
    (`readout` in its config; absent = letters, every run before the key existed)."""
    try:
        done = json.loads((out / JSON_FILE).read_text())
    except (OSError, ValueError):
        return  # nothing finished here (or unreadable: the run rewrites it)
    before = (done.get("config") or {}).get("readout", "letters") if isinstance(done, dict) else "letters"
    if before != readout:
        raise ConfigError(f"{out} holds a void-transfer run read with readout {before!r}, not {readout!r}; give "
                          f"another --out (a folder keeps one readout) or --readout {before}")


def _run(config: VoidTransferConfig, model: ModelConfig, bench: Path, pairs: dict[str, list[tuple[Any, Any]]],
         fit: list[str], held: list[str], out: Path, progress: bool, judged: Any = None) -> VoidTransferReport:
    """The run (module docstring); judged: (JudgedReplies, the finished run's JSON) to re-score (`rescore`):
    nothing captured, swept or written in `out`, every reply read by the panel, the files into out/judged."""
    from evprobe.bench.manifest import load_item_images
    from evprobe.bench.protocols import build_prompt
    from evprobe.experiments.capture.config import CaptureConfig
    from evprobe.experiments.capture.job import capture
    from evprobe.experiments.config import load_model
    from evprobe.analysis.dose_response import steering_dose_response
    from evprobe.analysis.label_null import direction_rows
    from evprobe.experiments.steering_conventions import measure_sign
    from evprobe.probes.captures import load_captures
    from evprobe.probes.label_sets import labels
    from evprobe.probes.directions import fit_directions, write_directions
    from evprobe.probes.runs import sweep_to_folder
    from evprobe.probes.sweep import SweepConfig
    from evprobe.probes.transfer import conditions

    acts = out / "acts"
    if judged is None:
        capture(CaptureConfig(model=model, bench=str(bench), out=str(acts), requests=("answer_initial", "voids"),
                              layers="all", positions=(POSITION,), batch_size=config.batch_size), progress=progress)
    cs = load_captures([acts])
    if judged is None:
        run = sweep_to_folder(cs, "resolved", out / "sweep", SweepConfig(folds=config.folds, n_boot=config.n_boot,
                                                                         seed=config.seed),
                              transfer=("void",), progress="void sweep" if progress else None)
        transfer = run.transfers["void"]
    ls = labels(cs, "resolved")
    fitting = ls.subset(np.isin(ls.families.astype(str), fit), reason="held-out family (void-transfer split)")
    directions = fit_directions(cs, fitting, list(config.layers), POSITION, "massmean",
                                conditions=[(f"void={c.name}", c.mask) for c in conditions(cs, fitting, "void")])
    check_fitted(directions, [c.name for c in conditions(cs, fitting, "void")], config.layers)
    if judged is None:
        write_directions(out / "directions", directions)
    toward_abstain = {(d.provenance["condition"].removeprefix("void="), d.provenance["layer"]):
                      measure_sign(d.provenance, d.name) * d.vector.astype(np.float64) for d in directions}
    # the rows each direction was fitted on (its void type's pairs in the fitting families): the label-free null's
    fit_rows = {(d.provenance["condition"].removeprefix("void="), d.provenance["layer"]): direction_rows(d)
                for d in directions} if config.n_relabel else {}
    handle = load_model(model)

    replies: list[JsonObject] = []  # the free readout's every reply, for replies.jsonl

    def steer(pairs_of: list[tuple[Any, Any]], group: str, source: str, goal: int, run: str) -> Any:
        """The source direction over the doses on the held-out pairs' `group` members (own-data dose-response)."""
        chosen = [v if group == "void" else t for v, t in pairs_of if v.family_id in held]
        vectors = {layer: toward_abstain[(source, layer)] for layer in config.layers if (source, layer) in toward_abstain}
        if not vectors:
            raise InputError(f"no {source} direction at layers {list(config.layers)} (identical class means)")
        free = (judged[0].readout([it.item_id for it in chosen], model.max_new_tokens_free) if judged is not None
                else _free_readout(chosen, model.max_new_tokens_free) if config.readout == "free" else None)
        result = steering_dose_response(
            handle, [build_prompt(it, "direct" if free is None else "free") for it in chosen],
            [load_item_images(bench, it.images) for it in chosen], direction=vectors, readout=free,
            candidates=sorted(chosen[0].options) if free is None else None,
            target=[next(k for k, a in it.options.items() if a == "undetermined") for it in chosen]
            if free is None else None,
            families=[it.family_id for it in chosen], alphas=config.alphas, goal=goal, units=config.alpha_units,
            n_random=config.n_random,
            n_relabel=config.n_relabel, fit_rows={layer: fit_rows[(source, layer)] for layer in vectors} or None,
            n_boot=config.n_boot, seed=config.seed, split_seed=config.split_seed, batch_size=config.batch_size)
        if free is not None:
            replies.extend(_reply_rows(result.replies, chosen, run, source, group))
        return result

    # the twins are shared by the void types: inducing abstention on them depends on the source alone
    any_pairs = next(iter(pairs.values()))
    induce = {source: steering_effect(steer(any_pairs, "twin", source, +1, "induce")) for source in sorted(pairs)}
    rows = []
    for target, target_pairs in sorted(pairs.items()):
        for source in sorted(pairs):
            if judged is None:
                cell = transfer.cell(source, target)
                probe = (cell.best.auroc if cell.best is not None else Estimate.empty(cell.reason or "no probe fit"))
            else:  # the run's own: no reader changes it
                probe = estimate_of_json(next(p["probe_auroc"] for p in judged[1]["paths"]
                                       if (p["source"], p["target"]) == (source, target)))
            rows.append(VoidPath(source, target, probe, steering_effect(steer(target_pairs, "void", source, -1, "suppress")),
                                 induce[source]))
    meta = VoidTransferMeta(config_json(config), tuple(fit), tuple(held), config.n_random, config.n_relabel,
                            reader=None if judged is None else judged[0].reader)
    written, dest = (JSON_FILE, MD_FILE), out if judged is None else out / JUDGED
    if judged is not None:
        same_replies(out, replies)
    elif config.readout == "free":
        atomic_write_jsonl(out / REPLIES_FILE, replies)
        written += (REPLIES_FILE,)
    atomic_write_json(dest / JSON_FILE, {**meta.to_json(), "paths": [r.to_json() for r in rows]})
    atomic_write_bytes(dest / MD_FILE, markdown(rows, meta).encode("utf-8"))
    return VoidTransferReport(paths=tuple(rows), files=written if judged else (*written, "sweep/", "directions/",
                                                                                "acts/"))


def _free_readout(items: Sequence[Any], max_new_tokens: int) -> GeneratedReadout:
    """Seed 002's readout (module docstring): item i's free-form reply read by the rule reader (bench.parse,
    letters off: the free protocol's seed002 rubric): abstained = answer undetermined, invalid = no readable
    answer (it abstains on nothing and stays in every denominator)."""
    def read(i: int, reply: str) -> tuple[float, float]:
        got = free_readout(items[i], reply, FREE_REGIME)
        return float(got.abstain), float(not got.valid)

    return GeneratedReadout(FREE_MEASURES, read=read, max_new_tokens=max_new_tokens, rates=FREE_MEASURES)


def _reply_rows(frame: Any, items: Sequence[Any], run: str, source: str, group: str) -> list[JsonObject]:
    """replies.jsonl's rows of one steering run (the dose-response's `replies` frame): the run (suppress on a
    target's voids, induce on the twins), source, item, direction (index within a null), layer, alpha, and the
    reply and the rule reader's reading of it (valid, route, answer, abstain)."""
    def number(x: Any, kind: type) -> Any:
        return None if x is None or x != x else kind(x)  # a frame's missing cell (None / NaN) as null

    rows = []
    for r in frame.itertuples(index=False):
        it = items[r.item]
        rows.append({"run": run, "source": source, "group": group, "item_id": it.item_id, "family_id": it.family_id,
                     "void": it.void, "protocol": "free", "regime": FREE_REGIME, "direction": r.direction,
                     "index": int(r.index), "layer": number(r.layer, int), "alpha": number(r.alpha, float),
                     **free_readout(it, r.reply, FREE_REGIME).to_json()})  # reply, valid, route, answer, abstain
    return rows


def config_json(config: VoidTransferConfig) -> JsonObject:
    """The config as JSON; the letters readout, the default, is left out (a letters run's files are as
    before the key existed; _check_readout reads its absence as letters)."""
    out = json.loads(json.dumps(as_dict(config), default=str))
    if out.get("readout") == "letters":
        del out["readout"]
    return out


def add_void_transfer_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = add_experiment_parser(
        sub, "void-transfer", VoidTransferConfig, run_void_transfer, example="void_transfer_tiny", config_required=False,
        help="probes and steering across void types: directions fitted on one void type, read and steered on the other",
        description="Capture the answer requests and the voids (a benchmark generated with --voids), sweep resolved "
        "with the transfer matrix by void type, fit one direction per void type on half the families and steer the "
        "other half's pairs of every void type with it, beside random and label-free null directions: void_transfer.json, "
        "void_transfer.md. Flags override the config.",
    )
    p.add_argument("--judged", type=Path, default=None, metavar="OUT/judged", help="alone: re-score the finished "
                   "--readout free run OUT from the panel's decisions (evprobe judge OUT), steering again with its own "
                   "config; writes void_transfer.json / .md into OUT/judged")
    return p


def run_void_transfer(args: argparse.Namespace) -> int:
    if args.judged is not None:  # the run's own config, in OUT/void_transfer.json
        from evprobe.core.flags import config_overrides

        if args.config is not None or config_overrides(args, VoidTransferConfig):
            raise InputError("--judged re-scores the run as it was run (its config is in OUT/void_transfer.json): "
                             "give it alone (and --quiet)")
    report = (rescore(args.judged, progress=not args.quiet) if args.judged is not None else
              void_transfer(experiment_config(VoidTransferConfig, args), progress=not args.quiet))
    for r in report.paths:
        e = r.suppress_on_voids
        print(f"{r.source} -> {r.target}: probe AUROC {estimate_text(r.probe_auroc, 3)}; on the voids' "
              f"abstention {estimate_text(e.abstention_change, 1, scale=100.0, sign=True)} points; {e.verdict}")
    print(f"wrote {', '.join(report.files)} in {args.judged or args.out}")
    return 0


