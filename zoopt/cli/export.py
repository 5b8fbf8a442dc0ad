"""``zoopt export``: rebuild a run's weights from its seed log as an HF directory (adapter space: a
PEFT adapter directory, or with ``--merge`` the base with the adapter merged in)."""

from __future__ import annotations

import argparse

from ..workflows.train import export_from_seedlog

HELP = "rebuild a run's weights from its seed log as an HF directory"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("seedlog", help="a run directory or its seedlog.json")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--upto", type=int, default=None, help="replay only the first N steps")
    p.add_argument("--merge", action="store_true",
                   help="adapter space: write a full HF model with the adapter merged into its base (not for a "
                        "quantized base); without it, a PEFT adapter directory")


def run(args: argparse.Namespace) -> int:
    path, checksum = export_from_seedlog(args.seedlog, args.out, upto=args.upto, merge=args.merge)
    print(f"wrote {path} (weights checksum {checksum})")
    return 0
