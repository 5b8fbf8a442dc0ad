"""``zoopt grpo``: GRPO-train a model on a verifier objective (:mod:`zoopt.workflows.grpo`)."""

from __future__ import annotations

import argparse

from ..config import load_config
from ..runs.rundir import RunDir
from ..workflows.grpo import train_grpo
from .common import MODEL_HELP, add_run_flags, flag_overrides

HELP = "GRPO-train a model on a verifier objective (TRL's loss, AdamW)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_flags(p, "grpo", MODEL_HELP, "; vllm rolls out while a separate fp32 policy trains")
    p.add_argument("--resume", metavar="DIR",
                   help="continue the run in DIR from its trainer_state.pt (kept with state_every > 0)")


def run(args: argparse.Namespace) -> int:
    config_path = args.config
    if args.resume and config_path is None and RunDir(args.resume).config_path.exists():
        config_path = RunDir(args.resume).config_path  # the run's own settings; --set still overrides
    cfg = load_config(config_path, flag_overrides(args), base="grpo")
    train_grpo(cfg, show_progress=not args.quiet, resume=args.resume)
    return 0
