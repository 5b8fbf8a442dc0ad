"""One adapter-space ES step against plain generation of the same rows, and the cost of
perturb / restore / apply over the adapter.

    python tests/benchmarks/adapter_speed.py [--model smollm2-135m] [--dtype float32] [--members 8]
        [--prompts 16] [--tokens 8] [--repeats 5] [--warmup 1] [--noise-cache-gb auto]
        [--out docs/results/adapter_speed.json]

One engine: ``HFEngine.from_pretrained(model, dtype, adapter=AdapterSpace(r=8, lora_alpha=16))``
(all linear layers, ``population="auto"``: the adapter space runs a population as one batched
call, :mod:`zoopt.engines.adapter_rows`), ``batch_size`` 64, the noise cache of ``zoopt train``'s
default (``noise_cache_gb: auto``, 40 % of free RAM on the CPU: the population call keeps the
members' noise for the update).  Per round, in alternating order
(A B, then B A, …, so a drift of the machine's speed falls on both):

- ``step``: one whole ES step — ``es.ask()``, ``engine.generate_population(Gaussian(), population,
  prompts, greedy)`` (``--members`` members, one_point, σ = 1.5e-3, × ``--prompts`` prompts,
  ``--tokens`` new greedy tokens, chat-templated prompts as in training), a dummy reward (the
  completions' text length, + 1e-3 × member index), ``es.tell`` and ``engine.apply``;
- ``generate``: ``engine.generate`` of the same rows (every prompt ``--members`` times) at the
  master weights, no perturbation.  The engine prefills each distinct prompt once and fans it
  out to its copies, which a population cannot do (its rows differ in weights), so this floor
  is lower than any population's;
- ``distinct``: ``engine.generate`` of ``--members × --prompts`` *different* prompts of the same
  form and token count — rows that share nothing but the chat template's head, as a
  population's rows do: the floor a step can reach.

``--warmup`` rounds are not counted; the three run in turn, the order rotating by round; each
counted round gives the ratios step/generate and step/distinct, and the median of each is
reported beside the ratio of the medians.  Then, over the adapter's
tensors: ``perturb`` + ``restore`` of one member, ``restore`` alone after a perturb, ``apply`` of
a ``--members``-seed update, and the population call's own extra work — drawing every member's
adapter (``member_tables``) — each the median of ``--repeats`` (at least 5) timings.

Appends (by ``dtype``) to the JSON at ``--out`` and prints a table.  On this project's 2-core CPU
machines bf16 matmuls are pathologically slow: run bf16 with a few rows
(``--dtype bfloat16 --members 4 --prompts 4 --tokens 4``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parents[1] / "docs" / "results" / "adapter_speed.json"
SIGMA, R, ALPHA = 1.5e-3, 8, 16.0


def prompts(n: int) -> list[str]:
    return [f"What is {10 + 7 * i % 83} + {20 + 13 * i % 71}?" for i in range(n)]


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--members", type=int, default=8)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--noise-cache-gb", default="auto", help="as zoopt train's noise_cache_gb (auto or GiB)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args()

    import torch

    from zoopt.adapters import AdapterSpace
    from zoopt.engines.adapter_rows import member_tables
    from zoopt.engines.base import Sampling
    from zoopt.engines.hf import HFEngine
    from zoopt.es import ES
    from zoopt.noise import Gaussian
    from zoopt.workflows.builders import noise_cache_bytes

    t0 = time.perf_counter()
    cache = noise_cache_bytes(args.noise_cache_gb, "cpu")
    engine = HFEngine.from_pretrained(args.model, dtype=args.dtype, adapter=AdapterSpace(r=R, lora_alpha=ALPHA),
                                      population="auto", batch_size=64, noise_cache_bytes=cache)
    load_s = time.perf_counter() - t0
    noise, greedy = Gaussian(), Sampling(temperature=0.0, max_new_tokens=args.tokens)
    es = ES("one_point", noise=noise, sigma=SIGMA, lr=2.5e-4, population_size=args.members, seed=0)
    ps = prompts(args.prompts)
    rows = [q for _ in range(args.members) for q in ps]
    assert engine.population_path(noise) == "batched"

    def step_call():
        population = es.ask()
        out = engine.generate_population(noise, population, ps, greedy)
        assert len(out) == args.members and len(out[0]) == args.prompts
        rewards = [sum(len(c.text) for per in member for c in per) + 1e-3 * i for i, member in enumerate(out)]
        engine.apply(noise, es.tell(rewards))

    def generate_call():
        out = engine.generate(rows, greedy)
        assert len(out) == len(rows)

    distinct_rows = prompts(args.members * args.prompts)
    assert len(set(distinct_rows)) == len(distinct_rows)

    def distinct_call():
        out = engine.generate(distinct_rows, greedy)
        assert len(out) == len(distinct_rows)

    times: dict[str, list[float]] = {"step": [], "generate": [], "distinct": []}
    calls = (("step", step_call), ("generate", generate_call), ("distinct", distinct_call))
    for k in range(args.warmup + args.repeats):
        order = calls[k % 3:] + calls[:k % 3]
        for name, fn in order:
            s = timed(fn)
            if k >= args.warmup:
                times[name].append(s)
        print(f"round {k}{' (warm-up)' if k < args.warmup else ''}: "
              + "  ".join(f"{n} {t[-1]:.2f} s" for n, t in times.items() if t and k >= args.warmup),
              file=sys.stderr, flush=True)
    ratios = [a / b for a, b in zip(times["step"], times["generate"])]
    ratios_distinct = [a / b for a, b in zip(times["step"], times["distinct"])]

    reps = max(5, args.repeats)
    population = es.ask()
    seeds = [m.seed for m in population.members]
    update = es.tell([float(i) for i in range(args.members)])  # z-scored, a non-zero update
    weights = {"perturb+restore": [], "restore": [], "apply": [], "member_tables": []}
    for k in range(reps + 1):  # the first is a warm-up
        w = {"perturb+restore": timed(lambda: (engine.perturb(noise, seeds[k % len(seeds)], SIGMA), engine.restore()))}
        engine.perturb(noise, seeds[0], SIGMA)
        w["restore"] = timed(engine.restore)
        w["apply"] = timed(lambda: engine.apply(noise, update))
        w["member_tables"] = timed(lambda: member_tables(engine.weights, noise, population))
        if k:
            for n, s in w.items():
                weights[n].append(s)

    med = {n: statistics.median(t) for n, t in times.items()}
    result = {
        "model": args.model, "dtype": args.dtype, "members": args.members, "prompts": args.prompts,
        "rows": len(rows), "max_new_tokens": args.tokens, "greedy": True, "chat_template": True,
        "noise": "Gaussian()", "batch_size": 64,
        "noise_cache_gb": args.noise_cache_gb, "noise_cache_bytes": cache, "adapter": {"r": R, "lora_alpha": ALPHA, "target_modules": "all-linear"},
        "trained_params": engine.num_parameters(), "population_path": engine.population_path(noise),
        "warmup_rounds": args.warmup, "rounds": args.repeats, "load_s": round(load_s, 2),
        "seconds": {n: [round(s, 3) for s in t] for n, t in times.items()},
        "ratio_per_round": [round(r, 3) for r in ratios],
        "ratio_median": round(statistics.median(ratios), 3),
        "ratio_of_medians": round(med["step"] / med["generate"], 3),
        "ratio_distinct_per_round": [round(r, 3) for r in ratios_distinct],
        "ratio_distinct_median": round(statistics.median(ratios_distinct), 3),
        "ratio_distinct_of_medians": round(med["step"] / med["distinct"], 3),
        "weights_ops_ms": {n: round(1e3 * statistics.median(t), 3) for n, t in weights.items()},
        "weights_ops_repeats": reps,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                    "torch_threads": torch.get_num_threads()},
    }
    print(f"| {'dtype':8} | rows | step s | generate s | distinct s | step/generate | step/distinct |")
    print(f"| {args.dtype:8} | {len(rows)} | {med['step']:.2f} | {med['generate']:.2f} | {med['distinct']:.2f} | "
          f"{result['ratio_median']:.3f} ({', '.join(f'{r:.3f}' for r in ratios)}) | "
          f"{result['ratio_distinct_median']:.3f} ({', '.join(f'{r:.3f}' for r in ratios_distinct)}) |")
    print("adapter ops (ms, median): " + ", ".join(f"{n} {v}" for n, v in result["weights_ops_ms"].items()))
    report = json.loads(args.out.read_text()) if args.out.is_file() else {
        "benchmark": "tests/benchmarks/adapter_speed.py", "runs": {}}
    report["runs"][args.dtype] = result
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
