"""The estimator contract and the one rule both built-in estimators share.

An estimator turns a population and its rewards into a gradient estimate ĝ = Σᵢ cᵢ·ε(seedᵢ).
For members ``i = 1..N`` with signs sᵢ ∈ {+1, −1} and shaped rewards wᵢ = shape(r)ᵢ:

    paper scaling (default):  ĝ = (1/N)·Σᵢ wᵢ·sᵢ·εᵢ          (the 1/σ is absorbed into α)
    textbook scaling:         ĝ = (1/(N·σ))·Σᵢ wᵢ·sᵢ·εᵢ

The ES shell multiplies ĝ by the learning rate α, giving the paper's update
θ ← θ + α·(1/N)·Σᵢ zᵢ·εᵢ with ``OnePoint(zscore)``.  Members that share a seed (an antithetic
pair) are merged into one coefficient.  With raw rewards on f(θ) = gᵀθ, textbook scaling is an
unbiased estimate of g and paper scaling of σ·g.

Degenerate rewards (any NaN/inf, or all equal) give a zero update and a warning: never NaN
weights, never a step driven by noise alone.
"""

from __future__ import annotations

import logging
import warnings
from typing import Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from zoopt.types import Member, Population, Update

from .shaping import zscore

log = logging.getLogger("zoopt.estimators")

Shaping = Callable[[np.ndarray], np.ndarray]
SCALINGS = ("paper", "textbook")


class DegenerateRewardsWarning(RuntimeWarning):
    """Rewards gave no usable signal (non-finite or all equal): the update is zero."""


@runtime_checkable
class Estimator(Protocol):
    def plan(self, step: int, population_size: int, sigma: float, base_seed: int) -> Population: ...

    def update(self, population: Population, rewards: Sequence[float]) -> Update: ...


def member_seeds(base_seed: int, step: int, count: int) -> list[int]:
    """``count`` distinct 31-bit seeds for ``step`` of a run started from ``base_seed``.

    Derived through SeedSequence, so step t's seeds depend only on (base_seed, t): a resumed
    run asks for exactly the seeds an uninterrupted one would have.
    """
    state = np.random.SeedSequence([int(base_seed), int(step)]).generate_state(count * 2, np.uint32)
    seeds: list[int] = []
    for s in (int(x) >> 1 for x in state):
        if s not in seeds:
            seeds.append(s)
        if len(seeds) == count:
            return seeds
    raise RuntimeError("could not draw distinct seeds")  # 2N draws of 31 bits: never in practice


class SignedEstimator:
    """Shared update rule for estimators whose members are (seed, ±1); see the module doc."""

    def __init__(self, shaping: Shaping | str = zscore, scaling: str = "paper") -> None:
        if isinstance(shaping, str):
            from zoopt.registry import SHAPINGS

            shaping = SHAPINGS.get(shaping)
        if not callable(shaping):
            raise TypeError(f"shaping must be callable, got {shaping!r}")
        if scaling not in SCALINGS:
            raise ValueError(f"scaling must be one of {SCALINGS}, got {scaling!r}")
        self.shaping = shaping
        self.scaling = scaling

    def plan(self, step: int, population_size: int, sigma: float, base_seed: int) -> Population:
        raise NotImplementedError

    def update(self, population: Population, rewards: Sequence[float]) -> Update:
        r = np.asarray(list(rewards), dtype=np.float64)
        n = len(population)
        if r.shape != (n,):
            raise ValueError(f"got {r.size} rewards for a population of {n}")
        seeds = tuple(dict.fromkeys(m.seed for m in population.members))
        finite = r[np.isfinite(r)]
        stats = {"reward_mean": float(finite.mean()) if finite.size else None,
                 "reward_std": float(finite.std()) if finite.size else None}
        reason = None
        if not np.isfinite(r).all():
            reason = f"{int((~np.isfinite(r)).sum())} of {n} rewards are NaN/inf"
        elif np.all(r == r[0]):
            reason = f"all {n} rewards equal {float(r[0])!r}"  # a float's repr, not np.float64(...)
        if reason is not None:
            message = f"degenerate rewards at step {population.step}: {reason}; update is zero"
            warnings.warn(message, DegenerateRewardsWarning, stacklevel=2)
            log.warning(message)
            return Update(seeds, (0.0,) * len(seeds), {**stats, "degenerate": reason})
        w = np.asarray(self.shaping(r), dtype=np.float64)
        if w.shape != (n,) or not np.isfinite(w).all():
            raise ValueError(f"shaping {getattr(self.shaping, '__name__', self.shaping)} returned "
                             f"{w.tolist()!r} for rewards {r.tolist()!r}")
        norm = n * (population.sigma if self.scaling == "textbook" else 1.0)
        coef = dict.fromkeys(seeds, 0.0)
        for m, wi in zip(population.members, w):
            coef[m.seed] += m.sign * wi / norm
        return Update(seeds, tuple(coef[s] for s in seeds),
                      {**stats, "shaped_min": float(w.min()), "shaped_max": float(w.max())})


__all__ = ["Estimator", "SignedEstimator", "member_seeds", "DegenerateRewardsWarning", "Member"]
