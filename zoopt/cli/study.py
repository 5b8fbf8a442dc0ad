"""``zoopt study SPEC``: the paper's claims C1–C8 as one resumable study
(:mod:`zoopt.workflows.study`; specs: :mod:`zoopt.study.spec`, docs/study.md)."""

from __future__ import annotations

import argparse

from ..study.spec import SHIPPED, load_study_spec
from ..workflows.study import run_study, study_dir_for
from .common import add_plugin_flag

HELP = "run a study of the paper's claims (tuning, runs, verdicts, report); re-run to resume"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help=f"a study spec YAML, or {' | '.join(SHIPPED)}")
    p.add_argument("--profile", metavar="P", help="apply the spec's profiles.P block (paper-toy: smoke)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a spec key (repeatable): model=…, objective=…, budget=…, es.sigma=…, tuning.validation=…")
    p.add_argument("--out", help="study directory (default runs/study-<spec>[-<profile>]; re-running resumes it)")
    p.add_argument("--runs", metavar="NAME[,NAME]",
                   help="do only these runs (base, es, grpo, es-s1, ...) and stop before the analyses and the "
                        "report: a long study split over machines; re-run without it to finish")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    add_plugin_flag(p)


def run(args: argparse.Namespace) -> int:
    spec = load_study_spec(args.spec, args.profile, args.set or [])
    if not args.quiet:
        print(f"study {spec['name']} (profile {spec['profile']}) in {study_dir_for(spec, args.out)}")
    only = [n.strip() for n in args.runs.split(",") if n.strip()] if args.runs is not None else None
    report = run_study(spec, out=args.out, quiet=args.quiet, log=(lambda *a: None) if args.quiet else print, only=only)
    if report is not None and not args.quiet:
        for cid, claim in report["claims"].items():
            print(f"{cid} {claim['title']}: {claim['summary']}")
    return 0
