"""One-point estimator: N members θ + σ·εᵢ with N independent seeds.

ĝ = (1/N)·Σᵢ wᵢ·εᵢ (paper scaling) or (1/(Nσ))·Σᵢ wᵢ·εᵢ (textbook), wᵢ = shape(r)ᵢ.
With zscore shaping this is the recipe of "Understanding Evolution Strategies for LLM
Reasoning" (N=32, σ=1.5e-3, α=2.5e-4).  With raw rewards and textbook scaling it is the
Gaussian-smoothing gradient E[f(θ+σε)·ε]/σ = ∇f_σ(θ) (Nesterov & Spokoiny 2017).
"""

from __future__ import annotations

from zoopt.hparams.keys import check_key
from zoopt.types import Member, Population

from .base import SignedEstimator, member_seeds


class OnePoint(SignedEstimator):
    """Independent members, each with its own seed and sign +1."""

    def plan(self, step: int, population_size: int, sigma: float, base_seed: int) -> Population:
        population_size, sigma = check_key("population_size", population_size), check_key("sigma", sigma)
        seeds = member_seeds(base_seed, step, population_size)
        return Population(step, sigma, tuple(Member(s, 1) for s in seeds))
