"""``zoopt frontier STUDY_DIR...``: ΔPass@k against ΔPass@1 over every evaluated checkpoint of
every run, and Pass@k at matched Pass@1 gain (:mod:`zoopt.study.frontier`); reads the studies'
committed per-problem evaluations, never weights."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..reporting.plots import plot_frontier
from ..runs.atomic import write_text_atomic
from ..study.frontier import markdown, report

HELP = "the coverage frontier (ΔPass@k vs ΔPass@1) of study directories' evaluated checkpoints"


def _numbers(text: str, kind, flag: str) -> list:
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated numbers, got {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("studies", nargs="+", help="study directories (runs/base/eval.json, runs/<method>[-s<seed>]/...), "
                                              "each run against its own study's base (evaluated on the same problems); DIR=LABEL names its methods "
                                              "'<method> (LABEL)' (e.g. one study per GRPO beta)")
    p.add_argument("--k", default="8,32,64", help="the Pass@k of the panels (default 8,32,64)")
    p.add_argument("--at", help="matched ΔPass@1 gains, as fractions (0.05 = 5 points); default: 3 evenly spaced "
                                "up to the largest every run reaches")
    p.add_argument("--match-k", type=int, help="the k compared at matched Pass@1 (default the largest --k)")
    p.add_argument("--xmax", type=float, help="zoom the plot to ΔPass@1 up to this many points (default: every point)")
    p.add_argument("--out", required=True, help="directory for frontier.json, frontier.md and frontier.png")


def run(args: argparse.Namespace) -> int:
    ks = _numbers(args.k, int, "--k")
    targets = _numbers(args.at, float, "--at") if args.at else None
    if args.xmax is not None and not args.xmax > 0:
        raise ValueError(f"--xmax: expected a positive number of points of ΔPass@1, got {args.xmax}")
    rep = report(args.studies, ks=ks, targets=targets, match_k=args.match_k)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "frontier.json", json.dumps(rep, indent=2) + "\n")
    text = markdown(rep)
    write_text_atomic(out / "frontier.md", text)
    plot_frontier(rep["points"], ks, out / "frontier.png", xmax=args.xmax)
    print(text.split("\n\n| run")[0])
    print(f"wrote {out / 'frontier.json'}, {out / 'frontier.md'}, {out / 'frontier.png'}")
    return 0
