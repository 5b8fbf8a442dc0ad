"""Maj@k: majority vote (self-consistency) over ``k`` sampled answers.

Wang et al. (2023), "Self-Consistency Improves Chain of Thought Reasoning in Language Models".
The vote is the most frequent extracted answer among the ``k``; ``None`` (no answer extracted)
never votes.  maj@k is 1 when the vote equals the gold answer, else 0, averaged over subsets.

Tie rule: when ``t`` answers tie for most frequent and the gold answer is one of them, the vote
is correct with probability ``1/t`` under uniform tie-breaking; we return that expected value,
so the result is deterministic.  A subset with no answers at all scores 0.

When ``n > k`` the score is averaged over ``subsets`` random ``k``-subsets (without replacement)
drawn from a seeded :class:`numpy.random.Generator` (never the global RNG); when ``n == k``
all answers are used.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np


def majority_vote_score(answers: Sequence[str | None], gold: str) -> float:
    """Expected correctness of a majority vote with uniform tie-breaking (``None`` abstains)."""
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return 0.0
    top = max(votes.values())
    tied = [a for a, v in votes.items() if v == top]
    return 1.0 / len(tied) if gold in tied else 0.0


def maj_at_k(answers: Sequence[str | None], gold: str, k: int, subsets: int = 16,
             seed: int = 0) -> float:
    """Maj@k of one problem's ``n = len(answers)`` extracted answers against ``gold``."""
    n = len(answers)
    if not (isinstance(k, int) and 1 <= k <= n):
        raise ValueError(f"maj_at_k: k must satisfy 1 ≤ k ≤ n={n}, got k={k!r}")
    if not (isinstance(subsets, int) and subsets >= 1):
        raise ValueError(f"maj_at_k: subsets must be an integer ≥ 1, got subsets={subsets!r}")
    if k == n:
        return majority_vote_score(answers, gold)
    rng = np.random.default_rng(seed)
    total = 0.0
    for _ in range(subsets):
        idx = rng.choice(n, size=k, replace=False)
        total += majority_vote_score([answers[i] for i in idx], gold)
    return total / subsets
