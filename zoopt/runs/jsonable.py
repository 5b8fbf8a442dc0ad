"""Strict JSON from result dicts: what every ``*.json`` a run or a study writes passes through."""

from __future__ import annotations

import math


def jsonable(obj):
    """``obj`` with NaN/inf floats as ``None``/strings and tuples as lists (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj
