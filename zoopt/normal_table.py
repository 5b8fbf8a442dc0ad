"""The counter noise stream's Gaussian table: ``|z| = Φ⁻¹(1 − v/2)`` at knots of the two-sided
tail probability ``v``, for the table inverse CDF of :mod:`zoopt.counter_stream` (whose
docstring gives the formula that reads it).

Octave ``p`` (0 … ``OCTAVES − 1``) covers ``v ∈ [2^(p−53), 2^(p−52))`` with ``2**KNOT_BITS`` knots
``v = 2^(p−53)·(1 + j/2**KNOT_BITS)``, computed once per process in float64
(:class:`statistics.NormalDist`) and rounded to float32; the slopes are the exact differences
of those float32 knots.  The bytes are pinned by :data:`TABLE_CHECKSUM`: a platform whose
float64 quantiles differ in a bit that survives the rounding is refused rather than drifting.
"""

from __future__ import annotations

import hashlib
import threading
from statistics import NormalDist

import torch

KNOT_BITS = 10            # 2**KNOT_BITS knots per octave of the tail probability
OCTAVES = 53              # y = 1 … 2**53 - 1
# blake2b-128 of the float32 tables (base then slope, little-endian); a platform whose float64
# quantiles differ in a bit that survives rounding to float32 is refused rather than drifting.
# (The float32 knots equal those of 120-bit mpmath; the closest one lies 3.8e-13 (relative) from
# a float32 rounding boundary, ~500× NormalDist's float64 error of 8e-16.)
TABLE_CHECKSUM = "fa936f7ae79fb10077ba2a9a7e8779ec"


def _quantile_knots() -> list[list[float]]:
    """``|z|`` at the knots, float64: row p, column j = 0 … 2**KNOT_BITS."""
    inv, m = NormalDist().inv_cdf, 1 << KNOT_BITS
    return [[-inv((1.0 + j / m) * 2.0 ** (p - 53) / 2) for j in range(m + 1)] for p in range(OCTAVES)]


def _build_tables() -> tuple[torch.Tensor, torch.Tensor]:
    """``(base, slope)``, float32, ``2·64·2**KNOT_BITS`` entries indexed by
    ``sign·64·2**KNOT_BITS + (e mod 64)·2**KNOT_BITS + j`` with ``e = 1023 + p`` the biased float64
    exponent of ``y`` (p = 0…52 gives 53 distinct rows ``e mod 64``; the other 11 rows of each
    half are NaN and unreachable) — so the index is three bit fields, no subtraction.

    ``base`` is the knot's quantile rounded to float32, and ``slope = (next knot − knot)·2⁻²⁴``
    from those float32 knots — exact (two nearby float32 numbers differ by a float32 number), so
    the table depends on nothing but the float32 knots, and the interpolation meets every knot.
    The negative half is the negation of the positive one."""
    knots = torch.tensor(_quantile_knots(), dtype=torch.float64).to(torch.float32).to(torch.float64)
    m = 1 << KNOT_BITS
    base = torch.full((2, 64, m), float("nan"), dtype=torch.float32)
    slope = torch.full((2, 64, m), float("nan"), dtype=torch.float32)
    rows = [(1023 + p) % 64 for p in range(OCTAVES)]
    steps = (knots[:, 1:] - knots[:, :-1]) * 2.0 ** -24                # exact in float64
    base[0, rows], slope[0, rows] = knots[:, :-1].to(torch.float32), steps.to(torch.float32)
    if not torch.equal(slope[0, rows].to(torch.float64), steps):       # exact in float32 too
        raise RuntimeError("counter noise stream: a knot step is not a float32 number")
    base[1], slope[1] = -base[0], -slope[0]
    return base.reshape(-1), slope.reshape(-1)


def table_checksum(base: torch.Tensor, slope: torch.Tensor) -> str:
    h = hashlib.blake2b(digest_size=16)
    for t in (base, slope):
        h.update(t.contiguous().view(torch.int32).numpy().tobytes())
    return h.hexdigest()


_TABLES: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
_LOCK = threading.Lock()


def tables(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The checksum-verified Gaussian tables on ``device`` (built once per process)."""
    key = str(device)
    if key not in _TABLES:
        with _LOCK:
            if "cpu" not in _TABLES:
                base, slope = _build_tables()
                got = table_checksum(base, slope)
                if got != TABLE_CHECKSUM:
                    raise RuntimeError(f"counter noise stream: the Gaussian table's checksum is {got}, not the pinned "
                                       f"{TABLE_CHECKSUM}; this platform's float64 quantiles differ")
                _TABLES["cpu"] = (base, slope)
            if key not in _TABLES:
                _TABLES[key] = tuple(t.to(device) for t in _TABLES["cpu"])
    return _TABLES[key]


__all__ = ["KNOT_BITS", "OCTAVES", "TABLE_CHECKSUM", "table_checksum", "tables"]
