"""The coverage frontier: how much Pass@k each method gives up for how much Pass@1.

Every evaluated checkpoint ``c`` of every run ``r`` (a method trained with one seed) is a point
``(ΔPass@1, ΔPass@k)`` against the base, paired over the same ``P`` held-out problems:

    d1_{r,c,p} = pass@1(r, c)_p − pass@1(base)_p        dk_{r,c,p} = pass@k(r, c)_p − pass@k(base)_p
    point     = ((1/P) Σ_p d1_{r,c,p}, (1/P) Σ_p dk_{r,c,p})

with each coordinate's 95 % percentile-bootstrap CI over problems.  A run's curve starts at the
base (``c = 0``: both 0) and follows its checkpoints in training order (the final weights last).

**Several studies.**  Each run's differences are taken against its own study's base evaluation.
Studies run in other sessions start from the same base *model* (a warm-up built from the same
recipe), but the warm-up's bits depend on the machine and library versions that built it (the
coverage study's base and a later rebuild differ by 0.005 points of Pass@1), so the bases need
not be bit-identical; they must be evaluated on the same problems in the same order, and the
report lists every study's base (its weights' digest from ``base.json`` and its Pass@k) so
that a difference between them is in view.  The same run in two studies under the same label
(a short study that checkpoints the first steps of the runs another study checkpoints every 2
steps) is one curve over both studies' steps, once its shared evaluations are checked equal.

**Matched Pass@1.**  At a target gain ``t > 0`` a run's curve is read where it first reaches
``t``: between the consecutive points ``c−1, c`` with ``D1_{c−1} < t ≤ D1_c``,

    w = (t − D1_{c−1}) / (D1_c − D1_{c−1}),     ΔPass@k(t) = (1−w)·Dk_{c−1} + w·Dk_c

(``D`` the means over problems).  A method's value at ``t`` is the mean over its seeds, and the
difference of two methods the difference of those means.  The CI comes from the per-problem
data: each bootstrap resample of the problems (the same resample for every run, so methods stay
paired) recomputes every mean, the crossing, ``w`` and the interpolated value; the 2.5 and 97.5
percentiles of the resampled values are the CI.  A run that never reaches ``t`` has no value
there (``None``), in the estimate and in a resample alike; ``reached`` is the share of
resamples in which every seed of the method reached ``t``, and the CI is taken over those
(the report prints a share between 0 and 1 % or 99 and 100 % to a tenth, rounded away from the
ends, so a CI over a handful of resamples never reads as 0 % or 100 %).

The input is what the study commits (:mod:`zoopt.workflows.study`): a study directory holds
``runs/base/eval.json`` and, per run ``runs/<method>[-s<seed>]/``, ``checkpoints/phase<i>-
<method>-<step>.json`` and the final ``eval.json`` with ``result.json`` (its phases' steps);
every evaluation carries per-problem ``pass@k``.  No weights are read.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..metrics import bootstrap_ci
from . import narrowing
from .verdict import N_BOOT

RUN_NAME = re.compile(r"^(?P<method>[A-Za-z][\w.]*?)(?:-s(?P<seed>\d+))?$")
CHECKPOINT_NAME = re.compile(r"^phase(?P<phase>\d+)-.+-(?P<step>\d+)\.json$")


@dataclass(frozen=True)
class Curve:
    """One run's evaluations in training order: ``steps[c]`` and ``evals[c]`` (the base not included)."""

    name: str
    method: str
    seed: int
    steps: tuple[int, ...]
    evals: tuple[dict, ...]
    base: dict = field(compare=False, repr=False)  # its study's base evaluation


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"frontier: no evaluation at {path}") from None


def per_problem(ev: dict, key: str, where: str) -> np.ndarray:
    """:func:`zoopt.study.narrowing.per_problem`, its one-line error naming the evaluation."""
    try:
        return narrowing.per_problem(ev, key)
    except ValueError as e:
        raise ValueError(f"frontier: {where}: {e}") from None


def split_label(arg: str | Path) -> tuple[Path, str | None]:
    """``DIR`` or ``DIR=LABEL`` (a command-line study argument) → ``(DIR, LABEL or None)``."""
    text = str(arg)
    if "=" in text:
        path, label = text.rsplit("=", 1)
        if not label.strip():
            raise ValueError(f"frontier: {text!r}: an empty label after '='")
        return Path(path), label.strip()
    return Path(text), None


def load_study(study_dir: str | Path, label: str | None = None) -> tuple[dict, list[Curve]]:
    """``(base evaluation, curves)`` of one study directory (module docstring).  With ``label``
    its runs count as other methods — ``grpo`` becomes ``grpo (LABEL)`` — so studies of one method
    with different settings (GRPO's ``beta``) stay apart."""
    tag = "" if label is None else f" ({label})"
    runs = Path(study_dir) / "runs"
    if not runs.is_dir():
        raise FileNotFoundError(f"frontier: {study_dir} has no runs/ directory (not a study directory)")
    base = _read(runs / "base" / "eval.json")
    curves = []
    for run in sorted(p for p in runs.iterdir() if p.is_dir() and p.name != "base"):
        match = RUN_NAME.match(run.name)
        if match is None or not (run / "eval.json").is_file():
            continue  # not a run, or one not evaluated yet
        phases = _read(run / "result.json")["phases"]
        offsets = np.cumsum([0] + [int(ph["steps"]) for ph in phases]).tolist()
        points = []
        for ck in (run / "checkpoints").glob("*.json") if (run / "checkpoints").is_dir() else ():
            m = CHECKPOINT_NAME.match(ck.name)
            if m is None:
                raise ValueError(f"frontier: checkpoint file name {ck.name!r} is not phase<i>-<method>-<step>.json")
            points.append((offsets[int(m["phase"])] + int(m["step"]), _read(ck)))
        points.sort(key=lambda sp: sp[0])
        final = (offsets[-1], _read(run / "eval.json"))
        if not points or points[-1][0] < final[0]:
            points.append(final)
        curves.append(Curve(run.name + tag, match["method"] + tag, int(match["seed"] or 0),
                            tuple(s for s, _ in points), tuple(e for _, e in points), base))
    return base, curves


def _same_problems(base: dict, other: dict, where: str) -> None:
    golds = [r.get("gold") for r in base["per_problem"]]
    if [r.get("gold") for r in other["per_problem"]] != golds:
        raise ValueError(f"frontier: {where} is not evaluated on the base's problems (golds differ)")


def differences(curve: Curve, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(d1, dk)``, each ``(1 + C, P)``, against the curve's own base: row 0 the base (zeros),
    row c the c-th evaluation."""
    base = curve.base
    b1, bk = per_problem(base, "pass@1", "the base"), per_problem(base, f"pass@{k}", "the base")
    d1, dk = [np.zeros_like(b1)], [np.zeros_like(bk)]
    for step, ev in zip(curve.steps, curve.evals):
        where = f"{curve.name} at step {step}"
        _same_problems(base, ev, where)
        d1.append(per_problem(ev, "pass@1", where) - b1)
        dk.append(per_problem(ev, f"pass@{k}", where) - bk)
    return np.stack(d1), np.stack(dk)


def crossing(m1: np.ndarray, target: float) -> int | None:
    """The index c of the point where the curve ``m1`` (``(1 + C,)``, the base first) first reaches
    ``target`` — the segment read is ``(c−1, c)`` — or None."""
    hits = np.flatnonzero(m1 >= target)
    return int(hits[0]) if hits.size else None


def interpolate(m1: np.ndarray, mk: np.ndarray, target: float) -> np.ndarray:
    """ΔPass@k where each row's curve ``(m1[..., c], mk[..., c])`` first reaches ``target``
    (module docstring); NaN where it never does.  ``m1``, ``mk``: ``(..., 1 + C)``."""
    if not target > 0:
        raise ValueError(f"frontier: a matched Pass@1 gain must be > 0, got {target!r}")
    reached = m1 >= target
    first = np.argmax(reached, axis=-1)  # the first index at or above; row 0 (the base) is 0 < target
    ok = reached.any(axis=-1)
    c = np.where(ok, first, 1)
    take = lambda a, i: np.take_along_axis(a, i[..., None], axis=-1)[..., 0]  # noqa: E731
    lo1, hi1, lok, hik = take(m1, c - 1), take(m1, c), take(mk, c - 1), take(mk, c)
    w = (target - lo1) / np.where(hi1 > lo1, hi1 - lo1, 1.0)
    return np.where(ok, lok + w * (hik - lok), np.nan)


def frontier_points(curves: Sequence[Curve], ks: Sequence[int], seed: int = 0) -> list[dict]:
    """Every evaluated point of every curve: ΔPass@1 and ΔPass@k for each ``k``, with CIs."""
    rows = []
    for curve in curves:
        per_k = {k: differences(curve, k) for k in ks}
        d1 = next(iter(per_k.values()))[0]
        for c, step in enumerate(curve.steps, start=1):
            row = {"run": curve.name, "method": curve.method, "seed": curve.seed, "step": step,
                   "d_pass@1": float(d1[c].mean()), "d_pass@1_ci": list(bootstrap_ci(d1[c], n_boot=N_BOOT, seed=seed))}
            for k, (_, dk) in per_k.items():
                row[f"d_pass@{k}"] = float(dk[c].mean())
                row[f"d_pass@{k}_ci"] = list(bootstrap_ci(dk[c], n_boot=N_BOOT, seed=seed))
            rows.append(row)
    return rows


def matched(curves: Sequence[Curve], k: int, targets: Sequence[float],
            n_boot: int = N_BOOT, seed: int = 0) -> list[dict]:
    """ΔPass@k of each method at each matched ΔPass@1 ``target``, and each pair's difference,
    with CIs from one shared resampling of the problems (module docstring)."""
    diffs = {c.name: differences(c, k) for c in curves}
    n_problems = next(iter(diffs.values()))[0].shape[1]
    idx = np.random.default_rng(seed).integers(0, n_problems, size=(n_boot, n_problems))
    curve_of = {c.name: c for c in curves}
    methods = sorted({c.method for c in curves})
    by_method = {m: [c.name for c in curves if c.method == m] for m in methods}
    out = []
    for t in targets:
        point, boot = {}, {}
        for name, (d1, dk) in diffs.items():
            point[name] = float(interpolate(d1.mean(axis=1), dk.mean(axis=1), t))
            boot[name] = interpolate(d1[:, idx].mean(axis=2).T, dk[:, idx].mean(axis=2).T, t)  # (n_boot,)
        values = {m: (np.mean([point[n] for n in names]), np.mean([boot[n] for n in names], axis=0))
                  for m, names in by_method.items()}
        row = {"target_d_pass@1": float(t), "k": k, "methods": {}, "differences": {}}
        for m, (est, samples) in values.items():
            row["methods"][m] = _summary(est, samples) | {
                "per_seed": {n: _num(point[n]) for n in by_method[m]},
                "segments": {n: _segment(curve_of[n], crossing(diffs[n][0].mean(axis=1), t)) for n in by_method[m]}}
        for i, a in enumerate(methods):
            for b in methods[i + 1:]:
                row["differences"][f"{a} - {b}"] = _summary(values[a][0] - values[b][0], values[a][1] - values[b][1])
        out.append(row)
    return out


def _segment(curve: Curve, c: int | None) -> list[int] | None:
    """The training steps ``[from, to]`` between which a matched value is interpolated (0: the base)."""
    return None if c is None else [0 if c == 1 else curve.steps[c - 2], curve.steps[c - 1]]


def _num(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def _summary(estimate: float, samples: np.ndarray) -> dict:
    finite = samples[~np.isnan(samples)]
    ci = [float(q) for q in np.quantile(finite, [0.025, 0.975])] if finite.size else None
    return {"value": _num(estimate), "ci": ci, "reached": float(finite.size / samples.size)}


def default_targets(curves: Sequence[Curve], n: int = 3) -> list[float]:
    """``n`` evenly spaced ΔPass@1 gains up to the largest one every run reaches."""
    reach = min(float(differences(c, 1)[0].mean(axis=1).max()) for c in curves)
    if reach <= 0:
        raise ValueError("frontier: some run never raises Pass@1 above the base: give --at explicitly")
    return [math.floor(1e4 * reach * (i + 1) / n) / 1e4 for i in range(n)]  # rounded down: still reached


def combine(studies: Sequence[tuple[dict, list[Curve]]], where: Sequence[str | Path]) -> list[Curve]:
    """All curves of several study directories (``where``: their names, for errors): their bases
    must be evaluated on the same problems (module docstring).  A run name that appears in two
    studies (the same label: the same runs, checkpointed at other steps) is one curve over the
    union of their steps (:func:`merge`)."""
    base, curves = studies[0][0], list(studies[0][1])
    for (other_base, other), name in zip(studies[1:], where[1:]):
        _same_problems(base, other_base, f"the base of {name}")
        known = {c.name: i for i, c in enumerate(curves)}
        for curve in other:
            if curve.name in known:
                curves[known[curve.name]] = merge(curves[known[curve.name]], curve, name)
            else:
                curves.append(curve)
    return curves


def merge(first: Curve, second: Curve, where: str | Path) -> Curve:
    """One run read from two studies (``second`` from ``where``) as one curve over the union of
    their steps.  Only for the same run: the two bases' per-problem evaluations must be equal, and
    so must the run's at every step both hold, and there must be one (a short study that checkpoints step 1 of the runs
    another study checkpoints every 2 steps retrains them bit for bit); else a one-line error."""
    if first.base["per_problem"] != second.base["per_problem"]:
        raise ValueError(f"frontier: run {first.name!r} repeats in {where}, whose base is another evaluation: "
                         "give the study another label (DIR=LABEL)")
    steps = dict(zip(first.steps, first.evals))
    if not set(first.steps) & set(second.steps):
        raise ValueError(f"frontier: run {first.name!r} repeats in {where} with no step in common, so it cannot be "
                         "checked to be the same run: give the study another label (DIR=LABEL)")
    for step, ev in zip(second.steps, second.evals):
        if step in steps and steps[step]["per_problem"] != ev["per_problem"]:
            raise ValueError(f"frontier: run {first.name!r} repeats in {where} with another evaluation at step {step} "
                             "(not the same run): give the study another label (DIR=LABEL)")
        steps.setdefault(step, ev)
    order = sorted(steps)
    return Curve(first.name, first.method, first.seed, tuple(order), tuple(steps[s] for s in order), first.base)


def base_record(study_dir: str | Path, base: dict, ks: Sequence[int]) -> dict:
    """A study's base as the report lists it: its directory, its weights' digest (``base.json``,
    when the study wrote one) and its mean Pass@k."""
    path = Path(study_dir) / "base.json"
    digest = json.loads(path.read_text()).get("digest") if path.is_file() else None
    return {"study": str(study_dir), "digest": digest,
            **{f"pass@{k}": float(per_problem(base, f"pass@{k}", "the base").mean()) for k in (1, *ks)}}


def report(study_dirs: Sequence[str | Path], ks: Sequence[int] = (8, 32, 64), targets: Sequence[float] | None = None,
           match_k: int | None = None, seed: int = 0) -> dict:
    """The frontier of the runs in ``study_dirs`` (each ``DIR`` or ``DIR=LABEL``, :func:`split_label`): every point, and ΔPass@``match_k`` (default the
    largest ``k``) at matched ΔPass@1 ``targets`` (default :func:`default_targets`)."""
    dirs = [split_label(d)[0] for d in study_dirs]
    studies = [load_study(*split_label(d)) for d in study_dirs]
    curves = combine(studies, dirs)
    if not curves:
        raise ValueError(f"frontier: no evaluated runs in {', '.join(map(str, study_dirs))}")
    match_k = max(ks) if match_k is None else match_k
    targets = list(targets) if targets else default_targets(curves)
    return {"studies": [str(d) for d in study_dirs], "ks": list(ks), "n_problems": len(studies[0][0]["per_problem"]),
            "bases": [base_record(d, base, ks) for d, (base, _) in zip(dirs, studies)],
            "runs": {c.name: {"method": c.method, "seed": c.seed, "steps": list(c.steps)} for c in curves},
            "points": frontier_points(curves, ks, seed),
            "matched": matched(curves, match_k, targets, seed=seed), "n_boot": N_BOOT}


def share(reached: float) -> str:
    """``reached`` as the report prints it: whole percents, but a tenth near the ends, rounded away
    from them (7 of 2,000 resamples: "0.4 %", not "0 %"; 1,996: "99.8 %", not "100 %")."""
    if 0 < reached < 0.01:
        return f"{math.ceil(1000 * reached) / 10:.1f} %"
    if 0.99 < reached < 1:
        return f"{math.floor(1000 * reached) / 10:.1f} %"
    return f"{100 * reached:.0f} %"


def markdown(rep: Mapping) -> str:
    """The matched-gain table and the points, as markdown (points in percentage points)."""
    pp = lambda x: "—" if x is None else f"{100 * x:+.1f}"  # noqa: E731
    ci = lambda c: "" if not c else f" [{100 * c[0]:+.1f}, {100 * c[1]:+.1f}]"  # noqa: E731
    lines = [f"Pass@k change at matched Pass@1 change (points, {rep['n_problems']} problems, "
             f"95 % CI over problems, {rep['n_boot']} resamples)", "",
             "| ΔPass@1 | k | method | ΔPass@k | reached | per seed | between steps |",
             "|---:|---:|---|---|---:|---|---|"]
    for row in rep["matched"]:
        for m, v in row["methods"].items():
            seeds = ", ".join(pp(x) for x in v["per_seed"].values())
            spans = ", ".join("—" if s is None else f"{s[0]}–{s[1]}" for s in v["segments"].values())
            lines.append(f"| {pp(row['target_d_pass@1'])} | {row['k']} | {m} | {pp(v['value'])}{ci(v['ci'])} | "
                         f"{share(v['reached'])} | {seeds} | {spans} |")
        for pair, v in row["differences"].items():
            lines.append(f"| {pp(row['target_d_pass@1'])} | {row['k']} | {pair} | {pp(v['value'])}{ci(v['ci'])} | "
                         f"{share(v['reached'])} | | |")
    ks = rep["ks"]
    lines += ["", "| run | step | ΔPass@1 | " + " | ".join(f"ΔPass@{k}" for k in ks) + " |",
              "|---|---:|---|" + "---|" * len(ks)]
    for p in rep["points"]:
        lines.append(f"| {p['run']} | {p['step']} | {pp(p['d_pass@1'])}{ci(p['d_pass@1_ci'])} | "
                     + " | ".join(f"{pp(p[f'd_pass@{k}'])}{ci(p[f'd_pass@{k}_ci'])}" for k in ks) + " |")
    lines += ["", "Each run against its own study's base:", "", "| study | base digest | Pass@1 | "
              + " | ".join(f"Pass@{k}" for k in ks) + " |", "|---|---|---:|" + "---:|" * len(ks)]
    for b in rep["bases"]:
        lines.append(f"| {b['study']} | {b['digest'] or '—'} | "
                     + " | ".join(f"{100 * b[f'pass@{k}']:.2f}" for k in (1, *ks)) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["Curve", "load_study", "differences", "crossing", "interpolate", "frontier_points", "matched", "default_targets",
           "combine", "merge", "base_record", "report", "markdown"]
