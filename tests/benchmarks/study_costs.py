"""What one unit of a study costs: a GRPO step, an ES step, a held-out evaluation — one JSON line each.

    python tests/benchmarks/study_costs.py [--model smollm2-135m] [--objective arithmetic]
        [--set KEY=VALUE ...]          # shared keys: objective_args.digits=1, batch_size=64, dtype=...
        [--grpo KEY=VALUE ...]         # grpo.yaml keys: prompts_per_step=32, sampling.n=8, lr=1e-5
        [--es KEY=VALUE ...]           # train.yaml keys: population_size=16, sigma=5e-3
        [--eval-problems 16] [--eval-samples 64] [--eval-temperature 0.6] [--eval-max-new-tokens 10]
        [--steps 2] [--units grpo,es,eval] [--threads 1]

Each unit runs as ``zoopt study`` runs it (:func:`zoopt.workflows.schedule.phase_config` configs,
the trainers of :mod:`zoopt.workflows.trainers` on one engine, :func:`zoopt.evaluate.evaluate`),
after one warm-up step, and prints wall seconds and this process's CPU seconds
(``time.process_time``) per step or per evaluation, with the step's phase timings.  With
``--threads 1`` on a shared machine the CPU seconds are the work itself; running the same
command for the paper-toy settings (``--set objective_args={}`` and 10 new tokens) gives the CPU
seconds of units whose idle 2-core wall time docs/study.md records, so a ratio of CPU seconds
carries that wall time over to other settings (an estimate, stated as one).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import yaml


def parse_pairs(pairs: list[str], flag: str) -> dict:
    out: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"{flag} needs KEY=VALUE, got {pair!r}")
        _set(out, key, yaml.safe_load(value))
    return out


def _set(tree: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value


def timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--objective", default="arithmetic")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--grpo", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--es", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--eval-problems", type=int, default=16)
    p.add_argument("--eval-samples", type=int, default=64)
    p.add_argument("--eval-temperature", type=float, default=0.6)
    p.add_argument("--eval-max-new-tokens", type=int, default=10)
    p.add_argument("--steps", type=int, default=2, help="timed steps per trainer (after one warm-up step)")
    p.add_argument("--units", default="grpo,es,eval")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = p.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    from zoopt.evaluate import evaluate
    from zoopt.workflows.compare import SHARED_KEYS
    from zoopt.workflows.run import build_engine, build_objective
    from zoopt.workflows.schedule import phase_config
    from zoopt.workflows.trainers import start_run

    shared = {"model": args.model, "dtype": "float32", "device": "cpu", "engine": "hf", "engine_args": {},
              "objective": args.objective, "objective_args": {}, "seed": 0, "batch_size": 64,
              "reward_timeout_s": 5.0, "reward_errors": "raise"}
    shared.update(parse_pairs(args.set, "--set"))
    shared = {k: shared[k] for k in SHARED_KEYS}
    objective = build_objective(shared)
    engine = build_engine(shared, objective)
    units = [u.strip() for u in args.units.split(",") if u.strip()]
    common = {"model": args.model, "threads": args.threads or None, "objective_args": shared["objective_args"]}
    with tempfile.TemporaryDirectory() as tmp:
        for method, overrides in (("grpo", parse_pairs(args.grpo, "--grpo")), ("es", parse_pairs(args.es, "--es"))):
            if method not in units:
                continue
            cfg = phase_config(method, shared, (method, overrides))
            cfg.update(run_dir=f"{tmp}/{method}", export=False, steps=args.steps + 1)
            cfg["eval"] = dict(cfg["eval"], n_problems=0)
            trainer = start_run(method, cfg, cfg["run_dir"], engine=engine, objective=objective)
            trainer.step()  # warm-up
            for _ in range(args.steps):
                wall, cpu, record = timed(trainer.step)
                keep = {k: round(v, 2) for k, v in record.items() if k.startswith("time_") and isinstance(v, float)}
                print(json.dumps({"unit": f"{method} step", **common, "prompts_per_step": cfg["prompts_per_step"],
                                  "n": cfg["sampling"]["n"], "max_new_tokens": cfg["sampling"]["max_new_tokens"],
                                  "population_size": cfg.get("population_size"), "dtype": cfg["dtype"],
                                  "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), **keep,
                                  "reward_mean": record.get("reward_mean")}), flush=True)
            engine.restore()
        if "eval" in units:
            wall, cpu, result = timed(lambda: evaluate(
                engine, objective, n_problems=args.eval_problems, ks=(1,), n_samples=args.eval_samples,
                temperature=args.eval_temperature, max_new_tokens=args.eval_max_new_tokens,
                batch_size=int(shared["batch_size"]), seed=0))
            completions = result.summary["n_problems"] * (args.eval_samples + 1)
            print(json.dumps({"unit": "evaluation", **common, "problems": result.summary["n_problems"],
                              "samples": args.eval_samples, "temperature": args.eval_temperature,
                              "max_new_tokens": args.eval_max_new_tokens, "wall_s": round(wall, 2),
                              "cpu_s": round(cpu, 2), "cpu_s_per_1000_completions": round(1000 * cpu / completions, 2),
                              "pass@1": result.summary["pass@1"]}), flush=True)
    engine.close()


if __name__ == "__main__":
    main()
