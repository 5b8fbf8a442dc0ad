"""C3's numbers from the weights themselves: how far ES and GRPO moved them and how sparse the
move is — one number per model, pure functions of the base and trained state dicts.

With α the ES learning rate of the study, the paper's τ (``c3.paper_tau``, given at its
learning rate ``c3.paper_lr``) is also read scaled to α, ``τ_scaled = τ_paper · α / paper_lr``,
since an ES step moves a weight by a multiple of α:

* ``drift[m]`` — ``D_rel = ‖θ_m − θ₀‖₂ / ‖θ₀‖₂`` (:func:`zoopt.metrics.relative_drift`);
* ``shares["<m> τ=<τ> (<label>)"]`` — the counts and shares of ``|Δ| ≤ τ`` among the moved
  weights at both τ (:func:`zoopt.metrics.magnitude_shares`);
* ``taus`` — per level of ``c3.sparsity``, the τ whose ``|Δ| ≤ τ`` share of ES's moved weights
  is about that level (:func:`sparsity_taus`): the thresholds ``zoopt analyze`` then applies.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..metrics import magnitude_histogram, magnitude_shares, relative_drift


def sparsity_taus(base: Mapping, trained: Mapping, levels: Sequence[float]) -> list[float]:
    """τ whose ``|Δ| ≤ τ`` share of the moved weights is about each level (from a 400-bin
    histogram of log10|Δ|: the upper edge of the bin where the cumulative share reaches it)."""
    counts, edges = magnitude_histogram(base, trained, bins=400)
    total = counts.sum()
    if not total:
        return []
    cum = np.cumsum(counts) / total
    return [float(10 ** edges[min(int(np.searchsorted(cum, float(s))) + 1, len(edges) - 1)]) for s in levels]


def weight_numbers(c3: Mapping, alpha: float, base: Mapping, es: Mapping, grpo: Mapping) -> dict:
    """``{"drift", "alpha", "tau_paper", "tau_scaled", "shares", "taus"}`` (module docstring) of the
    state dicts ``base``, ``es``, ``grpo``; ``c3``: the spec's ``c3`` section."""
    drift = {"es": relative_drift(base, es), "grpo": relative_drift(base, grpo)}
    paper_tau = float(c3["paper_tau"])
    scaled = paper_tau * alpha / float(c3["paper_lr"])
    shares = {f"{m} τ={t:g} ({label})": magnitude_shares(base, p, t)
              for m, p in (("es", es), ("grpo", grpo)) for label, t in (("paper", paper_tau), ("scaled to α", scaled))}
    return {"drift": drift, "alpha": alpha, "tau_paper": paper_tau, "tau_scaled": scaled, "shares": shares,
            "taus": sparsity_taus(base, es, c3["sparsity"])}
