"""``zoopt compare``: base vs ES vs GRPO vs ES→GRPO vs GRPO→ES at an equal completion budget
(:mod:`zoopt.workflows.compare`)."""

from __future__ import annotations

import argparse

from ..config import ConfigError
from ..workflows.compare import compare, load_compare_config
from .common import add_run_flags, flag_overrides

HELP = "base vs ES vs GRPO vs ES→GRPO vs GRPO→ES at an equal completion budget"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_flags(p, "compare", "the base model of every method",
                  ": the engine of every method (ray: methods of ES phases only)",
                  set_help="override a key (repeatable): budget=…, es.sigma=…, grpo.lr=…, methods.NAME=[…]")
    p.add_argument("--methods", metavar="A,B", help="run only these configured methods, in this order")


def run(args: argparse.Namespace) -> int:
    cfg = load_compare_config(args.config, flag_overrides(args))
    if args.methods:
        names = [m.strip() for m in args.methods.split(",") if m.strip()]
        unknown = [m for m in names if m not in cfg["methods"]]
        if unknown:
            raise ConfigError(f"--methods: unknown method {unknown[0]!r} (configured: {', '.join(cfg['methods'])})")
        cfg["methods"] = {m: cfg["methods"][m] for m in names}
    result = compare(cfg, log=(lambda *a: None) if args.quiet else print)
    if not args.quiet:
        print((result["run_dir"] / "compare.md").read_text())
    return 0
