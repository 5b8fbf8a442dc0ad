"""ES step time, batched low-rank vs sequential full-rank vs pure generation (the floor).

`make bench` runs these on the embedded SmolLM2-135M (``ZOOPT_BENCH_MODEL=smollm2-135m``, 16
members × 32 prompts, 10 greedy tokens, bf16 on the CPU), side by side in one run, each after a
warm-up round; the default test run executes each once, untimed, on the tiny model.  Read the
ratios from the report's means: (a) ``batched`` / (c) ``generate`` (target ≤ 1.15) and
(b) ``sequential`` / (a) ``batched``.

``test_peak_memory`` runs ``population_step.py`` in child processes and prints each mode's peak
resident memory, and the batched/generate ratio (target ≤ 1.1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import population_step as ps

MODEL = os.environ.get("ZOOPT_BENCH_MODEL", "tiny")
BIG = MODEL != "tiny"
MEMBERS, PROMPTS, TOKENS = (16, 32, 10) if BIG else (4, 4, 4)


@pytest.fixture(scope="module", params=ps.MODES)
def setup(request):
    engine, noise = ps.build(request.param, MODEL, MEMBERS)
    return request.param, engine, noise


@pytest.mark.benchmark(group="es-population-step")
def test_step(benchmark, setup):
    mode, engine, noise = setup
    counter = iter(range(1, 10_000))
    rounds = 3 if BIG else 1
    done = benchmark.pedantic(lambda: ps.step(mode, engine, noise, MEMBERS, PROMPTS, TOKENS, t=next(counter)),
                              rounds=rounds, warmup_rounds=1 if BIG else 0)
    assert done == MEMBERS * PROMPTS
    benchmark.extra_info.update(mode=mode, model=MODEL, members=MEMBERS, prompts=PROMPTS, max_new_tokens=TOKENS)


def test_peak_memory(tmp_path):
    script = Path(ps.__file__)
    results = {}
    for mode in ("generate", "batched", "sequential"):
        out = subprocess.run([sys.executable, str(script), mode, "--model", MODEL, "--members", str(MEMBERS),
                              "--prompts", str(PROMPTS), "--max-new-tokens", str(TOKENS)],
                             capture_output=True, text=True, check=True, timeout=1800)
        results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    ratio = results["batched"]["peak_rss_mib"] / results["generate"]["peak_rss_mib"]
    print(json.dumps({**results, "peak_rss_batched_over_generate": round(ratio, 3),
                      "peak_rss_sequential_over_generate":
                          round(results["sequential"]["peak_rss_mib"] / results["generate"]["peak_rss_mib"], 3)}))
    assert all(r["peak_rss_mib"] > 0 for r in results.values())
