"""The ``zoopt`` command: ``train``, ``export`` (``eval`` and ``analyze`` in later modules)."""

from __future__ import annotations

import argparse
import sys

from .config import ConfigError
from .models import ModelLoadError


def flag_overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` items, then ``--model``/``--objective``/``--engine`` as ``key=value`` overrides."""
    overrides = list(args.set or [])
    for key in ("model", "objective", "engine"):
        if getattr(args, key, None):
            overrides.append(f"{key}={getattr(args, key)}")
    return overrides


def add_run_flags(p: argparse.ArgumentParser, config: str, model: str, engine: str,
                  set_help: str = "override a config key (repeatable)") -> None:
    """The flags every training command takes: --model, --objective, --engine, --config, --set,
    --quiet (read back by :func:`flag_overrides`); ``config`` names the defaults file."""
    p.add_argument("--model", help=model)
    p.add_argument("--objective", help="a registered objective name or path/to/file.py:attr")
    p.add_argument("--engine", help=engine)
    p.add_argument("--config", help=f"YAML config (defaults: zoopt/configs/{config}.yaml)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help=set_help)
    p.add_argument("--quiet", action="store_true", help="no progress output")


MODEL_HELP = "smollm2-135m (embedded default), tiny, an HF id or a local directory"


def _train(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .config import load_config
    from .train import train

    overrides = flag_overrides(args)
    config_path = args.config
    if args.resume and config_path is None and (Path(args.resume) / "config.yaml").exists():
        config_path = Path(args.resume) / "config.yaml"
    cfg = load_config(config_path, overrides)
    train(cfg, resume=args.resume, show_progress=not args.quiet)
    return 0


def _export(args: argparse.Namespace) -> int:
    from .train import export_from_seedlog

    path, checksum = export_from_seedlog(args.seedlog, args.out, upto=args.upto)
    print(f"wrote {path} (weights checksum {checksum})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zoopt", description="Evolution-strategies post-training of LLMs.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="ES-train a model on a verifier objective")
    add_run_flags(p, "train", MODEL_HELP, "hf (default) or vllm")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its seed log")
    p.set_defaults(func=_train)

    p = sub.add_parser("export", help="rebuild a run's weights from its seed log as an HF directory")
    p.add_argument("seedlog", help="a run directory or its seedlog.json")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--upto", type=int, default=None, help="replay only the first N steps")
    p.set_defaults(func=_export)

    try:  # commands contributed by later modules
        from .cli_analysis import add_commands
    except ImportError:
        pass
    else:
        add_commands(sub)
    from .cli_grpo import add_commands as add_grpo_commands
    from .cli_sweep import add_command as add_sweep_command

    add_grpo_commands(sub)
    add_sweep_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, LookupError, FileNotFoundError, ValueError, ModelLoadError) as exc:
        print(f"zoopt {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
