"""``zoopt train``: the ES loop (docs/design.md) on an LLM engine and a verifier objective.

Per step:  ask → ``engine.generate_population`` (every member: perturb, generate the same
prompts, score, restore) → tell → apply → append the update to the seed log (atomic) → one
JSONL metrics line.

A run directory (:class:`~zoopt.runs.rundir.RunDir`) holds ``config.yaml``,
``seedlog.json`` (the run itself: base model + updates), ``metrics.jsonl``,
``eval_before.json``/``eval_after.json``, ``checksum.txt`` and, with ``export: true``,
``model/`` (an HF directory of the final weights).  ``--resume DIR`` replays the seed log onto
the base model and continues; member seeds and prompts of step t depend only on (seed, t), so
a resumed run ends with the same weights, bit for bit, as one that was never interrupted.

:class:`ESRun` is that run over objects (an engine, an objective, an ES shell with any
estimator); ``zoopt.fit`` (:mod:`zoopt.workflows.fit`) drives it from Python, and
:class:`Trainer` is ``zoopt train``'s thin layer that builds the objects from a config — one
loop, :func:`~zoopt.workflows.loop.run_loop`, for both.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from ..adapters.record import check_same_space, space_of_header
from ..callbacks import Callback
from ..config import ConfigError
from ..engines.base import Sampling
from ..hparams import TrainConfig, from_dict, to_dict
from ..metrics import mean_token_entropy
from ..objective import ZooptWarning, step_indices
from ..registry import ENGINES
from ..reporting.progress import TrainProgress
from ..reporting.trackers import ReportTo
from ..rewards.guard import mean_reward
from ..rewards.scoring import Scorer
from ..runs.rundir import RunDir
from ..runs.seedlog import SeedLog
from ..types import RunResult
from .builders import build_engine, build_es, build_objective, run_dir_for, sampling_from
from .loop import RunTrainer, run_loop

# keys that define the run: a resume with different values would not reproduce it
RUN_KEYS = ("model", "dtype", "objective", "objective_args", "seed", "prompts_per_step", "estimator",
            "shaping", "scaling", "population_size", "sigma", "lr", "update", "noise", "population", "sampling")


class ESRun(RunTrainer):
    """One ES run over objects — the trainer both ``zoopt.fit`` and ``zoopt train`` drive.

    ``engine`` and ``objective`` as in :class:`~zoopt.workflows.loop.RunTrainer`; ``es`` an
    :class:`~zoopt.es.ES` shell, whose estimator need only satisfy the estimator protocol
    (``plan``, ``update``: registered or not); ``sampling`` the rollouts' :class:`Sampling`.
    ``cfg`` describes the run: the keys :func:`~zoopt.workflows.loop.run_loop` reads, and
    ``prompts_per_step``, ``reward_timeout_s``, ``reward_errors``; it is written to
    ``config.yaml`` and the seed log's header.

    A new run creates ``seedlog.json`` replaying onto ``base = (model, dtype)`` and records the
    weights' checksum it starts from (``base_checksum``).  ``objects``: for a run started from
    Python, what each part given as an object is (``{"estimator": "pkg.mod:Class (not
    registered)", ...}``); it goes to the seed log, and such a run is resumed from Python only.
    A ``run_dir`` that holds a seed log is resumed: the run keys of ``cfg`` (:data:`RUN_KEYS`,
    those it has), the objects and the engine's weights (against ``base_checksum``) must match
    the log, whose updates are then replayed onto the engine; the run continues with the log's
    noise stream (a ``cfg`` noise that names another stream is refused).  ``owns_engine``:
    close the engine in :meth:`close`.
    """

    label = "ES"

    def __init__(self, cfg: dict, run_dir: str | Path, engine, objective, es, sampling: Sampling, *,
                 base: tuple[str, str] | None = None, objects: dict | None = None, owns_engine: bool = False) -> None:
        super().__init__(cfg, run_dir, engine=engine, objective=objective)
        self._owns_engine = owns_engine
        try:
            self.es = es
            self.units_per_step = self.es.population_size
            self.train_data = self.objective.dataset("train")
            self.columns = [c for c in self.train_data.column_names if c != "prompt"]
            self.sampling = sampling
            self.scorer = Scorer(self.objective, self.engine, timeout_s=float(cfg["reward_timeout_s"]),
                                 reward_errors=cfg.get("reward_errors", "raise"))
            self.objects = objects
            self.seedlog = self._open_seedlog(base)
        except BaseException:
            self.close()
            raise

    # -- set-up ----------------------------------------------------------------------------
    def _open_seedlog(self, base: tuple[str, str] | None) -> SeedLog:
        path = self.run_dir.seedlog_path
        if path.exists():
            log = SeedLog.load(path)
            self._check_resume(log)
            # the log's stream continues (a config that names no stream, or an old log's numpy one)
            self.es.noise = dataclasses.replace(self.es.noise, stream=log.noise.stream)
            log.replay(self.engine)
            self.es.step = log.steps_done
            return log
        if base is None:
            raise ValueError(f"a new run needs the base model its seed log replays onto (run_dir {str(self.run_dir.path)!r})")
        self.run_dir.write_config(self.cfg)
        extra = {"base_checksum": self.engine.checksum(), **self.engine.space_record(),
                 **({"objects": self.objects} if self.objects else {})}
        return SeedLog.create(path, model=str(base[0]), dtype=str(base[1]), noise=self.es.noise,
                              es_state=self.es.state_dict(), config=self.cfg, rule=self.es.rule, **extra)

    def _check_resume(self, log: SeedLog) -> None:
        """One-line :class:`ConfigError` when ``log`` is not the run these parts continue."""
        started = log.header.get("objects")
        if started and self.objects is None:
            raise ConfigError(not_resumable(self.run_dir.path, started))
        for part, what in (started or {}).items():
            if self.objects[part] != what:
                raise ConfigError(f"resume: the run's {part} was {what}, got {self.objects[part]}")
        raw = log.header.get("config", {})
        try:  # the normalisation load_config applies, so that '5e-3' saved by an older run equals 0.005
            saved = to_dict(from_dict(TrainConfig, raw))
        except ConfigError:
            saved = raw
        for key in RUN_KEYS:
            if key in raw and key in self.cfg and not same_run_value(key, saved[key], self.cfg[key]):
                raise ConfigError(f"--resume: config key {key!r} is {self.cfg[key]!r} but the run "
                                  f"was started with {saved[key]!r}")
        named = (self.cfg.get("noise") or {}).get("stream")
        if named is not None and named != log.noise.stream:
            raise ConfigError(f"--resume: config key 'noise.stream' is {named!r} but the run's seed log was written by "
                              f"the {log.noise.stream!r} stream; resume with that stream (in a config: leave noise.stream unset)")
        if log.rule != self.es.rule:  # the header's rule (none: sgd) is the one its records replay with
            raise ConfigError(f"resume: the run's update rule was {log.rule.to_dict()}, got {self.es.rule.to_dict()}")
        check_same_space(log.header, self.engine)
        base_checksum = log.header.get("base_checksum")
        if base_checksum is not None and self.engine.checksum() != base_checksum:
            raise ConfigError(f"resume: the engine's weights (checksum {self.engine.checksum()}) are not the ones the "
                              f"run started from ({base_checksum}); load its base model {log.header['model']!r} afresh")

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
        coef_norm = math.sqrt(sum(c * c for c in update.coefficients))  # of α·ĝ (sgd), else of ĝ
        record = {
            "step": population.step,
            "reward_mean": float(np.mean(rewards)), "reward_max": float(np.max(rewards)),
            "reward_min": float(np.min(rewards)), "reward_std": float(np.std(rewards)),
            "shaped_min": update.info.get("shaped_min"), "shaped_max": update.info.get("shaped_max"),
            "degenerate": update.info.get("degenerate"),
            "update_coef_norm": coef_norm, "update_rule": es.rule.label,
            # ‖Σcᵢεᵢ‖ ≈ √(Σcᵢ²)·√D for independent unit-variance noise over D moved weights: the step
            # under sgd; under another rule ‖ĝ‖ (the step is the rule's, made in the engine)
            "update_l2_expected": coef_norm * math.sqrt(self.moved_params),
            # mean per-token entropy (nats) of the sampling distribution over all members' tokens
            "entropy": mean_token_entropy(entropies) if any(entropies) else None,
            "tokens": tokens, "tokens_per_s": tokens / max(generate_s, 1e-9),
            "reward_failed": failures["failed"], "reward_timed_out": failures["timed_out"],
            "reward_skipped": failures["skipped"], "population_path": path,
            # each reward function's mean and std over every member's completions (TRL's rewards/NAME/mean, /std)
            **self.scorer.reward_metrics(),
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
                f"  {'|Δ|' if record.get('update_rule', 'sgd') == 'sgd' else '|ĝ|'}≈{record['update_l2_expected']:.3g}"
                f"  gen {record['time_generate_s']:.1f}s"
                f"  noise {record['time_weights_s'] + record['time_apply_s']:.1f}s"
                + (f"  reward failed on {failed} completions" if failed else "") + _replicas(record))


def _replicas(record: dict) -> str:
    """The Ray engine's part of a step's line: replicas ready, and what they went through."""
    if "ray_replicas_ready" not in record:
        return ""
    events = ("requeued", "restarts", "replays", "timeouts", "disagreements", "lost")
    seen = ", ".join(f"{k} {record[f'ray_{k}']}" for k in events if record.get(f"ray_{k}"))
    return f"  replicas ready {record['ray_replicas_ready']}" + (f" ({seen})" if seen else "")


class Trainer(ESRun):
    """``zoopt train``'s trainer: the ES run a ``train`` config describes — its engine, objective,
    ES shell and sampling built from ``cfg`` (see :class:`~zoopt.workflows.loop.RunTrainer` for
    ``engine`` and ``objective``), then :class:`ESRun`.  A ``run_dir`` that holds a seed log is
    resumed."""

    def __init__(self, cfg: dict, run_dir: str | Path, engine=None, objective=None) -> None:
        objective = objective if objective is not None else build_objective(cfg)
        es = build_es(cfg)
        owns = engine is None
        engine = engine if engine is not None else build_engine(cfg, objective)
        super().__init__(cfg, run_dir, engine, objective, es, sampling_from(cfg),
                         base=(str(cfg["model"]), str(cfg["dtype"])), owns_engine=owns)


def same_run_value(key: str, saved, now) -> bool:
    """Whether a resume's ``now`` equals the run's ``saved`` value of ``key``.  The noise's
    ``stream`` is compared only when both name one: a config without it continues with the
    seed log's stream (a run started before streams were recorded names none)."""
    if key == "noise" and isinstance(saved, dict) and isinstance(now, dict) and not ("stream" in saved and "stream" in now):
        saved, now = ({k: v for k, v in d.items() if k != "stream"} for d in (saved, now))
    return saved == now


def not_resumable(run_dir: str | Path, objects: dict) -> str:
    """The one line that refuses ``zoopt train --resume`` of a run ``zoopt.fit`` started with ``objects``."""
    parts = "; ".join(f"{part} {what}" for part, what in objects.items())
    return (f"--resume: {str(run_dir)!r} was started from Python (zoopt.fit) with objects a config cannot rebuild "
            f"({parts}); resume it from Python: zoopt.fit(engine, objective, es, ..., run_dir={str(run_dir)!r}, "
            f"resume=True) with the same objects")


def check_resumable(run_dir: str | Path) -> None:
    """Raise :class:`ConfigError` (one line) unless ``run_dir`` holds a seed log ``zoopt train
    --resume`` can continue: there is one, and it was not started from Python with objects."""
    path = RunDir(run_dir).seedlog_path
    if not path.exists():
        raise ConfigError(f"--resume: no seedlog.json in {RunDir(run_dir).path}")
    objects = SeedLog.load(path).header.get("objects")
    if objects:
        raise ConfigError(not_resumable(run_dir, objects))


def step_sampling_seed(seed: int, step: int) -> int:
    """The sampling seed of every member of ``step``: common random numbers across members."""
    return int(np.random.SeedSequence([int(seed), int(step), 0xC0DE]).generate_state(1)[0])


def train(cfg: dict, resume: str | Path | None = None, console=None, show_progress: bool = True,
          callbacks: Sequence[Callback] = ()) -> RunResult:
    """Run (or resume) the ES training described by ``cfg`` and return its result; ``cfg["report_to"]``'s
    trackers and ``callbacks`` hear of it (:mod:`zoopt.callbacks`)."""
    run_dir = RunDir(resume if resume else run_dir_for(cfg))
    if resume:
        check_resumable(run_dir.path)
    else:
        run_dir.refuse_if_used(f"; use --resume {run_dir.path}")
    report = ReportTo(cfg["report_to"], int(cfg["log_every"]))  # a missing tracker fails before the model loads
    ui = TrainProgress(console=console, enabled=show_progress)
    ui.note(f"loading {cfg['model']} ({cfg['dtype']}, {cfg['engine']} engine) and objective {cfg['objective']}")
    return run_loop(Trainer(cfg, run_dir.path), ui, [report, *callbacks])


def export_from_seedlog(seedlog_path: str | Path, out: str | Path, upto: int | None = None,
                        device: str = "cpu", merge: bool = False) -> tuple[Path, str]:
    """Rebuild a run's weights from its seed log alone and write them as an HF directory (an
    adapter-space run: its PEFT adapter directory, or with ``merge`` the merged model,
    :meth:`~zoopt.engines.hf.HFEngine.export_merged`).  The checksum is the weights' (the adapter's).

    ``upto``: replay only the first ``upto`` steps (≥ 0); more than the log holds replays all of
    them, with a :class:`~zoopt.objective.ZooptWarning` saying how many that is."""
    log = SeedLog.load(seedlog_path)
    if upto is not None:
        if isinstance(upto, bool) or not isinstance(upto, int) or upto < 0:
            raise ValueError(f"--upto must be an integer ≥ 0, got {upto!r}")
        if upto > log.steps_done:
            warnings.warn(f"--upto {upto}: the seed log has {log.steps_done} steps; exporting all {log.steps_done}",
                          ZooptWarning, stacklevel=2)
    engine = ENGINES.get("hf").from_pretrained(log.header["model"], dtype=log.header["dtype"], device=device,
                                               **space_of_header(log.header))
    try:
        log.replay(engine, upto=upto)
        if merge and engine.space != "adapter":
            raise ValueError("--merge: the run trained every weight (space: full); its export is already a full model")
        return (engine.export_merged(out) if merge else engine.export_pretrained(out)), engine.checksum()
    finally:
        engine.close()
