"""Two-point (antithetic) estimator: N/2 seeds, each evaluated at θ + σ·ε and θ − σ·ε.

ĝ = (1/N)·Σⱼ (w⁺ⱼ − w⁻ⱼ)·εⱼ (paper scaling; textbook divides by σ too), where w = shape(r) is
computed over all N rewards.  For raw rewards on a quadratic, f(θ+σε) − f(θ−σε) = 2σ∇fᵀε
exactly, so the even part of f cancels and the variance is lower than the one-point
estimator's (Salimans et al. 2017, "mirrored sampling").
"""

from __future__ import annotations

from zoopt.hparams.keys import check_key
from zoopt.types import Member, Population

from .base import SignedEstimator, member_seeds


class TwoPoint(SignedEstimator):
    """Antithetic pairs; ``population_size`` counts members, so it must be even."""

    def plan(self, step: int, population_size: int, sigma: float, base_seed: int) -> Population:
        population_size, sigma = check_key("population_size", population_size), check_key("sigma", sigma)
        if population_size % 2:
            raise ValueError(f"TwoPoint needs an even population_size, got {population_size}")
        seeds = member_seeds(base_seed, step, population_size // 2)
        members = tuple(Member(s, sign) for s in seeds for sign in (1, -1))
        return Population(step, sigma, members)
