"""``zoopt train``: the ES loop (docs/design.md) on an LLM engine and a verifier objective.

Per step:  ask → ``engine.generate_population`` (every member: perturb, generate the same
prompts, score, restore) → tell → apply → append the update to the seed log (atomic) → one
JSONL metrics line.

A run directory (:class:`~zoopt.rundir.RunDir`) holds ``config.yaml``,
``seedlog.json`` (the run itself: base model + updates), ``metrics.jsonl``,
``eval_before.json``/``eval_after.json``, ``checksum.txt`` and, with ``export: true``,
``model/`` (an HF directory of the final weights).  ``--resume DIR`` replays the seed log onto
the base model and continues; member seeds and prompts of step t depend only on (seed, t), so
a resumed run ends with the same weights, bit for bit, as one that was never interrupted.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from pathlib import Path

import numpy as np

from ..checkpoint import SeedLog
from ..config import ConfigError
from ..hparams import TrainConfig, from_dict, to_dict
from ..metrics import mean_token_entropy
from ..objective import mean_reward
from ..scoring import Scorer
from ..progress import TrainProgress
from ..registry import ENGINES
from ..types import RunResult
from ..rundir import RunDir
from .loop import RunTrainer, run_loop
from .run import build_es, run_dir_for, sampling_from, step_indices

# keys that define the run: a resume with different values would not reproduce it
RUN_KEYS = ("model", "dtype", "objective", "objective_args", "seed", "prompts_per_step", "estimator",
            "shaping", "scaling", "population_size", "sigma", "lr", "noise", "population", "sampling")


class Trainer(RunTrainer):
    """One ES run: the engine, objective, ES shell and seed log (see
    :class:`~zoopt.workflows.loop.RunTrainer` for the arguments).  A ``run_dir`` that holds a
    seed log is resumed: its updates are replayed onto the engine."""

    label = "ES"

    def __init__(self, cfg: dict, run_dir: str | Path, engine=None, objective=None) -> None:
        super().__init__(cfg, run_dir, engine=engine, objective=objective)
        try:
            self.es = build_es(cfg)
            self.units_per_step = self.es.population_size
            self.train_data = self.objective.dataset("train")
            self.columns = [c for c in self.train_data.column_names if c != "prompt"]
            self.sampling = sampling_from(cfg)
            self.scorer = Scorer(self.objective, self.engine, timeout_s=float(cfg["reward_timeout_s"]),
                                 reward_errors=cfg.get("reward_errors", "raise"))
            self.seedlog = self._open_seedlog()
        except BaseException:
            self.close()
            raise

    # -- set-up ----------------------------------------------------------------------------
    def _open_seedlog(self) -> SeedLog:
        path = self.run_dir.seedlog_path
        if path.exists():
            log = SeedLog.load(path)
            raw = log.header.get("config", {})
            try:  # the normalisation load_config applies, so that '5e-3' saved by an older run equals 0.005
                saved = to_dict(from_dict(TrainConfig, raw))
            except ConfigError:
                saved = raw
            for key in RUN_KEYS:
                if key in raw and saved[key] != self.cfg.get(key):
                    raise ConfigError(f"--resume: config key {key!r} is {self.cfg.get(key)!r} but the run "
                                      f"was started with {saved[key]!r}")
            log.replay(self.engine)
            self.es.step = log.steps_done
            return log
        self.run_dir.write_config(self.cfg)
        return SeedLog.create(path, model=str(self.cfg["model"]), dtype=str(self.cfg["dtype"]),
                              noise=self.es.noise, es_state=self.es.state_dict(), config=self.cfg)

    @property
    def steps_done(self) -> int:
        return self.es.step

    # -- one step --------------------------------------------------------------------------
    def step(self, on_member=None) -> dict:
        """One ES step; the record is appended to ``metrics.jsonl`` (after the seed log: the log
        is the source of truth).  ``on_member(i, reward)`` as each member is scored."""
        es, engine, noise = self.es, self.engine, self.es.noise
        population = es.ask()
        rows = self.train_data.select(step_indices(len(self.train_data), es.seed, population.step,
                                                   int(self.cfg["prompts_per_step"])).tolist())
        prompts = list(rows["prompt"])
        n = self.sampling.n
        flat_prompts = [p for p in prompts for _ in range(n)]
        flat_cols = {c: [v for v in rows[c] for _ in range(n)] for c in self.columns}
        sampling = dataclasses.replace(self.sampling, logprobs=True,
                                       seed=step_sampling_seed(es.seed, population.step))
        rewards = []
        self.scorer.start()
        entropies: list[list[float]] = []
        tokens, score_s = 0, 0.0

        def score_member(i: int, completions) -> None:  # while member i's weights may be in place
            nonlocal tokens, score_s
            flat = [c for per_prompt in completions for c in per_prompt]
            tokens += sum(len(c.token_ids) for c in flat)
            entropies.extend(c.entropies or [] for c in flat)
            t0 = time.perf_counter()
            result = self.scorer.score(flat_prompts, [c.text for c in flat], flat_cols)
            score_s += time.perf_counter() - t0
            rewards.append(mean_reward(result.rewards))
            if on_member:
                on_member(i, rewards[-1])

        path = engine.population_path(noise)
        generate_before = engine.stats.seconds
        t0 = time.perf_counter()
        engine.generate_population(noise, population, prompts, sampling, on_member=score_member)
        population_s = time.perf_counter() - t0
        generate_s = engine.stats.seconds - generate_before
        failures = self.scorer.finish(f"step {population.step}")  # every reward failed: stop before the update
        with warnings.catch_warnings():  # a degenerate step is logged (record["degenerate"]), not warned twice
            warnings.simplefilter("ignore", RuntimeWarning)
            update = es.tell(rewards)
        t0 = time.perf_counter()
        engine.apply(noise, update)
        apply_s = time.perf_counter() - t0
        coef_norm = math.sqrt(sum(c * c for c in update.coefficients))
        record = {
            "step": population.step,
            "reward_mean": float(np.mean(rewards)), "reward_max": float(np.max(rewards)),
            "reward_min": float(np.min(rewards)), "reward_std": float(np.std(rewards)),
            "shaped_min": update.info.get("shaped_min"), "shaped_max": update.info.get("shaped_max"),
            "degenerate": update.info.get("degenerate"),
            "update_coef_norm": coef_norm,
            # ‖Σcᵢεᵢ‖ ≈ √(Σcᵢ²)·√D for independent unit-variance noise over D moved weights
            "update_l2_expected": coef_norm * math.sqrt(self.moved_params),
            # mean per-token entropy (nats) of the sampling distribution over all members' tokens
            "entropy": mean_token_entropy(entropies) if any(entropies) else None,
            "tokens": tokens, "tokens_per_s": tokens / max(generate_s, 1e-9),
            "reward_failed": failures["failed"], "reward_timed_out": failures["timed_out"],
            "reward_skipped": failures["skipped"], "population_path": path,
            # the population call = setting weights (perturb, restore) + generate + score
            "time_weights_s": round(population_s - generate_s - score_s, 4),
            "time_generate_s": round(generate_s, 4), "time_score_s": round(score_s, 4),
            "time_apply_s": round(apply_s, 4),
            **engine.population_info(),
        }
        master = engine.applied_checksum()
        self.seedlog.append(population.step, update,
                            stats={"reward_mean": record["reward_mean"], **({"master": master} if master else {})})
        self.run_dir.append_metrics(record)
        return record

    @functools.cached_property
    def moved_params(self) -> int:
        """How many weights the noise moves (D of ``update_l2_expected``)."""
        return self.engine.num_parameters(self.es.noise)

    def describe(self, record: dict) -> str:
        failed = record["reward_failed"] + record["reward_timed_out"]
        return (f"step {record['step']:>3}  reward mean {record['reward_mean']:.4f} max {record['reward_max']:.4f}"
                f"  |Δ|≈{record['update_l2_expected']:.3g}  gen {record['time_generate_s']:.1f}s"
                f"  noise {record['time_weights_s'] + record['time_apply_s']:.1f}s"
                + (f"  reward failed on {failed} completions" if failed else "") + _replicas(record))


def _replicas(record: dict) -> str:
    """The Ray engine's part of a step's line: replicas ready, and what they went through."""
    if "ray_replicas_ready" not in record:
        return ""
    events = ("requeued", "restarts", "replays", "timeouts", "disagreements", "lost")
    seen = ", ".join(f"{k} {record[f'ray_{k}']}" for k in events if record.get(f"ray_{k}"))
    return f"  replicas ready {record['ray_replicas_ready']}" + (f" ({seen})" if seen else "")


def step_sampling_seed(seed: int, step: int) -> int:
    """The sampling seed of every member of ``step``: common random numbers across members."""
    return int(np.random.SeedSequence([int(seed), int(step), 0xC0DE]).generate_state(1)[0])


def train(cfg: dict, resume: str | Path | None = None, console=None, show_progress: bool = True) -> RunResult:
    """Run (or resume) the ES training described by ``cfg`` and return its result."""
    run_dir = RunDir(resume if resume else run_dir_for(cfg))
    if resume and not run_dir.seedlog_path.exists():
        raise ConfigError(f"--resume: no seedlog.json in {run_dir.path}")
    if not resume:
        run_dir.refuse_if_used(f"; use --resume {run_dir.path}")
    ui = TrainProgress(console=console, enabled=show_progress)
    ui.note(f"loading {cfg['model']} ({cfg['dtype']}, {cfg['engine']} engine) and objective {cfg['objective']}")
    return run_loop(Trainer(cfg, run_dir.path), ui)


def export_from_seedlog(seedlog_path: str | Path, out: str | Path, upto: int | None = None,
                        device: str = "cpu") -> tuple[Path, str]:
    """Rebuild a run's weights from its seed log alone and write them as an HF directory."""
    log = SeedLog.load(seedlog_path)
    engine = ENGINES.get("hf").from_pretrained(log.header["model"], dtype=log.header["dtype"], device=device)
    try:
        log.replay(engine, upto=upto)
        return engine.export_pretrained(out), engine.checksum()
    finally:
        engine.close()
