"""Schedules: ES and GRPO phases run in order on one engine, each given a share of a budget.

A schedule is a list of phases ``{method: es|grpo, budget_fraction: f, overrides: {...}}``.
The **budget** is a number of sampled completions (what both methods pay for in rollouts):

    ES   step:  population_size × P × sampling.n     (every member samples every prompt)
    GRPO step:  P × sampling.n                        (P prompts, a group of G = n each)

with P = min(prompts_per_step, rows of the training split) — what the trainers really draw.
Phase i gets ``allotted = ⌊f_i · budget⌋`` completions and runs ``steps = ⌊allotted / per
step⌋`` steps (rounding down: a phase never exceeds its share; a share smaller than one step
is an error), so it uses ``steps × per step ≤ allotted`` completions; both numbers are
reported, with the completions actually generated (the engine's ``stats.sequences`` over the
phase).

Phase i runs with ``seed + i`` (phase 0 keeps the run's seed, so the first half of ES→GRPO
is step for step the first half of ES alone).  An ES phase that follows another phase starts
its seed log from the weights it found, exported to ``<phase dir>/start_model`` (a seed log
replays onto its base model).  A GRPO phase ends each step with ``engine.sync_master()``, so
the ES phases after it perturb and update the GRPO weights.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..config import ConfigError, default_config, merge
from .methods import METHODS, start_run

BASE_CONFIG = {"es": "train", "grpo": "grpo"}
PHASE_KEYS = {"method", "budget_fraction", "overrides"}


@dataclass(frozen=True)
class Phase:
    method: str
    budget_fraction: float
    overrides: dict = field(default_factory=dict)


def parse_schedule(items, name: str = "schedule") -> list[Phase]:
    """Phases from a list of mappings; one-line ``ConfigError`` naming a bad key or value."""
    if not isinstance(items, (list, tuple)):
        raise ConfigError(f"{name} must be a list of phases, got {items!r}")
    phases = []
    for i, item in enumerate(items):
        where = f"{name}[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{where} must be a mapping {{method, budget_fraction, overrides}}, got {item!r}")
        unknown = sorted(set(item) - PHASE_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r} (phase keys: method, budget_fraction, overrides)")
        method = item.get("method")
        if method not in METHODS:
            raise ConfigError(f"{where}.method must be one of {', '.join(METHODS)}, got {method!r}")
        fraction = item.get("budget_fraction")
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise ConfigError(f"{where}.budget_fraction must be in (0, 1], got {fraction!r}")
        overrides = item.get("overrides") or {}
        if not isinstance(overrides, dict):
            raise ConfigError(f"{where}.overrides must be a mapping, got {overrides!r}")
        phases.append(Phase(method, float(fraction), dict(overrides)))
    total = sum(p.budget_fraction for p in phases)
    if total > 1 + 1e-9:
        raise ConfigError(f"{name}: budget fractions add up to {total:g} > 1")
    return phases


def phase_config(method: str, shared: dict, *layers: tuple[str, dict]) -> dict:
    """``train.yaml`` (ES) or ``grpo.yaml`` defaults ← ``shared`` ← each ``(label, overrides)``.

    Unknown keys are errors that name the layer they came from.
    """
    cfg = default_config(BASE_CONFIG[method])
    for label, overrides in (("shared", shared), *layers):
        try:
            merge(cfg, overrides)
        except ConfigError as exc:
            raise ConfigError(f"{label}: {exc}") from None
    return cfg


def completions_per_step(method: str, cfg: dict, n_train_rows: int) -> int:
    prompts = min(int(cfg["prompts_per_step"]), int(n_train_rows))
    per_prompt = int(cfg["sampling"]["n"])
    return prompts * per_prompt * (int(cfg["population_size"]) if method == "es" else 1)


@dataclass
class PlannedPhase:
    method: str
    cfg: dict
    steps: int
    per_step: int
    allotted: int

    @property
    def completions(self) -> int:
        return self.steps * self.per_step

    def to_dict(self) -> dict:
        return {"method": self.method, "steps": self.steps, "completions_per_step": self.per_step,
                "allotted": self.allotted, "completions": self.completions, "config": self.cfg}


def plan(phases: list[Phase], budget: int, shared: dict, method_overrides: dict, n_train_rows: int,
         name: str = "schedule") -> list[PlannedPhase]:
    """Configs and step counts of ``phases`` for ``budget`` completions (see the module docstring)."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ConfigError(f"budget must be an integer ≥ 1 (sampled completions), got {budget!r}")
    planned = []
    for i, phase in enumerate(phases):
        cfg = phase_config(phase.method, shared, (phase.method, method_overrides.get(phase.method) or {}),
                           (f"{name}[{i}].overrides", phase.overrides))
        cfg["seed"] = int(cfg["seed"]) + i
        per_step = completions_per_step(phase.method, cfg, n_train_rows)
        allotted = int(phase.budget_fraction * budget + 1e-9)
        steps = allotted // per_step
        if steps < 1:
            raise ConfigError(f"{name}[{i}] ({phase.method}): its share of the budget, {allotted} completions, is "
                              f"less than one step ({per_step} completions); raise budget")
        cfg["steps"] = steps
        planned.append(PlannedPhase(phase.method, cfg, steps, per_step, allotted))
    return planned


# on_checkpoint(phase_dir, steps done, checkpoint directory): called after each checkpoint's export
CheckpointHook = Callable[[Path, int, Path], None]


def run_schedule(planned: list[PlannedPhase], engine, objective, run_dir: str | Path, log=None,
                 on_checkpoint: CheckpointHook | None = None) -> list[dict]:
    """Run each phase in order on ``engine``; one summary dict per phase (JSON-able).

    Phase ``i`` writes ``run_dir/phase{i}-{method}/`` (``config.yaml``, ``metrics.jsonl`` and,
    for ES, ``seedlog.json``; for GRPO with ``state_every``, ``trainer_state.pt``); with
    ``checkpoint_every = k`` in its config also ``checkpoint-N/``, an HF directory of the weights
    after every k-th step N before its last, handed to ``on_checkpoint`` as soon as it is written
    (``zoopt study`` evaluates and removes it there).  A phase that resumes right after a
    checkpoint's step exports that checkpoint again: the kill may have come before it was used.
    """
    run_dir = Path(run_dir)
    summaries = []
    for i, phase in enumerate(planned):
        phase_dir = run_dir / f"phase{i}-{phase.method}"
        t0, generated = time.perf_counter(), engine.stats.sequences
        rewards = _run_phase(i, phase, phase_dir, engine, objective, log, on_checkpoint)
        summaries.append({**{k: v for k, v in phase.to_dict().items() if k != "config"},
                          "dir": str(phase_dir), "completions_generated": engine.stats.sequences - generated,
                          "reward_first": rewards[0], "reward_last": rewards[-1],
                          "wall_s": round(time.perf_counter() - t0, 3)})
    return summaries


def _run_phase(i: int, phase: PlannedPhase, phase_dir: Path, engine, objective, log,
               on_checkpoint: CheckpointHook | None = None) -> list[float]:
    """The steps of one phase (its trainer, and GRPO's AdamW state, are freed on return).  A phase
    whose directory holds a seed log (ES) or a trainer state (GRPO) resumes from it and runs only
    the missing steps (``zoopt study``'s resume)."""
    cfg = dict(phase.cfg, run_dir=str(phase_dir), export=False)
    cfg["eval"] = dict(cfg["eval"], n_problems=0)
    if phase.method == "es" and i > 0:
        cfg["model"] = str(engine.export_pretrained(phase_dir / "start_model"))
    trainer = start_run(phase.method, cfg, phase_dir, engine=engine, objective=objective)
    every = int(cfg.get("checkpoint_every") or 0)

    def checkpoint() -> None:
        if every and 0 < trainer.steps_done < phase.steps and trainer.steps_done % every == 0:
            path = engine.export_pretrained(trainer.run_dir.checkpoint_path(trainer.steps_done))
            if on_checkpoint:
                on_checkpoint(phase_dir, trainer.steps_done, Path(path))

    checkpoint()  # resumed just after a checkpoint's step: it may not have been exported or used
    while trainer.steps_done < phase.steps:
        record = trainer.step()
        checkpoint()
        if log:
            log(f"{phase_dir.name} step {record['step']}: reward {record['reward_mean']:.4f}")
    return [r["reward_mean"] for r in trainer.run_dir.read_metrics() if "reward_mean" in r]
