"""Optuna samplers and pruners from a spec's ``sampler``/``pruner`` entries (``(kind, options)``).

Below both :mod:`sweeps.spec` (which builds them once to validate a spec's options) and
:mod:`sweeps.study` (which builds them for each worker).
"""

from __future__ import annotations

import optuna

from .space import SpecError


def build_sampler(kind: str, options: dict, seed: int, space: dict, workers: int = 1):
    """``tpe`` | ``random`` | ``grid`` | ``nsga2`` with ``options`` and ``seed``; TPE in parallel
    workers uses ``constant_liar`` unless ``options`` say otherwise; ``grid`` walks the product
    of ``space``'s categorical/int params.  Bad options raise :class:`SpecError` naming ``sampler``."""
    kwargs = {"seed": seed, **options}
    try:
        if kind == "tpe":
            if workers > 1:
                kwargs.setdefault("constant_liar", True)
            return optuna.samplers.TPESampler(**kwargs)
        if kind == "random":
            return optuna.samplers.RandomSampler(**kwargs)
        if kind == "nsga2":
            return optuna.samplers.NSGAIISampler(**kwargs)
        grid = {name: param.grid() for name, param in space.items()}
        return optuna.samplers.GridSampler(grid, **kwargs)
    except TypeError as exc:
        raise SpecError(f"sampler: bad option for {kind!r}: {exc}") from None


def build_pruner(kind: str, options: dict):
    """``none`` | ``median`` | ``hyperband`` with ``options``; bad options raise
    :class:`SpecError` naming ``pruner``."""
    try:
        if kind == "median":
            return optuna.pruners.MedianPruner(**options)
        if kind == "hyperband":
            return optuna.pruners.HyperbandPruner(**options)
        return optuna.pruners.NopPruner()
    except (TypeError, ValueError) as exc:
        raise SpecError(f"pruner: bad option for {kind!r}: {exc}") from None
