"""How many held-out problems a paired comparison needs.

For per-problem differences ``d_p = a_p − b_p`` (two models on the same problems) with standard
deviation ``sd_d``, a two-sided test at level α has power ``1 − β`` against a true mean
difference ``δ`` when

    n = ((z_{1−α/2} + z_{1−β}) · sd_d / δ)²

problems are used (the normal approximation; e.g. Julious 2004, "Sample sizes for clinical
trials with Normal data", eq. 5 without the small-sample t correction).  With α = 0.05 and 80 %
power, ``z_{0.975} + z_{0.8} = 1.95996 + 0.84162 = 2.80159``.
"""

from __future__ import annotations

import math
from statistics import NormalDist


def paired_sample_size(sd_d: float, delta: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """The smallest whole number of problems ≥ ``((z_{1−α/2} + z_{power})·sd_d/delta)²``."""
    if not (sd_d >= 0 and math.isfinite(sd_d)):
        raise ValueError(f"sd_d must be a finite number ≥ 0, got {sd_d!r}")
    if not (delta > 0 and math.isfinite(delta)):
        raise ValueError(f"delta must be a finite number > 0, got {delta!r}")
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"alpha and power must lie in (0, 1), got alpha={alpha!r}, power={power!r}")
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return math.ceil((z * sd_d / delta) ** 2 - 1e-9)
