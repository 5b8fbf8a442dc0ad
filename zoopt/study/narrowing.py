"""C1S, C1's strong form: does a trained model fall *below* the base at large k — at which
checkpoint, at which temperature — over several training seeds?

The paper's headline (and Yue et al. 2025, "Does RL really incentivize reasoning capacity beyond
the base model?") is that GRPO raises Pass@1 but lowers Pass@k at large k below the base
model's, while ES raises both.  For a method ``m`` (``grpo``, ``es``), trained with seeds
``s = 1 … S``, evaluated at points ``t`` (checkpoints along training and the final weights) and
temperatures ``T``, on the held-out problems ``p = 1 … P`` (the same problems and sampling seeds
for every model), with ``K`` the largest ``eval.ks``:

    d_{s,p}(k) = pass@k(m, s, t, T)_p − pass@k(base, T)_p
    d̄_p(k)     = (1/S) Σ_s d_{s,p}(k)                 (the seed-averaged paired difference)
    D_s(k)     = (1/P) Σ_p d_{s,p}(k)                 (one number per seed)

* **over problems**: the 95 % percentile-bootstrap CI of the mean of ``d̄_p`` (2000 resamples
  of problems, :func:`zoopt.study.verdict.judge`);
* **over seeds**: the 95 % percentile-bootstrap CI of the mean of ``D_s`` (resampling seeds;
  with 3 seeds it can take only 10 distinct values, so it is reported, with every ``D_s``,
  beside the problem CI, not used for the verdict).

Verdicts, one per method and temperature at the final weights: "``m`` falls below the base at
Pass@K", i.e. the mean of ``−d̄_p(K)`` is > 0 — **reproduced** when the whole problem CI of
``pass@K(m) − pass@K(base)`` lies below 0, **contradicted** when it lies above 0,
**inconclusive** otherwise.  The numbers hold the same for every checkpoint and k, and the
first checkpoint whose CI lies wholly below the base.

**Sizing.** For each method and temperature at the final weights, ``sizing`` holds ``sd_d``, the
standard deviation over problems of the seed-averaged ``d̄_p(K)``, and the number of problems
``n = ((z_{0.975} + z_{0.8}) · sd_d / 0.03)²`` that resolves 3 points of Pass@K at 80 % power
(:mod:`zoopt.metrics.power`) — run on a pilot, it sizes the held-out set of the study itself.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..metrics import bootstrap_ci, paired_sample_size
from .verdict import N_BOOT, judge, paired

METHOD_LABELS = {"grpo": "GRPO", "es": "ES"}
DELTA = 0.03  # the Pass@K difference (3 points) the held-out set must resolve


def per_problem(ev: dict, key: str) -> np.ndarray:
    """Per-problem values of ``key`` (``pass@k``) of one evaluation (an ``eval.json``)."""
    values = [rec.get(key) for rec in ev["per_problem"]]
    if any(v is None for v in values):
        raise ValueError(f"evaluation lacks per-problem {key!r}")
    return np.asarray(values, dtype=np.float64)


def seed_bootstrap_ci(values: Sequence[float], seed: int = 0) -> list[float] | None:
    """95 % percentile-bootstrap CI of the mean of per-seed values (None for fewer than 2 seeds)."""
    if len(values) < 2:
        return None
    return list(bootstrap_ci(np.asarray(values, dtype=np.float64), n_boot=N_BOOT, seed=seed))


def point_difference(method_evals: Sequence[dict], base_eval: dict, k: int, seed: int = 0) -> dict:
    """The differences of one method at one point and temperature (module doc), at ``k``."""
    key = f"pass@{k}"
    base = per_problem(base_eval, key)
    diffs = [paired(per_problem(ev, key), base) for ev in method_evals]
    pooled = np.mean(diffs, axis=0)
    verdict = judge("C1S", "", pooled, 0.0, seed)
    per_seed = [float(d.mean()) for d in diffs]
    return {"k": k, "method": float(np.mean([per_problem(ev, key).mean() for ev in method_evals])),
            "base": float(base.mean()), "difference": float(pooled.mean()),
            "ci_problems": list(verdict.ci) if verdict.ci else None, "per_seed": per_seed,
            "ci_seeds": seed_bootstrap_ci(per_seed, seed), "seeds": len(method_evals)}


def c1_strong(points: dict, base: dict, ks: list[int], seed: int = 0) -> dict:
    """C1S's verdicts and numbers.

    ``points[method]``: a list of ``{"label", "step", "completions", "temperature", "final",
    "evals": [eval.json per seed]}``; ``base[str(T)]``: the base model's ``eval.json`` at T.
    """
    K = max(ks)
    verdicts, table, first_below, sizing = [], {}, {}, {}
    for method, entries in points.items():
        name = METHOD_LABELS.get(method, method)
        rows = []
        for entry in entries:
            base_eval = base[str(float(entry["temperature"]))]
            row = {x: entry[x] for x in ("label", "step", "completions", "temperature", "final")}
            row["by_k"] = {str(k): point_difference(entry["evals"], base_eval, k, seed) for k in ks}
            rows.append(row)
            if entry["final"]:
                below = -np.mean([paired(per_problem(ev, f"pass@{K}"), per_problem(base_eval, f"pass@{K}"))
                                  for ev in entry["evals"]], axis=0)
                at = row["by_k"][str(K)]
                ci_seeds = at["ci_seeds"]
                note = (f"{len(entry['evals'])} seeds; per-seed differences "
                        + ", ".join(f"{d:+.4f}" for d in at["per_seed"])
                        + (f"; CI over seeds [{ci_seeds[0]:+.4f}, {ci_seeds[1]:+.4f}]" if ci_seeds else ""))
                verdicts.append(judge("C1S", f"{name} falls below the base at Pass@{K} (final weights, "
                                             f"T = {float(entry['temperature']):g})", below, 0.0, seed, note=note))
                sizing.setdefault(method, {})[f"{float(entry['temperature']):g}"] = held_out_size(below, len(entry["evals"]))
        table[method] = rows
        first_below[method] = next((r["label"] for r in rows if _below(r["by_k"][str(K)])), None)
    return {"verdicts": verdicts, "numbers": {"K": K, "points": table, "first_below_base_at_K": first_below,
                                              "sizing": sizing}}


def held_out_size(differences: Sequence[float], seeds: int, delta: float = DELTA) -> dict:
    """``sd_d`` of the per-problem (seed-averaged) differences and the problems that resolve a
    mean difference of ``delta`` at 80 % power, two-sided α = 0.05
    (:func:`zoopt.metrics.paired_sample_size`)."""
    d = np.asarray(differences, dtype=np.float64)
    sd = float(d.std(ddof=1)) if d.size > 1 else 0.0
    return {"sd_d": sd, "delta": delta, "seeds": seeds, "problems": int(d.size),
            "problems_needed": paired_sample_size(sd, delta)}


def _below(at: dict) -> bool:
    ci = at["ci_problems"]
    return ci is not None and ci[1] < 0


def curves(numbers: dict, temperature: float) -> dict[str, dict[int, float]]:
    """``{label: {k: pass@k}}`` for :func:`zoopt.reporting.plots.plot_pass_at_k`: the base and every
    point of every method at ``temperature`` (seed means)."""
    out: dict[str, dict[int, float]] = {}
    for method, rows in numbers["points"].items():
        for row in rows:
            if float(row["temperature"]) != float(temperature):
                continue
            if "base" not in out:
                out["base"] = {int(k): v["base"] for k, v in row["by_k"].items()}
            out[f"{METHOD_LABELS.get(method, method)} {row['label']}"] = {int(k): v["method"]
                                                                          for k, v in row["by_k"].items()}
    return out
