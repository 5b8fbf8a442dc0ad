"""The report of ``zoopt compare`` (:mod:`zoopt.workflows.compare`): its table, ``compare.md``,
its plots and what ``report_to`` sends.

* :func:`table` — one row per method: schedule, steps, completions planned and generated,
  greedy accuracy, Pass@k and Maj@k for ``eval.ks`` (none when ``eval.n_samples`` is 0), entropy,
  mean reward, D_rel of its exported weights against the base (:func:`zoopt.metrics.relative_drift`),
  training, evaluation and process wall time and peak memory;
* :func:`markdown` — ``compare.md``: the budget, then the table;
* :func:`plots` — ``pass_at_k.png`` (when there are samples) and ``train_reward.png`` (training
  reward against sampled completions used) in the run directory;
* :func:`send` — ``report_to``'s trackers (:mod:`zoopt.reporting.trackers`).

A method's result is :func:`zoopt.workflows.compare.run_method`'s, with ``process_wall_s``,
``peak_rss_mib`` and ``peak_rss_mib_self`` set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ..metrics import relative_drift
from ..runs.references import load_params
from ..runs.rundir import RunDir
from .plots import plot_pass_at_k, plot_reward_curves
from .trackers import open_trackers, scalars


def table(cfg: dict, results: list[dict], base: Mapping) -> list[dict]:
    """The rows (module docstring); ``base``: the base weights as the runs loaded them
    (:func:`zoopt.runs.references.load_base`'s ``params``)."""
    ks = [int(k) for k in cfg["eval"]["ks"]] if int(cfg["eval"]["n_samples"]) else []
    rows = []
    for r in results:
        ev = r["eval"]
        row = {"method": r["name"], "schedule": " → ".join(p["method"] for p in r["phases"]) or "base",
               "steps": [p["steps"] for p in r["phases"]], "completions": r["completions"],
               "completions_generated": r["completions_generated"], "greedy_accuracy": ev.get("greedy_accuracy")}
        for k in ks:
            row[f"pass@{k}"] = ev.get(f"pass@{k}")
        for k in ks:
            row[f"maj@{k}"] = ev.get(f"maj@{k}")
        row.update(entropy=ev.get("entropy"), mean_reward=ev.get("mean_reward"),
                   d_rel=relative_drift(base, load_params(r["model_dir"]).params),
                   train_s=r["train_s"], eval_s=r["eval_s"], wall_s=r["process_wall_s"],
                   peak_rss_mib=r["peak_rss_mib"], peak_rss_mib_self=r["peak_rss_mib_self"])
        rows.append(row)
    return rows


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "+".join(map(str, v)) or "0"
    return str(v)


def markdown(cfg: dict, rows: list[dict]) -> str:
    """``compare.md``: the budget, then the table (floats to 4 significant digits, ``–`` for none)."""
    cols = list(rows[0])
    lines = [f"Budget: {cfg['budget']} sampled completions per method (phase steps rounded down).", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(row[c]) for c in cols) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def plots(run_dir: Path, cfg: dict, results: list[dict]) -> list[Path]:
    """``pass_at_k.png`` (with samples) and ``train_reward.png`` in ``run_dir``; their paths."""
    figures = []
    ks = [int(k) for k in cfg["eval"]["ks"]]
    if int(cfg["eval"]["n_samples"]):
        curves = {r["name"]: {k: r["eval"][f"pass@{k}"] for k in ks} for r in results}
        figures.append(plot_pass_at_k(curves, run_dir / "pass_at_k.png"))
    rewards = {}
    for r in results:
        points, used = [], 0
        for p in r["phases"]:
            for record in RunDir(p["dir"]).read_metrics():
                used += p["completions_per_step"]
                if record["reward_mean"] is not None:
                    points.append((used, record["reward_mean"]))
        rewards[r["name"]] = points
    figures.append(plot_reward_curves(rewards, run_dir / "train_reward.png"))
    return figures


def send(names: list[str], run_dir: Path, cfg: dict, results: list[dict], rows: list[dict],
         figures: list[Path]) -> None:
    """``report_to`` (``names``): per method, a tracker run (in its directory) of its phases' step
    records as ``train/KEY`` (step = steps done over its phases) and its table row as ``eval/KEY``;
    then one run of the whole table (``METHOD/KEY``) and the figures."""
    if not names:
        return
    for result, row in zip(results, rows):
        method_dir = run_dir / result["name"]
        trackers = open_trackers(names, method_dir, {**cfg, "method": result["name"]}, f"{run_dir.name}-{result['name']}")
        try:
            done = 0
            for phase in result["phases"]:
                for record in RunDir(phase["dir"]).read_metrics():
                    if "reward_mean" in record:  # a step (not a periodic evaluation line)
                        done += 1
                        for tracker in trackers:
                            tracker.log(scalars(record, "train/"), done)
            for tracker in trackers:
                tracker.log(scalars(row, "eval/"), done)
        finally:
            for tracker in trackers:
                tracker.close()
    trackers = open_trackers(names, run_dir, cfg, run_dir.name)
    try:
        values = {k: v for row in rows for k, v in scalars(row, f"{row['method']}/").items()}
        for tracker in trackers:
            tracker.log(values, 0)
            for figure in figures:
                tracker.log_image(figure.stem, figure, 0)
    finally:
        for tracker in trackers:
            tracker.close()
