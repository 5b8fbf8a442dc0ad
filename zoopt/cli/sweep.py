"""``zoopt sweep SPEC``: an Optuna sweep of ES or GRPO hyper-parameters (the ``sweeps`` plugin package).

``SPEC`` is a spec YAML or a packaged spec name (the files of ``sweeps/specs/``, listed in the
help); see ``docs/sweeps.md``.  Re-running with the same study name and storage adds ``--n-trials``
trials, or runs up to ``--total-trials`` finished ones.  The
``sweeps`` package is reached only through lazy registry targets, as the design asks of the
core.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ..config import packaged_names
from ..registry import resolve_target
from .common import add_plugin_flag

HELP = "search ES or GRPO hyper-parameters with Optuna (resumable, parallel)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help=f"a sweep spec YAML, or a packaged spec: {' | '.join(packaged_names('sweeps', 'specs'))}")
    p.add_argument("--study", metavar="NAME", help="study name (default: the spec's name)")
    p.add_argument("--storage", metavar="URL", help="Optuna RDB URL (default: sqlite under the study directory)")
    count = p.add_mutually_exclusive_group()
    count.add_argument("--n-trials", type=int, metavar="N", help="trials to add in this call (default: the spec's)")
    count.add_argument("--total-trials", type=int, metavar="N",
                       help="run until the study holds N finished (complete or pruned) trials: "
                            "the same command resumes a cut sweep")
    p.add_argument("--workers", type=int, default=1, metavar="W", help="processes sharing the storage")
    p.add_argument("--run-root", metavar="DIR", help="parent of the study directory (default: runs/sweeps)")
    add_plugin_flag(p)


def run(args: argparse.Namespace) -> int:
    """Run the sweep, then print the best trials and where the plots and ``best.yaml`` are."""
    run_sweep = resolve_target("sweeps.runner:run")
    best_table = resolve_target("sweeps.report:best_table")
    study = run_sweep(args.spec, study_name=args.study, storage=args.storage, n_trials=args.n_trials,
                      workers=args.workers, run_root=args.run_root, total_trials=args.total_trials)
    console = Console()
    console.print(best_table(study))
    study_dir = Path(study.user_attrs["study_dir"])
    best, front = study_dir / "best.yaml", study_dir / "front.yaml"
    console.print(f"study directory: {study_dir}" + (f"  best config: {best}" if best.exists() else "")
                  + (f"  Pareto front: {front}" if front.exists() else ""))
    return 0
