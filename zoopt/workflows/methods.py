"""The trainers by method name, and :func:`start_run`, how schedules and sweeps start one."""

from __future__ import annotations

from pathlib import Path

from .grpo import GRPOTrainer
from .loop import RunTrainer
from .train import Trainer

TRAINERS: dict[str, type[RunTrainer]] = {"es": Trainer, "grpo": GRPOTrainer}
METHODS = tuple(TRAINERS)


def start_run(method: str, cfg: dict, run_dir: str | Path, engine=None, objective=None) -> RunTrainer:
    """The trainer of ``method`` (``es`` or ``grpo``) for ``cfg`` in ``run_dir``; see
    :class:`~zoopt.workflows.loop.RunTrainer` for ``engine`` and ``objective``."""
    if method not in TRAINERS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    return TRAINERS[method](cfg, run_dir, engine=engine, objective=objective)
