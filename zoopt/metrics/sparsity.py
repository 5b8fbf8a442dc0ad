"""How large the individual weight updates are: magnitude shares, histogram, thresholding.

With ``Δ = θ − θ₀`` elementwise (computed as ``trained.float() − base.float()``: float32, exact
for bf16/fp16 inputs; float64 tensors are differenced in float64), "Understanding Evolution
Strategies for LLM Reasoning" reports the share of non-zero updates with ``|Δ| ≤ τ`` at
``τ = 1.5·10⁻³`` and checks, by resetting every element with ``|Δ| ≤ τ`` to its base value,
how much of the improvement the small updates carry.  Only floating-point tensors count.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from .drift import StateDict, paired_tensors

TAU = 1.5e-3  # the paper's threshold


def _delta(b: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    wide = torch.float64 if torch.float64 in (b.dtype, t.dtype) or not (
        b.is_floating_point() and t.is_floating_point()) else torch.float32
    return t.detach().to(wide) - b.detach().to(wide)


def magnitude_shares(base: StateDict, trained: StateDict, tau: float = TAU) -> dict:
    """Counts and shares of update magnitudes.

    Returns ``total`` (elements), ``zero`` (Δ = 0), ``small`` (0 < |Δ| ≤ τ), ``large`` (|Δ| > τ),
    ``nonzero`` (= small + large), ``share_zero = zero/total``, and, as in the paper's
    "% of updates below τ", ``share_small = small/nonzero`` and ``share_large = large/nonzero``
    (NaN when nothing moved), and ``tau``.
    """
    if not tau >= 0:
        raise ValueError(f"magnitude_shares: tau must be ≥ 0, got tau={tau!r}")
    total = zero = large = 0
    for _, b, t in paired_tensors(base, trained):
        a = _delta(b, t).abs()
        total += a.numel()
        zero += int((a == 0).sum())
        large += int((a > tau).sum())
    nonzero = total - zero
    small = nonzero - large
    return {
        "tau": float(tau), "total": total, "zero": zero, "small": small, "large": large,
        "nonzero": nonzero,
        "share_zero": zero / total if total else math.nan,
        "share_small": small / nonzero if nonzero else math.nan,
        "share_large": large / nonzero if nonzero else math.nan,
    }


def magnitude_histogram(base: StateDict, trained: StateDict,
                        bins: int | Sequence[float] = 60) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of ``log10|Δ|`` over the non-zero Δ of all floating-point tensors.

    ``bins`` is a count (equal-width bins spanning the observed range) or explicit edges in
    log10 units.  Returns ``(counts, edges)`` as numpy arrays, like :func:`numpy.histogram`.
    """
    logs = []
    for _, b, t in paired_tensors(base, trained):
        a = _delta(b, t).abs()
        a = a[a > 0]
        if a.numel():
            logs.append(torch.log10(a.to(torch.float64)).numpy())
    values = np.concatenate(logs) if logs else np.zeros(0)
    if isinstance(bins, int) and values.size == 0:
        return np.histogram(values, bins=bins, range=(0.0, 1.0))
    return np.histogram(values, bins=bins if isinstance(bins, int) else np.asarray(bins, float))


def threshold_state_dict(base: StateDict, trained: StateDict, tau: float = TAU) -> dict:
    """``θ_τ = where(|Δ| > τ, θ, θ₀)`` for every tensor: keep the updates larger than τ.

    Dtypes are preserved (base and trained must share each tensor's dtype).  ``τ = 0`` gives
    ``trained`` bit for bit (where Δ = 0 the values are equal) and ``τ = inf`` gives ``base``.
    Non-float tensors follow the same rule on their numeric difference.
    """
    if not tau >= 0:
        raise ValueError(f"threshold_state_dict: tau must be ≥ 0, got tau={tau!r}")
    out = {}
    for name, b, t in paired_tensors(base, trained, floating_only=False):
        if b.dtype != t.dtype:
            raise ValueError(f"key {name!r}: dtype {b.dtype} in base vs {t.dtype} in trained")
        keep = _delta(b, t).abs() > tau
        out[name] = torch.where(keep.to(t.device), t.detach(), b.detach().to(t.device))
    return out
