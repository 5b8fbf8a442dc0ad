"""``zoopt calibrate``: Pass@1, Pass@32, the share of rarely solved problems and the failure
modes of a model on a task — is it a base for a coverage study? (:mod:`zoopt.workflows.calibrate`)

Settings are an evaluation config (:func:`zoopt.cli.common.eval_config`: ``train.yaml``, or a
training run's config, then ``--set``, then the flags), except that the temperature defaults to
:data:`TEMPERATURE` (the study's) and the problems to :data:`N_PROBLEMS`.  Re-running the same
command with the same ``--out`` resumes it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from ..runs.references import model_label
from ..workflows.calibrate import calibrate
from .common import add_eval_flags, eval_config, slug, stamp

HELP = "Pass@1, Pass@32, the share of rarely solved problems and failure modes: a base for a coverage study?"
TEMPERATURE = 0.6   # the coverage study's evaluation temperature (Yue et al. 2025)
N_PROBLEMS = 200
N_SAMPLES = 64


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2-135m", help="a model name, an HF directory, or a training run directory")
    p.add_argument("--objective", help="objective name or path/to/file.py:attr (default: the run's, else the config's)")
    p.add_argument("--n", type=int, default=N_SAMPLES, help=f"samples per problem (default {N_SAMPLES})")
    p.add_argument("--chunk", type=int, default=16,
                   help="problems per generate call, written to disk when done (resume granularity; default 16)")
    p.add_argument("--no-greedy", action="store_true", help="skip the one greedy completion per problem")
    add_eval_flags(p)
    p.set_defaults(n_problems=N_PROBLEMS, temperature=TEMPERATURE)
    p.add_argument("--out", help="output directory (default runs/calibrate-<model>-<objective>-<time>); "
                                 "re-running with the same --out resumes")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    if args.n < 1:
        raise ValueError(f"--n must be ≥ 1, got {args.n}")
    if args.chunk < 1:
        raise ValueError(f"--chunk must be ≥ 1, got {args.chunk}")
    if not args.temperature > 0:
        raise ValueError(f"--temperature must be > 0 (sampled completions), got {args.temperature}")
    cfg = eval_config(args.model, args.objective, args, args.n, (1,))
    out = Path(args.out) if args.out else (
        Path("runs") / f"calibrate-{model_label(args.model)}-{slug(cfg['objective'])}-{stamp()}")
    console = Console()
    columns = (TextColumn("[bold]calibrate[/bold] problems"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console, disable=args.quiet, transient=True) as bar:
        task = bar.add_task("problems", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        result = calibrate(cfg, out, n_samples=args.n, chunk=args.chunk, greedy=not args.no_greedy,
                           progress=progress)
    if not args.quiet:
        console.print(result_table(result))
        console.print(f"wrote {out / 'calibration.json'}")
    return 0


def result_table(result: dict) -> Table:
    """The target criteria, then Pass@k, the histogram and the failure modes."""
    table = Table(title=f"calibration: {result['n_problems']} problems × {result['n_samples']} samples "
                        f"at T = {result['temperature']:g}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    for key, t in result["target"].items():
        value = "–" if t["value"] is None else f"{t['value']:.3f}"
        table.add_row(key, value, f"[{t['low']:g}, {t['high']:g}] {'ok' if t['ok'] else 'MISSED'}")
    for k, v in result["pass_at_k"].items():
        table.add_row(f"pass@{k}", f"{v:.3f}", "")
    for label, share in result["success_rate_histogram"].items():
        table.add_row(f"success rate {label}", f"{share:.3f}", "")
    for mode, share in result["failure_modes"].items():
        table.add_row(f"failures: {mode}", f"{share:.3f}", "")
    table.add_row("failures cut at max_new_tokens", f"{result['failures_cut_share']:.3f}", "")
    if result["greedy_accuracy"] is not None:
        table.add_row("greedy accuracy", f"{result['greedy_accuracy']:.3f}", "")
    table.add_row("mean completion tokens", f"{result['mean_completion_tokens']:.1f}", "")
    return table
