"""Experiment trackers (``report_to``): TensorBoard, Weights & Biases and Trackio.

``report_to: tensorboard`` (or ``wandb``, ``trackio``, a list of them, ``none``) sends a run's
step records, its held-out evaluations and its final plots to the tracker, as TRL's
``report_to`` does.  Each tracker is an optional extra; asking for one that is not installed is
a one-line error naming it (``pip install "zoopt-llm[wandb]"``), raised before any model loads.

What each tracker gets (``step`` = steps done, so the evaluation before training is step 0):

* every ``log_every``-th step record's numbers as ``train/KEY`` (``train/reward_mean``,
  ``train/rewards/NAME/mean``, ...; strings, None and booleans are left out);
* every evaluation's numbers as ``eval/KEY`` (``eval/greedy_accuracy``, ``eval/pass@8``, ...);
* the run's ``training.png`` as the image ``training`` at the last step.

Where it goes:

* ``tensorboard``: event files in ``run_dir/tensorboard/`` (``tensorboard --logdir runs``);
* ``wandb``: a run in ``run_dir/wandb/``, project ``$WANDB_PROJECT`` (default ``zoopt``), named
  after the run directory.  ``WANDB_MODE=offline`` keeps everything on the machine
  (``wandb sync`` uploads it later);
* ``trackio``: a run of project ``$TRACKIO_PROJECT`` (default ``zoopt``) in Trackio's local
  database (``$TRACKIO_DIR``, default ``$HF_HOME/trackio``); ``trackio show`` opens it.
"""

from __future__ import annotations

import abc
import math
import os
from pathlib import Path
from typing import Any, Iterable

from ..callbacks import Callback
from ..extras import require
from ..hparams.keys import check_key
from ..runs.rundir import RunDir

#: tracker name → the module it needs (a key of :data:`zoopt.extras.OPTIONAL`)
TRACKERS: dict[str, str] = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}


class Tracker(abc.ABC):
    """One run in one experiment tracker."""

    @abc.abstractmethod
    def log(self, values: dict[str, float], step: int) -> None:
        """Scalars at ``step``."""

    @abc.abstractmethod
    def log_image(self, tag: str, path: Path, step: int) -> None:
        """A PNG file as an image."""

    @abc.abstractmethod
    def close(self) -> None:
        """Flush and end the run."""


class TensorBoard(Tracker):
    """``torch.utils.tensorboard.SummaryWriter`` writing to ``run_dir/tensorboard``."""

    def __init__(self, run_dir: Path, config: dict, run_name: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))
        self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in config.items()), 0)

    def log(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_image(self, tag: str, path: Path, step: int) -> None:
        from matplotlib.image import imread

        self.writer.add_image(tag, imread(str(path)), step, dataformats="HWC")
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class RunTracker(Tracker):
    """A tracker over a run object with wandb's API, which Trackio copies: ``run.log(values, step=)``,
    ``run.finish()``, and images as ``module.Image(path)``; a subclass opens ``run`` from ``module``."""

    module: Any
    run: Any

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def log_image(self, tag: str, path: Path, step: int) -> None:
        self.run.log({tag: self.module.Image(str(path))}, step=step)

    def close(self) -> None:
        self.run.finish()


class WandB(RunTracker):
    """A ``wandb.init`` run in ``run_dir/wandb`` (``WANDB_MODE=offline``: nothing leaves the machine)."""

    def __init__(self, run_dir: Path, config: dict, run_name: str) -> None:
        import wandb

        self.module = wandb
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "zoopt"), name=run_name, dir=str(run_dir),
                              config=config, reinit="create_new")


class Trackio(RunTracker):
    """A ``trackio.init`` run in Trackio's local database (no dashboard is started)."""

    def __init__(self, run_dir: Path, config: dict, run_name: str) -> None:
        import trackio

        self.module = trackio
        self.run = trackio.init(project=os.environ.get("TRACKIO_PROJECT", "zoopt"), name=run_name, config=config,
                                embed=False, auto_log_cpu=False, auto_log_gpu=False)


_CLASSES: dict[str, type[Tracker]] = {"tensorboard": TensorBoard, "wandb": WandB, "trackio": Trackio}


def tracker_names(report_to: str | Iterable[str] | None) -> list[str]:
    """The trackers ``report_to`` asks for (``none``/None: none), each checked to be installed:
    :class:`~zoopt.extras.MissingDependency` (one line naming the extra) otherwise."""
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    names = [n for n in names if n != "none"]
    for name in names:
        if name not in TRACKERS:
            raise ValueError(f"report_to: unknown tracker {name!r} (known: none, {', '.join(TRACKERS)})")
        require(TRACKERS[name], f"report_to: {name}")
    return names


def open_trackers(report_to, run_dir: str | Path, config: dict, run_name: str) -> list[Tracker]:
    """One open :class:`Tracker` per name of ``report_to`` (see :func:`tracker_names`)."""
    opened: list[Tracker] = []
    try:
        for name in tracker_names(report_to):
            opened.append(_CLASSES[name](Path(run_dir), config, run_name))
    except BaseException:
        for tracker in opened:
            tracker.close()
        raise
    return opened


def scalars(values: dict, prefix: str) -> dict[str, float]:
    """``{prefix + key: value}`` for the finite numbers of ``values`` (not booleans, not ``step``)."""
    return {prefix + key: float(v) for key, v in values.items()
            if key != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class ReportTo(Callback):
    """The run loop's callback that feeds ``report_to``'s trackers (see the module docstring)."""

    def __init__(self, report_to, log_every: int = 1) -> None:
        self.names = tracker_names(report_to)  # fails now, before a model loads, when one is missing
        self.log_every = check_key("log_every", log_every)  # the config key's rule (one definition: zoopt.hparams)
        self.trackers: list[Tracker] = []

    def on_train_begin(self, trainer) -> None:
        run_dir = trainer.run_dir.path
        self.trackers = open_trackers(self.names, run_dir, trainer.cfg, run_dir.name)

    def on_step_end(self, record: dict) -> None:
        if (record["step"] + 1) % self.log_every == 0:
            self._log(scalars(record, "train/"), record["step"] + 1)

    def on_evaluate(self, summary: dict) -> None:
        self._log(scalars(summary, "eval/"), summary["step"])

    def on_train_end(self, result) -> None:
        try:
            plot = None if result is None else RunDir(result.run_dir).training_plot_path
            if plot is not None and plot.is_file():
                for tracker in self.trackers:
                    tracker.log_image("training", plot, result.steps)
        finally:
            for tracker in self.trackers:
                tracker.close()
            self.trackers = []

    def _log(self, values: dict[str, float], step: int) -> None:
        for tracker in self.trackers:
            tracker.log(values, step)


__all__ = ["TRACKERS", "Tracker", "RunTracker", "TensorBoard", "WandB", "Trackio", "ReportTo", "open_trackers",
           "tracker_names", "scalars"]
