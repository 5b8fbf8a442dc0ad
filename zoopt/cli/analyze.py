"""``zoopt analyze``: weight drift, update sparsity and thresholded checkpoints of a trained
model (:mod:`zoopt.workflows.analyze`), and ``--run``'s training curves."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from ..metrics import TAU
from ..models import resolve_dtype
from ..reporting.plots import plot_run
from ..runs.references import is_run_dir, model_label, run_config
from ..workflows.analyze import analyze, tables
from ..workflows.coverage import coverage_lines, population_coverage
from .common import EVAL_FLAGS, add_eval_flags, eval_config, stamp

HELP = "weight drift, update sparsity and thresholded checkpoints; --population-coverage (C8)"


def add_arguments(p: argparse.ArgumentParser) -> None:
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
    add_eval_flags(p, dtype_help="the dtype the run worked in: BASE is loaded in it, as the run's engine loaded it, "
                                 "before Δ is taken (default: TRAINED's run config dtype, else float32); "
                                 "also the evaluation's dtype")
    p.add_argument("--population-coverage", action="store_true",
                   help="C8: Pass@K from K different members θ+σεᵢ vs K samples of θ (σ, noise: the run's config or --set)")
    p.add_argument("--members", type=int, default=32, help="population members (and samples of θ) for --population-coverage")
    p.add_argument("--coverage-ks", default="1,4,16,32", metavar="K1,K2", help="the K of --population-coverage")
    p.add_argument("--out", help="output directory (default runs/analyze-<trained>-<time>)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def resolve_dtype_name(dtype: str) -> str:
    """``--dtype``'s value as a canonical name (``bf16`` → ``bfloat16``); a one-line error naming it."""
    try:
        return str(resolve_dtype(dtype)).removeprefix("torch.")
    except ValueError as exc:
        raise ValueError(f"--dtype: {exc}") from None


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


def run(args: argparse.Namespace) -> int:
    """``zoopt analyze BASE TRAINED`` / ``zoopt analyze RUN_DIR`` / ``--run RUN_DIR``."""
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
        if args.population_coverage:
            return _coverage(console, trained, args)
        if args.eval_objective:
            n = 0 if args.n is None else args.n
            if n < 0:
                raise ValueError(f"--n must be ≥ 0, got {n}")
            eval_cfg = eval_config(trained, args.eval_objective, args, n, (1,))
        else:
            given = [f for f in (*EVAL_FLAGS, "n", "set") if f != "dtype" and getattr(args, f) is not None]
            if given:
                raise ValueError(f"--{given[0].replace('_', '-')} only applies with --eval-objective")
        out = Path(args.out) if args.out else Path("runs") / f"analyze-{model_label(trained)}-{stamp()}"
        report = analyze(base, trained, out, tau=tau, thresholds=taus, eval_cfg=eval_cfg,
                         bins=args.bins, progress=None if args.quiet else True,
                         dtype=None if args.dtype is None else resolve_dtype_name(args.dtype))
        for table in tables(report):
            console.print(table)
        console.print(f"wrote {out / 'analysis.json'} and {report['plots']['magnitude_histogram']}")
    if args.run:
        console.print(f"wrote {plot_run(args.run)}")
    return 0


def _coverage(console: Console, trained: str, args: argparse.Namespace) -> int:
    """``--population-coverage``: :func:`zoopt.workflows.coverage.population_coverage` around TRAINED."""
    ks = tuple(int(k) for k in str(args.coverage_ks).split(",") if k.strip())
    cfg = eval_config(trained, args.eval_objective, args, args.members, (1,))
    record = population_coverage(cfg, args.members, ks)
    out = Path(args.out) if args.out else Path("runs") / f"coverage-{model_label(trained)}-{stamp()}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "coverage.json").write_text(json.dumps(record, indent=2))
    for line in coverage_lines(record):
        console.print(line)
    console.print(f"wrote {out / 'coverage.json'}")
    return 0
