"""``zoopt grpo``: GRPO-train a model on a verifier objective (:mod:`zoopt.workflows.grpo`)."""

from __future__ import annotations

import argparse

from ..config import load_config
from ..workflows.grpo import train_grpo
from .common import MODEL_HELP, add_run_flags, flag_overrides

HELP = "GRPO-train a model on a verifier objective (TRL's loss, AdamW)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_flags(p, "grpo", MODEL_HELP, "; vllm rolls out while a separate fp32 policy trains")


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, flag_overrides(args), base="grpo")
    train_grpo(cfg, show_progress=not args.quiet)
    return 0
