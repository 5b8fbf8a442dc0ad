"""C1–C8 of ``zoopt study``: each claim's numbers and verdicts from the runs' evaluations.

Inputs are plain data: ``evals[name]`` is a run's ``eval.json`` (``summary`` and
``per_problem``, every run evaluated on the same held-out problems with the same seed), so
problem ``p`` of one run pairs with problem ``p`` of another; ``moved[method]`` says whether
ES / GRPO moved under some tuned setting.  Every verdict is
:func:`zoopt.study.verdict.judge` of per-problem differences (a paired bootstrap over
problems, 95 %): reproduced when the CI lies above the margin, contradicted below it,
inconclusive when it crosses it.  ``K`` below is the largest ``eval.ks``.

* **C1** coverage: ``pass@1(ES) − pass@1(base) > 0``; ``pass@K(ES) − pass@K(base) > 0``;
  GRPO keeps less of its gain at K than ES:
  ``[g_ES(K) − g_ES(1)] − [g_GRPO(K) − g_GRPO(1)] > 0`` with ``g_m(k) = pass@k(m) − pass@k(base)``
  per problem (the difference form of "gain at K relative to gain at 1": a ratio is undefined
  when a gain at 1 is zero; the ratios are reported beside it).
* **C2** entropy: GRPO's entropy falls more than ES's:
  ``[H_base − H_GRPO] − [H_base − H_ES] = H_ES − H_GRPO > 0`` (per-problem mean token entropy of
  the held-out samples); training curves are plotted from ``metrics.jsonl``.
* **C3** drift and sparsity: ``D_rel(ES)/D_rel(GRPO)`` and the share of moved weights with
  ``|Δ| ≤ τ`` (one number per model: no CI, reported as measured, the ratio's verdict is its
  side of 1); the thresholded checkpoint nearest 78 % sparsity loses at most ``margin`` of
  Pass@1: ``pass@1(θ_τ) − pass@1(θ_ES) > −margin``.
* **C4** shaping: ``pass@1(z-score) − pass@1(raw) > 0`` and against centered-rank.
* **C5** estimator: ``pass@1(one-point) − pass@1(two-point) > 0`` (the paper's choice is the
  better one).
* **C6** population size: ``pass@1(N_max) − pass@1(N_min) > 0`` at equal completions.
* **C7** schedules: ``pass@K(ES→GRPO) − pass@K(GRPO) > 0`` and ``pass@K(GRPO→ES) − pass@K(GRPO) > 0``;
  the points (pass@1, pass@K) of every run are plotted.
* **C8** population coverage: ``pass@K(population) − pass@K(center) > 0`` at the largest K
  (:mod:`zoopt.workflows.coverage`).
"""

from __future__ import annotations

from .verdict import NOT_DRAWN, REPRODUCED, CONTRADICTED, Verdict, judge, not_drawn, paired

TITLES = {"C1": "reasoning coverage (Pass@k of base, ES, GRPO)",
          "C1S": "C1's strong form: below the base at large k? (seeds, checkpoints, temperatures)",
          "C2": "entropy",
          "C3": "drift and sparsity", "C4": "reward shaping", "C5": "estimator", "C6": "population size",
          "C7": "schedules ES→GRPO and GRPO→ES", "C8": "population coverage (Lemmas 2–3)"}


def column(ev: dict, key: str) -> list[float]:
    """Per-problem values of ``key`` (``pass@k``, ``entropy``) of one run's evaluation."""
    values = [rec.get(key) for rec in ev["per_problem"]]
    if any(v is None for v in values):
        raise ValueError(f"evaluation lacks per-problem {key!r}")
    return [float(v) for v in values]


def _guard(claim: str, statement: str, methods, moved: dict) -> Verdict | None:
    still = [m for m in methods if not moved.get(m, True)]
    if still:
        return not_drawn(claim, statement, f"{', '.join(still)} did not move under any tuned setting")
    return None


def _compare(claim, statement, evals, a, b, key, moved, methods, seed, margin=0.0) -> Verdict:
    guard = _guard(claim, statement, methods, moved)
    if guard:
        return guard
    return judge(claim, statement, paired(column(evals[a], key), column(evals[b], key)), margin, seed)


def c1(evals: dict, ks: list[int], moved: dict, seed: int = 0) -> dict:
    K = max(ks)
    v = [_compare("C1", "ES raises Pass@1 over base", evals, "es", "base", "pass@1", moved, ["es"], seed),
         _compare("C1", f"ES raises Pass@{K} over base", evals, "es", "base", f"pass@{K}", moved, ["es"], seed)]
    statement = f"GRPO's gain at Pass@{K} relative to its gain at Pass@1 is smaller than ES's"
    guard = _guard("C1", statement, ["es", "grpo"], moved)
    gains = {m: {k: paired(column(evals[m], f"pass@{k}"), column(evals["base"], f"pass@{k}")) for k in (1, K)}
             for m in ("es", "grpo")}
    dd = (gains["es"][K] - gains["es"][1]) - (gains["grpo"][K] - gains["grpo"][1])
    v.append(guard or judge("C1", statement, dd, 0.0, seed))
    ratios = {m: (float(gains[m][K].mean() / gains[m][1].mean()) if gains[m][1].mean() != 0 else None)
              for m in gains}
    below = [k for k in ks if evals["grpo"]["summary"][f"pass@{k}"] < evals["base"]["summary"][f"pass@{k}"]]
    table = {m: {k: evals[m]["summary"][f"pass@{k}"] for k in ks} for m in ("base", "es", "grpo")}
    return {"verdicts": v, "numbers": {"pass_at_k": table, "gain_ratio_K_over_1": ratios,
                                       "grpo_below_base_at_k": below}}


def c2(evals: dict, curves: dict, moved: dict, seed: int = 0) -> dict:
    v = [_compare("C2", "GRPO's token entropy falls more than ES's", evals, "es", "grpo", "entropy", moved,
                  ["es", "grpo"], seed)]
    numbers = {m: evals[m]["summary"].get("entropy") for m in ("base", "es", "grpo")}
    return {"verdicts": v, "numbers": {"held_out_entropy": numbers, "training_curves": curves}}


def c3(drift: dict, shares: dict, thresholds: list[dict], evals: dict, margin: float, moved: dict,
       seed: int = 0) -> dict:
    """``drift[m]`` D_rel; ``shares[label]`` shares dicts; ``thresholds`` records with ``share_reverted``
    and ``eval`` (an eval.json of θ_τ)."""
    es, grpo = drift["es"], drift["grpo"]
    ratio = (es / grpo) if grpo else (float("inf") if es else None)
    statement = "ES drifts more than GRPO: D_rel(ES)/D_rel(GRPO) > 1 (paper: 40.7–44.1×)"
    guard = _guard("C3", statement, ["es", "grpo"], moved)
    side = None if ratio is None else (REPRODUCED if ratio > 1 else CONTRADICTED)
    v = [guard or Verdict("C3", statement, side or "inconclusive", ratio, None, 1.0, 0,
                          "one number per pair of models: no CI over problems")]
    if thresholds:
        near = min(thresholds, key=lambda t: abs(t["share_reverted"] - 0.78))
        stmt = (f"thresholding ES's update at {near['share_reverted']:.0%} sparsity loses at most "
                f"{margin * 100:g} points of Pass@1 (paper: ≤ 0.5 at ~78 %)")
        v.append(_guard("C3", stmt, ["es"], moved) or judge(
            "C3", stmt, paired(column(near["eval"], "pass@1"), column(evals["es"], "pass@1")), -margin, seed))
    points = [{"tau": t["tau"], "share_reverted": t["share_reverted"], "pass@1": t["eval"]["summary"]["pass@1"]}
              for t in thresholds]
    return {"verdicts": v, "numbers": {"d_rel": drift, "ratio": ratio, "shares": shares, "thresholded": points}}


def c4(evals: dict, moved: dict, seed: int = 0) -> dict:
    v = [_compare("C4", f"z-score beats {name} on held-out Pass@1", evals, "es", run, "pass@1", moved, ["es"], seed)
         for name, run in (("raw", "es_raw"), ("centered-rank", "es_centered_rank")) if run in evals]
    return {"verdicts": v, "numbers": {"pass@1": {r: evals[r]["summary"]["pass@1"] for r in
                                                  ("es", "es_raw", "es_centered_rank") if r in evals}}}


def c5(evals: dict, moved: dict, seed: int = 0) -> dict:
    v = [_compare("C5", "one-point beats antithetic two-point at equal completions (held-out Pass@1)", evals,
                  "es", "es_two_point", "pass@1", moved, ["es"], seed)]
    return {"verdicts": v, "numbers": {"pass@1": {r: evals[r]["summary"]["pass@1"] for r in ("es", "es_two_point")}}}


def population_runs(sizes: list[int], es_population: int) -> dict[int, str]:
    """C6's run per population size N: ``es`` itself where N is its population size (the same
    configuration, so it is not trained twice), else ``es_n{N}``."""
    return {int(n): "es" if int(n) == int(es_population) else f"es_n{int(n)}" for n in sizes}


def c6(evals: dict, runs: dict[int, str], moved: dict, seed: int = 0) -> dict:
    """``runs``: :func:`population_runs`."""
    lo, hi = min(runs), max(runs)
    v = [_compare("C6", f"N={hi} beats N={lo} at equal completions (held-out Pass@1)", evals, runs[hi],
                  runs[lo], "pass@1", moved, ["es"], seed)]
    return {"verdicts": v, "numbers": {"pass@1": {n: evals[r]["summary"]["pass@1"] for n, r in runs.items()},
                                       "runs": runs}}


def c7(evals: dict, ks: list[int], moved: dict, seed: int = 0) -> dict:
    K = max(ks)
    v = [_compare("C7", f"{label} keeps more Pass@{K} than GRPO alone", evals, run, "grpo", f"pass@{K}", moved,
                  ["es", "grpo"], seed) for label, run in (("ES→GRPO", "es_grpo"), ("GRPO→ES", "grpo_es"))]
    points = {r: (evals[r]["summary"]["pass@1"], evals[r]["summary"][f"pass@{K}"])
              for r in ("base", "es", "grpo", "es_grpo", "grpo_es")}
    return {"verdicts": v, "numbers": {"points_pass@1_pass@K": points, "K": K}}


def c8(coverage: dict, moved: dict) -> dict:
    K = max(coverage["ks"])
    at = coverage["by_k"][str(K)]
    statement = f"Pass@{K} from {K} different members ≥ Pass@{K} from {K} samples of the center"
    guard = _guard("C8", statement, ["es"], moved)
    v = [guard or judge("C8", statement, at["per_problem_difference"], 0.0, 0,
                        note=f"mean success: population {coverage['mean_success_population']:.4f}, "
                             f"center {coverage['mean_success_center']:.4f}")]
    table = {k: {x: r[x] for x in ("population", "center", "difference", "difference_ci")}
             for k, r in coverage["by_k"].items()}
    return {"verdicts": v, "numbers": {"by_k": table, "member_success": {k: coverage["member_success"][k] for k in
                                                                          ("mean", "std", "min", "max")},
                                       "mean_success_population": coverage["mean_success_population"],
                                       "mean_success_center": coverage["mean_success_center"],
                                       "members": coverage["members"], "sigma": coverage["sigma"]}}


def summarise(verdicts: list[Verdict]) -> str:
    """One word for a claim: its verdicts' common value, else ``mixed``."""
    kinds = {v["verdict"] if isinstance(v, dict) else v.verdict for v in verdicts}
    if not kinds:
        return NOT_DRAWN
    return kinds.pop() if len(kinds) == 1 else "mixed"
