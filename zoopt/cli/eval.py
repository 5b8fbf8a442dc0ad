"""``zoopt eval``: held-out greedy accuracy, pass@k and maj@k of a model; pass@k charts.

Settings: :func:`zoopt.cli.common.eval_config` (a run config, then ``--set``, then the flags).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .. import plots
from ..state import model_label
from ..workflows.analyze import evaluate_model, jsonable
from .common import add_eval_flags, eval_config, slug, stamp

HELP = "held-out greedy accuracy, pass@k and maj@k of a model"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="a model name, an HF directory, or a training run directory")
    p.add_argument("--objective", help="objective name or path/to/file.py:attr (default: the run's, "
                                       "else the config's)")
    p.add_argument("--k", default="1,8,16,32", help="comma-separated k for pass@k/maj@k (default 1,8,16,32)")
    p.add_argument("--n", type=int, default=None,
                   help="samples per problem (≥ max k; default max k; 0: greedy only)")
    add_eval_flags(p)
    p.add_argument("--out", help="output directory (default runs/eval-<model>-<objective>-<time>)")
    p.add_argument("--compare", nargs="+", metavar="DIR",
                   help="also draw these eval directories' pass@k curves (summary.json) on one chart")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def parse_ks(text: str) -> tuple[int, ...]:
    """``"1,8,16"`` → ``(1, 8, 16)`` (sorted, unique, each ≥ 1)."""
    try:
        ks = sorted({int(x) for x in str(text).split(",") if x.strip()})
    except ValueError:
        ks = []
    if not ks or ks[0] < 1:
        raise ValueError(f"--k must be comma-separated integers ≥ 1, got {text!r}")
    return tuple(ks)


def samples_for(ks: tuple[int, ...], n: int | None) -> int:
    """``n`` (default ``max(ks)``), checked: 0 (greedy only) or ``n ≥ max(ks)``."""
    n = max(ks) if n is None else n
    if n < 0 or 0 < n < max(ks):
        raise ValueError(f"--n {n} is smaller than the largest --k {max(ks)}: pass@k needs n ≥ k "
                         f"samples per problem (or --n 0 for greedy only)")
    return n


def run(args: argparse.Namespace) -> int:
    """``zoopt eval``: evaluate ``--model`` and/or chart ``--compare`` directories."""
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
        out = out or Path("runs") / f"eval-{label}-{slug(cfg['objective'])}-{stamp()}"
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
        out = out or Path("runs") / f"compare-{stamp()}"
        console.print(compare_table(curves))
    if curves:
        png = plots.plot_pass_at_k(curves, out / "pass_at_k.png")
        console.print(f"wrote {png}")
    return 0


def read_curve(directory: str | Path) -> tuple[str, dict[int, float]]:
    """``(label, {k: pass@k})`` from an eval directory's ``summary.json`` (or the file)."""
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
    ks = sorted({k for c in curves.values() for k in c})
    table = Table(title="pass@k")
    table.add_column("model")
    for k in ks:
        table.add_column(f"pass@{k}", justify="right")
    for label, curve in curves.items():
        table.add_row(label, *(f"{curve[k]:.4f}" if k in curve else "–" for k in ks))
    return table
