"""Figures for the analysis metrics (matplotlib, Agg backend, PNG files).

* :func:`plot_pass_at_k` — pass@k against k (log₂ axis), one curve per model;
* :func:`plot_entropy` — mean token entropy against training step;
* :func:`plot_reward_curves` — training reward against sampled completions used, one curve per method;
* :func:`plot_points` — one labelled point per model (``zoopt study``'s Pass@1 vs Pass@K);
* :func:`plot_frontier` — ΔPass@k against ΔPass@1 along each run's checkpoints, a panel per k;
* :func:`plot_magnitude_histogram` — histogram of log10|Δθ| with the threshold τ marked;
* :func:`plot_training_log` — reward mean/max and held-out accuracy from a JSONL metrics log;
* :func:`plot_run` — the same for a run directory, to its ``training.png``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..runs.rundir import RunDir  # noqa: E402


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)
    return path


def plot_pass_at_k(curves: Mapping[str, Mapping[int, float]], path: str | Path) -> Path:
    """``curves[label][k] = pass@k``; one line per label, k on a log₂ axis."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for label, curve in curves.items():
        ks = sorted(int(k) for k in curve)
        ax.plot(ks, [curve[k] for k in ks], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def plot_entropy(curves: Mapping[str, Sequence[tuple[float, float]]], path: str | Path) -> Path:
    """``curves[label] = [(step, mean token entropy), ...]``."""
    return _plot_curves(curves, path, "step", "mean token entropy (nats)", width=5)


def plot_reward_curves(curves: Mapping[str, Sequence[tuple[float, float]]], path: str | Path) -> Path:
    """``curves[label] = [(completions used, mean training reward), ...]``."""
    return _plot_curves(curves, path, "sampled completions used", "training reward (mean)", width=5.5)


def plot_points(points: Mapping[str, tuple[float, float]], path: str | Path, xlabel: str, ylabel: str) -> Path:
    """``points[label] = (x, y)``: one marker per label, annotated with it."""
    fig, ax = plt.subplots(figsize=(5, 4))
    for label, (x, y) in points.items():
        ax.scatter([x], [y])
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_frontier(points: Sequence[Mapping], ks: Sequence[int], path: str | Path, xmax: float | None = None) -> Path:
    """:func:`frontier_figure` saved to ``path``."""
    return _save(frontier_figure(points, ks, xmax), path)


def frontier_figure(points: Sequence[Mapping], ks: Sequence[int], xmax: float | None = None):
    """``zoopt frontier``'s points (:func:`zoopt.study.frontier.frontier_points`): per ``k`` a
    panel of ΔPass@k against ΔPass@1 (points), each run a line from the base (0, 0) through its
    checkpoints in training order, one colour per method, one marker per seed.  ``xmax`` (points
    of ΔPass@1) zooms every panel to ``ΔPass@1 ≤ xmax``, its y range fitted to the points shown
    (lines to points beyond it run off the edge)."""
    methods = sorted({p["method"] for p in points})
    colours = {m: f"C{i}" for i, m in enumerate(methods)}
    markers = "osD^vP*X"
    fig, axes = plt.subplots(1, len(ks), figsize=(4.2 * len(ks), 3.8), squeeze=False)
    for ax, k in zip(axes[0], ks):
        for run in dict.fromkeys(p["run"] for p in points):
            pts = [p for p in points if p["run"] == run]
            xs = [0.0] + [100 * p["d_pass@1"] for p in pts]
            ys = [0.0] + [100 * p[f"d_pass@{k}"] for p in pts]
            ax.plot(xs, ys, color=colours[pts[0]["method"]], marker=markers[pts[0]["seed"] % len(markers)],
                    markersize=4, linewidth=1, label=run)
        ax.axhline(0, color="grey", linewidth=0.6)
        ax.axvline(0, color="grey", linewidth=0.6)
        if xmax is not None:
            shown = [0.0] + [100 * p[f"d_pass@{k}"] for p in points if 100 * p["d_pass@1"] <= xmax]
            pad = 0.05 * (max(shown) - min(shown) or 1.0)
            ax.set_xlim(min(-0.5, min(100 * p["d_pass@1"] for p in points) - 0.5), xmax)
            ax.set_ylim(min(shown) - pad, max(shown) + pad)
        ax.set_xlabel("ΔPass@1 (points)")
        ax.set_ylabel(f"ΔPass@{k} (points)")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig


def _plot_curves(curves: Mapping[str, Sequence[tuple[float, float]]], path: str | Path, xlabel: str,
                 ylabel: str, width: float) -> Path:
    """One line per label through its ``(x, y)`` points (sorted by x); empty curves are left out."""
    fig, ax = plt.subplots(figsize=(width, 3.5))
    for label, points in curves.items():
        points = sorted(points)
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def plot_magnitude_histogram(counts: Sequence[float], edges: Sequence[float], tau: float,
                             path: str | Path) -> Path:
    """Bars of a :func:`~zoopt.metrics.magnitude_histogram` (log10|Δ| edges), τ as a line."""
    counts, edges = np.asarray(counts, float), np.asarray(edges, float)
    if edges.size != counts.size + 1:
        raise ValueError(f"edges must have len(counts)+1={counts.size + 1} entries, "
                         f"got {edges.size}")
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge", edgecolor="none")
    if tau > 0:
        ax.axvline(math.log10(tau), color="C3", linestyle="--", label=f"τ = {tau:g}")
        ax.legend()
    ax.set_xlabel("log10 |Δθ|")
    ax.set_ylabel("parameters")
    return _save(fig, path)


def _read_jsonl(jsonl_path: str | Path) -> list[dict]:
    rows = []
    for n, line in enumerate(Path(jsonl_path).read_text().splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            if "step" not in row or "reward_mean" not in row:
                raise ValueError(f"{jsonl_path}:{n}: a metrics line needs 'step' and "
                                 f"'reward_mean'")
            rows.append(row)
    if not rows:
        raise ValueError(f"{jsonl_path}: no metrics lines")
    return rows


def plot_training_log(jsonl_path: str | Path, path: str | Path) -> Path:
    """Reward mean (and max) per step, plus ``eval_accuracy`` and ``entropy`` where logged.

    Each JSONL line needs ``step`` and ``reward_mean``; ``reward_max``, ``eval_accuracy`` and
    ``entropy`` are optional and plotted at the steps that have them.
    """
    return _plot_rows(_read_jsonl(jsonl_path), path)


def plot_run(run_dir: str | Path) -> Path:
    """``run_dir/training.png`` from ``run_dir/metrics.jsonl`` (as :func:`plot_training_log`).

    A periodic evaluation may be logged as a separate ``{"step", "eval_accuracy"}`` line; the
    lines of one step are merged first, so every plotted row has ``reward_mean``.
    """
    run = RunDir(run_dir)
    merged: dict[int, dict] = {}
    for n, row in enumerate(run.read_metrics(), 1):
        if "step" not in row:
            raise ValueError(f"{run.metrics_path}:{n}: a metrics line needs 'step'")
        merged.setdefault(row["step"], {}).update(row)
    rows = [r for _, r in sorted(merged.items()) if "reward_mean" in r]
    if not rows:
        raise ValueError(f"{run.metrics_path}: no step record with 'reward_mean'")
    return _plot_rows(rows, run.training_plot_path)


def _plot_rows(rows: list[dict], path: str | Path) -> Path:
    rows = sorted(rows, key=lambda r: r["step"])

    def series(key):
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        return [p[0] for p in pts], [p[1] for p in pts]

    has_entropy = any(r.get("entropy") is not None for r in rows)
    fig, axes = plt.subplots(1, 2 if has_entropy else 1, figsize=(9 if has_entropy else 5, 3.5),
                             squeeze=False)
    ax = axes[0][0]
    for key, style in (("reward_mean", "-"), ("reward_max", ":"), ("eval_accuracy", "--")):
        x, y = series(key)
        if x:
            ax.plot(x, y, style, marker="." if key != "eval_accuracy" else "o", label=key)
    ax.set_xlabel("step")
    ax.set_ylabel("reward / accuracy")
    ax.grid(alpha=0.3)
    ax.legend()
    if has_entropy:
        x, y = series("entropy")
        axes[0][1].plot(x, y, marker=".", color="C4")
        axes[0][1].set_xlabel("step")
        axes[0][1].set_ylabel("mean token entropy (nats)")
        axes[0][1].grid(alpha=0.3)
    return _save(fig, path)
