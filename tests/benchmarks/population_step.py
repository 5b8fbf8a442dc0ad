"""One ES population step on an HF engine, three ways; run as a script for a clean peak RSS.

    python tests/benchmarks/population_step.py MODE [--model smollm2-135m] [--members 16]
        [--prompts 32] [--max-new-tokens 10] [--steps 1]

MODE:
- ``batched``:    ``LowRank(rank=1)`` members through the batched population call, then ``apply``;
- ``sequential``: full-rank ``Gaussian`` members one after another (perturb, generate,
  restore), with the demo's noise cache (40 % of free RAM), then ``apply``;
- ``generate``:   the same members × prompts rows generated at the base weights in one
  ``generate`` call — the floor a population step cannot beat.

Prints one JSON line: the mode, seconds per step (after one warm-up step), and the process's
peak resident memory (``VmHWM``, MiB).  ``test_bench_population.py`` imports :func:`build`
and :func:`step` and times paired rounds of the three modes with pytest-benchmark.
"""

from __future__ import annotations

import argparse
import json
import time

from zoopt.engines.base import Sampling
from zoopt.noise import Gaussian, LowRank
from zoopt.types import Member, Population, Update

MODES = ("batched", "sequential", "generate")
SIGMA = 5e-3


def prompts(n: int) -> list[str]:
    return [f"What is {10 + 7 * i % 83} + {20 + 13 * i % 71}?" for i in range(n)]


def build(model: str, batch_size: int = 64):
    """``(engine, {mode: noise})``: one engine for all three modes (``population: auto`` sends
    the low-rank noise to the batched path and the Gaussian one member by member, with the noise
    cache; the cache fills only during Gaussian perturbs, so the other modes' memory is their own),
    so paired rounds compare the modes on the same weights and allocator."""
    from zoopt.engines.hf import HFEngine
    from zoopt.workflows.builders import noise_cache_bytes

    engine = HFEngine.from_pretrained(model, dtype="bfloat16", batch_size=batch_size,
                                      noise_cache_bytes=noise_cache_bytes("auto", "cpu"), population="auto")
    return engine, {"batched": LowRank(rank=1), "sequential": Gaussian(), "generate": None}


def step(mode: str, engine, noise, members: int, n_prompts: int, max_new_tokens: int, t: int = 0) -> int:
    """One step of ``mode``; returns the completions generated."""
    greedy = Sampling(temperature=0.0, max_new_tokens=max_new_tokens)
    ps = prompts(n_prompts)
    pop = Population(step=t, sigma=SIGMA, members=tuple(Member(1000 * t + i, 1 if i % 2 == 0 else -1)
                                                        for i in range(members)))
    if mode == "generate":
        out = engine.generate([p for _ in range(members) for p in ps], greedy)
        return len(out)
    out = engine.generate_population(noise, pop, ps, greedy)
    coefs = tuple(1e-4 * (1 if i % 3 else -1) for i in range(members))
    engine.apply(noise, Update(tuple(m.seed for m in pop.members), coefs))
    return sum(len(m) for m in out)


def peak_rss_mib() -> float:
    with open("/proc/self/status") as fh:
        kb = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    return kb / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=MODES)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--members", type=int, default=16)
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=10)
    p.add_argument("--steps", type=int, default=1)
    args = p.parse_args()
    engine, noises = build(args.model)
    noise = noises[args.mode]
    step(args.mode, engine, noise, args.members, args.prompts, args.max_new_tokens, t=0)  # warm-up
    t0 = time.perf_counter()
    for t in range(1, args.steps + 1):
        step(args.mode, engine, noise, args.members, args.prompts, args.max_new_tokens, t=t)
    seconds = (time.perf_counter() - t0) / args.steps
    print(json.dumps({"mode": args.mode, "model": args.model, "members": args.members, "prompts": args.prompts,
                      "step_s": round(seconds, 3), "peak_rss_mib": round(peak_rss_mib(), 1)}), flush=True)


if __name__ == "__main__":
    main()
