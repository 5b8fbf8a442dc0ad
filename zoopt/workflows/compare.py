"""``zoopt compare``: base, ES, GRPO, ES→GRPO and GRPO→ES from one base model at equal budgets.

Each method is a schedule (:mod:`zoopt.workflows.schedule`) given the same ``budget`` of sampled
completions; ``base`` is the empty schedule.  Every method starts from the same base
weights, is evaluated with the same settings (:func:`zoopt.workflows.builders.evaluate_run` on the
``eval`` block and ``seed`` of the compare config), and reports

* Pass@k and Maj@k for the configured ``eval.ks`` (with ``eval.n_samples`` samples), greedy
  accuracy, mean sampled reward and mean token entropy;
* D_rel = ‖θ − θ₀'‖₂ / ‖θ₀'‖₂ of the exported weights (the fp32 master) against the base as the
  run loaded it, ``θ₀' = fp32(cast_dtype(θ₀))`` (:func:`zoopt.runs.references.load_base`), so a method that
  did not move reports 0 in every dtype, as ``zoopt analyze`` does
  (:func:`zoopt.metrics.relative_drift`);
* the completions planned and actually generated (the engine's ``stats.sequences``);
* wall time (training, evaluation, the whole method) and peak memory.

With ``isolate: true`` (the default) each method runs in its own Python process
(``python -m zoopt.workflows.compare --worker``, :mod:`zoopt.workflows.isolation`), so its peak
resident memory is its own: it is read twice, inside the child (``VmHWM`` of
``/proc/self/status``) and by the parent from the child's ``rusage`` (``os.wait4``;
``ru_maxrss``) in a minimal launcher process (see :data:`zoopt.workflows.isolation.LAUNCHER` for
why not the parent itself), and both are reported (MiB).  In-process (``isolate: false``, for
tests) memory is not attributable to one method and is reported as ``null``.  Results:
``compare.json`` (everything), ``compare.md`` (the table), ``pass_at_k.png`` and
``train_reward.png`` in the run directory (:mod:`zoopt.reporting.comparison`); ``report_to``
sends them, and each method's step records, to experiment trackers
(:mod:`zoopt.reporting.trackers`).  ``keep_models: false`` removes
each method's final ``model/`` once D_rel is measured; the ``start_model/`` of an ES phase that
follows another phase is kept, since that phase's seed log replays onto it (``zoopt export``).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from ..config import ConfigError, absolute_paths, config_items, default_config, merge
from ..registry import engine_refusal
from ..reporting import comparison
from ..reporting.trackers import tracker_names
from ..runs.references import load_base
from ..runs.rundir import RunDir
from ..warmups import ensure_warmup
from .builders import build_engine, build_objective, evaluate_config, run_dir_for
from .isolation import run_isolated, worker_main
from .schedule import CheckpointHook, PlannedPhase, parse_schedule, plan, run_schedule

OPEN_SECTIONS = ("methods", "es", "grpo")  # free-form here, checked when the phases are planned
SHARED_KEYS = ("model", "dtype", "device", "engine", "engine_args", "objective", "objective_args", "seed",
               "batch_size", "reward_timeout_s", "reward_errors")


# -- configuration -------------------------------------------------------------------------------
def load_compare_config(path: str | Path | None = None, overrides=()) -> dict:
    """``zoopt/configs/compare.yaml`` ← YAML file ← ``key=value`` overrides.

    ``methods.NAME=[...]`` adds or replaces one schedule (``methods={...}`` replaces all);
    ``es.KEY=V`` / ``grpo.KEY=V`` override ``train.yaml`` / ``grpo.yaml`` keys of every phase
    of that method (checked against those files when the phases are planned).  Any other key
    must exist in ``compare.yaml``.
    """
    cfg = default_config("compare")
    items = config_items(path, overrides)
    for key, value in items:
        head, _, rest = str(key).partition(".")
        if head not in OPEN_SECTIONS:
            merge(cfg, {key: value})
        elif not rest:
            if not isinstance(value, dict):
                raise ConfigError(f"config key {head!r} must be a mapping, got {value!r}")
            cfg[head] = dict(value) if head == "methods" else {**cfg[head], **value}
        else:
            cfg[head][rest] = value
    check_compare_config(cfg)
    return absolute_paths(cfg)


def check_compare_config(cfg: dict) -> None:
    if not cfg["methods"]:
        raise ConfigError("methods is empty: nothing to compare")
    refused = engine_refusal(cfg["engine"], "compare")
    if refused:
        raise ConfigError(f"config key 'engine': {refused}")
    for name, schedule in cfg["methods"].items():
        parse_schedule(schedule, name=f"methods.{name}")
    for key in ("es", "grpo"):
        if not isinstance(cfg[key], dict):
            raise ConfigError(f"config key {key!r} must be a mapping, got {cfg[key]!r}")
        for space_key in ("space", "adapter", "quantization"):  # one engine serves every phase: not per method
            if space_key in cfg[key]:
                raise ConfigError(f"config key '{key}.{space_key}': zoopt compare runs full space only for now "
                                  f"(adapter space: zoopt train, zoopt grpo)")
    ev = cfg["eval"]
    n, ks = int(ev["n_samples"]), [int(k) for k in ev["ks"]]
    if n and (not ks or min(ks) < 1 or max(ks) > n):
        raise ConfigError(f"eval.ks must lie in [1, eval.n_samples={n}], got {ks}")


def shared_config(cfg: dict) -> dict:
    return {k: cfg[k] for k in SHARED_KEYS}


ES_ENGINE_KEYS = ("noise_cache_gb", "population")  # ES settings that belong to the engine, not to a step


def engine_config(shared: dict, planned: list[PlannedPhase], name: str = "method") -> dict:
    """The config a method's one engine is built from: the shared keys, plus the engine settings
    of its ES phases (``ES_ENGINE_KEYS``: the noise cache that makes ES's update cheap, the
    population path).  The engine serves every phase, so ES phases that set one of them
    differently are an error; GRPO phases never perturb, and a GRPO-only method keeps neither."""
    es = [p.cfg for p in planned if p.method == "es"]
    out = dict(shared)
    for key in ES_ENGINE_KEYS:
        values = [c[key] for c in es if key in c]
        if any(v != values[0] for v in values):
            raise ConfigError(f"{name}: its ES phases set {key} differently ({values}); "
                              f"one engine runs every phase")
        if values:
            out[key] = values[0]
    return out


def eval_config(cfg: dict) -> dict:
    """The config :func:`zoopt.workflows.builders.evaluate_run` reads: the same for every method."""
    return {"eval": dict(cfg["eval"]), "batch_size": cfg["batch_size"], "seed": cfg["seed"],
            "reward_timeout_s": cfg["reward_timeout_s"], "reward_errors": cfg["reward_errors"]}


def plan_methods(cfg: dict, n_train_rows: int) -> dict[str, list]:
    """``{method name: [PlannedPhase, ...]}`` for the configured budget."""
    overrides = {"es": cfg["es"], "grpo": cfg["grpo"]}
    return {name: plan(parse_schedule(schedule, f"methods.{name}"), int(cfg["budget"]), shared_config(cfg),
                       overrides, n_train_rows, name=f"methods.{name}")
            for name, schedule in cfg["methods"].items()}


# -- one method (in a child process, or in-process) ----------------------------------------------
def run_method(spec: dict, objective=None, on_checkpoint: CheckpointHook | None = None) -> dict:
    """Load the base model, run the method's phases, evaluate, export; a JSON-able result.

    ``spec``: ``name``, ``dir``, ``shared`` (model/engine keys), ``eval`` (see
    :func:`eval_config`) and ``phases`` (``PlannedPhase.to_dict()`` entries); ``on_checkpoint``:
    see :func:`zoopt.workflows.schedule.run_schedule`.
    """
    t0 = time.perf_counter()
    method_dir = Path(spec["dir"])
    method_dir.mkdir(parents=True, exist_ok=True)
    objective = objective if objective is not None else build_objective(spec["shared"])
    planned = [PlannedPhase(p["method"], p["config"], p["steps"], p["completions_per_step"], p["allotted"])
               for p in spec["phases"]]
    engine = build_engine(engine_config(spec["shared"], planned, f"methods.{spec['name']}"), objective)
    t_loaded = time.perf_counter()
    try:
        phases = run_schedule(planned, engine, objective, method_dir, on_checkpoint=on_checkpoint)
        t_trained = time.perf_counter()
        evaluation = evaluate_config(engine, objective, spec["eval"])
        evaluation.to_json(method_dir / "eval.json")  # per problem: what paired comparisons (zoopt study) read
        summary = evaluation.summary
        t_evaluated = time.perf_counter()
        model_dir = method_dir / "model"  # as given (relative stays relative: a study directory moves between machines)
        engine.export_pretrained(model_dir)
        checksum = engine.checksum()
    finally:
        engine.close()
    return {"name": spec["name"], "phases": phases, "eval": summary, "model_dir": str(model_dir),
            "checksum": checksum,
            "completions": sum(p["completions"] for p in phases),
            "completions_generated": sum(p["completions_generated"] for p in phases),
            "load_s": round(t_loaded - t0, 3), "train_s": round(t_trained - t_loaded, 3),
            "eval_s": round(t_evaluated - t_trained, 3), "total_s": round(time.perf_counter() - t0, 3)}


# -- the comparison ------------------------------------------------------------------------------
def compare(cfg: dict, objective=None, log=print) -> dict:
    """Run every method of ``cfg`` (``compare.yaml`` keys); write and return the table.

    ``objective`` (an object) is only usable in-process (``isolate: false``); children build
    theirs from ``cfg["objective"]``.
    """
    run_dir = run_dir_for(cfg, prefix="compare-")
    if (run_dir / "compare.json").exists():
        raise ConfigError(f"run_dir {str(run_dir)!r} already holds a comparison")
    isolate = bool(cfg["isolate"])
    trackers = tracker_names(cfg["report_to"])  # a missing tracker fails before any method runs
    if isolate and objective is not None:
        raise ConfigError("an objective object cannot cross a process boundary: use isolate=false or a name")
    obj = objective if objective is not None else build_objective(cfg)
    planned = plan_methods(cfg, len(obj.dataset("train")))
    RunDir(run_dir).write_config(cfg)
    results = []
    for name, phases in planned.items():
        spec = {"name": name, "dir": str(run_dir / name), "shared": shared_config(cfg), "eval": eval_config(cfg),
                "phases": [p.to_dict() for p in phases]}
        log(f"compare: {name}: " + (" → ".join(f"{p.method} {p.steps} steps × {p.per_step}" for p in phases)
                                     or "base model, no training"))
        if isolate:
            result = run_isolated("zoopt.workflows.compare", spec, run_dir / name)
        else:
            result = run_method(spec, objective=obj)
            result.update(peak_rss_mib=None, peak_rss_mib_self=None, process_wall_s=result["total_s"])
        results.append(result)
    ensure_warmup(str(cfg["model"]))  # built by the runs, unless they ran on another machine
    table = comparison.table(cfg, results, load_base(cfg["model"], cfg["dtype"]).params)
    out = {"budget": int(cfg["budget"]), "isolated": isolate, "rounding": "floor per phase",
           "methods": results, "table": table}
    (run_dir / "compare.json").write_text(json.dumps(out, indent=2))
    (run_dir / "compare.md").write_text(comparison.markdown(cfg, table))
    figures = comparison.plots(run_dir, cfg, results)
    comparison.send(trackers, run_dir, cfg, results, table, figures)
    if not cfg["keep_models"]:  # each method's final weights; an ES phase's start_model/ stays: its seed log
        for r in results:       # replays onto it (zoopt export PHASE_DIR)
            shutil.rmtree(r["model_dir"], ignore_errors=True)
    log(f"compare: wrote {run_dir / 'compare.json'}, {run_dir / 'compare.md'}" + "".join(f", {f}" for f in figures))
    return {"run_dir": run_dir, **out, "figures": figures}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(worker_main(run_method, sys.argv[2], sys.argv[3]))
    sys.exit("usage: python -m zoopt.workflows.compare --worker SPEC.json OUT.json (use `zoopt compare` instead)")
