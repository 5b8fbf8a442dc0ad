"""Sweep results: a table of the best trials, PNG plots, and the best config as a train YAML.

:func:`write_report` writes into the study directory

* ``plots/history.png`` (one ``history-<metric>.png`` per objective when there are several),
  ``plots/importances.png`` (≥ 2 completed trials and > 1 param), ``plots/contour.png``
  (σ–α, when both are searched and ≥ 2 trials completed), ``plots/pareto.png``
  (multi-objective) — drawn by ``optuna.visualization.matplotlib``; a plot that cannot be
  drawn is skipped with a logged reason and never fails the sweep;
* ``best.yaml``: the best trial's full train config (``run_dir: null``), ready for
  ``zoopt train --config best.yaml`` (``zoopt grpo --config best.yaml`` for a GRPO sweep).  With several objectives the best trial is the one on
  the Pareto front that is best on the first objective;
* ``front.yaml`` (several objectives): every trial of the Pareto front in trial order, each as
  ``{trial, values: {metric: value}, params: {key: value}}`` — what a user retrains, as
  ``--set`` items of the same keys.
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import optuna  # noqa: E402
import yaml  # noqa: E402
from optuna.trial import FrozenTrial, TrialState  # noqa: E402

log = logging.getLogger("sweeps")


@dataclass
class Report:
    plots: dict[str, Path] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # plot name → reason
    best_yaml: Path | None = None
    front_yaml: Path | None = None


def metric_names(study: optuna.Study) -> list[str]:
    names = study.metric_names
    return list(names) if names else [f"value{i}" for i in range(len(study.directions))]


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """The best completed trial (multi-objective: best on objective 0 among the Pareto front)."""
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return None
    if len(study.directions) == 1:
        return study.best_trial
    sign = 1 if study.directions[0] == optuna.study.StudyDirection.MAXIMIZE else -1
    return max(study.best_trials, key=lambda t: (sign * t.values[0], -t.number))


def ranked_trials(study: optuna.Study, top: int = 10) -> list[FrozenTrial]:
    """Completed trials best first (single objective) or the Pareto front (several)."""
    if len(study.directions) > 1:
        return sorted(study.best_trials, key=lambda t: t.number)[:top]
    sign = -1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return sorted(done, key=lambda t: (sign * t.value, t.number))[:top]


def best_table(study: optuna.Study, top: int = 10):
    """A :class:`rich.table.Table` of :func:`ranked_trials` with their values and params."""
    from rich.table import Table

    counts = {s.name.lower(): len(study.get_trials(deepcopy=False, states=(s,)))
              for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
    front = " (Pareto front)" if len(study.directions) > 1 else ""
    table = Table(title=f"study {study.study_name}{front}: "
                        + ", ".join(f"{n} {state}" for state, n in counts.items()))
    trials = ranked_trials(study, top)
    params = sorted({p for t in trials for p in t.params})
    names = metric_names(study)
    cis = [n for n in names if any(f"{n}_ci" in t.user_attrs.get("eval", {}) for t in trials)]
    table.add_column("trial", justify="right")
    for name in names:
        table.add_column(name, justify="right")
        if name in cis:
            table.add_column(f"{name} 95 % CI", justify="right")
    for name in params:
        table.add_column(name, justify="right")
    for t in trials:
        values = []
        for name, v in zip(names, t.values):
            values.append(f"{v:.4g}")
            if name in cis:
                ci = t.user_attrs.get("eval", {}).get(f"{name}_ci")
                values.append(f"[{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "–")
        table.add_row(str(t.number), *values, *(_fmt(t.params.get(p)) for p in params))
    return table


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def write_best_config(trial: FrozenTrial, path: str | Path, method: str = "es") -> Path:
    """Write ``trial``'s train config (``run_dir: null``) as YAML with a provenance header
    naming the command that runs it (``method``: the sweep's, ``es`` or ``grpo``)."""
    cfg = dict(trial.user_attrs["config"])
    cfg["run_dir"] = None
    values = ", ".join(f"{v:.6g}" for v in trial.values)
    command = "zoopt grpo" if method == "grpo" else "zoopt train"
    header = (f"# best {method} sweep trial {trial.number} (values: {values}); params: "
              + ", ".join(f"{k}={v!r}" for k, v in trial.params.items())
              + f"\n# run it: {command} --config best.yaml\n")
    path = Path(path)
    path.write_text(header + yaml.safe_dump(cfg, sort_keys=False))
    return path


def write_front(study: optuna.Study, path: str | Path) -> Path:
    """Write the Pareto front of a multi-objective ``study`` (module docstring) as YAML."""
    names = metric_names(study)
    front = [{"trial": t.number, "values": dict(zip(names, (float(v) for v in t.values))), "params": dict(t.params)}
             for t in sorted(study.best_trials, key=lambda t: t.number)]
    path = Path(path)
    path.write_text(f"# the Pareto front of sweep {study.study_name!r} over {', '.join(names)}\n"
                    + yaml.safe_dump(front, sort_keys=False))
    return path


def write_report(study: optuna.Study, out_dir: str | Path) -> Report:
    """Plots under ``out_dir/plots`` and ``out_dir/best.yaml``; see the module docstring."""
    out_dir = Path(out_dir)
    report = Report()
    for name, draw in _plots(study):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ax = draw()
            report.plots[name] = _save(ax, out_dir / "plots" / f"{name}.png")
        except Exception as exc:  # a plot Optuna cannot draw must never fail the sweep
            plt.close("all")
            report.skipped[name] = f"{type(exc).__name__}: {exc}"
            log.warning("sweep report: skipped plot %s: %s", name, report.skipped[name])
    best = best_trial(study)
    if best is not None and "config" in best.user_attrs:
        report.best_yaml = write_best_config(best, out_dir / "best.yaml",
                                             method=study.user_attrs.get("method", "es"))
    if best is not None and len(study.directions) > 1:
        report.front_yaml = write_front(study, out_dir / "front.yaml")
    return report


def _plots(study: optuna.Study):
    """(name, zero-argument draw function) for each plot the study can support."""
    vis = optuna.visualization.matplotlib
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not done:
        return
    names = metric_names(study)
    searched = set().union(*(t.params for t in done))
    if len(names) == 1:
        yield "history", lambda: vis.plot_optimization_history(study, target_name=names[0])
    else:
        for i, name in enumerate(names):
            yield (f"history-{_safe(name)}",
                   lambda i=i, name=name: vis.plot_optimization_history(
                       study, target=lambda t: t.values[i], target_name=name))
        yield "pareto", lambda: vis.plot_pareto_front(study, target_names=names)
    target = {} if len(names) == 1 else {"target": lambda t: t.values[0], "target_name": names[0]}
    if len(done) >= 2 and len(searched) > 1:
        yield "importances", lambda: vis.plot_param_importances(study, **target)
    if len(done) >= 2 and {"sigma", "lr"} <= searched:
        yield "contour", lambda: vis.plot_contour(study, params=["sigma", "lr"], **target)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _save(ax, path: Path) -> Path:
    first = np.asarray(ax, dtype=object).flat[0]
    fig = first.figure
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
