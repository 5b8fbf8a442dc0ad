"""Train/test splits that never share a problem, and seeded sampling within a split.

Each distinct problem has a string key; ``blake2b(key)`` maps it to ``u ∈ [0, 1)`` and the
problem belongs to ``test`` iff ``u < test_fraction``.  The assignment depends on the key only
(not on any seed), so every seed's ``train`` is disjoint from every seed's ``test``.  Sampling
within a split draws candidates from a caller's seeded ``numpy.random.Generator`` (never the
global RNG) and keeps the first ``n`` distinct ones that fall in the split, so a smaller ``n``
gives a prefix of a larger one.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Callable, Iterator, TypeVar

from zoopt.objective import check_split

T = TypeVar("T")


def unit_hash(key: str) -> float:
    """``blake2b(key)`` as a float in ``[0, 1)`` (stable across processes and Python versions)."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8, person=b"zoopt-split").digest()
    return int.from_bytes(digest, "big") / 2.0**64


def split_of(key: str, test_fraction: float) -> str:
    """``"test"`` if ``unit_hash(key) < test_fraction`` else ``"train"``."""
    return "test" if unit_hash(key) < test_fraction else "train"


def sample_split(candidates: Iterator[T], key: Callable[[T], str], split: str, n: int,
                 test_fraction: float, max_draws: int | None, what: str) -> list[T]:
    """The first ``n`` distinct candidates (by ``key``) that belong to ``split``.

    ``candidates`` is an endless iterator (a seeded generator).  ``max_draws=None`` draws until
    ``n`` are found: only for a caller that knows the split holds ``n`` (a counted space).

    Raises a one-line ValueError when ``max_draws`` candidates yield fewer than ``n`` (the split
    of the problem space is too small for ``n``).
    """
    check_split(split)
    if n < 0:
        raise ValueError(f"n must be ≥ 0, got {n}")
    seen: set[str] = set()
    out: list[T] = []
    for _ in (range(max_draws) if max_draws is not None else itertools.count()):
        if len(out) == n:
            break
        item = next(candidates)
        k = key(item)
        if k in seen or split_of(k, test_fraction) != split:
            continue
        seen.add(k)
        out.append(item)
    if len(out) < n:
        raise ValueError(f"{what}: found only {len(out)} distinct {split!r} problems in "
                         f"{max_draws} draws, {n} asked; ask for fewer or widen the problem space")
    return out
