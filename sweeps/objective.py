"""One sweep trial: suggest params, train a run (ES or GRPO), return the final metric(s) to Optuna.

:class:`TrialObjective` is the ``func`` given to ``study.optimize``.  For a trial it

1. suggests every param of ``spec.space`` (trial params are keyed by dotted config keys); when a
   COMPLETE trial of the study has exactly these params, it returns that trial's values without
   training (user attr ``duplicate_of``): a trial's config is its params over a fixed base and
   seed, so the run would repeat that trial's run, and a sampler does propose the same params
   again (NSGA-II's crossover can copy a parent whole: 2 of the frontier sweep's 16 trials);
2. builds the train config (:meth:`SweepSpec.trial_config`) with ``run_dir`` =
   ``<study_dir>/trials/trial-NNNN`` and records ``run_dir``, ``config``, ``steps`` and
   ``worker`` as trial user attrs;
3. drives the method's trainer (:func:`zoopt.workflows.methods.start_run`: ES's ``Trainer`` or
   ``GRPOTrainer``, each writing ``config.yaml`` and ``metrics.jsonl`` as ``zoopt train``/``zoopt
   grpo`` do) step by step; with a single objective and
   ``report_every`` > 0 it evaluates every ``report_every`` steps (before the last),
   ``trial.report(value, steps_done)`` and raises ``optuna.TrialPruned`` when
   ``trial.should_prune()``;
4. evaluates once more after the last step (written to ``run_dir/eval_after.json`` and the
   ``eval`` user attr) and returns the metric value (one objective) or the list of values.

A metric that is missing or ``None`` is returned as NaN, which Optuna records as FAIL; an
exception also fails the trial (the sweep runs with ``catch=(Exception,)``) and its message is
kept as the ``error`` user attr.  ES trials never
export weights: the trial's seed log rebuilds them (``zoopt export``); GRPO trials keep no
weights (retrain from ``best.yaml`` with ``zoopt grpo --config``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from zoopt.runs.rundir import RunDir
from zoopt.workflows.builders import evaluate_run
from zoopt.workflows.loop import RunTrainer
from zoopt.workflows.methods import start_run

from .spec import Objective, SweepSpec

EvaluateFn = Callable[[RunTrainer], dict]


def default_evaluate(trainer: RunTrainer) -> dict:
    """The held-out evaluation of ``zoopt train``/``zoopt grpo`` (``eval`` section of the trial's config)."""
    return evaluate_run(trainer.engine, trainer.objective, trainer.cfg)


def metric_value(objective: Objective, summary: dict, record: dict | None) -> float:
    """``objective.metric`` from an eval ``summary`` (or the last step ``record`` for
    ``reward``); NaN when absent."""
    if objective.metric == "reward":
        value = None if record is None else record.get("reward_mean")
    else:
        value = summary.get(objective.metric)
    return float("nan") if value is None else float(value)


class TrialObjective:
    """``study.optimize(TrialObjective(spec, study_dir), ...)``; see the module docstring.

    ``evaluate_fn(trainer) -> summary dict`` replaces the held-out evaluation (a hook for
    custom metrics and tests); it must be a module-level function when ``workers`` > 1.
    """

    def __init__(self, spec: SweepSpec, study_dir: str | Path, evaluate_fn: EvaluateFn | None = None,
                 worker: int = 0) -> None:
        self.spec = spec
        self.study_dir = Path(study_dir)
        self.evaluate_fn = evaluate_fn or default_evaluate
        self.worker = worker

    def __call__(self, trial: optuna.Trial) -> float | list[float]:
        spec = self.spec
        params = {name: param.suggest(trial) for name, param in spec.space.items()}
        twin = completed_twin(trial.study, params)
        if twin is not None:
            return self._reuse(trial, twin)
        run_dir = self.study_dir / "trials" / f"trial-{trial.number:04d}"
        cfg = spec.trial_config(params, run_dir)
        for key, value in (("run_dir", str(run_dir)), ("config", cfg), ("steps", cfg["steps"]),
                           ("worker", self.worker)):
            trial.set_user_attr(key, value)
        if RunDir(run_dir).holds_run():
            raise FileExistsError(f"{run_dir} already holds a run (left from an earlier study of this name?)")
        try:
            return self._train(trial, cfg, run_dir)
        except optuna.TrialPruned:
            raise
        except Exception as exc:
            trial.set_user_attr("error", f"{type(exc).__name__}: {exc}"[:2000])
            raise

    def _reuse(self, trial: optuna.Trial, twin: FrozenTrial) -> float | list[float]:
        """``twin``'s values and its run's user attrs, with ``duplicate_of`` = its number."""
        trial.set_user_attr("duplicate_of", twin.number)
        for key in ("run_dir", "config", "steps", "eval"):
            if key in twin.user_attrs:
                trial.set_user_attr(key, twin.user_attrs[key])
        trial.set_user_attr("worker", self.worker)
        return list(twin.values) if self.spec.multi_objective else twin.value

    def _train(self, trial: optuna.Trial, cfg: dict, run_dir: Path) -> float | list[float]:
        trainer = start_run(self.spec.method, cfg, run_dir)
        try:
            return self._steps(trial, trainer, cfg)
        finally:  # a vLLM engine's worker processes must not outlive the trial
            trainer.close()

    def _steps(self, trial: optuna.Trial, trainer: RunTrainer, cfg: dict) -> float | list[float]:
        spec = self.spec
        needs_eval = any(o.needs_eval for o in spec.objectives)
        every = spec.report_every if not spec.multi_objective else 0
        steps, record = int(cfg["steps"]), None
        while trainer.steps_done < steps:
            record = trainer.step()
            done = trainer.steps_done
            if every and done % every == 0 and done < steps:
                summary = self.evaluate_fn(trainer) if needs_eval else {}
                value = metric_value(spec.objectives[0], summary, record)
                trial.report(value, done)
                if trial.should_prune():
                    raise optuna.TrialPruned(f"step {done}: {spec.objectives[0].metric}={value:.4g}")
        summary = self.evaluate_fn(trainer) if needs_eval else {}
        if needs_eval:
            trainer.run_dir.write_eval("after", summary)
            trial.set_user_attr("eval", {k: v for k, v in summary.items()  # scalars, and the 95 % CIs' pairs
                                         if (isinstance(v, (int, float, str)) and not _nan(v))
                                         or (k.endswith("_ci") and isinstance(v, (list, tuple)))})
        values = [metric_value(o, summary, record) for o in spec.objectives]
        return values if spec.multi_objective else values[0]


def completed_twin(study: optuna.Study, params: dict) -> FrozenTrial | None:
    """The first COMPLETE trial of ``study`` whose params equal ``params`` exactly, or None.
    (A twin still RUNNING on another worker is not waited for: that pair trains twice.)"""
    for done in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if done.params == params:
            return done
    return None


def _nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)
