"""Sampled evaluation with and without a shared prefill, side by side in one process.

    python tests/benchmarks/shared_prefill.py [--model smollm2-135m] [--dtype float32]
        [--prompts 4] [--n 32] [--max-new-tokens 10] [--rounds 2]

``shared``: ``generate(prompts, n)``, where a prompt's n samples share one prefill (HFEngine
fans its KV cache out to the rows).  ``every row``: the same rows as ``n`` copies of each prompt
with ``n = 1``, so every row is prefilled on its own — what generation cost before sharing.
Prints one line per round (after a warm-up call) with both times and their ratio.
"""

from __future__ import annotations

import argparse
import time

from zoopt.engines.base import Sampling
from zoopt.engines.hf import HFEngine


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    engine = HFEngine.from_pretrained(args.model, dtype=args.dtype, batch_size=64)
    prompts = [f"What is {10 + 7 * i % 83} + {20 + 13 * i % 71}?" for i in range(args.prompts)]
    shared = Sampling(temperature=1.0, max_new_tokens=args.max_new_tokens, n=args.n, seed=1)
    single = Sampling(temperature=1.0, max_new_tokens=args.max_new_tokens, n=1, seed=1)
    copies = [q for q in prompts for _ in range(args.n)]
    print(f"prompt tokens: {[len(engine.encode(q)) for q in prompts]}")
    engine.generate(prompts[:1], shared)  # warm-up
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        engine.generate(prompts, shared)
        a = time.perf_counter() - t0
        t0 = time.perf_counter()
        engine.generate(copies, single)
        b = time.perf_counter() - t0
        print(f"shared prefill {a:.2f} s   every row prefilled {b:.2f} s   ratio {b / a:.2f}", flush=True)


if __name__ == "__main__":
    main()
