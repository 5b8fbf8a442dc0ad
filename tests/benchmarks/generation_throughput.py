"""Sampled-generation throughput of the HF engine: completions per second, one line per setting.

    python tests/benchmarks/generation_throughput.py [--model smollm2-135m] [--dtype float32]
        [--objective arithmetic] [--set KEY=VALUE ...] [--temperature 0.6] [--n 64]
        [--prompts 4] [--max-new-tokens 8,16,32] [--batch-sizes 64,128,256] [--rounds 1]

For every (max_new_tokens, batch_size) it calls ``engine.generate(prompts, n)`` — ``prompts``
test problems of the objective (``--set`` sets its constructor arguments, e.g.
``--set digits=1 --set operators=+-``), ``n`` samples each, so a prompt's samples share one
prefill and every micro-batch the chat template's head — after one warm-up call, and prints a
JSON line: the setting, wall seconds and this process's CPU seconds (``time.process_time``),
completions per wall second and per CPU second, generated tokens/s, the mean completion length
and the share of completions cut at ``max_new_tokens``.  ``--threads`` sets torch's intra-op
threads (default: torch's own).  On a shared machine the wall time says little; the CPU time of
a one-thread run is the work itself, an upper bound on the wall time of a quiet core.  This is what sizes a calibration or
a study's evaluations: ``seconds = problems · n / completions_per_s``.

Run it alone (or give it ``OMP_NUM_THREADS`` cores of its own): threads sharing cores with
another process make the numbers meaningless.
"""

from __future__ import annotations

import argparse
import json
import time

import yaml

from zoopt.engines.base import Sampling


def parse_set(pairs: list[str]) -> dict:
    """``["digits=1", "operators=+-"]`` → ``{"digits": 1, "operators": "+-"}`` (YAML values)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set needs KEY=VALUE, got {pair!r}")
        out[key] = yaml.safe_load(value)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--objective", default="arithmetic")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--max-new-tokens", default="8,16,32")
    p.add_argument("--batch-sizes", default="64,128,256")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = p.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    import objectives
    from zoopt.engines.hf import HFEngine

    objective = objectives.load(args.objective, **parse_set(args.set))
    prompts = list(objective.dataset("test", args.prompts)["prompt"])
    engine = HFEngine.from_pretrained(args.model, dtype=args.dtype, batch_size=64,
                                      system_prompt=objective.system_prompt)
    lengths = [int(x) for x in args.max_new_tokens.split(",")]
    sizes = [int(x) for x in args.batch_sizes.split(",")]
    engine.generate(prompts[:1], Sampling(temperature=args.temperature, max_new_tokens=4, n=8, seed=0))
    for length in lengths:
        for size in sizes:
            engine.batch_size = size
            sampling = Sampling(temperature=args.temperature, max_new_tokens=length, n=args.n, seed=1)
            for _ in range(args.rounds):
                t0, c0 = time.perf_counter(), time.process_time()
                out = engine.generate(prompts, sampling)
                seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
                comps = [c for cs in out for c in cs]
                tokens = sum(len(c.token_ids) for c in comps)
                print(json.dumps({
                    "model": args.model, "dtype": args.dtype, "max_new_tokens": length, "batch_size": size,
                    "n": args.n, "prompts": len(prompts), "threads": args.threads or None,
                    "seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
                    "completions_per_s": round(len(comps) / seconds, 1),
                    "completions_per_cpu_s": round(len(comps) / cpu, 1),
                    "tokens_per_s": round(tokens / seconds, 1),
                    "mean_tokens": round(tokens / len(comps), 2),
                    "cut_share": round(sum(c.finish_reason == "length" for c in comps) / len(comps), 3),
                }), flush=True)


if __name__ == "__main__":
    main()
