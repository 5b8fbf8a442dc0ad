"""vLLM ES step: one multi-LoRA call for the whole population vs N sequential member calls, side by side.

    python tests/benchmarks/vllm_multilora.py [--model smollm2-135m] [--members 8] [--prompts 16]
        [--max-new-tokens 16] [--rank 1] [--steps 2] [--dtype float32] [--device cpu]

Two vLLM engines of the same model live in this one run and take turns, step by step (after
one warm-up step each), so a change in the machine's load hits both alike:

- ``multilora``: ``population: batched`` with ``max_loras = members`` — each member a LoRA
  adapter, all prompts × members in one ``generate`` call (``zoopt.engines.vllm.lora``);
- ``sequential``: LoRA off, ``population: sequential`` — for each member perturb (the dense
  low-rank ε written into the weights in the workers), generate the prompts, restore.

Both run the same ``LowRank(rank)`` noise on the linear layers (embeddings and norms excluded:
LoRA cannot move them), then the same ``apply``.  Prints one JSON line: seconds per step of
each (mean and all), each step's sequential / multilora with their median, the population-call
and apply seconds, and whether every member's greedy tokens were equal on both paths (in bf16
or on a GPU the two round differently: information, not a test — exactness is
``tests/test_vllm_multilora.py``, in fp32).  The vLLM processes need ``if __name__ == "__main__"``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("ZOOPT_CACHE", str(Path(__file__).resolve().parents[2] / ".cache" / "zoopt"))
os.environ.setdefault("HF_HOME", str(Path(os.environ["ZOOPT_CACHE"]).parent / "hf"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

LINEAR_ONLY = ("model.embed_tokens.weight", "*norm.weight", "lm_head.weight", "*.bias")
SIGMA = 0.02


def prompts(n: int) -> list[str]:
    return [f"What is {10 + 7 * i % 83} + {20 + 13 * i % 71}?" for i in range(n)]


def build(args) -> dict:
    """``{"multilora": engine, "sequential": engine}`` (see the module docstring)."""
    from zoopt.engines.vllm import VLLMEngine

    common = dict(dtype=args.dtype, device=args.device, batch_size=min(args.members * args.prompts, 1024),
                  max_model_len=args.max_model_len, gpu_memory_utilization=args.gpu_memory_utilization)
    return {"multilora": VLLMEngine.from_pretrained(args.model, population="batched", max_loras=args.members,
                                                    max_lora_rank=args.rank, **common),
            "sequential": VLLMEngine.from_pretrained(args.model, population="sequential", **common)}


def one_step(engine, noise, args, t: int):
    """``(population seconds, apply seconds, greedy tokens of every member)`` of ES step ``t``."""
    from zoopt.engines.base import Sampling
    from zoopt.types import Member, Population, Update

    greedy = Sampling(temperature=0.0, max_new_tokens=args.max_new_tokens)
    pop = Population(step=t, sigma=SIGMA, members=tuple(Member(1000 * t + i // 2, 1 if i % 2 == 0 else -1)
                                                        for i in range(args.members)))
    t0 = time.perf_counter()
    out = engine.generate_population(noise, pop, prompts(args.prompts), greedy)
    t1 = time.perf_counter()
    seeds = tuple(dict.fromkeys(m.seed for m in pop.members))
    engine.apply(noise, Update(seeds, tuple(1e-3 * (1 if k % 3 else -1) for k in range(len(seeds)))))
    return t1 - t0, time.perf_counter() - t1, [[c.token_ids for p in member for c in p] for member in out]


def run(args) -> dict:
    """The measurement (module docstring) for ``args`` with the fields of :func:`main`'s options;
    ``bench_engines_gpu.py`` calls it too.  Returns the result dict."""
    from zoopt.noise import LowRank

    noise = LowRank(rank=args.rank, exclude=LINEAR_ONLY)
    started = time.perf_counter()
    engines = build(args)
    startup_s = time.perf_counter() - started
    times = {name: [] for name in engines}
    parts = {name: [] for name in engines}
    equal = []
    try:
        assert engines["multilora"].population_path(noise) == "batched"
        assert engines["sequential"].population_path(noise) == "sequential"
        for t in range(args.steps + 1):
            outs = {}
            for name in (("multilora", "sequential") if t % 2 == 0 else ("sequential", "multilora")):
                population_s, apply_s, outs[name] = one_step(engines[name], noise, args, t)
                if t:  # step 0 warms up
                    times[name].append(population_s + apply_s)
                    parts[name].append((population_s, apply_s))
                print(f"step {t} {name}: population {population_s:.2f} s, apply {apply_s:.2f} s",
                      file=sys.stderr, flush=True)
            equal.append(sum(a == b for a, b in zip(outs["multilora"], outs["sequential"])))
        same_weights = engines["multilora"].checksum() == engines["sequential"].checksum()
    finally:
        for engine in engines.values():
            engine.close()
    mean = {name: statistics.mean(ts) for name, ts in times.items()}
    return {
        "model": str(args.model), "device": args.device, "dtype": args.dtype, "members": args.members,
        "prompts": args.prompts, "max_new_tokens": args.max_new_tokens, "rank": args.rank, "steps": args.steps,
        "startup_s_both": round(startup_s, 1),
        "multilora_s": round(mean["multilora"], 3), "sequential_s": round(mean["sequential"], 3),
        "ratio_sequential_over_multilora": round(mean["sequential"] / mean["multilora"], 3),
        "multilora_all": [round(x, 2) for x in times["multilora"]],
        "sequential_all": [round(x, 2) for x in times["sequential"]],
        "pair_ratios": [round(s / m, 3) for m, s in zip(times["multilora"], times["sequential"])],
        "median_pair_ratio": round(statistics.median(s / m for m, s in zip(times["multilora"], times["sequential"])),
                                   3),
        "population_s": {n: round(statistics.mean(a for a, _ in v), 3) for n, v in parts.items()},
        "apply_s": {n: round(statistics.mean(b for _, b in v), 3) for n, v in parts.items()},
        "members_with_equal_tokens_per_step": equal, "same_final_checksum": same_weights,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--members", type=int, default=8)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.35, help="each engine's share (two engines)")
    p.add_argument("--out", default=None, help="also write the JSON line here")
    args = p.parse_args()
    result = run(args)
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
