"""How a model's per-problem success rates are spread: the shape that decides whether RL can
narrow coverage.

With ``n`` samples of problem p of which ``c_p`` are correct, its success rate is
``r_p = c_p / n``.  Pass@k for large k counts the problems with any success; whether training
can *lower* it depends on how many problems sit at small but non-zero ``r_p`` (Yue et al. 2025,
"Does RL really incentivize reasoning capacity beyond the base model?": RL pushes ``r_p`` to 0
or 1).  So a calibration reports

* ``share_between(counts, n, 0.01, 0.1)`` — the share of problems with ``0.01 ≤ r_p ≤ 0.1``
  (bounds included; with n = 64 that is 1 to 6 correct samples);
* ``rate_histogram(counts, n)`` — the share of problems in each bin of :data:`RATE_BINS`.
"""

from __future__ import annotations

from typing import Sequence

#: (label, low, high, low included, high included) of :func:`rate_histogram`
RATE_BINS = (
    ("0", 0.0, 0.0, True, True),
    ("(0, 0.01)", 0.0, 0.01, False, False),
    ("[0.01, 0.1]", 0.01, 0.1, True, True),
    ("(0.1, 0.5]", 0.1, 0.5, False, True),
    ("(0.5, 1)", 0.5, 1.0, False, False),
    ("1", 1.0, 1.0, True, True),
)


def _rates(counts: Sequence[int], n: int) -> list[float]:
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n must be an integer ≥ 1, got n={n!r}")
    if not counts:
        raise ValueError("counts is empty: no problems")
    bad = [c for c in counts if not (isinstance(c, int) and 0 <= c <= n)]
    if bad:
        raise ValueError(f"each count must be an integer in [0, n={n}], got {bad[0]!r}")
    return [c / n for c in counts]


def share_between(counts: Sequence[int], n: int, low: float, high: float) -> float:
    """The share of problems whose success rate ``c/n`` lies in ``[low, high]`` (inclusive)."""
    rates = _rates(counts, n)
    return sum(low <= r <= high for r in rates) / len(rates)


def rate_histogram(counts: Sequence[int], n: int) -> dict[str, float]:
    """``{bin label: share of problems}`` over :data:`RATE_BINS` (the shares sum to 1)."""
    rates = _rates(counts, n)

    def inside(r, low, high, low_in, high_in):
        return (low < r or (low_in and r == low)) and (r < high or (high_in and r == high))

    return {label: sum(inside(r, *edges) for r in rates) / len(rates) for label, *edges in RATE_BINS}
