"""A sweep spec: what to search, what to optimise, on what budget (see ``docs/sweeps.md``).

:func:`load_spec` reads a YAML file, a packaged spec name (a file of
``sweeps/specs/``: ``tiny``, ``default``, ...) or a dict, validates every part and returns a :class:`SweepSpec` whose
``base`` is a complete train config: ``zoopt/configs/train.yaml`` keys for ``method: es``,
``zoopt/configs/grpo.yaml`` keys for ``method: grpo``.  Any unknown key or bad value raises :class:`SpecError`
(a ``ValueError``) with a one-line message that names the key.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoopt.config import ConfigError, absolute_paths, load_config, merge, packaged_yaml, read_yaml_spec, set_dotted

from .samplers import build_pruner, build_sampler
from .space import Param, SpecError, parse_param

TOP_KEYS = ("name", "method", "base", "set", "space", "objectives", "budget", "sampler", "pruner",
            "report_every", "n_trials", "enqueue_paper_defaults", "seed", "heartbeat")
# method → the packaged train config a trial's base starts from (``zoopt/configs/<name>.yaml``)
METHODS = {"es": "train", "grpo": "grpo"}
SAMPLERS = ("tpe", "random", "grid", "nsga2")
PRUNERS = ("none", "median", "hyperband")
# the ES recipe of "Evolution Strategies at Scale" (Qiu et al. 2025) and of the paper zoopt studies:
# σ, α, N and a one-point estimator with z-scored rewards, Gaussian noise, a plain step; enqueued
# as trial 0 on request, restricted to the keys a spec searches
PAPER_DEFAULTS = {"sigma": 1.5e-3, "lr": 2.5e-4, "population_size": 32, "estimator": "one_point",
                  "shaping": "zscore", "noise.kind": "gaussian", "update.rule": "sgd"}
METRIC = re.compile(r"^(greedy_accuracy|mean_reward|reward|(pass|maj)@([1-9][0-9]*))$")
NOT_SWEPT = ("steps", "run_dir")  # set by the sweep itself


@dataclass(frozen=True)
class Objective:
    """``metric`` is read from the held-out eval summary (``reward``: the last step's mean
    member reward, no eval needed); ``direction`` is ``maximize`` or ``minimize``."""

    metric: str
    direction: str = "maximize"

    @property
    def needs_eval(self) -> bool:
        return self.metric != "reward"


@dataclass(frozen=True)
class Heartbeat:
    """Optuna heartbeats: a RUNNING trial silent for ``grace_period`` s is marked FAIL and,
    when ``retry`` > 0, re-queued up to ``retry`` times (``RetryFailedTrialCallback``)."""

    interval: int = 60
    grace_period: int = 180
    retry: int = 0


@dataclass(frozen=True)
class SweepSpec:
    name: str
    base: dict                      # a complete train config
    space: dict[str, Param]
    objectives: tuple[Objective, ...]
    budget: tuple[str, int]         # ("steps" | "completions", amount)
    sampler: tuple[str, dict]       # (name, keyword arguments)
    pruner: tuple[str, dict]
    report_every: int = 0
    n_trials: int = 20
    enqueue_paper_defaults: bool = False
    seed: int = 0
    heartbeat: Heartbeat = field(default_factory=Heartbeat)
    method: str = "es"

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    @property
    def metric_names(self) -> list[str]:
        return [o.metric for o in self.objectives]

    def steps_for(self, cfg: dict) -> int:
        """Training steps of a trial with config ``cfg``: the ``steps`` budget, or
        ``completions // (population_size × prompts_per_step × sampling.n)``, at least 1
        (GRPO: ``completions // (prompts_per_step × sampling.n)``, ``sampling.n`` the group size)."""
        kind, amount = self.budget
        if kind == "steps":
            return amount
        members = int(cfg["population_size"]) if self.method == "es" else 1
        per_step = members * int(cfg["prompts_per_step"]) * int(cfg["sampling"]["n"])
        return max(1, amount // per_step)

    def trial_config(self, params: dict[str, Any], run_dir: str | Path | None) -> dict:
        """``base`` ← ``params`` (dotted keys) ← ``steps`` from the budget ← ``run_dir``."""
        cfg = copy.deepcopy(self.base)
        for key, value in params.items():
            set_dotted(cfg, key, value)
        cfg["steps"] = self.steps_for(cfg)
        cfg["run_dir"] = None if run_dir is None else str(run_dir)
        return cfg

    def paper_trial(self) -> dict[str, Any]:
        """The paper's recipe (:data:`PAPER_DEFAULTS`) restricted to the searched keys (validated to
        lie in the space)."""
        return {k: v for k, v in PAPER_DEFAULTS.items() if k in self.space}


def packaged_spec(name: str) -> Path | None:
    return packaged_yaml("sweeps", "specs", name)


def load_spec(source: str | Path | dict | SweepSpec) -> SweepSpec:
    """Parse and validate a spec from a path, a packaged spec name, a dict, or a spec."""
    if isinstance(source, SweepSpec):
        return source
    if isinstance(source, dict):
        return parse_spec(source, name="sweep", root=Path.cwd())
    path, raw = read_yaml_spec(source, "sweeps", "specs", "spec file", error=SpecError)
    return parse_spec(raw, name=path.stem, root=path.parent)


def parse_spec(raw: dict, *, name: str, root: Path) -> SweepSpec:
    """Validate ``raw``; relative ``base`` paths are resolved against ``root``."""
    unknown = [k for k in raw if k not in TOP_KEYS]
    if unknown:
        raise SpecError(f"unknown spec key {unknown[0]!r} (allowed: {', '.join(TOP_KEYS)})")
    method = raw.get("method", "es")
    if not isinstance(method, str) or method not in METHODS:
        raise SpecError(f"method must be one of {list(METHODS)}, got {method!r}")
    base = _base_config(raw.get("base"), raw.get("set"), root, METHODS[method])
    space = _space(raw.get("space"), base)
    objectives = _objectives(raw.get("objectives"), base)
    budget = _budget(raw.get("budget"))
    report_every = _int(raw, "report_every", 0, minimum=0)
    sampler = _choice(raw.get("sampler", "nsga2" if len(objectives) > 1 else "tpe"), "sampler", SAMPLERS)
    pruner = _choice(raw.get("pruner", "none"), "pruner", PRUNERS)
    if len(objectives) > 1 and pruner[0] != "none":
        raise SpecError("pruner: Optuna prunes single-objective studies only; use pruner: none with 2+ objectives")
    if len(objectives) > 1 and report_every:
        raise SpecError("report_every: intermediate values are reported for a single objective only")
    if pruner[0] != "none" and not report_every:
        raise SpecError(f"pruner: {pruner[0]!r} needs report_every > 0 (steps between held-out evals)")
    enqueue = raw.get("enqueue_paper_defaults", False)
    if not isinstance(enqueue, bool):
        raise SpecError(f"enqueue_paper_defaults must be true or false, got {enqueue!r}")
    if enqueue and method != "es":
        raise SpecError(f"enqueue_paper_defaults: the paper's σ, α, N are ES values; "
                        f"set it false for method: {method}")
    spec = SweepSpec(
        name=check_name(raw.get("name", name)), base=base, space=space, objectives=objectives, budget=budget,
        sampler=sampler, pruner=pruner, report_every=report_every,
        n_trials=_int(raw, "n_trials", 20, minimum=0), enqueue_paper_defaults=enqueue,
        seed=_int(raw, "seed", 0, minimum=0), heartbeat=_heartbeat(raw.get("heartbeat")), method=method)
    if enqueue:
        for key, value in PAPER_DEFAULTS.items():
            if key in space and not space[key].contains(value):
                raise SpecError(f"enqueue_paper_defaults: the paper's {key}={value!r} is outside space.{key}; "
                                f"widen it or set enqueue_paper_defaults: false")
    build_sampler(*spec.sampler, seed=0, space=spec.space)  # validate sampler/pruner options now
    build_pruner(*spec.pruner)
    return spec


def _base_config(base: Any, overrides: Any, root: Path, defaults: str = "train") -> dict:
    """``zoopt/configs/<defaults>.yaml`` ← ``base`` (overrides or a YAML path) ← ``overrides``."""
    try:
        if base is None or isinstance(base, dict):
            cfg = load_config(None, base=defaults)
            merge(cfg, base or {})
        elif isinstance(base, str):
            path = Path(base) if Path(base).is_absolute() else root / base
            cfg = load_config(path, base=defaults)
        else:
            raise SpecError(f"base must be a mapping of train-config overrides or a path, got {base!r}")
    except ConfigError as exc:
        raise SpecError(f"base: {exc}") from None
    if overrides is not None:
        if not isinstance(overrides, dict):
            raise SpecError(f"set must be a mapping of train-config overrides, got {overrides!r}")
        try:
            merge(cfg, overrides)
        except ConfigError as exc:
            raise SpecError(f"set: {exc}") from None
    return absolute_paths(cfg)


def _space(raw: Any, base: dict) -> dict[str, Param]:
    if not isinstance(raw, dict) or not raw:
        raise SpecError(f"space must be a non-empty mapping of train-config keys to params, got {raw!r}")
    space = {}
    for key, entry in raw.items():
        key = str(key)
        if key in NOT_SWEPT:
            raise SpecError(f"space.{key}: {key!r} is set by the sweep itself and cannot be searched")
        param = parse_param(key, entry)
        try:
            set_dotted(copy.deepcopy(base), key, param.choices[0] if param.choices else param.low)
        except ConfigError as exc:
            raise SpecError(f"space.{key}: {exc}") from None
        space[key] = param
    return space


def _objectives(raw: Any, base: dict) -> tuple[Objective, ...]:
    if isinstance(raw, (str, dict)):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise SpecError(f"objectives must be a non-empty list of {{metric, direction}}, got {raw!r}")
    out = []
    for i, item in enumerate(raw):
        where = f"objectives[{i}]"
        item = {"metric": item} if isinstance(item, str) else item
        if not isinstance(item, dict):
            raise SpecError(f"{where} must be a mapping {{metric, direction}}, got {item!r}")
        extra = sorted(set(item) - {"metric", "direction"})
        if extra:
            raise SpecError(f"unknown key {where}.{extra[0]} (allowed: metric, direction)")
        metric, direction = str(item.get("metric")), item.get("direction", "maximize")
        match = METRIC.match(metric)
        if not match:
            raise SpecError(f"{where}.metric must be greedy_accuracy, pass@K, maj@K, mean_reward or reward, "
                            f"got {metric!r}")
        if direction not in ("maximize", "minimize"):
            raise SpecError(f"{where}.direction must be maximize or minimize, got {direction!r}")
        _check_eval_supports(metric, match, base, where)
        out.append(Objective(metric, direction))
    if len({o.metric for o in out}) != len(out):
        raise SpecError("objectives: a metric is listed twice")
    return tuple(out)


def _check_eval_supports(metric: str, match: re.Match, base: dict, where: str) -> None:
    ev = base["eval"]
    if metric == "reward":
        return
    if int(ev["n_problems"]) <= 0:
        raise SpecError(f"{where}.metric {metric!r} needs a held-out eval: set base eval.n_problems > 0")
    if metric == "greedy_accuracy":
        return
    k = int(match.group(3)) if match.group(3) else 1
    if int(ev["n_samples"]) < k or (match.group(3) and k not in [int(x) for x in ev["ks"]]):
        raise SpecError(f"{where}.metric {metric!r} needs base eval.n_samples >= {k}"
                        + (f" and {k} in eval.ks" if match.group(3) else ""))


def _budget(raw: Any) -> tuple[str, int]:
    if not isinstance(raw, dict) or len(raw) != 1 or next(iter(raw)) not in ("steps", "completions"):
        raise SpecError(f"budget must be {{steps: N}} or {{completions: N}}, got {raw!r}")
    kind, amount = next(iter(raw.items()))
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
        raise SpecError(f"budget.{kind} must be a positive integer, got {amount!r}")
    return kind, amount


def _choice(raw: Any, key: str, names: tuple[str, ...]) -> tuple[str, dict]:
    if isinstance(raw, dict):
        kwargs = dict(raw)
        kind = kwargs.pop("type", None)
    else:
        kind, kwargs = raw, {}
    if kind not in names:
        raise SpecError(f"{key} must be one of {list(names)} (or {{type: NAME, ...options}}), got {kind!r}")
    if kind == "none" and kwargs:
        raise SpecError(f"{key}: 'none' takes no options, got {sorted(kwargs)}")
    return kind, kwargs


def _heartbeat(raw: Any) -> Heartbeat:
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise SpecError(f"heartbeat must be a mapping {{interval, grace_period, retry}}, got {raw!r}")
    extra = sorted(set(raw) - {"interval", "grace_period", "retry"})
    if extra:
        raise SpecError(f"unknown key heartbeat.{extra[0]} (allowed: interval, grace_period, retry)")
    hb = Heartbeat(**raw)
    for key in ("interval", "grace_period"):
        value = getattr(hb, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"heartbeat.{key} must be a positive integer (seconds), got {value!r}")
    if isinstance(hb.retry, bool) or not isinstance(hb.retry, int) or hb.retry < 0:
        raise SpecError(f"heartbeat.retry must be an integer >= 0, got {hb.retry!r}")
    return hb


def _int(raw: dict, key: str, default: int, minimum: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def check_name(value: Any) -> str:
    """A study name usable as a directory name; :class:`SpecError` otherwise."""
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", value):
        raise SpecError(f"name must start with a letter or digit and hold only letters, digits, "
                        f"'_', '-' or '.', got {value!r}")
    return value
