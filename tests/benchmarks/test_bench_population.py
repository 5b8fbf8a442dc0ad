"""ES step time, batched low-rank vs sequential full-rank vs pure generation (the floor).

`make bench` runs these on the embedded SmolLM2-135M (``ZOOPT_BENCH_MODEL=smollm2-135m``, 16
members × 32 prompts, 10 greedy tokens, bf16 on the CPU); the default test run executes one
round, on the tiny model.  ``test_paired_rounds`` times, round by round on one engine,
(c) ``generate``, (a) ``batched`` and (b) ``sequential`` one after another (a warm-up round,
then 5), so a drift in the machine's speed — ±10 % between blocks of rounds on the 2-core
machine — falls on the three alike; pytest-benchmark times the whole round and the per-mode
times and ratios go into ``extra_info`` and are printed: (a)/(c) (target ≤ 1.15) and (b)/(a)
as the ratio of the mean times, with the median of the per-round ratios beside it.

``test_peak_memory`` runs ``population_step.py`` in child processes and prints each mode's peak
resident memory, and the batched/generate ratio (target ≤ 1.1).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import population_step as ps

MODEL = os.environ.get("ZOOPT_BENCH_MODEL", "tiny")
BIG = MODEL != "tiny"
MEMBERS, PROMPTS, TOKENS = (16, 32, 10) if BIG else (4, 4, 4)


def test_paired_rounds(benchmark):
    engine, noises = ps.build(MODEL)
    order = ("generate", "batched", "sequential")
    times: dict[str, list[float]] = {mode: [] for mode in order}
    counter = iter(range(1, 10_000))

    def one_round() -> int:
        t, done = next(counter), 0
        for mode in order:
            t0 = time.perf_counter()
            done += ps.step(mode, engine, noises[mode], MEMBERS, PROMPTS, TOKENS, t=t)
            times[mode].append(time.perf_counter() - t0)
        return done

    rounds, warmup = (5, 1) if BIG else (1, 0)
    done = benchmark.pedantic(one_round, rounds=rounds, warmup_rounds=warmup)
    assert done == 3 * MEMBERS * PROMPTS
    timed = {mode: ts[warmup:] for mode, ts in times.items()}
    assert all(len(ts) == rounds for ts in timed.values())
    mean = {mode: statistics.fmean(ts) for mode, ts in timed.items()}
    report = {
        "model": MODEL, "members": MEMBERS, "prompts": PROMPTS, "max_new_tokens": TOKENS, "rounds": rounds,
        "seconds": {mode: [round(t, 2) for t in ts] for mode, ts in timed.items()},
        "batched_over_generate": round(mean["batched"] / mean["generate"], 3),
        "batched_over_generate_median_of_rounds": round(statistics.median(
            a / c for a, c in zip(timed["batched"], timed["generate"])), 3),
        "sequential_over_batched": round(mean["sequential"] / mean["batched"], 3),
        "sequential_over_batched_median_of_rounds": round(statistics.median(
            b / a for b, a in zip(timed["sequential"], timed["batched"])), 3),
    }
    benchmark.extra_info.update(report)
    print(json.dumps(report))


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
