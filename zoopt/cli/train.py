"""``zoopt train``: ES-train a model on a verifier objective (:mod:`zoopt.workflows.train`)."""

from __future__ import annotations

import argparse

from ..config import load_config
from ..runs.rundir import RunDir
from ..workflows.train import check_resumable, train
from .common import MODEL_HELP, add_run_flags, flag_overrides

HELP = "ES-train a model on a verifier objective"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_flags(p, "train", MODEL_HELP)
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its seed log")


def run(args: argparse.Namespace) -> int:
    config_path = args.config
    if args.resume:  # before its config.yaml is read: a run zoopt.fit started may name objects no config rebuilds
        check_resumable(args.resume)
    if args.resume and config_path is None and RunDir(args.resume).config_path.exists():
        config_path = RunDir(args.resume).config_path
    cfg = load_config(config_path, flag_overrides(args))
    train(cfg, resume=args.resume, show_progress=not args.quiet)
    return 0
