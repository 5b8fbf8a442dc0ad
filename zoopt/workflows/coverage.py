"""Population coverage (the argument of the paper's Lemmas 2–3): does a population of
perturbed models cover more problems at K samples than K samples of its center?

For a center θ (a trained model), noise ε and scale σ, draw ``M`` members ``θ + σ·εᵢ``
(seeds from ``SeedSequence([seed, i, 0xC0FE])``).  On each held-out problem ``x``:

* (a) **population**: every member samples one completion (temperature ``T``, sampling seed
  ``seed + i``); ``c_pop(x)`` of the ``M`` members are correct, and Pass@K over *K different
  members* is the unbiased ``1 − C(M − c_pop, K) / C(M, K)`` (:func:`zoopt.metrics.pass_at_k`
  with ``n = M``: a uniformly random K-subset of members);
* (b) **center**: θ samples ``M`` completions; ``c_θ(x)`` are correct and Pass@K is the same
  estimator with ``n = M`` samples of θ.

Reported per K: both means, the paired difference (a) − (b) with its 95 % bootstrap CI over
problems, the mean success rates ``p̄_pop = mean c_pop/M`` and ``p_θ = mean c_θ/M`` (the
lemma's comparison is at equal mean success: read the gap beside them), and the spread of the
members' own success rates (each member's share of problems solved: mean, std, min, max).
Both sides sample with the same evaluation settings (:func:`zoopt.workflows.evaluate.evaluate`, no
greedy pass) on the same problems.
"""

from __future__ import annotations

import numpy as np

from ..hparams import check_key
from ..metrics import bootstrap_ci, pass_at_k
from ..noise import noise_from_dict
from .builders import build_engine, build_objective, eval_kwargs
from .evaluate import evaluate


def member_seed(seed: int, i: int) -> int:
    """The noise seed of member ``i``."""
    return int(np.random.SeedSequence([int(seed), int(i), 0xC0FE]).generate_state(1)[0])


def population_coverage(cfg: dict, members: int, ks, *, sigma: float | None = None, noise: dict | None = None,
                        progress=None) -> dict:
    """Measure (a) and (b) of the module docstring for ``cfg["model"]`` (a run config: engine,
    objective, ``eval`` block, ``seed``); ``sigma`` and ``noise`` default to the config's.
    Returns a JSON-able dict with ``per_problem`` counts, per-K results and the member spread."""
    if isinstance(members, bool) or not isinstance(members, int) or members < 1:
        raise ValueError(f"--members must be an integer ≥ 1, got {members!r}")
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1 or ks[-1] > members:
        raise ValueError(f"coverage ks must lie in [1, members={members}], got {ks}")
    sigma = check_key("sigma", cfg["sigma"] if sigma is None else sigma)
    noise_obj = noise_from_dict(dict(noise if noise is not None else cfg["noise"]))
    objective = build_objective(cfg)
    base = eval_kwargs(cfg)
    seed = int(cfg["seed"])
    common = dict(base, greedy=False, ks=(1,))
    engine = build_engine(cfg, objective)
    try:
        member_correct = []
        for i in range(members):
            engine.perturb(noise_obj, member_seed(seed, i), sigma)
            try:
                result = evaluate(engine, objective, **{**common, "n_samples": 1, "seed": seed + i})
            finally:
                engine.restore()
            member_correct.append([int(r["n_correct"]) for r in result.per_problem])
            if progress:
                progress("members", i + 1, members)
        center = evaluate(engine, objective, **{**common, "n_samples": members, "seed": seed})
    finally:
        engine.close()
    return coverage_from_counts(np.asarray(member_correct), [int(r["n_correct"]) for r in center.per_problem],
                                ks, sigma=sigma, seed=seed)


def coverage_from_counts(member_correct: np.ndarray, center_correct, ks, sigma: float, seed: int = 0) -> dict:
    """The report of the module docstring from ``member_correct[i, x]`` ∈ {0, 1} (member i's one
    sample on problem x) and ``center_correct[x]`` (correct samples of θ out of ``M``)."""
    m = np.asarray(member_correct, dtype=np.int64)
    members, n_problems = m.shape
    c_pop = m.sum(axis=0)
    c_center = np.asarray(center_correct, dtype=np.int64)
    rates = m.mean(axis=1)
    by_k = {}
    for k in ks:
        a = np.array([pass_at_k(members, int(c), k) for c in c_pop])
        b = np.array([pass_at_k(members, int(c), k) for c in c_center])
        d = a - b
        by_k[str(k)] = {"population": float(a.mean()), "center": float(b.mean()), "difference": float(d.mean()),
                        "difference_ci": list(bootstrap_ci(d, n_boot=2000, seed=seed)),
                        "population_ci": list(bootstrap_ci(a, seed=seed)), "center_ci": list(bootstrap_ci(b, seed=seed)),
                        "per_problem_difference": d.tolist()}
    return {"members": members, "n_problems": n_problems, "sigma": sigma, "ks": [int(k) for k in ks],
            "mean_success_population": float(c_pop.mean() / members),
            "mean_success_center": float(c_center.mean() / members),
            "member_success": {"mean": float(rates.mean()), "std": float(rates.std()), "min": float(rates.min()),
                               "max": float(rates.max()), "rates": rates.tolist()},
            "by_k": by_k, "per_problem": {"population_correct": c_pop.tolist(), "center_correct": c_center.tolist()}}


def coverage_lines(record: dict) -> list[str]:
    """Readable lines of a coverage record: per K both Pass@K and the difference with its CI."""
    s = record["member_success"]
    lines = [f"population coverage: {record['members']} members at σ = {record['sigma']:g}, "
             f"{record['n_problems']} problems; mean success population {record['mean_success_population']:.4f}, "
             f"center {record['mean_success_center']:.4f}; members' success rates mean {s['mean']:.4f} "
             f"std {s['std']:.4f} [{s['min']:.4f}, {s['max']:.4f}]"]
    for k, r in record["by_k"].items():
        lo, hi = r["difference_ci"]
        lines.append(f"  K = {k}: population {r['population']:.4f}  center {r['center']:.4f}  "
                     f"difference {r['difference']:+.4f}  95 % CI [{lo:+.4f}, {hi:+.4f}]")
    return lines
