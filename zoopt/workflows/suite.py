"""Evaluating one model on several objectives — a *suite* — and the paper's table.

A suite is a list of objective names: one of ``zoopt/configs/suites.yaml`` (``paper-math``:
gsm8k, math500, aime24, aime25, amc23, minerva, olympiadbench; ``paper-nonmath``:
gpqa_diamond) or any comma-separated list.  :func:`evaluate_suite` builds the engine once and
evaluates it on each objective with the same settings (:func:`~zoopt.workflows.builders.eval_kwargs`:
``eval.n_problems`` problems of each, ``n_samples`` samples at ``eval.temperature``), each
with its own system prompt.  An objective whose data cannot be had here
(:class:`~zoopt.objective.DataUnavailable`: no hub, no cache, no offline source) becomes a row
that says so, and the others go on.

The table (:func:`suite_table`) has the paper's layout: one row per benchmark and an
``average`` row (the unweighted mean over the benchmarks that were evaluated, as the paper
averages benchmark scores); columns pass@k for each k and maj@K for the largest K (with
``ks = 1,16,32``: Pass@1, Pass@16, Pass@32, Maj@32), all in percent, plus the problems
evaluated, where the data came from and the checks that timed out.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from importlib import resources
from typing import Callable

import yaml

from ..objective import DataUnavailable
from .builders import build_engine, build_objective, evaluate_config
from .evaluate import EvalResult


@dataclass
class BenchmarkResult:
    """One objective of a suite: its evaluation, or why there is none (``error``)."""

    name: str
    result: EvalResult | None = None
    error: str | None = None
    data_source: str | None = None


def suites() -> dict[str, dict]:
    """``{name: {"about": ..., "objectives": [...]}}`` from ``zoopt/configs/suites.yaml``."""
    return yaml.safe_load(resources.files("zoopt.configs").joinpath("suites.yaml").read_text())


def suite_objectives(suite: str | None, objectives: str | None) -> list[str]:
    """The objective names of ``--suite`` or of a comma-separated ``--objective`` list."""
    if suite:
        known = suites()
        if suite not in known:
            close = difflib.get_close_matches(suite, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"--suite: unknown suite {suite!r} (known: {', '.join(known)}){hint}")
        return list(known[suite]["objectives"])
    names = [n.strip() for n in str(objectives or "").split(",") if n.strip()]
    if len(set(names)) != len(names):
        raise ValueError(f"--objective lists a benchmark twice: {objectives!r}")
    if not names:
        raise ValueError("a suite needs --suite NAME or --objective a,b,c")
    return names


def evaluate_suite(cfg: dict, names: list[str], progress=None,
                   announce: Callable[[int, str], None] | None = None) -> list[BenchmarkResult]:
    """Evaluate ``cfg["model"]`` on each objective in ``names`` (see the module doc);
    ``announce(i, name)`` is called before the ``i``-th (from 1)."""
    objectives: dict = {}
    for name in names:  # every name and argument checked before the model loads
        try:
            objectives[name] = build_objective({**cfg, "objective": name})
        except DataUnavailable as exc:
            objectives[name] = exc
    engine = build_engine(cfg)
    default_prompt = engine.system_prompt
    out: list[BenchmarkResult] = []
    try:
        for i, (name, objective) in enumerate(objectives.items(), 1):
            if announce is not None:
                announce(i, name)
            if isinstance(objective, DataUnavailable):
                out.append(BenchmarkResult(name, error=str(objective)))
                continue
            engine.system_prompt = objective.system_prompt or default_prompt
            try:
                result = evaluate_config(engine, objective, cfg, progress=progress)
            except DataUnavailable as exc:
                out.append(BenchmarkResult(name, error=str(exc)))
                continue
            out.append(BenchmarkResult(name, result=result, data_source=objective.data_source))
    finally:
        engine.close()
    return out


def suite_table(results: list[BenchmarkResult], ks: tuple[int, ...]) -> list[dict]:
    """The paper's table as rows of ``{"benchmark", "pass@k"..., "maj@K", ...}`` (percent; None
    where not evaluated), the ``average`` row last."""
    majority = f"maj@{max(ks)}"
    metrics = [f"pass@{k}" for k in ks] + [majority]
    rows = []
    for b in results:
        s = b.result.summary if b.result is not None else {}
        row = {"benchmark": b.name, **{m: _percent(s.get(m)) for m in metrics},
               "n_problems": s.get("n_problems"), "source": b.data_source,
               "timed_out": s.get("score_timed_out"), "note": b.error}
        rows.append(row)
    done = [r for r in rows if r["note"] is None]
    average = {"benchmark": "average", "n_problems": sum(r["n_problems"] or 0 for r in done),
               "source": None, "timed_out": sum(r["timed_out"] or 0 for r in done),
               "note": None if len(done) == len(rows) else f"mean of the {len(done)} of {len(rows)} evaluated"}
    for m in metrics:
        values = [r[m] for r in done if r[m] is not None]
        average[m] = sum(values) / len(values) if values and len(values) == len(done) else None
    return rows + [average]


def metric_columns(rows: list[dict]) -> list[str]:
    """The metric columns of a table's rows, in order (pass@k by k, then maj@K)."""
    return [k for k in rows[0] if k.startswith(("pass@", "maj@"))]


def to_markdown(rows: list[dict], title: str) -> str:
    """The table as GitHub markdown (metrics with one decimal, '–' where missing)."""
    metrics = metric_columns(rows)
    head = ["benchmark", *[m.replace("pass@", "Pass@").replace("maj@", "Maj@") for m in metrics],
            "problems", "source", "timed out"]
    lines = [f"**{title}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["benchmark"], *[_fmt(r[m]) for m in metrics], str(r["n_problems"] or "–"),
                 r["source"] or "–", "–" if r["timed_out"] is None else str(r["timed_out"])]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {r['note']}" if r["note"].startswith(r["benchmark"]) else f"- {r['benchmark']}: {r['note']}"
             for r in rows if r["note"]]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def _percent(value):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return 100.0 * float(value)


def _fmt(value) -> str:
    return "–" if value is None else f"{value:.1f}"
