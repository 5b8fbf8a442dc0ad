"""Callbacks: what a run loop tells you as it goes, and how you stop it early.

:func:`zoopt.workflows.loop.run_loop` (so ``zoopt.fit``, ``zoopt train``, ``zoopt grpo`` and
``zoopt.trl.ESTrainer``) calls, on every callback, in order:

* ``on_train_begin(trainer)`` once, before the first evaluation; ``trainer`` is the
  :class:`~zoopt.workflows.loop.RunTrainer` (``cfg``, ``run_dir``, ``engine``, ``objective``,
  ``steps_done``);
* ``on_step_end(record)`` after each step, with the step's metrics record (the line it appended
  to ``metrics.jsonl``, and ``eval_accuracy`` when a periodic evaluation ran at that step);
* ``on_evaluate(summary)`` after each held-out evaluation, with its summary plus ``tag``
  (``before``, ``after`` or ``step``) and ``step`` (the steps done when it ran);
* ``on_train_end(result)`` once at the end: the :class:`~zoopt.types.RunResult`, or None when
  the run raised (then the exception propagates after every callback has been told).

``on_step_end`` and ``on_evaluate`` may return True to stop the run after the current step: the
loop then evaluates, exports, plots and writes ``checksum.txt`` as at a normal end, and the
result says ``stopped_early``.  A stopped ES run stays resumable: its seed log holds every step
done (a resumed run goes on to ``steps``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the loop imports this module, never the other way round
    from .types import RunResult


class Callback:
    """Base class: every hook is a no-op; override the ones you need (see the module docstring)."""

    def on_train_begin(self, trainer) -> None:
        """Before the first evaluation of a run (or of a resumed run)."""

    def on_step_end(self, record: dict) -> bool | None:
        """After each step; return True to stop after it."""

    def on_evaluate(self, summary: dict) -> bool | None:
        """After each held-out evaluation (``summary["tag"]``, ``summary["step"]``); True stops the run."""

    def on_train_end(self, result: "RunResult | None") -> None:
        """At the end; ``result`` is None when the run raised."""


class EarlyStopping(Callback):
    """Stop when ``metric`` has not improved by more than ``min_delta`` for ``patience`` observations.

    ``metric`` is a key of the step records (``reward_mean``, ``rewards/NAME/mean``, ...) or of
    the evaluation summaries (``greedy_accuracy``, ``mean_reward``: set ``eval.every`` for
    evaluations during training); each record or summary that carries it is one observation.
    ``mode="max"``: higher is better (``"min"``: lower).  The best value so far is ``best``; an
    observation improves when ``value > best + min_delta`` (``value < best − min_delta`` for min).
    """

    def __init__(self, metric: str = "reward_mean", patience: int = 3, min_delta: float = 0.0,
                 mode: str = "max") -> None:
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        if not (isinstance(patience, int) and patience >= 1):
            raise ValueError(f"patience must be an integer ≥ 1, got {patience!r}")
        if not (isinstance(min_delta, (int, float)) and min_delta >= 0):
            raise ValueError(f"min_delta must be a number ≥ 0, got {min_delta!r}")
        self.metric, self.patience, self.min_delta, self.mode = metric, patience, float(min_delta), mode
        self.best: float | None = None
        self.waited = 0
        self.stopped_at: int | None = None  # the steps done when it asked to stop

    def on_step_end(self, record: dict) -> bool:
        return self._observe(record.get(self.metric), record["step"] + 1)

    def on_evaluate(self, summary: dict) -> bool:
        return self._observe(summary.get(self.metric), summary["step"])

    def _observe(self, value, steps_done: int) -> bool:
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False  # this record does not carry the metric
        sign = 1.0 if self.mode == "max" else -1.0
        if self.best is None or sign * (value - self.best) > self.min_delta:
            self.best, self.waited = float(value), 0
            return False
        self.waited += 1
        if self.waited >= self.patience:
            self.stopped_at = steps_done
            return True
        return False


__all__ = ["Callback", "EarlyStopping"]
