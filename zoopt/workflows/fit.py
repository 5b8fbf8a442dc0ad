"""``zoopt.fit``: ES-train an LLM from Python with the objects you composed.

    result = fit(engine, objective, es, steps=15, prompts_per_step=32,
                 sampling=Sampling(temperature=0.0, max_new_tokens=10), run_dir="runs/mine")

Per step, as ``zoopt train``: ``es.ask()`` → every member generates the same prompts and is
scored → ``es.tell(rewards)`` → ``engine.apply`` → the seed log and ``metrics.jsonl``.  It is
``zoopt train``'s loop (:func:`~zoopt.workflows.loop.run_loop` over
:class:`~zoopt.workflows.train.ESRun`), so the same configuration gives the same weights, bit for
bit, and the same run directory: ``seedlog.json`` (``zoopt export RUN`` rebuilds the weights from
it), ``metrics.jsonl``, ``config.yaml``, ``eval_*.json``, ``checksum.txt``, ``training.png``.

* ``engine``: any :class:`~zoopt.engines.Engine`.  Its seed log replays onto
  ``engine.model_name`` in ``engine.model_dtype`` (what ``from_pretrained`` loaded); an engine
  built around a model object first exports its weights to ``run_dir/base_model/``.  Give an
  engine whose weights are still the base model's.
* ``objective``: the objective contract (:mod:`zoopt.objective`: a TRL-signature reward with
  ``dataset(split)``); TRL reward functions and your datasets become one with
  :class:`~zoopt.rewards.functions.RewardFunctions`.  An objective's ``system_prompt`` goes to an
  engine that has none, as in ``zoopt train``.
* ``es``: an :class:`~zoopt.es.ES` shell; its estimator needs only ``plan`` and ``update`` —
  registered or not.
* ``resume=True`` continues the run in ``run_dir`` with the same objects (a fresh engine of the
  same base).  ``zoopt train --resume`` cannot rebuild objects from a config and says so in one
  line; ``zoopt export`` needs none of them.

The other settings are ``zoopt train``'s keys, with their rules (:class:`~zoopt.hparams.TrainConfig`):
``evaluation`` is its ``eval`` section (None: no held-out evaluation), ``report_to``,
``log_every``, ``checkpoint_every``, ``reward_timeout_s``, ``reward_errors``, ``batch_size``,
``export`` (default true, as ``zoopt train``'s: ``run_dir/model/`` is what ``zoopt eval --model
RUN`` and ``zoopt analyze RUN`` read); a bad value is a one-line
:class:`~zoopt.config.ConfigError` naming the key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..callbacks import Callback
from ..config import ConfigError
from ..engines.base import Sampling
from ..es import ES
from ..hparams import EvalConfig, TrainConfig, from_dict, to_dict
from ..objective import Objective
from ..registry import ENGINES, ESTIMATORS
from ..reporting.progress import TrainProgress
from ..reporting.trackers import ReportTo
from ..rewards.scoring import reward_name
from ..runs.rundir import RunDir
from ..runs.seedlog import SeedLog
from ..types import RunResult
from ..updates import config_of
from .builders import run_dir_for
from .loop import run_loop
from .train import ESRun


def fit(engine, objective, es: ES, *, steps: int, prompts_per_step: int, sampling: Sampling,
        run_dir: str | Path | None = None, callbacks: Sequence[Callback] = (), report_to: str | Sequence[str] = "none",
        evaluation: EvalConfig | Mapping | None = None, resume: bool = False, export: bool = TrainConfig.export,
        log_every: int = 1, checkpoint_every: int = 0, reward_timeout_s: float = TrainConfig.reward_timeout_s,
        reward_errors: str = TrainConfig.reward_errors, batch_size: int = TrainConfig.batch_size,
        progress: bool = True, console=None) -> RunResult:
    """Train ``engine``'s weights with ``es`` on ``objective`` for ``steps`` steps (see the module
    docstring); ``callbacks`` and ``report_to``'s trackers hear of it (:mod:`zoopt.callbacks`).

    ``run_dir`` defaults to ``runs/<objective>-<time>``; a directory that already holds a run is
    an error unless ``resume``.  The engine stays open (it is yours).
    """
    if not isinstance(sampling, Sampling):
        raise TypeError(f"sampling must be a zoopt.engines.base.Sampling, got {type(sampling).__name__}")
    eval_section = to_dict(EvalConfig(n_problems=0)) if evaluation is None else to_dict(
        evaluation if isinstance(evaluation, EvalConfig) else from_dict(EvalConfig, evaluation))
    settings = to_dict(TrainConfig(  # every value checked by the one definition of its key
        steps=steps, prompts_per_step=prompts_per_step, reward_timeout_s=reward_timeout_s,
        reward_errors=reward_errors, batch_size=batch_size, export=export, report_to=report_to,
        log_every=log_every, checkpoint_every=checkpoint_every, eval=eval_section,
        run_dir=None if run_dir is None else str(run_dir)))
    cfg = {**describe(engine, objective, es, sampling), **{k: settings[k] for k in _SETTINGS}}
    where = RunDir(run_dir if run_dir is not None else run_dir_for(cfg))
    cfg["run_dir"] = str(where.path)
    if resume and not where.seedlog_path.exists():
        raise ConfigError(f"resume: no seedlog.json in {where.path}")
    if not resume:
        where.refuse_if_used("; pass resume=True to continue it")
    report = ReportTo(cfg["report_to"], cfg["log_every"])  # a missing tracker fails before anything is written
    base = None if resume else base_model(engine, where)
    if base is not None:
        cfg["model"], cfg["dtype"] = base
    elif engine.model_name is None:  # resumed on an engine built around a model object: its base is the log's
        header = SeedLog.load(where.seedlog_path).header
        cfg["model"], cfg["dtype"] = header["model"], header["dtype"]
    if isinstance(objective, Objective) and objective.system_prompt is not None and engine.system_prompt is None:
        engine.system_prompt = objective.system_prompt  # as zoopt train's build_engine does
    trainer = ESRun(cfg, where.path, engine, objective, es, sampling, base=base, objects=objects(engine, objective, es))
    return run_loop(trainer, TrainProgress(console=console, enabled=progress), [report, *callbacks])


# the keys of TrainConfig that fit takes as arguments (the rest describe its objects)
_SETTINGS = ("steps", "prompts_per_step", "reward_timeout_s", "reward_errors", "eval", "batch_size", "export",
             "report_to", "log_every", "checkpoint_every")


def describe(engine, objective, es: ES, sampling: Sampling) -> dict:
    """What ``zoopt train``'s keys say about these objects (``config.yaml`` of a run ``fit`` started):
    the estimator and engine by their registered names (a class path where there is none), the
    objective by its name, the ES shell's numbers, its update rule (the ``update`` section, when
    one stands for it: :func:`objects` names any other rule), its noise and the sampling."""
    update = config_of(es.rule)
    return _plain({
        "model": engine.model_name, "dtype": engine.model_dtype, "engine": _name(ENGINES, engine),
        "objective": reward_name(objective), "seed": es.seed, "estimator": _name(ESTIMATORS, es.estimator),
        "population_size": es.population_size, "sigma": es.sigma, "lr": es.lr,
        **({"update": update} if update is not None else {}), "noise": es.noise.to_dict(),
        **{k: v for k, v in engine.space_record().items() if k != "base_weights"},
        "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p,
                     "max_new_tokens": sampling.max_new_tokens, "n": sampling.n}})


def objects(engine, objective, es: ES) -> dict[str, str]:
    """``{part: "module:Class"}`` of the parts ``fit`` was given as objects, the estimator marked
    ``(not registered)`` or ``(registered as NAME)``, and an update rule that no ``update`` config
    section stands for (its :meth:`~zoopt.updates.UpdateRule.to_dict`): recorded in the seed log,
    compared on resume."""
    name = ESTIMATORS.name_of(type(es.estimator))
    parts = {"engine": _path(engine), "objective": _path(objective),
             "estimator": f"{_path(es.estimator)} " + (f"(registered as {name!r})" if name else "(not registered)")}
    if config_of(es.rule) is None:
        parts["update"] = json.dumps(es.rule.to_dict())
    return parts


def base_model(engine, run_dir: RunDir) -> tuple[str, str]:
    """``(model, dtype)`` the seed log replays onto: what the engine was loaded from, else its weights
    exported to ``run_dir/base_model/`` (an engine built around an in-process model object)."""
    if engine.model_name is not None:
        return engine.model_name, engine.model_dtype or "float32"
    if engine.space != "full":  # its export is the adapter, not the base it sits on
        raise ConfigError("an adapter-space engine built around a model object has no base to replay its seed log "
                          "onto: build it with HFEngine.from_pretrained(model, adapter=...)")
    if engine.module is None:
        raise ConfigError(f"{type(engine).__name__} has no model_name to replay its seed log onto: build it with "
                          f"from_pretrained(model, dtype=...)")
    dtype = str(next(engine.module.parameters()).dtype).removeprefix("torch.")
    return str(engine.export_pretrained(run_dir.base_model_path)), dtype


def _name(registry, obj: Any) -> str:
    return registry.name_of(type(obj)) or _path(obj)


def _path(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def _plain(value: Any) -> Any:
    """JSON's plain types (tuples → lists), for config.yaml and the trackers."""
    return json.loads(json.dumps(value))


__all__ = ["fit", "describe", "objects", "base_model"]
