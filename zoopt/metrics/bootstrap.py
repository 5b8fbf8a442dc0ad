"""Percentile bootstrap confidence interval of a mean over problems.

Efron & Tibshirani (1993), "An Introduction to the Bootstrap", ch. 13: resample the ``P``
per-problem values with replacement ``n_boot`` times, take each resample's mean, and report the
``α/2`` and ``1 − α/2`` quantiles of those means.  Uses a seeded :class:`numpy.random.Generator`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def bootstrap_ci(per_problem_values: Sequence[float], n_boot: int = 1000, alpha: float = 0.05,
                 seed: int = 0) -> tuple[float, float]:
    """``(low, high)`` percentile-bootstrap ``1 − alpha`` interval of the mean."""
    x = np.asarray(per_problem_values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"bootstrap_ci: need a non-empty 1-D sequence, got shape {x.shape}")
    if not (isinstance(n_boot, int) and n_boot >= 1):
        raise ValueError(f"bootstrap_ci: n_boot must be an integer ≥ 1, got n_boot={n_boot!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"bootstrap_ci: alpha must be in (0, 1), got alpha={alpha!r}")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)
