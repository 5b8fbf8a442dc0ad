"""The ``zoopt`` command: one module per sub-command, listed once in :data:`COMMANDS`.

Each command module has ``HELP`` (its one-line help), ``add_arguments(parser)`` and
``run(args) -> exit status``; shared flags live in :mod:`zoopt.cli.common`.  A user error
(a bad config key or value, an unknown name, a missing file, a model that does not load) is one
line, ``zoopt CMD: error: ...``, and exit status 2; ``zoopt --debug CMD ...`` (or
``ZOOPT_DEBUG=1``) shows its traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..config import ConfigError
from ..models import ModelLoadError
from . import analyze, compare, export, grpo, sweep, train
from . import eval as eval_command

COMMANDS = {"train": train, "export": export, "eval": eval_command, "analyze": analyze, "grpo": grpo,
            "compare": compare, "sweep": sweep}

# one-line errors: what a user can mend.  LookupError includes the registry's RegistryError
# (an unknown name); ValueError, the validation of a flag or config value.
USER_ERRORS = (ConfigError, ModelLoadError, LookupError, FileNotFoundError, ValueError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zoopt", description="Evolution-strategies post-training of LLMs.")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an error instead of one line (also ZOOPT_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in COMMANDS.items():
        p = sub.add_parser(name, help=module.HELP)
        module.add_arguments(p)
        p.set_defaults(func=module.run)
    return parser


def debug_requested(args: argparse.Namespace) -> bool:
    return args.debug or os.environ.get("ZOOPT_DEBUG", "").strip() not in ("", "0")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except USER_ERRORS as exc:
        if debug_requested(args):
            raise
        print(f"zoopt {args.command}: error: {exc} (zoopt --debug {args.command} ... shows the traceback)",
              file=sys.stderr)
        return 2
