"""Ray engine overhead: ES step time on one Ray replica vs the in-process HF engine, side by side.

    python tests/benchmarks/ray_overhead.py [--model smollm2-135m] [--members 16] [--prompts 32]
        [--max-new-tokens 10] [--steps 3] [--threads 2] [--noise-cache-gb 0] [--verify apply]

Both engines live in this one run and take turns, step by step (after one warm-up step each),
so a change in the machine's load hits both alike.  A step is the demo's: full-rank Gaussian
members one after another (perturb, greedy generate, restore) through the population call, then
``apply``.  The replica gets the same torch thread count as this process and runs on a local
loopback cluster started here.  Prints one JSON line: seconds per step of each engine (mean and
all), the mean population-call and apply seconds, ``ratio`` = mean ray / mean hf (target ≤ 1.05)
and each step's ray / hf with their median (on a shared machine the load moves between steps;
the two engines of a step ran back to back), and the CPU seconds per step with their ratio
(hf: this process; ray: this process plus every process of the local cluster).
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
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before ray is imported: loopback only
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

sys.path.insert(0, str(Path(__file__).parent))
import population_step as ps  # noqa: E402


def cpu_seconds(with_ray: bool) -> float:
    """CPU seconds used so far by this process, and with ``with_ray`` by every process it
    started too (the local cluster: GCS, raylet, the replica), alive now."""
    import psutil

    procs = [psutil.Process()]
    if with_ray:
        procs += psutil.Process().children(recursive=True)
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def one_step(engine, noise, args, t: int) -> tuple[float, float]:
    from zoopt.engines.base import Sampling
    from zoopt.types import Member, Population, Update

    greedy = Sampling(temperature=0.0, max_new_tokens=args.max_new_tokens)
    pop = Population(step=t, sigma=ps.SIGMA, members=tuple(Member(1000 * t + i, 1 if i % 2 == 0 else -1)
                                                           for i in range(args.members)))
    t0 = time.perf_counter()
    engine.generate_population(noise, pop, ps.prompts(args.prompts), greedy)
    t1 = time.perf_counter()
    engine.apply(noise, Update(tuple(m.seed for m in pop.members),
                               tuple(1e-4 * (1 if i % 3 else -1) for i in range(args.members))))
    return t1 - t0, time.perf_counter() - t1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--members", type=int, default=16)
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=10)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--noise-cache-gb", type=float, default=0.0, help="each engine's noise cache")
    p.add_argument("--verify", default="apply", choices=("apply", "step"))
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args()

    import torch

    from zoopt.engines.hf import HFEngine
    from zoopt.engines.ray import RayEngine
    from zoopt.noise import Gaussian

    torch.set_num_threads(args.threads)
    cache = int(args.noise_cache_gb * 2**30)
    common = dict(dtype=args.dtype, batch_size=64, noise_cache_bytes=cache, population="sequential")
    engines = {"hf": HFEngine.from_pretrained(args.model, **common),
               "ray": RayEngine.from_pretrained(args.model, replicas=1, num_cpus=0, threads=args.threads,
                                                verify=args.verify, object_store_memory=256 * 2**20, **common)}
    noise = Gaussian()
    times = {name: [] for name in engines}
    parts = {name: [] for name in engines}
    cpu = {name: [] for name in engines}
    try:
        for t in range(args.steps + 1):
            for name in (("hf", "ray") if t % 2 == 0 else ("ray", "hf")):
                c0 = cpu_seconds(with_ray=name == "ray")
                population_s, apply_s = one_step(engines[name], noise, args, t)
                cpu_s = cpu_seconds(with_ray=name == "ray") - c0
                if t:  # step 0 warms up
                    times[name].append(population_s + apply_s)
                    parts[name].append((population_s, apply_s))
                    cpu[name].append(cpu_s)
                print(f"step {t} {name}: population {population_s:.2f} s, apply {apply_s:.2f} s, cpu {cpu_s:.2f} s",
                      file=sys.stderr, flush=True)
        assert engines["hf"].checksum() == engines["ray"].checksum(), "the engines' weights differ"
    finally:
        for engine in engines.values():
            engine.close()
    mean = {name: statistics.mean(ts) for name, ts in times.items()}
    print(json.dumps({
        "model": args.model, "members": args.members, "prompts": args.prompts, "threads": args.threads,
        "noise_cache_gb": args.noise_cache_gb, "verify": args.verify, "steps": args.steps,
        "hf_s": round(mean["hf"], 3), "ray_s": round(mean["ray"], 3), "ratio": round(mean["ray"] / mean["hf"], 4),
        "hf_all": [round(x, 2) for x in times["hf"]], "ray_all": [round(x, 2) for x in times["ray"]],
        # each step's ray / hf: the two ran back to back, so a load change hits a pair less than the means
        "pair_ratios": [round(r / h, 3) for h, r in zip(times["hf"], times["ray"])],
        "median_pair_ratio": round(statistics.median(r / h for h, r in zip(times["hf"], times["ray"])), 4),
        # CPU seconds a step costs (hf: this process; ray: this process + the cluster's): the load
        # of a shared machine moves wall time far more than it moves these
        "cpu_s": {n: round(statistics.mean(v), 3) for n, v in cpu.items()},
        "cpu_ratio": round(statistics.mean(cpu["ray"]) / statistics.mean(cpu["hf"]), 4),
        "population_s": {n: round(statistics.mean(a for a, _ in v), 3) for n, v in parts.items()},
        "apply_s": {n: round(statistics.mean(b for _, b in v), 3) for n, v in parts.items()},
    }))


if __name__ == "__main__":
    main()
