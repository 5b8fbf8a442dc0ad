"""``zoopt grpo`` and ``zoopt compare`` (added to the ``zoopt`` parser by :func:`add_commands`)."""

from __future__ import annotations

import argparse

from .cli import MODEL_HELP, add_run_flags, flag_overrides


def add_commands(sub) -> None:
    """Add the ``grpo`` and ``compare`` sub-commands to ``sub`` (an argparse subparsers)."""
    p = sub.add_parser("grpo", help="GRPO-train a model on a verifier objective (TRL's loss, AdamW)")
    add_run_flags(p, "grpo", MODEL_HELP, "hf (default) or vllm: the rollout engine")
    p.set_defaults(func=_grpo)

    p = sub.add_parser("compare", help="base vs ES vs GRPO vs ES→GRPO vs GRPO→ES at an equal completion budget")
    add_run_flags(p, "compare", "the base model of every method",
                  "hf (default) or vllm: the rollout engine of every method",
                  set_help="override a key (repeatable): budget=…, es.sigma=…, grpo.lr=…, methods.NAME=[…]")
    p.add_argument("--methods", metavar="A,B", help="run only these configured methods, in this order")
    p.set_defaults(func=_compare)


def _grpo(args: argparse.Namespace) -> int:
    from .config import load_config
    from .grpo import train_grpo

    cfg = load_config(args.config, flag_overrides(args), base="grpo")
    train_grpo(cfg, show_progress=not args.quiet)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from .compare import compare, load_compare_config
    from .config import ConfigError

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
