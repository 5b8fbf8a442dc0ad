"""``zoopt grpo`` and ``zoopt compare`` (added to the ``zoopt`` parser by :func:`add_commands`)."""

from __future__ import annotations

import argparse

from .cli import flag_overrides


def add_commands(sub) -> None:
    """Add the ``grpo`` and ``compare`` sub-commands to ``sub`` (an argparse subparsers)."""
    p = sub.add_parser("grpo", help="GRPO-train a model on a verifier objective (TRL's loss, AdamW)")
    p.add_argument("--model", help="smollm2-135m (embedded default), tiny, an HF id or a local directory")
    p.add_argument("--objective", help="a registered objective name or path/to/file.py:attr")
    p.add_argument("--engine", help="hf (default) or vllm: the rollout engine")
    p.add_argument("--config", help="YAML config (defaults: zoopt/configs/grpo.yaml)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=_grpo)

    p = sub.add_parser("compare", help="base vs ES vs GRPO vs ES→GRPO vs GRPO→ES at an equal completion budget")
    p.add_argument("--model", help="the base model of every method")
    p.add_argument("--objective", help="a registered objective name or path/to/file.py:attr")
    p.add_argument("--engine", help="hf (default) or vllm: the rollout engine of every method")
    p.add_argument("--config", help="YAML config (defaults: zoopt/configs/compare.yaml)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a key (repeatable): budget=…, es.sigma=…, grpo.lr=…, methods.NAME=[…]")
    p.add_argument("--methods", metavar="A,B", help="run only these configured methods, in this order")
    p.add_argument("--quiet", action="store_true", help="no progress output")
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
