"""What an update rule costs: its state in bytes per weight, the time to replay a seed log, and
momentum kept as a dense buffer against momentum written out as extra seeds and coefficients.

    python tests/benchmarks/update_rules.py replay RULE [--model smollm2-135m] [--noise gaussian]
        [--steps 100] [--members 16] [--dtype bfloat16]
    python tests/benchmarks/update_rules.py momentum-as-seeds [--model ...] [--noise ...] [--steps 8]

``replay``: writes a seed log of ``--steps`` synthetic steps (``--members`` seeds each, z-scored
coefficients /N, as ``one_point`` makes them) under RULE (``sgd``, ``momentum``, ``adam``,
``rmsprop``, ``adam+decay``, ``clip+adam``), then times ``SeedLog.replay`` onto a fresh engine
— exactly what ``zoopt export`` and ``--resume`` do — and prints one JSON line: seconds (total
and per step), the rule's state in bytes per moved weight (its buffers over the weights the noise
moves), and the process's resident memory (MiB) after loading the model and at its peak
(``VmHWM``).  ``cpu_seconds_per_step`` is the process's CPU time (all its threads): on a machine
whose cores are shared it moves less than the wall time.  Run one rule per process for an honest peak.

``momentum-as-seeds``: momentum is linear in past gradients, v_t = Σ_{s≤t} μ^{t−s}·ĝ_s, so step t
can be applied with no state as the seeds of every step so far with coefficients α·μ^{t−s}·c_s.
Times the first ``--steps`` steps both ways on one model (dense buffer: ``momentum`` rule; seeds:
one plain update of (t+1)·N seeds at step t) and prints seconds per step each way and how far apart
the two masters end (fp32 rounding: another order of summation).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from zoopt.engines.hf import HFEngine
from zoopt.noise import Gaussian, LowRank
from zoopt.runs.seedlog import SeedLog
from zoopt.types import Update
from zoopt.updates import adam, chain, clip_by_norm, momentum, rmsprop, sgd, step_update, weight_decay

RULES = {"sgd": sgd(), "momentum": momentum(0.9), "adam": adam(), "rmsprop": rmsprop(),
         "adam+decay": chain(adam(), weight_decay(0.01)), "clip+adam": chain(clip_by_norm(1.0), adam())}
NOISES = {"gaussian": Gaussian(), "low_rank": LowRank(rank=1)}
LR, SIGMA = 2.5e-3, 5e-3


def coefficients(step: int, members: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Step ``step``'s seeds and ĝ coefficients zᵢ/N (z-scored rewards from a fixed stream)."""
    rng = np.random.default_rng([7, step])
    rewards = rng.standard_normal(members)
    z = (rewards - rewards.mean()) / rewards.std()
    seeds = tuple(int(s) for s in rng.choice(2**31 - 1, size=members, replace=False))
    return seeds, tuple(float(c) for c in z / members)


def memory_mib() -> dict:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def replay(args) -> dict:
    rule, noise = RULES[args.rule], NOISES[args.noise]
    with tempfile.TemporaryDirectory(prefix="zoopt-bench-") as tmp:
        es_state = {"step": 0, "seed": 0, "lr": LR, "sigma": SIGMA, "population_size": args.members,
                    "noise": noise.to_dict(), "update": rule.to_dict()}
        log = SeedLog.create(Path(tmp) / "seedlog.json", model=args.model, dtype=args.dtype, noise=noise,
                             es_state=es_state, rule=rule)
        for t in range(args.steps):
            log.updates.append({"step": t, **step_update(rule, Update(*coefficients(t, args.members)), LR, t).to_dict()})
        log.save()
        engine = HFEngine.from_pretrained(args.model, dtype=args.dtype)
        loaded = memory_mib()
        t0, c0 = time.perf_counter(), time.process_time()
        SeedLog.load(log.path).replay(engine)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    moved = engine.num_parameters(noise)
    state = engine.weights.rule_state
    return {"mode": "replay", "rule": args.rule, "model": args.model, "noise": args.noise, "dtype": args.dtype,
            "steps": args.steps, "members": args.members, "moved_weights": moved,
            "seconds": round(seconds, 2), "seconds_per_step": round(seconds / max(1, args.steps), 3),
            "cpu_seconds_per_step": round(cpu / max(1, args.steps), 3),
            "state_bytes_per_weight": round((state.nbytes if state else 0) / moved, 3),
            "rss_after_load_mib": round(loaded["VmRSS"], 1), "peak_rss_mib": round(memory_mib()["VmHWM"], 1),
            "checksum": engine.master_checksum()}


def momentum_as_seeds(args) -> dict:
    noise, mu = NOISES[args.noise], 0.9
    dense = HFEngine.from_pretrained(args.model, dtype=args.dtype)
    seeds_engine = HFEngine.from_pretrained(args.model, dtype=args.dtype)
    steps = [coefficients(t, args.members) for t in range(args.steps)]
    rule, dense_s, seeds_s, cpu = momentum(mu), [], [], {"dense": 0.0, "seeds": 0.0}
    for t in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        dense.apply(noise, step_update(rule, Update(*steps[t]), LR, t))
        dense_s.append(time.perf_counter() - t0)
        cpu["dense"] += time.process_time() - c0
        # v_t = Σ_{s≤t} μ^{t−s}·ĝ_s: every step so far as seeds, α·μ^{t−s}·c_s (seeds differ between steps)
        seeds = tuple(seed for s in range(t + 1) for seed in steps[s][0])
        coefs = tuple(LR * mu ** (t - s) * c for s in range(t + 1) for c in steps[s][1])
        t0, c0 = time.perf_counter(), time.process_time()
        seeds_engine.apply(noise, Update(seeds, coefs))
        seeds_s.append(time.perf_counter() - t0)
        cpu["seeds"] += time.process_time() - c0
    a, b = dense.state_dict(), seeds_engine.state_dict()
    diff = max(float((a[n] - b[n]).abs().max()) for n in a)
    scale = max(float(a[n].abs().max()) for n in a)
    return {"mode": "momentum-as-seeds", "model": args.model, "noise": args.noise, "steps": args.steps,
            "members": args.members, "dense_seconds_per_step": [round(s, 3) for s in dense_s],
            "seeds_seconds_per_step": [round(s, 3) for s in seeds_s],
            "seeds_over_dense_total": round(sum(seeds_s) / sum(dense_s), 2),
            "seeds_over_dense_cpu": round(cpu["seeds"] / cpu["dense"], 2),
            "dense_state_bytes_per_weight": 4.0, "seeds_state_bytes_per_weight": 0.0,
            "max_abs_difference": diff, "max_abs_weight": scale}


def measure(argv=None) -> dict:
    """The JSON record of one command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("replay", "momentum-as-seeds"))
    parser.add_argument("rule", nargs="?", default="sgd", choices=sorted(RULES))
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--noise", default="gaussian", choices=sorted(NOISES))
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--members", type=int, default=16)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = 100 if args.mode == "replay" else 8
    return replay(args) if args.mode == "replay" else momentum_as_seeds(args)


if __name__ == "__main__":
    print(json.dumps(measure()))
