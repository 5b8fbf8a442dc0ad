"""The ``zoopt`` command: one module per sub-command, listed once in :data:`COMMANDS`.

Each command module has ``HELP`` (its one-line help), ``add_arguments(parser)`` and
``run(args) -> exit status``; shared flags live in :mod:`zoopt.cli.common`.  A user error
(a bad config key or value, an unknown name, a missing file, a model that does not load) is one
line, ``zoopt CMD: error: ...``, and exit status 2; ``zoopt --debug CMD ...`` (or
``ZOOPT_DEBUG=1``) shows its traceback instead.  So is a missing optional dependency: the line
names the extra to install (:mod:`zoopt.extras`).

Commands that resolve names (``train``, ``grpo``, ``compare``, ``eval``, ``analyze``, ``sweep``)
take ``--plugin MODULE_OR_FILE`` (repeatable): the modules are imported before anything else,
so the objectives, engines or noises they register are known (:mod:`zoopt.plugins`).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from ..config import ConfigError
from ..extras import missing_dependency
from ..models import ModelLoadError
from ..plugins import PluginError, add_plugins
from ..rewards.scoring import RewardError, ZooptWarning
from . import analyze, calibrate, compare, export, frontier, grpo, study, sweep, train
from . import eval as eval_command

COMMANDS = {"train": train, "export": export, "eval": eval_command, "analyze": analyze, "grpo": grpo,
            "compare": compare, "sweep": sweep, "study": study, "frontier": frontier, "calibrate": calibrate}

# one-line errors: what a user can mend.  LookupError includes the registry's RegistryError
# (an unknown name); ValueError, the validation of a flag or config value.
# PluginError: a --plugin that does not import; RewardError: every reward of a step failed.
USER_ERRORS = (ConfigError, ModelLoadError, LookupError, FileNotFoundError, ValueError, PluginError, RewardError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zoopt", description="Evolution-strategies post-training of LLMs.")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an error instead of one line (also ZOOPT_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in COMMANDS.items():
        p = sub.add_parser(name, help=module.HELP)
        module.add_arguments(p)
        p.set_defaults(func=module.run, plugin=[])
    return parser


def debug_requested(args: argparse.Namespace) -> bool:
    return args.debug or os.environ.get("ZOOPT_DEBUG", "").strip() not in ("", "0")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning(warnings.showwarning)
            warnings.simplefilter("default", ZooptWarning)
            add_plugins(args.plugin or [])
            return args.func(args)
    except (*USER_ERRORS, ImportError) as exc:
        error = exc if isinstance(exc, USER_ERRORS) else missing_dependency(exc)
        if error is None or debug_requested(args):
            raise
        print(f"zoopt {args.command}: error: {_one_line(error)} (zoopt --debug {args.command} ... shows the "
              f"traceback)", file=sys.stderr)
        return 2


def _show_warning(show):
    """zoopt's own warnings (:class:`~zoopt.rewards.scoring.ZooptWarning`) as one ``zoopt: warning: ...`` line."""
    def showwarning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, ZooptWarning):
            print(f"zoopt: warning: {message}", file=file or sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)
    return showwarning


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
