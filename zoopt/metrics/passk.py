"""Pass@k: the unbiased estimator of Chen et al. (2021), "Evaluating Large Language Models
Trained on Code", eq. (1).

From ``n`` samples of which ``c`` are correct,

    pass@k = 1 − C(n−c, k) / C(n, k) = 1 − Π_{i=n−c+1}^{n} (1 − k/i),

the probability that a uniformly random ``k``-subset of the ``n`` samples contains at least one
correct sample.  The product form avoids huge binomials (their Fig. 3 code).  ``pass@1 = c/n``.
"""

from __future__ import annotations

from typing import Iterable, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct (requires 0 ≤ c ≤ n, 1 ≤ k ≤ n)."""
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"pass_at_k: n must be an integer ≥ 1, got n={n!r}")
    if not (isinstance(c, int) and 0 <= c <= n):
        raise ValueError(f"pass_at_k: c must satisfy 0 ≤ c ≤ n={n}, got c={c!r}")
    if not (isinstance(k, int) and 1 <= k <= n):
        raise ValueError(f"pass_at_k: k must satisfy 1 ≤ k ≤ n={n}, got k={k!r}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_at_k_table(counts: Sequence[tuple[int, int]], ks: Iterable[int]) -> dict[int, float]:
    """Mean pass@k over problems, for each ``k``: ``{k: (1/P) Σ_p pass_at_k(n_p, c_p, k)}``.

    ``counts`` holds one ``(n, c)`` pair per problem.
    """
    counts = list(counts)
    if not counts:
        raise ValueError("pass_at_k_table: counts is empty")
    return {int(k): sum(pass_at_k(n, c, k) for n, c in counts) / len(counts) for k in ks}
