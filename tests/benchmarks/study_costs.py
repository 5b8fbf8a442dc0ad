"""What a study's units cost — a GRPO step, an ES step, a held-out evaluation — and what the whole
study costs from them.  One JSON line per measured unit, then one line with the estimate.

    python tests/benchmarks/study_costs.py --spec coverage [--profile P] [--set KEY=VALUE ...]
        [--steps 1] [--eval-problems 16] [--threads 0] [--units grpo,es,eval]

The units are measured with the spec's own settings (model, objective, dtype, batch size, the
``es``/``grpo`` sections, ``eval``), as ``zoopt study`` runs them: the trainers of
:mod:`zoopt.workflows.methods` on one engine with :func:`zoopt.workflows.schedule.phase_config`
configs, each timed after one warm-up step, and :func:`zoopt.workflows.evaluate.evaluate` on
``--eval-problems`` problems (its cost per problem scales to ``eval.n_problems``).  Each line has
wall seconds and this process's CPU seconds (``time.process_time``).  The estimate counts the
study's units from its plan (:func:`zoopt.workflows.study_seeds.plan_runs`): every run's steps,
one evaluation per checkpoint (``checkpoint_every``), the final one and one per
``final_temperatures`` — and sums ``count × wall seconds`` (``wall_estimate_h``: meaningful on a
quiet machine) and ``count × CPU seconds`` (``cpu_estimate_h``).

On a shared machine, measure with ``--threads 1`` (one core's work: CPU seconds are then
what the unit costs, whatever else runs) and convert with the ratio of idle 2-core wall time to
1-thread CPU time of units whose idle wall time is known (docs/study.md: the paper-toy ES and
GRPO steps and evaluation): ``--spec paper-toy --set eval.n_samples=32`` measures those.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", default="coverage")
    p.add_argument("--profile")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--steps", type=int, default=1, help="timed steps per trainer (after one warm-up step)")
    p.add_argument("--eval-problems", type=int, default=16)
    p.add_argument("--units", default="grpo,es,eval")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = p.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    from zoopt.workflows.evaluate import evaluate
    from zoopt.study.spec import load_study_spec
    from zoopt.workflows.compare import shared_config
    from zoopt.workflows.builders import build_engine, build_objective
    from zoopt.workflows.schedule import phase_config
    from zoopt.workflows.study import compare_config
    from zoopt.workflows.study_seeds import final_temperatures, plan_runs
    from zoopt.workflows.methods import start_run

    spec = load_study_spec(args.spec, args.profile, args.set)
    cfg = compare_config(spec, {m: {"chosen": {}} for m in ("es", "grpo")}, Path("unused"))
    shared = shared_config(cfg)
    objective = build_objective(shared)
    engine = build_engine(shared, objective)
    units = [u.strip() for u in args.units.split(",") if u.strip()]
    common = {"spec": spec["name"], "profile": spec["profile"], "threads": args.threads or None}
    cost: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in ("grpo", "es"):
            if method not in units:
                continue
            unit = phase_config(method, shared, (method, cfg[method]))
            unit.update(run_dir=f"{tmp}/{method}", export=False, steps=args.steps + 1, checkpoint_every=0)
            unit["eval"] = dict(unit["eval"], n_problems=0)
            trainer = start_run(method, unit, unit["run_dir"], engine=engine, objective=objective)
            trainer.step()  # warm-up
            walls, cpus = [], []
            for _ in range(args.steps):
                wall, cpu, record = timed(trainer.step)
                walls.append(wall)
                cpus.append(cpu)
                phases = {k: round(v, 2) for k, v in record.items() if k.startswith("time_") and isinstance(v, float)}
                print(json.dumps({"unit": f"{method} step", **common, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                                  **phases, "reward_mean": record.get("reward_mean")}), flush=True)
            cost[method] = (sum(walls) / len(walls), sum(cpus) / len(cpus))
            engine.restore()
        if "eval" in units:
            ev = spec["eval"]
            wall, cpu, result = timed(lambda: evaluate(
                engine, objective, n_problems=args.eval_problems, ks=(1,), n_samples=int(ev["n_samples"]),
                temperature=float(ev["temperature"]), max_new_tokens=int(ev["max_new_tokens"]),
                batch_size=int(shared["batch_size"]), seed=0))
            scale = int(ev["n_problems"]) / result.summary["n_problems"]
            cost["eval"] = (wall * scale, cpu * scale)
            print(json.dumps({"unit": "evaluation", **common, "problems": result.summary["n_problems"],
                              "samples": int(ev["n_samples"]), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                              "per_study_evaluation_wall_s": round(wall * scale, 1),
                              "per_study_evaluation_cpu_s": round(cpu * scale, 1)}), flush=True)
    engine.close()
    if set(cost) == {"grpo", "es", "eval"}:
        print(json.dumps({"estimate": spec["name"], **common, **count_units(spec, cfg, len(objective.dataset("train")),
                                                                          plan_runs, final_temperatures, cost)}))


def count_units(spec: dict, cfg: dict, n_train: int, plan_runs, final_temperatures, cost: dict) -> dict:
    """The study's units from its plan, and the sums of their measured costs (hours)."""
    steps = {"grpo": 0, "es": 0}
    evaluations = 0
    for run in plan_runs(spec, cfg, n_train).values():
        evaluations += 1 + len(final_temperatures(spec))
        for phase in run["phases"]:
            steps[phase.method] += phase.steps
            every = int(phase.cfg.get("checkpoint_every") or 0)
            evaluations += (phase.steps - 1) // every if every else 0
    units = {"grpo_steps": steps["grpo"], "es_steps": steps["es"], "evaluations": evaluations}
    wall = steps["grpo"] * cost["grpo"][0] + steps["es"] * cost["es"][0] + evaluations * cost["eval"][0]
    cpu = steps["grpo"] * cost["grpo"][1] + steps["es"] * cost["es"][1] + evaluations * cost["eval"][1]
    return {**units, "wall_estimate_h": round(wall / 3600, 2), "cpu_estimate_h": round(cpu / 3600, 2),
            "unit_wall_s": {k: round(v[0], 1) for k, v in cost.items()},
            "unit_cpu_s": {k: round(v[1], 1) for k, v in cost.items()}}


if __name__ == "__main__":
    main()
