"""Fitness shaping: plain functions ``shape(rewards: np.ndarray) -> np.ndarray``.

Each takes the population's rewards (float64, all finite) and returns one weight per member.
They are passed to an estimator (``OnePoint(zscore)``), so "normalize or not" is just a choice
of function.  Parameterise with ``functools.partial`` (``partial(zscore, ddof=1)``).
"""

from __future__ import annotations

import numpy as np


def zscore(rewards: np.ndarray, ddof: int = 0, eps: float = 1e-8) -> np.ndarray:
    """zᵢ = (rᵢ − mean(r)) / (std(r, ddof) + eps).  The paper uses ddof=0, eps=1e-8."""
    r = np.asarray(rewards, dtype=np.float64)
    return (r - r.mean()) / (r.std(ddof=ddof) + eps)


def centered_rank(rewards: np.ndarray) -> np.ndarray:
    """Ranks mapped linearly to [−0.5, 0.5]: uᵢ = rank(rᵢ)/(N − 1) − 0.5 (Salimans et al. 2017).

    Rank 0 is the lowest reward; tied rewards share the mean of their ranks, so equal rewards
    get equal weights and the output always sums to zero.
    """
    r = np.asarray(rewards, dtype=np.float64)
    n = r.shape[0]
    if n < 2:
        return np.zeros_like(r)
    order = np.argsort(r, kind="stable")
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.arange(n, dtype=np.float64)
    for value in np.unique(r):  # average the ranks of ties
        tied = r == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks / (n - 1) - 0.5


def raw(rewards: np.ndarray) -> np.ndarray:
    """wᵢ = rᵢ (no shaping)."""
    return np.asarray(rewards, dtype=np.float64).copy()


def mean_baseline(rewards: np.ndarray) -> np.ndarray:
    """wᵢ = rᵢ − mean(r)."""
    r = np.asarray(rewards, dtype=np.float64)
    return r - r.mean()
