"""``report.md``, ``report.json`` and the plots of a finished study.

``report.json`` holds everything: the spec, the tuning stage (grid, trials, choices, whether
each method moved), every run's summary, and per claim its numbers and verdicts (each with
the statement tested, the mean per-problem difference, its 95 % paired-bootstrap CI and the
margin).  ``report.md`` is the same for reading: a verdict table first, then one section per
claim.  Plots (PNG, in the study directory): ``pass_at_k.png`` (every run), ``entropy.png``
(training entropy of ES and GRPO), ``c7_points.png`` (Pass@1 vs Pass@K of every run),
``c8_coverage.png`` (population vs center), and C3's ``analysis/c3/magnitude_histogram.png``.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from ..reporting import plots
from ..runs.jsonable import jsonable
from . import narrowing
from .claims import TITLES, summarise

INCONCLUSIVE_RULE = ("A verdict is drawn from a paired bootstrap over the held-out problems (2000 resamples, "
                     "95 % percentile CI of the mean per-problem difference): **reproduced** when the CI lies above "
                     "the margin (0 unless stated), **contradicted** when it lies below, **inconclusive** when the "
                     "95 % CI crosses it (for margin 0: crosses zero). **not drawn**: a method in the comparison did "
                     "not move under any tuned setting, so no verdict is drawn from noise.")


def _f(v, spec=".4f") -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else format(v, spec)
    return str(v)


def _plots(study_dir: Path, spec: dict, results: dict, claims: dict) -> list[str]:
    ks = [int(k) for k in spec["eval"]["ks"]]
    out = [plots.plot_pass_at_k({r: {k: res["eval"][f"pass@{k}"] for k in ks} for r, res in results.items()},
                                study_dir / "pass_at_k.png")]
    if "C2" in claims:
        out.append(plots.plot_entropy(claims["C2"]["numbers"]["training_curves"], study_dir / "entropy.png"))
    if "C7" in claims:
        K = claims["C7"]["numbers"]["K"]
        pts = {r: (res["eval"]["pass@1"], res["eval"][f"pass@{K}"]) for r, res in results.items()}
        out.append(plots.plot_points(pts, study_dir / "c7_points.png", "Pass@1", f"Pass@{K}"))
    if "C8" in claims:
        by_k = claims["C8"]["numbers"]["by_k"]
        out.append(plots.plot_pass_at_k({"population (K members)": {int(k): r["population"] for k, r in by_k.items()},
                                         "center (K samples of θ)": {int(k): r["center"] for k, r in by_k.items()}},
                                        study_dir / "c8_coverage.png"))
    if "C3" in claims:
        out += claims["C3"].get("plots", [])
    if "C1S" in claims:
        numbers = claims["C1S"]["numbers"]
        temperatures = sorted({float(r["temperature"]) for rows in numbers["points"].values() for r in rows})
        for t in temperatures:
            name = "coverage_pass_at_k.png" if t == float(spec["eval"]["temperature"]) else f"coverage_pass_at_k_T{t:g}.png"
            out.append(plots.plot_pass_at_k(narrowing.curves(numbers, t), study_dir / name))
        out.append(plots.plot_reward_curves(numbers["training_reward"], study_dir / "training_reward.png"))
    return [str(p) for p in out]


def write_report(study_dir: Path, spec: dict, tuned: dict, results: dict, claims: dict,
                 wall: dict | None = None) -> dict:
    """Write ``report.json``, ``report.md`` and the plots; return the report.  ``wall``: the
    study's wall time (``total_s`` over its ``segments``, one per invocation)."""
    figures = _plots(study_dir, spec, results, claims)
    ks = [int(k) for k in spec["eval"]["ks"]]
    runs = {r: {"schedule": " → ".join(p["method"] for p in res["phases"]) or "base",
                "steps": [p["steps"] for p in res["phases"]], "completions": res["completions"],
                "checksum": res["checksum"], "train_s": res["train_s"], "eval_s": res["eval_s"],
                **{f"pass@{k}": res["eval"][f"pass@{k}"] for k in ks},
                "greedy_accuracy": res["eval"].get("greedy_accuracy"), "entropy": res["eval"].get("entropy")}
            for r, res in results.items()}
    claims = {c: {**v, "verdicts": [x.to_dict() for x in v["verdicts"]]} for c, v in claims.items()}
    report = jsonable({"name": spec["name"], "profile": spec["profile"], "written": time.strftime("%Y-%m-%d %H:%M:%S"),
                        "rule": INCONCLUSIVE_RULE, "spec": spec, "tuning": tuned, "runs": runs,
                        "claims": {c: {"title": TITLES[c], "summary": summarise(v["verdicts"]), **v}
                                   for c, v in claims.items()}, "plots": figures, "wall_time": wall})
    (study_dir / "report.json").write_text(json.dumps(report, indent=2))
    (study_dir / "report.md").write_text(markdown(report))
    return report


def markdown(report: dict) -> str:
    spec, lines = report["spec"], []
    lines += [f"# Study `{report['name']}` (profile `{report['profile']}`)", "",
              f"Model `{spec['model']}`, objective `{spec['objective']}`, budget {spec['budget']} sampled completions "
              f"per method, held-out evaluation: {spec['eval']['n_problems']} problems × {spec['eval']['n_samples']} "
              f"samples at T = {spec['eval']['temperature']}.", "", *_wall_lines(report.get("wall_time")),
              report["rule"], "",
              "| claim | hypothesis | verdict | mean diff | 95 % CI | margin |", "|---|---|---|---|---|---|"]
    for cid, claim in report["claims"].items():
        for v in claim["verdicts"]:
            ci = v["ci"]
            lines.append(f"| {cid} | {v['statement']} | **{v['verdict']}** | {_f(v['mean'])} | "
                         f"{'[' + _f(ci[0]) + ', ' + _f(ci[1]) + ']' if ci else '–'} | {_f(v['margin'], 'g')} |")
    lines += ["", "## Tuning (validation split carved from train)", ""]
    for method, t in report["tuning"].items():
        if t.get("skipped"):
            lines.append(f"- {method}: {t['note']}")
            continue
        lines.append(f"- **{method}**: grid {t['grid']}, {len(t['trials'])} trials × {t['budget_per_trial']} sampled "
                     f"completions; validation {t['metric']} of the base {_f(t['base_value'])}; chosen {t['chosen']} "
                     f"({t['metric']} {_f(t['chosen_value'])})." + (f" **{t['note']}.**" if t["note"] else ""))
    lines += ["", "## Runs (equal budget)", ""]
    ks = [int(k) for k in spec["eval"]["ks"]]
    cols = ["schedule", "steps", "completions", *[f"pass@{k}" for k in ks], "greedy_accuracy", "entropy", "train_s"]
    lines += ["| run | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for r, row in report["runs"].items():
        lines.append(f"| {r} | " + " | ".join(_f(row[c]) if not isinstance(row[c], list) else
                                                "+".join(map(str, row[c])) or "0" for c in cols) + " |")
    for cid, claim in report["claims"].items():
        lines += ["", f"## {cid}: {claim['title']} — {claim['summary']}", ""]
        for v in claim["verdicts"]:
            note = f" ({v['note']})" if v["note"] else ""
            lines.append(f"- {v['statement']}: **{v['verdict']}**{note}")
        if cid == "C1S":
            lines += ["", *_coverage_table(claim["numbers"])]
            continue
        lines += ["", "```json", json.dumps(_brief(claim["numbers"]), indent=1), "```"]
    lines += ["", "Plots: " + ", ".join(f"`{Path(p).name}`" for p in report["plots"]), ""]
    return "\n".join(lines)


def _wall_lines(wall: dict | None) -> list[str]:
    if not wall:
        return []
    return [f"Wall time: {wall['total_s'] / 3600:.2f} h ({wall['total_s']:.0f} s) over {len(wall['segments'])} "
            f"invocation(s), as recorded after each unit of work (a killed invocation loses its last unit's time).", ""]


def _coverage_table(numbers: dict) -> list[str]:
    """C1S: every point of every method (seed means, points), its difference from the base at K
    with the CI over problems and over seeds."""
    K = numbers["K"]
    lines = [f"First point whose Pass@{K} CI lies wholly below the base: "
             + ", ".join(f"{m}: {v or 'none'}" for m, v in numbers["first_below_base_at_K"].items()), "",
             f"| method | point | T | completions | seeds | Pass@1 | Pass@{K} | base Pass@{K} | Δ Pass@{K} (points) "
             f"| 95 % CI over problems | 95 % CI over seeds |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for method, by_t in numbers.get("sizing", {}).items():
        for t, z in by_t.items():
            lines.insert(1, f"Sizing ({method}, T = {t}): sd of the per-problem Pass@{K} difference {z['sd_d']:.4f} over "
                            f"{z['problems']} problems → {z['problems_needed']} problems resolve {100 * z['delta']:g} "
                            f"points at 80 % power.")
    for method, rows in numbers["points"].items():
        for r in rows:
            one, at = r["by_k"]["1"], r["by_k"][str(K)]
            ci, cs = at["ci_problems"], at["ci_seeds"]
            lines.append(f"| {method} | {r['label']} | {float(r['temperature']):g} | {r['completions']} | {at['seeds']} "
                         f"| {100 * one['method']:.1f} | {100 * at['method']:.1f} | {100 * at['base']:.1f} "
                         f"| {100 * at['difference']:+.1f} | "
                         + (f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]" if ci else "–") + " | "
                         + (f"[{100 * cs[0]:+.1f}, {100 * cs[1]:+.1f}]" if cs else "–") + " |")
    return lines


def _brief(numbers: dict) -> dict:
    """The numbers without long per-item lists (curves, rates): those are in report.json."""
    drop = ("training_curves", "rates", "per_problem_difference", "training_reward")
    return {k: (_brief(v) if isinstance(v, dict) else v) for k, v in numbers.items() if k not in drop}
