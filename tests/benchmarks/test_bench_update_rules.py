"""Update rules: replay time of a seed log per rule, and momentum as a dense buffer against extra seeds.

The default test run replays 5 steps on the tiny model, in this process; ``ZOOPT_BENCH_MODEL=smollm2-135m``
(with ``ZOOPT_BENCH_STEPS``, default 100, and ``ZOOPT_BENCH_NOISE``, default gaussian) replays the
embedded model, each rule in its own process so that its peak resident memory is its own.  The printed JSON lines are ``update_rules.py``'s; ratios against
``sgd`` are taken within this one run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import update_rules as ur

MODEL = os.environ.get("ZOOPT_BENCH_MODEL", "tiny")
BIG = MODEL != "tiny"
STEPS = int(os.environ.get("ZOOPT_BENCH_STEPS", 100 if BIG else 5))
NOISE = os.environ.get("ZOOPT_BENCH_NOISE", "gaussian")
DTYPE = "bfloat16" if BIG else "float32"


def child(*args: str) -> dict:
    argv = [*args, "--model", MODEL, "--noise", NOISE, "--dtype", DTYPE]
    if not BIG:
        return ur.measure(argv)
    out = subprocess.run([sys.executable, str(Path(ur.__file__)), *argv], capture_output=True, text=True, check=True,
                         timeout=24 * 3600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_replay_per_rule(benchmark):
    rules = ("sgd", "momentum", "adam")
    results = benchmark.pedantic(lambda: {r: child("replay", r, "--steps", str(STEPS)) for r in rules}, rounds=1)
    assert [results[r]["state_bytes_per_weight"] for r in rules] == [0.0, 4.0, 8.0]
    assert len({results[r]["checksum"] for r in rules}) == 3, "the rules did not move the weights apart"
    report = {"model": MODEL, "noise": NOISE, "steps": STEPS, **{r: results[r] for r in rules},
              **{f"{r}_over_sgd_seconds": round(results[r]["seconds"] / results["sgd"]["seconds"], 3)
                 for r in rules[1:]}}
    benchmark.extra_info.update(report)
    print(json.dumps(report))


def test_momentum_as_seeds_against_the_buffer():
    result = child("momentum-as-seeds", "--steps", str(8 if BIG else 4))
    print(json.dumps(result))
    assert result["max_abs_difference"] <= 1e-5 * max(1.0, result["max_abs_weight"]), result  # fp32 rounding only
