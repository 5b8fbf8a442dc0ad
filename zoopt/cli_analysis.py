"""``zoopt eval`` and ``zoopt analyze`` (added to the ``zoopt`` parser by :func:`add_commands`).

Evaluation settings are a run config: ``zoopt/configs/train.yaml`` — or, when ``--model`` is a
training run (or its ``model/``), that run's ``config.yaml`` — then ``--set KEY=VALUE``, then
the explicit flags.  So by default ``zoopt eval`` uses the trainer's held-out settings
(``eval.n_problems``, ``eval.temperature``, ``eval.max_new_tokens``, ``seed``, ``batch_size``,
``dtype``) and its greedy accuracy / pass@1 equal the training loop's.  Bad flags are
``ValueError``s with a one-line message naming the flag (``zoopt`` exits with status 2).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import yaml

EVAL_FLAGS = ("n_problems", "temperature", "max_new_tokens", "dtype", "seed", "batch_size",
              "device", "engine")


def add_commands(sub) -> None:
    """Add the ``eval`` and ``analyze`` sub-commands to ``sub`` (an argparse subparsers)."""
    p = sub.add_parser("eval", help="held-out greedy accuracy, pass@k and maj@k of a model")
    p.add_argument("--model", help="a model name, an HF directory, or a training run directory")
    p.add_argument("--objective", help="objective name or path/to/file.py:attr (default: the run's, "
                                       "else the config's)")
    p.add_argument("--k", default="1,8,16,32", help="comma-separated k for pass@k/maj@k (default 1,8,16,32)")
    p.add_argument("--n", type=int, default=None,
                   help="samples per problem (≥ max k; default max k; 0: greedy only)")
    _add_eval_flags(p)
    p.add_argument("--out", help="output directory (default runs/eval-<model>-<objective>-<time>)")
    p.add_argument("--compare", nargs="+", metavar="DIR",
                   help="also draw these eval directories' pass@k curves (summary.json) on one chart")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_eval)

    p = sub.add_parser("analyze", help="weight drift, update sparsity and thresholded checkpoints")
    p.add_argument("base", nargs="?", help="base model (name, HF dir or run dir); a run dir alone "
                                           "means its config's model → its model/")
    p.add_argument("trained", nargs="?", help="trained model (name, HF dir or run dir)")
    p.add_argument("--run", metavar="RUN_DIR", help="plot RUN_DIR/metrics.jsonl to RUN_DIR/training.png")
    p.add_argument("--tau", type=float, default=None, help="magnitude threshold τ (default 1.5e-3)")
    p.add_argument("--threshold", metavar="T1,T2,...",
                   help="write a checkpoint keeping only |Δ| > τ for each τ (inf allowed)")
    p.add_argument("--bins", type=int, default=60, help="histogram bins (default 60)")
    p.add_argument("--eval-objective", metavar="O", help="evaluate base, trained and each threshold on O")
    p.add_argument("--n", type=int, default=None, help="samples per problem for pass@1 (default 0: greedy only)")
    _add_eval_flags(p)
    p.add_argument("--out", help="output directory (default runs/analyze-<trained>-<time>)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_analyze)


def _add_eval_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n-problems", type=int, help="test problems (default eval.n_problems)")
    p.add_argument("--temperature", type=float, help="sampling temperature (default eval.temperature)")
    p.add_argument("--max-new-tokens", type=int, help="default eval.max_new_tokens")
    p.add_argument("--dtype", help="working dtype (default: the config's dtype)")
    p.add_argument("--seed", type=int, help="default: the config's seed")
    p.add_argument("--batch-size", type=int, help="default: the config's batch_size")
    p.add_argument("--device", help="default: the config's device")
    p.add_argument("--engine", help="hf or vllm (default: the config's engine)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config key, e.g. objective_args.digits=1 (repeatable)")


# -- settings -----------------------------------------------------------------------------
def parse_ks(text: str) -> tuple[int, ...]:
    """``"1,8,16"`` → ``(1, 8, 16)`` (sorted, unique, each ≥ 1)."""
    try:
        ks = sorted({int(x) for x in str(text).split(",") if x.strip()})
    except ValueError:
        ks = []
    if not ks or ks[0] < 1:
        raise ValueError(f"--k must be comma-separated integers ≥ 1, got {text!r}")
    return tuple(ks)


def parse_taus(text: str | None) -> tuple[float, ...]:
    """``"1e-4,1.5e-3,inf"`` → ``(1e-4, 1.5e-3, inf)`` (each ≥ 0, order kept)."""
    if text is None:
        return ()
    try:
        taus = tuple(float(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        taus = ()
    if not taus or any(not t >= 0 for t in taus):
        raise ValueError(f"--threshold must be comma-separated numbers ≥ 0 (inf allowed), got {text!r}")
    return taus


def samples_for(ks: tuple[int, ...], n: int | None) -> int:
    """``n`` (default ``max(ks)``), checked: 0 (greedy only) or ``n ≥ max(ks)``."""
    n = max(ks) if n is None else n
    if n < 0 or 0 < n < max(ks):
        raise ValueError(f"--n {n} is smaller than the largest --k {max(ks)}: pass@k needs n ≥ k "
                         f"samples per problem (or --n 0 for greedy only)")
    return n


def eval_config(model: str | None, objective: str | None, args: argparse.Namespace,
                n_samples: int, ks: tuple[int, ...]) -> dict:
    """The run config for evaluating ``model`` (see the module doc)."""
    from .config import default_config, merge, set_dotted
    from .state import resolve_model, run_config

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
        if "=" not in item:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        set_dotted(cfg, key.strip(), yaml.safe_load(raw))
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
    return cfg


def _slug(text: str) -> str:
    name = Path(str(text).split(":")[0]).stem if ("/" in str(text) or ".py" in str(text)) else str(text)
    return "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in name).strip("-.") or "x"


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


# -- zoopt eval ---------------------------------------------------------------------------
def run_eval(args: argparse.Namespace) -> int:
    """``zoopt eval``: evaluate ``--model`` and/or chart ``--compare`` directories."""
    from rich.console import Console

    from . import plots
    from .analyze import evaluate_model, jsonable
    from .state import model_label

    if not args.model and not args.compare:
        raise ValueError("zoopt eval needs --model M (or --compare DIR ...)")
    ks = parse_ks(args.k)
    n = samples_for(ks, args.n)
    console = Console()
    curves: dict[str, dict[int, float]] = {}
    out = Path(args.out) if args.out else None
    if args.model:
        cfg = eval_config(args.model, args.objective, args, n, ks)
        label = model_label(args.model)
        out = out or Path("runs") / f"eval-{label}-{_slug(cfg['objective'])}-{_stamp()}"
        result = evaluate_model(cfg, progress=None if args.quiet else True)
        summary = {**result.summary, "model": str(args.model), "model_path": cfg["model"],
                   "objective": cfg["objective"], "objective_args": cfg.get("objective_args") or {},
                   "dtype": cfg["dtype"], "device": cfg["device"], "batch_size": cfg["batch_size"],
                   "ks": list(ks) if n else []}
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(jsonable(summary), indent=2))
        result.to_csv(out / "per_problem.csv")
        console.print(result.table())
        if n:
            curves[label] = {k: summary[f"pass@{k}"] for k in ks}
        console.print(f"wrote {out / 'summary.json'} and {out / 'per_problem.csv'}")
    for directory in args.compare or []:
        label, curve = read_curve(directory)
        unique, i = label, 2
        while unique in curves:
            unique, i = f"{label} ({i})", i + 1
        curves[unique] = curve
    if args.compare:
        out = out or Path("runs") / f"compare-{_stamp()}"
        console.print(compare_table(curves))
    if curves:
        png = plots.plot_pass_at_k(curves, out / "pass_at_k.png")
        console.print(f"wrote {png}")
    return 0


def read_curve(directory: str | Path) -> tuple[str, dict[int, float]]:
    """``(label, {k: pass@k})`` from an eval directory's ``summary.json`` (or the file)."""
    from .state import model_label

    path = Path(directory)
    path = path / "summary.json" if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"--compare: no summary.json in {str(directory)!r}")
    summary = json.loads(path.read_text())
    curve = {int(key[5:]): float(v) for key, v in summary.items()
             if key.startswith("pass@") and key[5:].isdigit() and v is not None}
    if not curve:
        raise ValueError(f"--compare: {str(path)!r} has no pass@k values (evaluated with --n 0?)")
    return model_label(summary.get("model") or path.parent), curve


def compare_table(curves: dict[str, dict[int, float]]):
    from rich.table import Table

    ks = sorted({k for c in curves.values() for k in c})
    table = Table(title="pass@k")
    table.add_column("model")
    for k in ks:
        table.add_column(f"pass@{k}", justify="right")
    for label, curve in curves.items():
        table.add_row(label, *(f"{curve[k]:.4f}" if k in curve else "–" for k in ks))
    return table


# -- zoopt analyze ------------------------------------------------------------------------
def run_analyze(args: argparse.Namespace) -> int:
    """``zoopt analyze BASE TRAINED`` / ``zoopt analyze RUN_DIR`` / ``--run RUN_DIR``."""
    from rich.console import Console

    from .analyze import analyze, plot_run, tables
    from .metrics import TAU
    from .state import is_run_dir, model_label, run_config

    if not args.base and not args.run:
        raise ValueError("zoopt analyze needs BASE TRAINED, a training run directory, or --run RUN_DIR")
    console = Console()
    if args.base:
        base, trained = args.base, args.trained
        if trained is None:
            run = run_config(base) if is_run_dir(base) else None
            if not run or not run.get("model"):
                raise ValueError(f"zoopt analyze: give BASE and TRAINED, or one training run "
                                 f"directory (got only {base!r})")
            base, trained = str(run["model"]), base
        tau = TAU if args.tau is None else args.tau
        if not tau >= 0:
            raise ValueError(f"--tau must be ≥ 0, got {args.tau}")
        if args.bins < 1:
            raise ValueError(f"--bins must be ≥ 1, got {args.bins}")
        taus = parse_taus(args.threshold)
        eval_cfg = None
        if args.eval_objective:
            n = 0 if args.n is None else args.n
            if n < 0:
                raise ValueError(f"--n must be ≥ 0, got {n}")
            eval_cfg = eval_config(trained, args.eval_objective, args, n, (1,))
        else:
            given = [f for f in (*EVAL_FLAGS, "n", "set") if getattr(args, f) is not None]
            if given:
                raise ValueError(f"--{given[0].replace('_', '-')} only applies with --eval-objective")
        out = Path(args.out) if args.out else Path("runs") / f"analyze-{model_label(trained)}-{_stamp()}"
        report = analyze(base, trained, out, tau=tau, thresholds=taus, eval_cfg=eval_cfg,
                         bins=args.bins, progress=None if args.quiet else True)
        for table in tables(report):
            console.print(table)
        console.print(f"wrote {out / 'analysis.json'} and {report['plots']['magnitude_histogram']}")
    if args.run:
        console.print(f"wrote {plot_run(args.run)}")
    return 0
