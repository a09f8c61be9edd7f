"""`evprobe organism train`: retrain the model organism from a seed (see organism.train)."""

from __future__ import annotations

import argparse
from dataclasses import fields, replace
from pathlib import Path

from evprobe.core.argtypes import positive_int


def add_organism_parser(sub: argparse._SubParsersAction) -> None:
    from evprobe.organism.train import TrainConfig

    # The class's field defaults, not TrainConfig(): an instance builds its ModelConfig, which
    # imports torch and transformers (organism.model), and `--help` must not pay for them.
    defaults = argparse.Namespace(**{f.name: f.default for f in fields(TrainConfig)})
    p = sub.add_parser(
        "organism",
        help="the known-answer model organism: retrain it",
        description="The model organism (model name `organism`): a small Llama trained here on "
        "freshly drawn families to solve the selection task. `train` reproduces the committed "
        "checkpoint from its seed.",
    )
    actions = p.add_subparsers(dest="organism_command", required=True, parser_class=type(p))
    t = actions.add_parser(
        "train",
        help="train from a seed into OUT (resumable; OUT/checkpoint is the model folder)",
        description="Train the organism into OUT: OUT/train_log.jsonl (validation every "
        "--eval-every steps), OUT/train_state.json + .safetensors (resume point), OUT/checkpoint/ (the model). "
        "Rerun the same command to resume a killed run.",
    )
    t.add_argument("--out", required=True, type=Path, help="training folder")
    t.add_argument("--seed", type=int, default=defaults.seed, help=f"training seed (default {defaults.seed})")
    t.add_argument("--steps", type=positive_int, default=defaults.steps,
                   help=f"optimizer steps (default {defaults.steps})")
    t.add_argument("--batch-size", type=positive_int, default=defaults.batch_size)
    t.add_argument("--threads", type=positive_int, default=defaults.threads, help="torch CPU threads")
    t.add_argument("--eval-every", type=positive_int, default=defaults.eval_every)
    t.add_argument("--val-families", type=positive_int, default=defaults.val_families)
    t.set_defaults(run=_run_train)


def _run_train(args: argparse.Namespace) -> int:
    from evprobe.organism.train import TrainConfig, train

    cfg = replace(TrainConfig(), seed=args.seed, steps=args.steps, batch_size=args.batch_size,
                  threads=args.threads, eval_every=args.eval_every, val_families=args.val_families)
    result = train(cfg, args.out)
    print(
        f"trained {cfg.steps} steps in {result['seconds']:.0f} s; validation ({result['n']} fresh "
        f"decisions): accuracy {result['accuracy']:.3f}, both-correct pairs {result['pairs_both_correct']:.3f}; "
        f"voids ({result['voids']['n']}): accuracy {result['voids']['accuracy']:.3f}; "
        f"model in {args.out / 'checkpoint'}"
    )
    return 0
