"""A claim's verdict from a paired bootstrap over problems.

For a comparison of A against B on the same ``P`` held-out problems, the per-problem
differences ``dₚ = aₚ − bₚ`` (for example Pass@1 of ES minus Pass@1 of the base on problem p)
are resampled with replacement (:func:`zoopt.metrics.bootstrap_ci`, seeded): the 95 %
percentile interval ``[lo, hi]`` of the resampled means ``d̄*`` is the CI of ``d̄``.  Pairing
removes the between-problem variance that two independent CIs would carry.

The verdict of the hypothesis "``d̄ > margin``" (``margin`` is 0 unless a claim states a
tolerance, e.g. C3's "loses at most 0.5 points": ``margin = −0.005``):

* ``reproduced``   — ``lo > margin``: the whole CI lies above the margin;
* ``contradicted`` — ``hi < margin``: the whole CI lies below it;
* ``inconclusive`` — otherwise: the 95 % CI crosses the margin (with ``margin = 0``: it
  crosses zero).

``not drawn`` is a fourth state the study uses when a method did not move at all under any
tuned setting: a verdict from noise is not drawn (see :mod:`zoopt.workflows.study`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from ..metrics import bootstrap_ci

REPRODUCED, CONTRADICTED, INCONCLUSIVE, NOT_DRAWN = "reproduced", "contradicted", "inconclusive", "not drawn"
N_BOOT = 2000


@dataclass(frozen=True)
class Verdict:
    """One tested hypothesis: ``statement`` holds when ``mean > margin`` (see the module doc)."""

    claim: str
    statement: str
    verdict: str
    mean: float | None = None
    ci: tuple[float, float] | None = None
    margin: float = 0.0
    n_problems: int = 0
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def decide(ci: tuple[float, float] | None, margin: float = 0.0) -> str:
    """``reproduced`` / ``contradicted`` / ``inconclusive`` from the CI ``(lo, hi)`` of ``d̄``."""
    if ci is None or not all(math.isfinite(x) for x in ci):
        return INCONCLUSIVE
    lo, hi = ci
    if lo > margin:
        return REPRODUCED
    if hi < margin:
        return CONTRADICTED
    return INCONCLUSIVE


def paired(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    """``a − b`` per problem; both lists must cover the same problems in the same order."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"paired: need two equal-length, non-empty per-problem lists, got {x.shape} and {y.shape}")
    return x - y


def judge(claim: str, statement: str, diffs: Sequence[float], margin: float = 0.0,
          seed: int = 0, note: str = "") -> Verdict:
    """The verdict of "mean of ``diffs`` > ``margin``" by a paired bootstrap over problems."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0 or not np.all(np.isfinite(d)):
        return Verdict(claim, statement, INCONCLUSIVE, None, None, margin, int(d.size),
                       note or "no finite per-problem differences")
    ci = bootstrap_ci(d, n_boot=N_BOOT, seed=seed)
    return Verdict(claim, statement, decide(ci, margin), float(d.mean()), ci, margin, int(d.size), note)


def not_drawn(claim: str, statement: str, why: str) -> Verdict:
    """A hypothesis the study refuses to judge (a method that did not move): ``why`` says so."""
    return Verdict(claim, statement, NOT_DRAWN, note=why)
