"""A study's outcome: every claim of its spec judged from the records of its finished runs.

:func:`judge_claims` is stage 4's input to the report (:func:`zoopt.study.report.write_report`):
``{claim: {"verdicts", "numbers"[, "plots"]}}`` in the order of ``spec["claims"]``, each from
:mod:`zoopt.study.claims` (C1–C8) or :mod:`zoopt.study.narrowing` (C1S).  Its inputs are plain
data the runner (:mod:`zoopt.workflows.study`) gathered:

* ``tuned[m]["moved"]`` — whether ES / GRPO moved under some tuned setting (a method that did
  not is judged ``not drawn``);
* ``evals[run]`` — a run's ``eval.json``; ``results[run]`` — its ``result.json``; ``runs`` — the
  plan (:func:`zoopt.workflows.study_seeds.plan_runs`: ``{run: {"method", "phases", ...}}``);
* ``c3`` — C3's analysis record (``analysis/c3/c3.json``), ``c8`` — C8's
  (``analysis/c8.json``), for the claims that name them;
* ``coverage`` — C1S's ``(points, base)`` (:func:`zoopt.workflows.study_seeds.coverage_points`);
* ``pooled_entropy[m]`` — C2's held-out evaluation of ``m`` with per-problem entropy averaged
  over its training seeds (:func:`zoopt.workflows.study_seeds.pooled_eval`).

Training curves are read from the runs' ``metrics.jsonl`` (:func:`training_curves`).
"""

from __future__ import annotations

from typing import Sequence

from ..config import default_config
from ..runs.rundir import RunDir
from . import claims as C
from .narrowing import c1_strong


def c6_runs(spec: dict) -> dict[int, str]:
    """C6's run per population size (:func:`zoopt.study.claims.population_runs`)."""
    es_population = spec["es"].get("population_size", default_config("train")["population_size"])
    return C.population_runs(spec["c6"]["population_sizes"], es_population)


def training_curves(results: dict, key: str, names: Sequence[str] = ("es", "grpo")) -> dict:
    """``{run: [(completions used, value)]}`` of ``key`` in the training logs of ``names`` (those
    among ``results``): one point per step whose record holds ``key``, at the completions the run
    had used by the end of that step."""
    out = {}
    for name in names:
        if name not in results:
            continue
        points, used = [], 0
        for p in results[name]["phases"]:
            for rec in RunDir(p["dir"]).read_metrics():
                if "reward_mean" not in rec:  # a periodic evaluation line, not a step
                    continue
                used += p["completions_per_step"]
                if rec.get(key) is not None:
                    points.append((used, rec[key]))
        out[name] = points
    return out


def judge_claims(spec: dict, tuned: dict, evals: dict, results: dict, runs: dict, *, c3: dict | None = None,
                 c8: dict | None = None, coverage: tuple[dict, dict] | None = None,
                 pooled_entropy: dict | None = None) -> dict:
    """Every claim of ``spec["claims"]`` judged (module docstring); a claim's input left ``None``
    while the spec names the claim is a ``TypeError``."""
    moved = {m: tuned[m]["moved"] for m in ("es", "grpo")}
    ks, seed, claims = [int(k) for k in spec["eval"]["ks"]], int(spec["bootstrap_seed"]), {}
    for cid in spec["claims"]:
        if cid == "C1":
            claims[cid] = C.c1(evals, ks, moved, seed)
        elif cid == "C1S":
            points, base = coverage
            claims[cid] = c1_strong(points, base, ks, seed)
            trained = [n for n, r in runs.items() if r["phases"]]
            claims[cid]["numbers"]["training_reward"] = training_curves(results, "reward_mean", trained)
        elif cid == "C2":
            claims[cid] = C.c2({**evals, **pooled_entropy}, training_curves(results, "entropy"), moved, seed)
        elif cid == "C3":
            claims[cid] = C.c3(c3["drift"], c3["shares"], c3["thresholds"], evals, float(spec["c3"]["margin"]),
                               moved, seed)
            claims[cid]["numbers"].update(tau_paper=c3["tau_paper"], tau_scaled=c3["tau_scaled"], alpha=c3["alpha"])
            claims[cid]["plots"] = [c3["histogram"]]
        elif cid == "C4":
            claims[cid] = C.c4(evals, moved, seed)
            claims[cid]["numbers"]["final_training_reward"] = {
                r: results[r]["phases"][-1]["reward_last"] for r in ("es", "es_raw", "es_centered_rank")}
        elif cid == "C5":
            claims[cid] = C.c5(evals, moved, seed)
        elif cid == "C6":
            claims[cid] = C.c6(evals, c6_runs(spec), moved, seed)
        elif cid == "C7":
            claims[cid] = C.c7(evals, ks, moved, seed)
        else:
            claims[cid] = C.c8(c8, moved)
    return claims
