"""The fair-comparison tuning stage of ``zoopt study``: one grid sweep per method (the sweeps
plugin, reached through its lazy target) on a validation split carved from train.

For ``method`` ∈ {es, grpo} the sweep's base is the study's shared keys and its ``es``/``grpo``
block, with the objective replaced by :class:`zoopt.study.validation.ValidationSplit` (train
minus the first ``tuning.validation`` problems to train on, those problems to score on: the
held-out problems are never seen), a budget of ``tuning.budget`` sampled completions per trial
(the same for both methods) and a grid over ``tuning.<method>`` (every combination one trial).

The choice: the trial with the highest ``tuning.metric`` (ties: the earlier trial).  A method
**moved** when some trial's validation metric differs from the base model's on the same
problems; one that did not move under any tried setting is reported as such, and the study
draws no verdict from it.  Resumable: the sweep's own storage keeps finished trials; only the
missing grid points run again (a trial the kill interrupted is queued again,
:func:`requeue_interrupted`), and ``tuning/<method>/choice.json`` marks a finished stage.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from ..registry import resolve_target
from ..study.validation import TARGET
from .analyze import evaluate_model

SHARED = ("model", "dtype", "device", "engine", "engine_args", "seed", "batch_size", "reward_timeout_s",
          "reward_errors")


def validation_config(spec: dict) -> dict:
    """The keys every tuning run shares: the validation objective and its evaluation."""
    tuning = spec["tuning"]
    n = int(tuning["n_samples"])
    return {**{k: spec[k] for k in SHARED}, "objective": TARGET,
            "objective_args": {"objective": spec["objective"], "objective_args": spec["objective_args"],
                               "n_validation": int(tuning["validation"])},
            "eval": {**spec["eval"], "n_problems": int(tuning["validation"]), "n_samples": n,
                     "ks": [1], "every": 0}}


def sweep_spec(spec: dict, method: str) -> dict:
    """The sweeps spec (a dict, see docs/sweeps.md) of ``method``'s tuning grid."""
    grid = spec["tuning"][method]
    base = {**validation_config(spec), **spec[method], "export": False}
    return {"name": f"tune-{method}", "method": method, "base": base,
            "space": {k: {"type": "categorical", "choices": list(v)} for k, v in grid.items()},
            "objectives": [{"metric": spec["tuning"]["metric"], "direction": "maximize"}],
            "budget": {"completions": int(spec["tuning"]["budget"])}, "sampler": "grid", "pruner": "none",
            "n_trials": grid_size(grid), "seed": int(spec["seed"])}


def grid_size(grid: dict) -> int:
    return len(list(itertools.product(*grid.values()))) if grid else 1


def base_validation(spec: dict, out: Path) -> dict:
    """The base model's validation summary (cached in ``out``)."""
    path = out / "base_validation.json"
    if path.exists():
        return json.loads(path.read_text())
    summary = evaluate_model(validation_config(spec)).summary
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, default=str))
    return summary


def tune(spec: dict, method: str, out: Path, base_value: float | None) -> dict:
    """Run (or finish) ``method``'s grid and return its choice record (module docstring)."""
    done = out / method / "choice.json"
    if done.exists():
        return json.loads(done.read_text())
    import optuna

    run_sweep = resolve_target("sweeps.runner:run")
    sweep = sweep_spec(spec, method)
    study_dir = out / method / sweep["name"]
    url = f"sqlite:///{(study_dir / 'study.db').resolve()}"
    finished = 0
    if (study_dir / "study.db").exists():
        stored = optuna.load_study(study_name=sweep["name"], storage=url)
        requeue_interrupted(stored)
        finished = sum(t.state == optuna.trial.TrialState.COMPLETE for t in stored.trials)
    study = run_sweep(sweep, n_trials=max(0, sweep["n_trials"] - finished), run_root=out / method, report=False)
    metric = spec["tuning"]["metric"]
    trials = [{"number": t.number, "params": dict(t.params), "value": t.value,
               "run_dir": t.user_attrs.get("run_dir"), "error": t.user_attrs.get("error")}
              for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    failed = [t.number for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    best = max(trials, key=lambda t: (t["value"], -t["number"])) if trials else None
    moved = any(t["value"] != base_value for t in trials)
    why = (f"{method} did not move: under every tried setting its validation {metric} equals the base "
           f"model's ({base_value})") if trials else f"no {method} tuning trial finished (failed: {failed})"
    record = {"method": method, "metric": metric, "base_value": base_value, "grid": spec["tuning"][method],
              "budget_per_trial": int(spec["tuning"]["budget"]), "trials": trials, "failed_trials": failed,
              "chosen": best["params"] if best else {}, "chosen_value": best["value"] if best else None,
              "moved": moved,
              "note": "" if moved else why}
    done.write_text(json.dumps(record, indent=2))
    return record


def requeue_interrupted(study) -> list[dict]:
    """Queue again the grid points of trials a killed study left unfinished; their params.

    A trial is unfinished when it is RUNNING (``zoopt study`` runs its sweeps in this one
    process, so none is alive when a stage starts: its process was killed) or FAIL without an
    ``error`` attr (interrupted, e.g. by Ctrl-C, rather than failed by its own error).  The
    grid sampler counts such points as visited and would never run them again; an enqueued
    trial runs them with fixed params (a new trial directory; the old one stays).  A point that
    is already complete or queued is not queued twice."""
    import optuna

    state = optuna.trial.TrialState
    taken = [t.params for t in study.trials if t.state in (state.COMPLETE, state.WAITING)]
    queued = []
    for t in study.trials:
        interrupted = t.state == state.RUNNING or (t.state == state.FAIL and "error" not in t.user_attrs)
        if interrupted and t.params and t.params not in taken:
            study.enqueue_trial(t.params)
            taken.append(t.params)
            queued.append(t.params)
    return queued


def untuned(spec: dict, method: str) -> dict:
    """The record of a skipped tuning stage (``tuning.enabled: false``): the spec's own settings."""
    return {"method": method, "metric": None, "trials": [], "chosen": {}, "moved": True, "skipped": True,
            "note": "tuning disabled: the spec's settings are used as they are"}
