"""Generation with and without the HF engine's shared prefills, side by side in one process.

    python tests/benchmarks/shared_prefill.py [--model smollm2-135m] [--dtype float32]
        [--prompts 32] [--n 32] [--max-new-tokens 10] [--rounds 2]

Two comparisons, each timed after a warm-up call, one line per round:

- **samples**: ``generate(prompts[:4], n)``, where a prompt's n samples share one prefill,
  against the same rows as n copies of each prompt with ``n = 1`` (every row prefilled on its own);
- **head**: greedy ``generate(prompts)``, whose rows share the chat template's system turn
  (prefilled once per micro-batch), against the same call with head sharing switched off
  (``MIN_SHARED_PREFIX`` raised past any prompt); it also counts the rows whose tokens agree.
"""

from __future__ import annotations

import argparse
import time

import zoopt.engines.hf as hf
from zoopt.engines.base import Sampling


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    engine = hf.HFEngine.from_pretrained(args.model, dtype=args.dtype, batch_size=64)
    prompts = [f"What is {10 + 7 * i % 83} + {20 + 13 * i % 71}?" for i in range(args.prompts)]
    print(f"prompt tokens: {len(engine.encode(prompts[0]))}, shared head: "
          f"{hf.shared_prefix([engine.encode(q) for q in prompts])}")
    sampled = Sampling(temperature=1.0, max_new_tokens=args.max_new_tokens, n=args.n, seed=1)
    single = Sampling(temperature=1.0, max_new_tokens=args.max_new_tokens, n=1, seed=1)
    greedy = Sampling(temperature=0.0, max_new_tokens=args.max_new_tokens)
    few = prompts[:4]
    engine.generate(few, sampled)  # warm-up
    for _ in range(args.rounds):
        a, _ = timed(lambda: engine.generate(few, sampled))
        b, _ = timed(lambda: engine.generate([q for q in few for _ in range(args.n)], single))
        print(f"samples: shared {a:.2f} s   every row prefilled {b:.2f} s   ratio {b / a:.2f}", flush=True)
    default = hf.MIN_SHARED_PREFIX
    for _ in range(args.rounds):
        hf.MIN_SHARED_PREFIX = default
        a, shared = timed(lambda: engine.generate(prompts, greedy))
        hf.MIN_SHARED_PREFIX = 10 ** 9
        b, whole = timed(lambda: engine.generate(prompts, greedy))
        hf.MIN_SHARED_PREFIX = default
        same = sum(x[0].token_ids == y[0].token_ids for x, y in zip(shared, whole))
        print(f"head: shared {a:.2f} s   whole prompts {b:.2f} s   ratio {b / a:.2f}   "
              f"rows alike {same}/{len(prompts)}", flush=True)


if __name__ == "__main__":
    main()
