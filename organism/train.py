"""`evprobe organism train`: train the organism from a seed on this machine's CPU.

Deterministic given (seed, config, torch build, thread count): batch k is drawn from the stream
(seed, k), so a resumed run draws the same batches as an uninterrupted one. Every
`save_every` steps the full training state is written atomically and a killed run resumes from
it: the tensors (model weights, optimizer moments) in OUT/train_state-<step>.safetensors, then
OUT/train_state.json (step, config, torch RNG state, optimizer hyperparameters, and the name and
sha256 of the tensors file), whose rename is the commit point. Nothing is unpickled: an
OUT/train_state.pt of older versions (a pickle) is refused, never read. The result is
OUT/checkpoint/, an ordinary transformers folder
(config.json, model.safetensors, tokenizer, processor_config.json) plus organism.json (the
recipe and the validation numbers).

Validation uses fresh families from a stream the training never draws (seed, "val"), with the
benchmark's constructed thresholds, so it measures the benchmark's kind of question without
touching the benchmark's seeds.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from evprobe.bench.family import Family
from evprobe.bench.reference import ACTIONS, ANSWERS
from evprobe.core.errors import InputError
from evprobe.core.files import append_log_lines, atomic_write_bytes
from evprobe.core.json_files import parse_json
from evprobe.core.json_types import JsonObject, JsonScalar, JsonValue
from evprobe.organism.data import (DataConfig, draw_family, property_word, sample_example, select_example,
                                   void_example)
from evprobe.organism.facts import Facts
from evprobe.organism.vocab import ANSWER_PREFIX, OPTION_WORDS, token_ids

# torch and transformers (organism.model) are imported where they are used, so that building
# `evprobe organism train`'s parser (which reads TrainConfig's defaults) loads neither.
if TYPE_CHECKING:
    import torch

    from evprobe.organism.model import ModelConfig, Organism

_VAL_STREAM = 7_777_001  # an extra seed word: validation families never meet training ones
_VOID_VAL_STREAM = 7_777_002  # the void validation's families: apart from both


def _model_config() -> ModelConfig:
    from evprobe.organism.model import ModelConfig

    return ModelConfig()


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 20261130
    steps: int = 16000
    batch_size: int = 64
    lr: float = 3e-3
    min_lr_fraction: float = 0.05
    warmup: int = 200
    weight_decay: float = 0.01
    clip: float = 1.0
    aux_weight: float = 1.0  # the training-only head on the right option's meaning (organism.model)
    # On the reply tokens: keeps the letter probabilities unsaturated, so that interventions have
    # graded effects (chosen on a dev benchmark, seed 777: without it the model steered toward
    # measuring only ~0.45 before breaking; with it 0.84 at layer 2).
    label_smoothing: float = 0.1
    threads: int = 2
    eval_every: int = 500
    save_every: int = 500
    val_families: int = 150
    model: ModelConfig = field(default_factory=_model_config)  # imports torch: only when built
    data: DataConfig = field(default_factory=DataConfig)


def encode(batch: list[tuple[Facts, str | None]]) -> dict[str, torch.Tensor]:
    """Left-padded ids of prompt + the reply: `ANSWER:`, then (when given) the target letter and
    <eos>, with labels. Without a target a row ends at `ANSWER:`, the position that predicts the
    letter (as the toolkit's readouts feed it: hooks' answer prefix).

    Returns input_ids, attention_mask, position_ids (batch, seq), labels (batch, seq): the id
    each position must predict, -100 where nothing is learned, and aux (batch,): the index in
    OPTION_WORDS of what the right option offers (-100 without a target).
    """
    import torch

    ids = token_ids()
    rows, labels, aux = [], [], []
    for facts, letter in batch:
        what = next((w for L, w, _ in facts.options if L == letter), None)
        aux.append(OPTION_WORDS.index(what) if isinstance(what, str) else -100)
        prompt = [ids[t] for t in facts.tokens()]
        if letter is None:
            rows.append(prompt + [ids[ANSWER_PREFIX]])
            labels.append([-100] * (len(prompt) + 1))
        else:
            tail = [ids[ANSWER_PREFIX], ids[letter], ids["<eos>"]]
            rows.append(prompt + tail)
            labels.append([-100] * (len(prompt) - 1) + tail + [-100])
    width = max(len(r) for r in rows)
    pad = ids["<pad>"]
    input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    label_t = torch.tensor([[-100] * (width - len(r)) + lab for r, lab in zip(rows, labels)])
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(r) for r in rows])[:, None]).long()
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": input_ids, "attention_mask": mask, "position_ids": position_ids, "labels": label_t,
            "aux": torch.tensor(aux)}


def _lr(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    floor = cfg.lr * cfg.min_lr_fraction
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * min(t, 1.0)))


def training_batch(cfg: TrainConfig, step: int) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng([cfg.seed, step])
    examples = []
    for i in range(cfg.batch_size):
        family = draw_family(rng, step * cfg.batch_size + i)
        examples.append(sample_example(rng, family, cfg.data))
    return encode(examples)


def validation_set(cfg: TrainConfig) -> list[tuple[Facts, str, str]]:
    """(facts, target letter, pair id): every family's four decisions at its constructed
    thresholds, exact sheet values; the pair id joins the two histories of one threshold."""
    rng = np.random.default_rng([cfg.seed, _VAL_STREAM])
    out = []
    for k in range(cfg.val_families):
        family: Family = draw_family(rng, k)
        order = [ACTIONS[int(i)] for i in rng.permutation(len(ACTIONS))]
        for level in ("low", "high"):
            for history in (0, 1):
                value = family.value(family.initial, history)
                facts, letter = select_example(family, history, family.thresholds[level], order, value)
                out.append((facts, letter, f"{k}.{level}"))
    return out


def void_validation_set(cfg: TrainConfig) -> list[tuple[Facts, str, str]]:
    """(facts, target letter, void type) of the voids the benchmark builds (bench.voids), on fresh
    families at their constructed thresholds: per family and threshold an occluded selection, an
    occluded initial answer and an unstated initial answer (each history's exact reading)."""
    rng = np.random.default_rng([cfg.seed, _VOID_VAL_STREAM])
    out = []
    for k in range(cfg.val_families):
        family: Family = draw_family(rng, k)
        word = property_word(family, family.initial)
        actions = [ACTIONS[int(i)] for i in rng.permutation(len(ACTIONS))]
        answers = [ANSWERS[int(i)] for i in rng.permutation(len(ANSWERS))]
        for level, history in (("low", 0), ("high", 1)):
            q = family.thresholds[level]
            for task, order in (("select", actions), ("answer", answers)):
                facts, letter = void_example(family, "occluded", task, q, order, [(word, None)])
                out.append((facts, letter, "occluded"))
            reading = [(word, family.value(family.initial, history))]
            facts, letter = void_example(family, "unstated", "answer", q, answers, reading)
            out.append((facts, letter, "unstated"))
    return out


def evaluate(model: Organism, examples: list[tuple[Facts, str, str]]) -> dict[str, float]:
    """Greedy letter accuracy (the token after `ANSWER:`) and both-correct pairs."""
    import torch

    ids = token_ids()
    model.eval()
    enc = encode([(f, None) for f, _, _ in examples])
    last = (torch.arange(len(examples)), torch.full((len(examples),), enc["input_ids"].shape[1] - 1))
    with torch.no_grad():
        logits = model(enc["input_ids"], enc["attention_mask"], enc["position_ids"], last)  # (n, vocab)
    pred = logits.argmax(-1).tolist()
    correct = [p == ids[letter] for p, (_, letter, _) in zip(pred, examples)]
    pairs: dict[str, list[bool]] = {}
    for ok, (_, _, pair) in zip(correct, examples):
        pairs.setdefault(pair, []).append(ok)
    model.train()
    return {
        "accuracy": float(np.mean(correct)),
        "pairs_both_correct": float(np.mean([all(v) for v in pairs.values()])),
        "n": len(examples),
    }


STATE_FILE = "train_state.json"  # the commit point of a saved training state
LEGACY_STATE_FILE = "train_state.pt"  # older versions' pickle: refused, never read
_TENSORS = "train_state-{step:08d}.safetensors"
_STATE_FORMAT = 1


_STATE_FIX = "delete the train_state files in {folder} (training restarts) or start a new --out"


def _bad_state(path: Path, why: str) -> InputError:
    return InputError(f"{path}: {why}; {_STATE_FIX.format(folder=path.parent)}")


def _refuse_legacy_state(out: Path) -> None:
    legacy = out / LEGACY_STATE_FILE
    if legacy.exists():
        raise InputError(f"{legacy} is not read: it is a pickle from an older evprobe, and unpickling a file "
                         "can run code; delete it (training restarts from step 0) or start a new --out")


def save_train_state(out: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, cfg: TrainConfig,
                     step: int, seconds: float) -> None:
    """Tensors to OUT/train_state-<step>.safetensors, then the rest to OUT/train_state.json, each
    written atomically; the JSON names the tensors file (and its sha256), so a kill between the two
    leaves the previous state whole. Older tensors files are removed afterwards."""
    import torch
    from safetensors.torch import save

    # clone: the number embedding shares its table with the Llama, and safetensors stores no aliases
    tensors = {f"model.{k}": v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    opt_state = opt.state_dict()
    values: dict[str, dict[str, JsonScalar]] = {}
    for index, entry in opt_state["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{index}.{key}"] = value.detach().clone().contiguous()
            elif value is None or isinstance(value, (bool, int, float, str)):
                values.setdefault(str(index), {})[key] = value
            else:
                raise TypeError(f"optimizer state {index}.{key} is a {type(value).__name__}; not storable as JSON")
    data = save(tensors)
    name = _TENSORS.format(step=step)
    atomic_write_bytes(out / name, data)
    groups = [{k: list(v) if isinstance(v, tuple) else v for k, v in group.items()}
              for group in opt_state["param_groups"]]
    state = {
        "format": _STATE_FORMAT, "step": step, "seconds": seconds, "config": asdict(cfg),
        "tensors": name, "tensors_sha256": hashlib.sha256(data).hexdigest(),
        "optimizer": {"param_groups": groups, "state_values": values,
                      "state_keys": {str(i): sorted(entry) for i, entry in opt_state["state"].items()}},
        "rng": {"torch_cpu": torch.get_rng_state().tolist()},
    }
    atomic_write_bytes(out / STATE_FILE, (json.dumps(state) + "\n").encode("utf-8"))
    for old in out.glob("train_state-*.safetensors"):
        if old.name != name:
            old.unlink(missing_ok=True)


class OptimizerState(TypedDict):
    """torch.optim's state dict (`Optimizer.load_state_dict` takes it): each parameter's state by index
    (tensors, and the plain values the state holds), and the parameter groups' settings."""

    state: dict[int, dict[str, torch.Tensor | JsonScalar]]
    param_groups: list[dict[str, JsonValue | tuple[JsonValue, ...]]]


@dataclass(frozen=True)
class TrainState:
    """A saved training state read back (`read_train_state`): the step and seconds reached, the config
    it was trained with (as JSON), and what resumes it: the model's and the optimizer's state dicts and
    the torch CPU generator state (byte values, for torch.set_rng_state)."""

    step: int
    seconds: float
    config: JsonObject
    model: dict[str, torch.Tensor]
    optimizer: OptimizerState
    rng: list[int]


def read_train_state(out: str | Path) -> TrainState | None:
    """The saved training state of OUT (None when there is none): step, seconds, config (as JSON),
    model (a state dict), optimizer (a state dict), rng. Reads JSON and safetensors only; a
    train_state.pt (a pickle) is refused, never read. A damaged state is a one-line InputError.
    rng: the torch CPU generator state as a list of byte values (torch.set_rng_state)."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    out = Path(out)
    _refuse_legacy_state(out)
    path = out / STATE_FILE
    if not path.exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise _bad_state(path, f"not valid JSON ({err})") from None
    state = parse_json(text, path, _STATE_FIX.format(folder=path.parent))  # bounded: not JSON, nested too deep
    keys = {"format", "step", "seconds", "config", "tensors", "tensors_sha256", "optimizer", "rng"}
    if not isinstance(state, dict) or not keys <= set(state) or state["format"] != _STATE_FORMAT:
        raise _bad_state(path, f"not a training state of format {_STATE_FORMAT}")
    name = state["tensors"]
    if not isinstance(name, str) or Path(name).name != name or not name.endswith(".safetensors"):
        raise _bad_state(path, f"bad tensors file name {name!r}")
    tensors_path = out / name
    if not tensors_path.is_file():
        raise _bad_state(path, f"its tensors file {name} is missing")
    data = tensors_path.read_bytes()
    if hashlib.sha256(data).hexdigest() != state["tensors_sha256"]:
        raise _bad_state(tensors_path, "does not match the sha256 in train_state.json")
    try:
        tensors = load(data)
    except SafetensorError as err:
        raise _bad_state(tensors_path, f"not a safetensors file ({err})") from None
    model = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    try:
        opt = state["optimizer"]
        opt_state: dict[int, dict[str, torch.Tensor | JsonScalar]] = {}
        for index, names in opt["state_keys"].items():
            entry = dict(opt["state_values"].get(index, {}))
            for key in names:
                if key not in entry:
                    entry[key] = tensors[f"optimizer.{index}.{key}"]
            opt_state[int(index)] = entry
        groups = [{k: tuple(v) if isinstance(v, list) and k != "params" else v for k, v in group.items()}
                  for group in opt["param_groups"]]
        return TrainState(step=int(state["step"]), seconds=float(state["seconds"]), config=state["config"],
                          model=model, optimizer={"state": opt_state, "param_groups": groups},
                          rng=[int(x) for x in state["rng"]["torch_cpu"]])
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        raise _bad_state(path, f"incomplete or malformed ({type(err).__name__}: {err})") from None


def train(cfg: TrainConfig, out: str | Path, *, log=print, stop_after: int | None = None) -> dict:
    """Train (or resume) into `out`; returns the final validation numbers.

    stop_after: leave after this step's state is saved, as a killed run would (tests resume)."""
    from evprobe.core.lock import folder_lock

    with folder_lock(out, "evprobe organism train"):  # one trainer per folder: two would interleave their states
        return _train(cfg, Path(out), log, stop_after)


def _train(cfg: TrainConfig, out: Path, log, stop_after: int | None) -> dict:  # noqa: ANN001 - log as in train
    import torch
    import torch.nn.functional as F

    from evprobe.organism.model import Organism

    torch.set_num_threads(cfg.threads)
    state_path, log_path = out / STATE_FILE, out / "train_log.jsonl"
    state = read_train_state(out)  # before anything is built: a refused state costs nothing
    model = Organism(cfg.model, cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay)
    step, seconds = 0, 0.0
    if state is not None:
        if state.config != json.loads(json.dumps(asdict(cfg))):
            raise ValueError(
                f"{state_path} was written by a different training config; use a new --out or delete it"
            )
        try:
            model.load_state_dict(state.model)
            opt.load_state_dict(state.optimizer)
            torch.set_rng_state(torch.tensor(state.rng, dtype=torch.uint8))
        except (RuntimeError, KeyError, TypeError, ValueError) as err:
            raise _bad_state(state_path, f"does not fit this model ({(str(err).splitlines() or [type(err).__name__])[0]})") from None
        step, seconds = state.step, state.seconds
        log(f"resuming at step {step} ({seconds:.0f} s trained)")
    val, void_val = validation_set(cfg), void_validation_set(cfg)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=-100)
    model.train()
    start, window = time.perf_counter() - seconds, []
    while step < cfg.steps:
        batch = training_batch(cfg, step)
        for group in opt.param_groups:
            group["lr"] = _lr(cfg, step)
        # Position t predicts the label at t: labels are already aligned to next tokens.
        where = torch.nonzero(batch["labels"] != -100, as_tuple=True)
        # Every row ends prompt, ANSWER:, letter, <eos>: the position that predicts the letter is at -3.
        logits, aux = model(batch["input_ids"], batch["attention_mask"], batch["position_ids"], where, aux_at=-3)
        loss = (F.cross_entropy(logits, batch["labels"][where], label_smoothing=cfg.label_smoothing)
                + cfg.aux_weight * loss_fn(aux, batch["aux"]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        step += 1
        window.append(loss.item())
        if step % cfg.eval_every == 0 or step == cfg.steps:
            metrics = {**evaluate(model, val), "void_accuracy": evaluate(model, void_val)["accuracy"]}
            row = {"step": step, "loss": float(np.mean(window)), "seconds": round(time.perf_counter() - start, 1),
                   **{f"val_{k}": v for k, v in metrics.items()}}
            window = []
            append_log_lines(log_path, [row])  # one line, fsynced; a link or FIFO there refused
            log(json.dumps(row))
        if step % cfg.save_every == 0 or step == cfg.steps:
            save_train_state(out, model, opt, cfg, step, time.perf_counter() - start)
            if stop_after is not None and step >= stop_after:
                return {"stopped_at": step}
    seconds = time.perf_counter() - start
    final = evaluate(model, val)
    voids = evaluate(model, void_val)
    final["voids"] = {"accuracy": voids["accuracy"], "n": voids["n"]}
    from evprobe.organism.checkpoint import write_checkpoint

    write_checkpoint(model.export(), out / "checkpoint", {
        "recipe": asdict(cfg), "train_seconds": round(seconds, 1), "validation": final,
        "torch": torch.__version__,
    })
    return {"seconds": seconds, **final}
