"""The one run loop: ``zoopt train`` and ``zoopt grpo`` drive their trainer through :func:`run_loop`.

A *trainer* (ES's :class:`zoopt.workflows.train.Trainer`, GRPO's
:class:`zoopt.workflows.grpo.GRPOTrainer`, both :class:`RunTrainer` subclasses) has one shape:

* ``cfg`` (the run config), ``run_dir`` (a :class:`~zoopt.runs.rundir.RunDir`),
  ``engine``, ``objective``, ``steps_done``;
* ``step(on_member=None) -> record``: one training step; it appends ``record`` to
  ``metrics.jsonl`` and calls ``on_member(i, reward)`` as units of the step finish;
* ``evaluate(tag, progress=None) -> summary``: the held-out evaluation, written to
  ``eval_{tag}.json`` with the working weights' ``checksum``;
* ``close()``: release the engine it built;
* ``label``, ``units_per_step`` and ``describe(record)`` for the progress display.

The loop evaluates before (unless ``eval_before.json`` exists: a resumed run keeps it), steps to
``cfg["steps"]`` — with ``eval.every = k`` also evaluating every k steps, logged as a separate
``{"step", "eval_accuracy"}`` line of ``metrics.jsonl``, and with ``checkpoint_every = k``
exporting ``checkpoint-{steps done}/`` every k steps — evaluates after, exports ``model/``
(``export: true``), plots ``training.png``, writes ``checksum.txt`` and closes the engine, also
when a step raises.  Callbacks (:mod:`zoopt.callbacks`) hear of the start, each step, each
evaluation and the end, and may stop the run early; ``report_to``'s trackers are one
(:class:`zoopt.reporting.trackers.ReportTo`).
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Sequence

from ..callbacks import Callback
from ..reporting.plots import plot_run
from ..reporting.progress import TrainProgress
from ..runs.rundir import RunDir
from ..types import RunResult
from .builders import build_engine, build_objective, evaluate_run


class RunTrainer(abc.ABC):
    """The shape :func:`run_loop`, schedules and sweeps drive (see the module docstring).

    The constructor takes the run's parts: ``objective`` and ``engine`` are built from ``cfg``
    when not given.  An engine given by the caller stays the caller's (:meth:`close` leaves it
    open); one built here is closed by :meth:`close`.
    """

    label: str = "train"
    units_per_step: int = 1

    def __init__(self, cfg: dict, run_dir: str | Path, engine=None, objective=None) -> None:
        self.cfg = cfg
        self.run_dir = RunDir(run_dir)
        self.objective = objective if objective is not None else build_objective(cfg)
        self._owns_engine = engine is None
        self.engine = engine if engine is not None else build_engine(cfg, self.objective)

    @property
    @abc.abstractmethod
    def steps_done(self) -> int:
        """Steps trained so far (a resumed run counts the replayed ones)."""

    @abc.abstractmethod
    def step(self, on_member=None) -> dict:
        """One step: its metrics record, also appended to ``metrics.jsonl``."""

    @abc.abstractmethod
    def describe(self, record: dict) -> str:
        """One line about a step's record, for the progress display."""

    def evaluate(self, tag: str, progress=None) -> dict:
        """The held-out evaluation (with the weights' ``checksum``), written to ``eval_{tag}.json``."""
        summary = evaluate_run(self.engine, self.objective, self.cfg, progress=progress)
        summary["checksum"] = self.engine.checksum()
        self.run_dir.write_eval(tag, summary)
        return summary

    def close(self) -> None:
        """Close the engine if this trainer built it."""
        if self._owns_engine:
            self.engine.close()


def run_loop(trainer: RunTrainer, ui: TrainProgress, callbacks: Sequence[Callback] = ()) -> RunResult:
    """Train ``trainer`` to ``trainer.cfg["steps"]`` (see the module docstring), telling
    ``callbacks``; close it."""
    result = None
    try:
        for callback in callbacks:
            callback.on_train_begin(trainer)
        result = _run(trainer, ui, callbacks)
        return result
    finally:
        try:
            for callback in callbacks:
                callback.on_train_end(result)
        finally:
            trainer.close()


def _run(trainer: RunTrainer, ui: TrainProgress, callbacks: Sequence[Callback]) -> RunResult:
    cfg, run_dir = trainer.cfg, trainer.run_dir
    ui.note(f"run directory: {run_dir.path}  ({trainer.steps_done} steps already done)")
    eval_on = int(cfg["eval"]["n_problems"]) > 0
    before = run_dir.read_eval("before")
    stop = False
    if eval_on and before is None:
        before = _evaluate(trainer, ui, "before")
        stop = _evaluated(callbacks, before, "before", trainer.steps_done)
    steps, every = int(cfg["steps"]), int(cfg["eval"]["every"] or 0)
    save_every = int(cfg["checkpoint_every"] or 0)
    history = []
    finished = trainer.steps_done >= steps  # a finished run resumed: nothing to train, no step bar
    if finished:
        ui.note(f"the run already has its {steps} steps: nothing to train")
    with ui.train_progress(trainer.label, steps, trainer.steps_done, trainer.units_per_step,
                           enabled=not finished) as bar:
        while trainer.steps_done < steps and not stop:
            record = trainer.step(on_member=bar.member_done)
            done = record["step"] + 1
            summary = None
            if eval_on and every and done % every == 0 and done < steps:
                summary = evaluate_run(trainer.engine, trainer.objective, cfg)
                accuracy = summary.get("greedy_accuracy")
                run_dir.append_metrics({"step": record["step"], "eval_accuracy": accuracy})
                record = {**record, "eval_accuracy": accuracy}
            if save_every and done % save_every == 0:
                trainer.engine.export_pretrained(run_dir.checkpoint_path(done))
            history.append(record)
            bar.step_done(record, trainer.describe(record))
            stop = any([callback.on_step_end(record) for callback in callbacks])
            if summary is not None:
                stop = _evaluated(callbacks, summary, "step", done) or stop
    stopped_early = trainer.steps_done < steps
    if stopped_early:
        ui.note(f"stopped early by a callback after {trainer.steps_done} of {steps} steps")
    after = run_dir.read_eval("after") if finished else None  # its weights are those it was evaluated with
    if eval_on and after is None:
        after = _evaluate(trainer, ui, "after")
        _evaluated(callbacks, after, "after", trainer.steps_done)
    ui.compare(before, after)
    if cfg["export"]:
        ui.note(f"exported the final weights to {trainer.engine.export_pretrained(run_dir.model_path)}")
    if history:
        ui.note(f"reward and entropy curves: {plot_run(run_dir.path)}")
    checksum = trainer.engine.checksum()
    run_dir.write_checksum(checksum)
    ui.note(f"done: {trainer.steps_done} steps, weights checksum {checksum}")
    return RunResult(run_dir.path, checksum, trainer.steps_done, before, after, history, stopped_early)


def _evaluated(callbacks: Sequence[Callback], summary: dict, tag: str, step: int) -> bool:
    """Tell every callback of an evaluation; whether one asked to stop."""
    return any([callback.on_evaluate({**summary, "tag": tag, "step": step}) for callback in callbacks])


def _evaluate(trainer: RunTrainer, ui: TrainProgress, tag: str) -> dict:
    with ui.eval_progress(f"held-out eval ({tag})") as callback:
        return trainer.evaluate(tag, progress=callback)
