"""``zoopt grpo``: the GRPO stepper (:class:`zoopt.grpo.GRPO`) as a trainer of the run loop.

:class:`GRPOTrainer` has the shape of ES's :class:`~zoopt.workflows.train.Trainer` (see
:mod:`zoopt.workflows.loop`), so ``zoopt grpo``, schedules and sweeps drive it as they drive
ES.  Its run directory holds ``config.yaml``, ``metrics.jsonl`` (one line per step),
``eval_before.json``/``eval_after.json``, ``checksum.txt`` and, with ``export: true``,
``model/``.

**Resume.** With ``state_every = k`` the run also keeps ``trainer_state.pt`` (the policy's
weights, AdamW's state and the step count: :meth:`zoopt.grpo.GRPO.state_dict`), rewritten
atomically after every k-th step and after the last.  A directory that holds one is resumed:
the run keys (:data:`RESUME_KEYS`) must equal the saved ``config.yaml``'s, the state is loaded,
``metrics.jsonl`` loses the records of steps after it, and the run goes on — on the same
machine, to the same weights bit for bit as a run never stopped (step t draws its prompts and
rollouts from ``(seed, t)`` alone).  A directory that holds a run but no state is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from ..callbacks import Callback
from ..config import ConfigError
from ..grpo import GRPO
from ..reporting.progress import TrainProgress
from ..reporting.trackers import ReportTo
from ..runs.atomic import atomic_file
from ..runs.rundir import RunDir
from ..types import RunResult
from .builders import run_dir_for
from .loop import RunTrainer, run_loop


# keys that define a GRPO run: a resume with other values would not continue it
RESUME_KEYS = ("model", "dtype", "objective", "objective_args", "seed", "prompts_per_step", "sampling", "loss_type",
               "epsilon", "epsilon_high", "beta", "scale_rewards", "num_iterations", "lr", "adam_betas", "adam_eps",
               "weight_decay", "max_grad_norm")


class GRPOTrainer(RunTrainer):
    """One GRPO run (see :class:`~zoopt.workflows.loop.RunTrainer` for the arguments); a
    ``run_dir`` holding ``trainer_state.pt`` is resumed (see the module docstring)."""

    label = "GRPO"
    units_per_step = 1

    def __init__(self, cfg: dict, run_dir: str | Path, engine=None, objective=None) -> None:
        saved = RunDir(run_dir)
        resuming = saved.trainer_state_path.exists()
        if resuming:
            check_resume(saved, cfg)
        else:
            saved.refuse_if_used()
        super().__init__(cfg, run_dir, engine=engine, objective=objective)
        self.state_every = int(cfg.get("state_every") or 0)
        try:
            self.grpo = GRPO.from_config(cfg, self.engine, self.objective)
            if resuming:
                self.grpo.load_state_dict(torch.load(saved.trainer_state_path, weights_only=True))
                self.run_dir.keep_metrics_before(self.grpo.step_count)
        except BaseException:
            self.close()
            raise
        self.run_dir.write_config(cfg)

    @property
    def steps_done(self) -> int:
        return self.grpo.step_count

    def step(self, on_member=None) -> dict:
        """One GRPO step (rollout, score, AdamW, sync); the record is appended to ``metrics.jsonl``.
        ``on_member(0, reward_mean)`` once the step is done (a GRPO step is one unit)."""
        record = self.grpo.step()
        self.run_dir.append_metrics(record)
        done = self.grpo.step_count
        if self.state_every and (done % self.state_every == 0 or done >= int(self.cfg["steps"])):
            self.save_state()
        if on_member:
            on_member(0, record["reward_mean"])
        return record

    def save_state(self) -> Path:
        """Write :meth:`zoopt.grpo.GRPO.state_dict` to ``trainer_state.pt`` (a temporary file, then
        renamed: a kill never leaves half a state)."""
        with atomic_file(self.run_dir.trainer_state_path) as tmp:
            torch.save(self.grpo.state_dict(), tmp)
        return self.run_dir.trainer_state_path

    def describe(self, record: dict) -> str:
        gap = record["sampler_logp_gap_max"]
        failed = record["reward_failed"] + record["reward_timed_out"]
        return (f"GRPO step {record['step']:>3}  reward {record['reward_mean'] or 0:.4f}  loss {record['loss']:+.4f}"
                f"  |g| {record['grad_norm']:.3g}  gen {record['time_generate_s']:.1f}s"
                f"  train {record['time_train_s']:.1f}s"
                + (f"  sync {record['time_sync_s']:.1f}s  |Δlogp| ≤ {gap:.1e}" if gap is not None else "")
                + (f"  reward failed on {failed} completions" if failed else ""))


def check_resume(run_dir: RunDir, cfg: dict) -> None:
    """A one-line :class:`ConfigError` unless ``run_dir`` holds a GRPO state whose run keys
    (:data:`RESUME_KEYS`) ``cfg`` repeats."""
    if not run_dir.trainer_state_path.exists():
        raise ConfigError(f"--resume: no trainer_state.pt in {run_dir.path} (a GRPO run keeps one with state_every > 0)")
    saved = run_dir.read_config() or {}
    for key in RESUME_KEYS:
        if key in saved and saved[key] != cfg.get(key):
            raise ConfigError(f"--resume: config key {key!r} is {cfg.get(key)!r} but the run in {run_dir.path} "
                              f"was started with {saved[key]!r}")


def train_grpo(cfg: dict, console=None, show_progress: bool = True, engine=None, objective=None,
               callbacks: Sequence[Callback] = (), resume: str | Path | None = None) -> RunResult:
    """Run (or, with ``resume``, continue from its ``trainer_state.pt``) the GRPO training described by
    ``cfg`` (``zoopt/configs/grpo.yaml`` keys); ``cfg["report_to"]``'s trackers and ``callbacks`` hear
    of it (:mod:`zoopt.callbacks`)."""
    run_dir = RunDir(resume if resume else run_dir_for(cfg))
    if resume:
        check_resume(run_dir, cfg)
    else:
        run_dir.refuse_if_used(f"; a run that keeps its state (state_every > 0) continues with --resume {run_dir.path}")
    report = ReportTo(cfg["report_to"], int(cfg["log_every"]))  # a missing tracker fails before the model loads
    ui = TrainProgress(console=console, enabled=show_progress)
    return run_loop(GRPOTrainer(cfg, run_dir.path, engine=engine, objective=objective), ui, [report, *callbacks])
