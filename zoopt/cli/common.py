"""Flags and settings more than one command shares (no command module imports another).

* :func:`add_run_flags` / :func:`flag_overrides`: ``--model``, ``--objective``, ``--engine``,
  ``--config``, ``--set``, ``--report-to``, ``--quiet`` of ``train``, ``grpo`` and ``compare``;
* :func:`add_eval_flags` / :func:`eval_config`: the evaluation settings of ``eval`` and
  ``analyze``.  They are a run config: ``zoopt/configs/train.yaml`` — or, when ``--model`` is a
  training run (or its ``model/``), that run's ``config.yaml`` — then ``--set KEY=VALUE``, then
  the explicit flags.  So by default ``zoopt eval`` uses the trainer's held-out settings
  (``eval.n_problems``, ``eval.temperature``, ``eval.max_new_tokens``, ``seed``,
  ``batch_size``, ``dtype``) and its greedy accuracy / pass@1 equal the training loop's.  Bad
  flags are ``ValueError``s with a one-line message naming the flag (exit status 2).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from ..config import ConfigError, absolute_paths, default_config, merge, parse_override, set_dotted
from ..hparams import validate
from ..registry import engine_refusal, engines_for
from ..runs.references import resolve_model, run_config

MODEL_HELP = "smollm2-135m (embedded default), tiny, an HF id or a local directory"
EVALUATION_KEYS = ("dtype", "device", "engine", "seed", "batch_size", "reward_timeout_s", "reward_errors", "eval")
EVAL_FLAGS = ("n_problems", "temperature", "max_new_tokens", "dtype", "seed", "batch_size",
              "device", "engine")


# -- training commands ------------------------------------------------------------------------
def flag_overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` items, then ``--model``/``--objective``/``--engine`` as ``key=value`` overrides."""
    overrides = list(args.set or [])
    for key in ("model", "objective", "engine"):
        if getattr(args, key, None):
            overrides.append(f"{key}={getattr(args, key)}")
    return overrides


def add_plugin_flag(p: argparse.ArgumentParser) -> None:
    """``--plugin`` (repeatable): modules imported before names resolve (``zoopt.cli.main`` does it)."""
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE",
                   help="import a module (my_pkg.rewards) or file (rewards.py) that registers objectives, "
                        "engines, ... before names resolve (repeatable; also ZOOPT_PLUGINS)")


def engine_help(command: str, note: str = "", default: str | None = "hf") -> str:
    """``--engine``'s help: the registered engines ``command`` runs (:func:`zoopt.registry.engines_for`)."""
    listed = ", ".join(f"{n} (default)" if n == default else n for n in engines_for(command))
    return f"one of {listed}{note}"


def add_run_flags(p: argparse.ArgumentParser, config: str, model: str, engine_note: str = "",
                  set_help: str = "override a config key (repeatable)") -> None:
    """The flags every training command takes: --model, --objective, --engine, --config, --set,
    --quiet (read back by :func:`flag_overrides`), --plugin; ``config`` names the defaults file
    and the command (``train``, ``grpo``, ``compare``), whose engines ``--engine`` lists;
    ``--ray-address`` only where that command runs the ray engine."""
    add_plugin_flag(p)
    p.add_argument("--model", help=model)
    p.add_argument("--objective", help="a registered objective name or path/to/file.py:attr")
    p.add_argument("--engine", help=engine_help(config, note=engine_note))
    p.add_argument("--config", help=f"YAML config (defaults: zoopt/configs/{config}.yaml)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help=set_help)
    if "ray" in engines_for(config):
        p.add_argument("--ray-address", dest="set", action="append", metavar="ADDRESS",
                       type="engine_args.address={}".format,
                       help="with --engine ray: attach to this Ray cluster (auto, HOST:PORT); default: start a local one")
    p.add_argument("--report-to", dest="set", action="append", metavar="TRACKER[,TRACKER]",
                   type="report_to=[{}]".format,
                   help="send step records, evaluations and plots to tensorboard, wandb or trackio (report_to)")
    p.add_argument("--quiet", action="store_true", help="no progress output")


# -- evaluation commands ----------------------------------------------------------------------
def add_eval_flags(p: argparse.ArgumentParser, dtype_help: str = "working dtype (default: the config's dtype)") -> None:
    """The evaluation settings flags of ``eval`` and ``analyze`` (read by :func:`eval_config`), and --plugin."""
    add_plugin_flag(p)
    p.add_argument("--n-problems", type=int, help="test problems (default eval.n_problems)")
    p.add_argument("--temperature", type=float, help="sampling temperature (default eval.temperature)")
    p.add_argument("--max-new-tokens", type=int, help="default eval.max_new_tokens")
    p.add_argument("--dtype", help=dtype_help)
    p.add_argument("--seed", type=int, help="default: the config's seed")
    p.add_argument("--batch-size", type=int, help="default: the config's batch_size")
    p.add_argument("--device", help="default: the config's device")
    p.add_argument("--engine", help=engine_help("eval", note=" (default: the config's engine)", default=None))
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config key, e.g. objective_args.digits=1 (repeatable)")


def eval_config(model: str | None, objective: str | None, args: argparse.Namespace,
                n_samples: int, ks: tuple[int, ...]) -> dict:
    """The run config for evaluating ``model`` (see the module docstring)."""
    cfg = default_config()
    run = run_config(model) if model else None
    if run:  # an ES or a GRPO run: take the keys evaluation shares with train.yaml, not the method's own
        merge(cfg, {k: v for k, v in run.items() if k in cfg})
        if objective and objective != run.get("objective"):
            cfg["objective_args"] = {}  # the run's arguments belong to the run's objective
        if args.engine and args.engine != run.get("engine"):
            cfg["engine_args"] = {}  # and its engine options to its engine
    if objective:
        cfg["objective"] = objective
    if model:
        cfg["model"] = resolve_model(model)
    for item in args.set or []:
        set_dotted(cfg, *parse_override(item))
    for flag in EVAL_FLAGS:
        value = getattr(args, flag)
        if value is None:
            continue
        if flag in ("n_problems", "max_new_tokens", "batch_size") and value < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be ≥ 1, got {value}")
        if flag == "temperature" and not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"--temperature must be a finite number ≥ 0, got {value}")
        if flag in ("n_problems", "temperature", "max_new_tokens"):
            cfg["eval"][flag] = value
        else:
            cfg[flag] = value
    cfg["eval"]["n_samples"] = int(n_samples)
    cfg["eval"]["ks"] = [int(k) for k in ks]
    refused = engine_refusal(cfg["engine"], "eval")
    if refused:
        raise ConfigError(f"--engine {cfg['engine']}: {refused}")
    # the values evaluation reads, against train.yaml's rules (a bad one is one line naming its key);
    # a run's training-only keys (an estimator zoopt.fit was given as an object) are not its business
    validate({**default_config(), **{k: cfg[k] for k in EVALUATION_KEYS}}, "train")
    return absolute_paths(cfg)


def slug(text: str) -> str:
    name = Path(str(text).split(":")[0]).stem if ("/" in str(text) or ".py" in str(text)) else str(text)
    return "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in name).strip("-.") or "x"


def stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")
