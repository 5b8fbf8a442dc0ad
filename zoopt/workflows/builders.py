"""The build-and-run helpers every workflow shares: a config becomes an ES shell, an engine, an
objective, a step's rows and sampling, an evaluation and a run directory.

Every workflow (``train``, ``grpo``, schedules, ``compare``, ``analyze``, sweeps) builds its
parts here, so one config means the same engine, data and evaluation everywhere.  This module
sits below all of them and imports none.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from ..config import ConfigError
from ..engines.base import Sampling
from ..es import ES
from ..extras import missing_dependency
from ..hparams import TrainConfig, from_dict, to_dict
from ..noise import noise_from_dict
from ..objective import load_objective
from ..plugins import is_file_spec
from ..registry import ENGINES, ESTIMATORS, build
from ..updates import rule_from_config
from ..warmups import ensure_warmup
from .evaluate import EvalResult, evaluate


def build_es(cfg: dict) -> ES:
    """The ES shell of a ``train`` config dict (:class:`~zoopt.hparams.TrainConfig` keys, every value checked)."""
    hp = from_dict(TrainConfig, cfg)
    estimator = build(ESTIMATORS, hp.estimator, shaping=hp.shaping, scaling=hp.scaling)
    return ES(estimator, noise=noise_from_dict(to_dict(hp.noise)), lr=hp.lr, sigma=hp.sigma,
              population_size=hp.population_size, seed=hp.seed, rule=rule_from_config(to_dict(hp.update)))


def build_engine(cfg: dict, objective=None, engines_on_host: int = 1):
    """The configured engine; it takes the objective's system prompt (``Objective.system_prompt``).

    ``engines_on_host``: how many engines share this host's ``noise_cache_gb`` budget (see
    :func:`noise_cache_bytes`).  An engine whose optional dependency is not installed (``vllm``)
    raises :class:`~zoopt.extras.MissingDependency` naming the extra.
    """
    engine_cls = ENGINES.get(cfg["engine"])
    ensure_warmup(str(cfg["model"]))  # a named warm-up model is built into the cache on first use
    options = dict(cfg.get("engine_args") or {})
    cache = noise_cache_bytes(cfg.get("noise_cache_gb", 0), str(cfg["device"]), engines_on_host)
    if cache:
        options["noise_cache_bytes"] = cache
    if "population" in cfg:  # ES configs: how the engine runs a population (GRPO has none)
        options["population"] = cfg["population"]
    options.update(space_options(cfg))
    try:
        engine = engine_cls.from_pretrained(cfg["model"], dtype=cfg["dtype"], device=cfg["device"],
                                            batch_size=int(cfg["batch_size"]), **options)
    except ModuleNotFoundError as exc:  # vllm, ray, ...: one line naming the extra to install
        missing = missing_dependency(exc)
        if missing is None:
            raise
        raise missing from exc
    except TypeError as exc:  # an engine_args key this engine does not take
        bad = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        if bad is None:
            raise
        raise ConfigError(f"engine_args.{bad.group(1)}: not an option of the {cfg['engine']!r} engine") from None
    if objective is not None and objective.system_prompt is not None:  # "" too: an empty system turn
        engine.system_prompt = objective.system_prompt
    engine.model_name, engine.model_dtype = str(cfg["model"]), str(cfg["dtype"])
    return engine


def space_options(cfg: dict) -> dict:
    """The engine options of a config's parameter space: ``adapter`` (an
    :class:`~zoopt.adapters.AdapterSpace`) and ``quantization`` for ``space: adapter``; none for
    ``full`` (the default, and every config written before spaces existed)."""
    if cfg.get("space", "full") != "adapter":
        return {}
    from ..adapters import adapter_space_from_dict

    try:
        adapter = adapter_space_from_dict(cfg.get("adapter"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return {"adapter": adapter, "quantization": cfg.get("quantization", "none")}


def noise_cache_bytes(setting, device: str, engines_on_host: int = 1) -> int:
    """Bytes of member noise one engine may keep for the update (``noise_cache_gb``).

    The setting is the budget of the **host**, shared by the ``engines_on_host`` engines that
    run on it (each gets an equal share).  ``auto``: on the CPU, 40 % of the memory available
    now (MemAvailable); elsewhere 0, since device memory is better spent on rollouts.  A number
    is taken as GiB.
    """
    if isinstance(engines_on_host, bool) or not isinstance(engines_on_host, int) or engines_on_host < 1:
        raise ValueError(f"engines_on_host must be an integer ≥ 1, got {engines_on_host!r}")
    if setting == "auto":
        if not device.startswith("cpu"):
            return 0
        try:
            with open("/proc/meminfo") as fh:
                available_kb = next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable:"))
        except (OSError, StopIteration, ValueError):
            return 0
        return int(0.4 * available_kb * 1024) // engines_on_host
    try:
        gib = float(setting or 0)
    except (TypeError, ValueError):
        raise ConfigError(f"noise_cache_gb must be 'auto' or a number of GiB, got {setting!r}") from None
    if gib < 0:
        raise ConfigError(f"noise_cache_gb must be ≥ 0, got {setting!r}")
    return int(gib * 2**30) // engines_on_host


def build_objective(cfg: dict):
    """``cfg["objective"]`` (a registered name or ``path/file.py:attr``) with ``objective_args``."""
    return load_objective(cfg["objective"], **(cfg.get("objective_args") or {}))


def sampling_from(cfg: dict, **extra: Any) -> Sampling:
    s = dict(cfg["sampling"])
    return Sampling(temperature=float(s["temperature"]), top_p=float(s["top_p"]),
                    max_new_tokens=int(s["max_new_tokens"]), n=int(s["n"]), **extra)


def run_dir_for(cfg: dict, prefix: str = "") -> Path:
    """``cfg["run_dir"]``, else ``runs/<prefix><objective>-<time>``."""
    if cfg.get("run_dir"):
        return Path(cfg["run_dir"])
    return Path("runs") / f"{prefix}{objective_label(cfg['objective'])}-{time.strftime('%Y%m%d-%H%M%S')}"


def objective_label(spec: str) -> str:
    """A file-name-safe label of an objective spec: ``gsm8k``; ``/abs/dir/rewards.py:fn`` → ``rewards_fn``."""
    text = str(spec)
    if ":" in text:
        where, attr = text.rsplit(":", 1)
        text = f"{Path(where).stem if is_file_spec(where) else where}_{attr}"
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in text).strip("._") or "objective"


def eval_kwargs(cfg: dict) -> dict:
    """:func:`zoopt.workflows.evaluate.evaluate` keyword arguments from a run config's ``eval`` block,
    ``batch_size``, ``seed``, ``reward_timeout_s`` and ``reward_errors`` (``eval.n_samples = 0`` ⇒ greedy only)."""
    ev = cfg["eval"]
    n_samples = int(ev["n_samples"]) or None
    return dict(split="test", n_problems=int(ev["n_problems"]),
                ks=tuple(int(k) for k in ev["ks"]) if n_samples else (1,), n_samples=n_samples,
                temperature=float(ev["temperature"]), max_new_tokens=int(ev["max_new_tokens"]),
                greedy=True, batch_size=int(cfg["batch_size"]), seed=int(cfg["seed"]),
                timeout_s=float(cfg["reward_timeout_s"]), reward_errors=cfg.get("reward_errors", "raise"))


def evaluate_config(engine, objective, cfg: dict, progress=None) -> EvalResult:
    """The held-out evaluation a run config asks for (:func:`eval_kwargs`)."""
    return evaluate(engine, objective, progress=progress, **eval_kwargs(cfg))


def evaluate_run(engine, objective, cfg: dict, progress=None) -> dict:
    """The summary of :func:`evaluate_config`: what ``eval_*.json`` of a run holds."""
    return evaluate_config(engine, objective, cfg, progress).summary
