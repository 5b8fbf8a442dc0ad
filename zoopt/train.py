"""``zoopt train``: the ES loop of DESIGN.md on an LLM engine and a verifier objective.

Per step:  ask → for each member: perturb, generate (same prompts for all), score, restore
→ tell → apply → append the update to the seed log (atomic) → one JSONL metrics line.

A run directory holds ``config.yaml``, ``seedlog.json`` (the run itself: base model +
updates), ``metrics.jsonl``, ``eval_before.json``/``eval_after.json`` and, with
``export: true``, ``model/`` (an HF directory of the final weights).  ``--resume DIR`` replays
the seed log onto the base model and continues; member seeds and prompts of step t depend
only on (seed, t), so a resumed run ends with the same weights, bit for bit, as one that was
never interrupted.
"""

from __future__ import annotations

import json
import math
import re
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from .checkpoint import SeedLog
from .config import ConfigError, load_config
from .engines.base import Sampling
from .es import ES
from .noise import noise_from_dict
from .metrics import mean_token_entropy
from .objective import mean_reward, score
from .registry import ENGINES, ESTIMATORS, RegistryError, build
from .types import RunResult

# keys that define the run: a resume with different values would not reproduce it
RUN_KEYS = ("model", "dtype", "objective", "objective_args", "seed", "prompts_per_step", "estimator",
            "shaping", "scaling", "population_size", "sigma", "lr", "noise", "sampling")


TrainResult = RunResult  # what ``train`` returns (the same fields as GRPO's)


def build_es(cfg: dict) -> ES:
    estimator = build(ESTIMATORS, cfg["estimator"], shaping=cfg["shaping"], scaling=cfg["scaling"])
    return ES(estimator, noise=noise_from_dict(cfg["noise"]), lr=float(cfg["lr"]), sigma=float(cfg["sigma"]),
              population_size=int(cfg["population_size"]), seed=int(cfg["seed"]))


def build_engine(cfg: dict, objective=None):
    """The configured engine; it takes the objective's system prompt, if it has one."""
    engine_cls = ENGINES.get(cfg["engine"])
    options = dict(cfg.get("engine_args") or {})
    cache = noise_cache_bytes(cfg.get("noise_cache_gb", 0), str(cfg["device"]))
    if cache:
        options["noise_cache_bytes"] = cache
    try:
        engine = engine_cls.from_pretrained(cfg["model"], dtype=cfg["dtype"], device=cfg["device"],
                                            batch_size=int(cfg["batch_size"]), **options)
    except TypeError as exc:  # an engine_args key this engine does not take
        bad = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        if bad is None:
            raise
        raise ConfigError(f"engine_args.{bad.group(1)}: not an option of the {cfg['engine']!r} engine") from None
    if getattr(objective, "system_prompt", None):
        engine.system_prompt = objective.system_prompt
    return engine


def noise_cache_bytes(setting, device: str) -> int:
    """Bytes of member noise the engine may keep for the update (``noise_cache_gb``).

    ``auto``: on the CPU, 40 % of the memory available now (MemAvailable); elsewhere 0, since
    device memory is better spent on rollouts.  A number is taken as GiB.
    """
    if setting == "auto":
        if not device.startswith("cpu"):
            return 0
        try:
            with open("/proc/meminfo") as fh:
                available_kb = next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable:"))
        except (OSError, StopIteration, ValueError):
            return 0
        return int(0.4 * available_kb * 1024)
    try:
        gib = float(setting or 0)
    except (TypeError, ValueError):
        raise ConfigError(f"noise_cache_gb must be 'auto' or a number of GiB, got {setting!r}") from None
    if gib < 0:
        raise ConfigError(f"noise_cache_gb must be ≥ 0, got {setting!r}")
    return int(gib * 2**30)


def build_objective(cfg: dict):
    import objectives  # plugin package, reached only here and through the registry

    return objectives.load(cfg["objective"], **(cfg.get("objective_args") or {}))


def step_indices(n_rows: int, seed: int, step: int, k: int) -> np.ndarray:
    """The training rows of ``step``: ``k`` distinct rows drawn from (seed, step) alone."""
    rng = np.random.default_rng([int(seed), int(step), 0x5EED])
    return rng.choice(n_rows, size=min(k, n_rows), replace=False)


def sampling_from(cfg: dict, **extra: Any) -> Sampling:
    s = dict(cfg["sampling"])
    return Sampling(temperature=float(s["temperature"]), top_p=float(s["top_p"]),
                    max_new_tokens=int(s["max_new_tokens"]), n=int(s["n"]), **extra)


def run_dir_for(cfg: dict) -> Path:
    if cfg.get("run_dir"):
        return Path(cfg["run_dir"])
    name = str(cfg["objective"]).replace("/", "_").replace(":", "_").replace(".py", "")
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def evaluate_run(engine, objective, cfg: dict, progress=None) -> dict:
    from .evaluate import evaluate

    ev = cfg["eval"]
    n_samples = int(ev["n_samples"]) or None
    result = evaluate(engine, objective, split="test", n_problems=int(ev["n_problems"]),
                      ks=tuple(int(k) for k in ev["ks"]) if n_samples else (1,), n_samples=n_samples,
                      temperature=float(ev["temperature"]), max_new_tokens=int(ev["max_new_tokens"]),
                      greedy=True, batch_size=int(cfg["batch_size"]), seed=int(cfg["seed"]),
                      timeout_s=float(cfg["reward_timeout_s"]), progress=progress)
    return result.summary


class Trainer:
    """Holds the engine, objective, ES and logs of one run; :meth:`run` trains to ``steps``."""

    def __init__(self, cfg: dict, run_dir: Path, engine=None, objective=None, console=None) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.console = console
        self.objective = objective if objective is not None else build_objective(cfg)
        self.engine = engine if engine is not None else build_engine(cfg, self.objective)
        self.es = build_es(cfg)
        self.train_data = self.objective.dataset("train")
        self.columns = [c for c in self.train_data.column_names if c != "prompt"]
        self.sampling = sampling_from(cfg)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.seedlog = self._open_seedlog()

    # -- set-up ----------------------------------------------------------------------------
    def _open_seedlog(self) -> SeedLog:
        path = self.run_dir / "seedlog.json"
        if path.exists():
            log = SeedLog.load(path)
            saved = log.header.get("config", {})
            for key in RUN_KEYS:
                if key in saved and saved[key] != self.cfg.get(key):
                    raise ConfigError(f"--resume: config key {key!r} is {self.cfg.get(key)!r} but the run "
                                      f"was started with {saved[key]!r}")
            log.replay(self.engine)
            self.es.step = log.steps_done
            return log
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(yaml.safe_dump(self.cfg, sort_keys=False))
        return SeedLog.create(path, model=str(self.cfg["model"]), dtype=str(self.cfg["dtype"]),
                              noise=self.es.noise, es_state=self.es.state_dict(), config=self.cfg)

    # -- one step --------------------------------------------------------------------------
    def step(self, on_member=None) -> dict:
        es, engine, noise = self.es, self.engine, self.es.noise
        population = es.ask()
        rows = self.train_data.select(step_indices(len(self.train_data), es.seed, population.step,
                                                   int(self.cfg["prompts_per_step"])).tolist())
        prompts = list(rows["prompt"])
        n = self.sampling.n
        flat_prompts = [p for p in prompts for _ in range(n)]
        flat_cols = {c: [v for v in rows[c] for _ in range(n)] for c in self.columns}
        timing = dict.fromkeys(("perturb", "generate", "score", "restore", "apply"), 0.0)
        rewards, failures, tokens = [], {"failed": 0, "timed_out": 0, "skipped": 0}, 0
        entropies: list[list[float]] = []
        for i, member in enumerate(population.members):
            t0 = time.perf_counter()
            engine.perturb(noise, member.seed, population.scale(i))
            t1 = time.perf_counter()
            sampling = Sampling(**{**self.sampling.__dict__, "logprobs": True,
                                   "seed": _member_sampling_seed(es.seed, population.step, i)})
            completions = engine.generate(prompts, sampling)
            t2 = time.perf_counter()
            texts = [c.text for per_prompt in completions for c in per_prompt]
            tokens += sum(len(c.token_ids) for per_prompt in completions for c in per_prompt)
            entropies.extend(c.entropies or [] for per_prompt in completions for c in per_prompt)
            result = score(self.objective, flat_prompts, texts, flat_cols, timeout_s=float(self.cfg["reward_timeout_s"]))
            t3 = time.perf_counter()
            engine.restore()
            t4 = time.perf_counter()
            rewards.append(mean_reward(result.rewards))
            for key in failures:
                failures[key] += getattr(result, key)
            for key, dt in zip(("perturb", "generate", "score", "restore"), (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                timing[key] += dt
            if on_member:
                on_member(i, rewards[-1])
        with warnings.catch_warnings():  # a degenerate step is logged (record["degenerate"]), not warned twice
            warnings.simplefilter("ignore", RuntimeWarning)
            update = es.tell(rewards)
        t0 = time.perf_counter()
        engine.apply(noise, update)
        timing["apply"] = time.perf_counter() - t0
        coef_norm = math.sqrt(sum(c * c for c in update.coefficients))
        record = {
            "step": population.step,
            "reward_mean": float(np.mean(rewards)), "reward_max": float(np.max(rewards)),
            "reward_min": float(np.min(rewards)), "reward_std": float(np.std(rewards)),
            "shaped_min": update.info.get("shaped_min"), "shaped_max": update.info.get("shaped_max"),
            "degenerate": update.info.get("degenerate"),
            "update_coef_norm": coef_norm,
            # ‖Σcᵢεᵢ‖ ≈ √(Σcᵢ²)·√D for independent unit-variance noise over D moved weights
            "update_l2_expected": coef_norm * math.sqrt(self._moved_params()),
            # mean per-token entropy (nats) of the sampling distribution over all members' tokens
            "entropy": mean_token_entropy(entropies) if any(entropies) else None,
            "tokens": tokens, "tokens_per_s": tokens / max(timing["generate"], 1e-9),
            "reward_failed": failures["failed"], "reward_timed_out": failures["timed_out"],
            "reward_skipped": failures["skipped"],
            **{f"time_{k}_s": round(v, 4) for k, v in timing.items()},
        }
        self.seedlog.append(population.step, update, stats={"reward_mean": record["reward_mean"]})
        return record

    def log(self, record: dict) -> None:
        """Append one line to ``metrics.jsonl`` (after the seed log: the log is the source of truth)."""
        with open(self.metrics_path, "a") as fh:
            fh.write(json.dumps(record) + "\n")

    def _moved_params(self) -> int:
        if not hasattr(self, "_moved"):
            self._moved = self.engine.num_parameters(self.es.noise)
        return self._moved

    def evaluate(self, tag: str, progress=None) -> dict:
        path = self.run_dir / f"eval_{tag}.json"
        summary = evaluate_run(self.engine, self.objective, self.cfg, progress=progress)
        summary["checksum"] = self.engine.checksum()
        path.write_text(json.dumps(summary, indent=2))
        return summary


def _member_sampling_seed(seed: int, step: int, member: int) -> int:
    # common random numbers across members: the sampling seed depends on the step only
    del member
    return int(np.random.SeedSequence([int(seed), int(step), 0xC0DE]).generate_state(1)[0])


def train(cfg: dict, resume: str | Path | None = None, console=None, show_progress: bool = True) -> TrainResult:
    """Run (or resume) the ES training described by ``cfg`` and return its result."""
    from .progress import TrainProgress

    run_dir = Path(resume) if resume else run_dir_for(cfg)
    if resume and not (run_dir / "seedlog.json").exists():
        raise ConfigError(f"--resume: no seedlog.json in {run_dir}")
    if not resume and (run_dir / "seedlog.json").exists():
        raise ConfigError(f"run_dir {str(run_dir)!r} already holds a run; use --resume {run_dir}")
    ui = TrainProgress(console=console, enabled=show_progress)
    ui.note(f"loading {cfg['model']} ({cfg['dtype']}, {cfg['engine']} engine) and objective {cfg['objective']}")
    trainer = Trainer(cfg, run_dir)
    ui.note(f"run directory: {run_dir}  ({trainer.seedlog.steps_done} steps already in the seed log)")
    eval_on = int(cfg["eval"]["n_problems"]) > 0
    before_path = run_dir / "eval_before.json"
    before = json.loads(before_path.read_text()) if before_path.exists() else None
    if eval_on and before is None:
        with ui.eval_progress("held-out eval (before)") as cb:
            before = trainer.evaluate("before", progress=cb)
    steps = int(cfg["steps"])
    history = []
    every = int(cfg["eval"].get("every") or 0)
    with ui.train_progress(steps, trainer.es.step, int(cfg["population_size"])) as bar:
        while trainer.es.step < steps:
            record = trainer.step(on_member=bar.member_done)
            if eval_on and every and (record["step"] + 1) % every == 0 and record["step"] + 1 < steps:
                record["eval_accuracy"] = evaluate_run(trainer.engine, trainer.objective, cfg).get("greedy_accuracy")
            trainer.log(record)
            history.append(record)
            bar.step_done(record)
    after = None
    if eval_on:
        with ui.eval_progress("held-out eval (after)") as cb:
            after = trainer.evaluate("after", progress=cb)
        ui.compare(before, after)
    if cfg.get("export"):
        path = trainer.engine.export_pretrained(run_dir / "model")
        ui.note(f"exported the final weights to {path}")
    if history:
        from .analyze import plot_run

        ui.note(f"reward and entropy curves: {plot_run(run_dir)}")
    checksum = trainer.engine.checksum()
    (run_dir / "checksum.txt").write_text(checksum + "\n")
    ui.note(f"done: {trainer.es.step} steps, weights checksum {checksum}")
    return TrainResult(run_dir, checksum, trainer.es.step, before, after, history)


def export_from_seedlog(seedlog_path: str | Path, out: str | Path, upto: int | None = None,
                        device: str = "cpu") -> tuple[Path, str]:
    """Rebuild a run's weights from its seed log alone and write them as an HF directory."""
    log = SeedLog.load(seedlog_path)
    engine_cls = ENGINES.get("hf")
    engine = engine_cls.from_pretrained(log.header["model"], dtype=log.header["dtype"], device=device)
    log.replay(engine, upto=upto)
    path = engine.export_pretrained(out)
    return path, engine.checksum()


__all__ = ["train", "Trainer", "TrainResult", "build_es", "export_from_seedlog", "load_config", "RegistryError"]
