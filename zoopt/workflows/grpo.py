"""``zoopt grpo``: the GRPO stepper (:class:`zoopt.grpo.GRPO`) as a trainer of the run loop.

:class:`GRPOTrainer` has the shape of ES's :class:`~zoopt.workflows.train.Trainer` (see
:mod:`zoopt.workflows.loop`), so ``zoopt grpo``, schedules and sweeps drive it as they drive
ES.  Its run directory holds ``config.yaml``, ``metrics.jsonl`` (one line per step),
``eval_before.json``/``eval_after.json``, ``checksum.txt`` and, with ``export: true``,
``model/``.  There is no resume: a directory that already holds a run is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..callbacks import Callback
from ..grpo import GRPO
from ..reporting.progress import TrainProgress
from ..reporting.trackers import ReportTo
from ..runs.rundir import RunDir
from ..types import RunResult
from .builders import run_dir_for
from .loop import RunTrainer, run_loop


class GRPOTrainer(RunTrainer):
    """One GRPO run (see :class:`~zoopt.workflows.loop.RunTrainer` for the arguments)."""

    label = "GRPO"
    units_per_step = 1

    def __init__(self, cfg: dict, run_dir: str | Path, engine=None, objective=None) -> None:
        RunDir(run_dir).refuse_if_used()
        super().__init__(cfg, run_dir, engine=engine, objective=objective)
        try:
            self.grpo = GRPO.from_config(cfg, self.engine, self.objective)
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
        if on_member:
            on_member(0, record["reward_mean"])
        return record

    def describe(self, record: dict) -> str:
        gap = record["sampler_logp_gap_max"]
        failed = record["reward_failed"] + record["reward_timed_out"]
        return (f"GRPO step {record['step']:>3}  reward {record['reward_mean'] or 0:.4f}  loss {record['loss']:+.4f}"
                f"  |g| {record['grad_norm']:.3g}  gen {record['time_generate_s']:.1f}s"
                f"  train {record['time_train_s']:.1f}s"
                + (f"  sync {record['time_sync_s']:.1f}s  |Δlogp| ≤ {gap:.1e}" if gap is not None else "")
                + (f"  reward failed on {failed} completions" if failed else ""))


def train_grpo(cfg: dict, console=None, show_progress: bool = True, engine=None, objective=None,
               callbacks: Sequence[Callback] = ()) -> RunResult:
    """Run the GRPO training described by ``cfg`` (``zoopt/configs/grpo.yaml`` keys); ``cfg["report_to"]``'s
    trackers and ``callbacks`` hear of it (:mod:`zoopt.callbacks`)."""
    report = ReportTo(cfg["report_to"], int(cfg["log_every"]))  # a missing tracker fails before the model loads
    ui = TrainProgress(console=console, enabled=show_progress)
    return run_loop(GRPOTrainer(cfg, run_dir_for(cfg), engine=engine, objective=objective), ui, [report, *callbacks])
