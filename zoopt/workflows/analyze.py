"""The library behind ``zoopt eval`` and ``zoopt analyze``: how far, and how sparsely, did
training move the weights, and how much of the gain do the small updates carry?

With ``Δ = θ − θ₀'`` (TRAINED minus BASE, compared on ``named_parameters`` so tied tensors count
once; see :mod:`zoopt.runs.references`), where TRAINED is read as saved (a run's ``model/`` holds its
fp32 master) and ``θ₀' = fp32(cast_dtype(θ₀))`` is BASE loaded in the dtype the run worked in, as
its engine loaded it (:func:`zoopt.runs.references.load_base`; ``dtype``: the run's ``config.yaml``,
else float32), so Δ is the update and not BASE's own rounding to bf16/fp16:

* relative drift ``D_rel = ‖Δ‖₂ / ‖θ₀‖₂``, overall and per parameter group
  (:func:`zoopt.metrics.relative_drift`, :func:`~zoopt.metrics.drift_by_group`);
* magnitude shares at τ: ``small = #{0 < |Δ| ≤ τ}``, ``large = #{|Δ| > τ}``, the paper's
  "% of updates below τ" = ``small / (small + large)`` (:func:`~zoopt.metrics.magnitude_shares`);
* thresholded checkpoints ``θ_τ = where(|Δ| > τ, θ, θ₀)``: the ``small`` elements are reverted,
  so ``share_reverted = small/nonzero`` of the moved weights (``small/total`` of all weights);
* optionally the held-out accuracy of BASE, TRAINED and every ``θ_τ`` with
  ``retained = (acc_τ − acc_base) / (acc_trained − acc_base)`` (``None`` when TRAINED did not
  change the accuracy).

Evaluation settings come from a run config (``zoopt/configs/train.yaml`` keys) and go through
:func:`zoopt.workflows.builders.evaluate_config`, as the training loop's do, so an accuracy here
equals the training loop's at the same settings.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable

import torch
from rich.table import Table

from ..metrics import TAU, drift_by_group, magnitude_histogram, magnitude_shares, param_group, threshold_state_dict
from ..models import ModelLoadError
from ..reporting import plots
from ..runs.jsonable import jsonable
from ..runs.references import LoadedModel, load_base, load_params, run_dtype, save_with_params
from ..warmups import ensure_warmup
from .builders import build_engine, build_objective, eval_kwargs, evaluate_config
from .evaluate import EvalResult

Params = dict[str, torch.Tensor]


# -- evaluation ---------------------------------------------------------------------------
def evaluate_model(cfg: dict, objective=None, progress=None) -> EvalResult:
    """Evaluate ``cfg["model"]`` (engine ``cfg["engine"]`` in ``cfg["dtype"]``) on ``objective``
    (default: built from ``cfg``); returns the ``EvalResult`` with the working weights'
    ``checksum`` added to its summary (comparable with a run's ``eval_after.json``)."""
    objective = objective if objective is not None else build_objective(cfg)
    try:
        engine = build_engine(cfg, objective)
    except ModelLoadError as exc:  # the CLI reports ValueErrors as one-line errors
        raise ValueError(str(exc)) from None
    try:
        result = evaluate_config(engine, objective, cfg, progress=progress)
        result.summary["checksum"] = engine.checksum()
    finally:
        engine.close()
    return result


# -- weights ------------------------------------------------------------------------------
def weight_report(base: Params, trained: Params, tau: float = TAU) -> dict:
    """Drift (``all`` and per group) and magnitude shares at ``tau`` (overall and per group)."""
    groups = sorted({param_group(n) for n in base})
    by_group = {}
    for g in groups:
        keys = [n for n in base if param_group(n) == g]
        by_group[g] = magnitude_shares({k: base[k] for k in keys},
                                       {k: trained[k] for k in keys if k in trained}, tau)
    return {"drift": drift_by_group(base, trained), "shares": magnitude_shares(base, trained, tau),
            "shares_by_group": by_group}


def tau_dirname(tau: float) -> str:
    """``1.5e-3`` → ``tau-0.0015``, ``inf`` → ``tau-inf``."""
    return f"tau-{float(tau):g}"


def write_thresholded(base: LoadedModel, trained: LoadedModel, tau: float,
                      directory: str | Path) -> dict:
    """Write ``θ_τ`` (see the module doc) as an HF directory; return its sparsity record."""
    shares = magnitude_shares(base.params, trained.params, tau)
    path = save_with_params(trained, threshold_state_dict(base.params, trained.params, tau),
                            directory)
    return {"tau": float(tau), "dir": str(path), "reverted": shares["small"],
            "kept": shares["large"], "unchanged": shares["zero"], "total": shares["total"],
            "share_reverted": shares["share_small"],
            "share_reverted_of_all": shares["small"] / shares["total"] if shares["total"] else None}


def _metric(summary: dict | None, key: str):
    return None if summary is None else summary.get(key)


def _diff(a, b):
    return None if a is None or b is None else a - b


def _retained(acc, base_acc, trained_acc):
    if acc is None or base_acc is None or trained_acc is None or trained_acc == base_acc:
        return None
    return (acc - base_acc) / (trained_acc - base_acc)


def analyze(base_spec: str, trained_spec: str, out: str | Path, *, tau: float = TAU,
            thresholds: tuple[float, ...] = (), eval_cfg: dict | None = None, bins: int = 60,
            progress: Callable | bool | None = None, dtype: str | None = None) -> dict:
    """Compare BASE and TRAINED, write ``analysis.json``, ``magnitude_histogram.png`` and one
    ``tau-<τ>/`` HF directory per threshold into ``out``; with ``eval_cfg`` (a run config
    naming the objective) also evaluate BASE, TRAINED and every thresholded model.

    ``dtype``: the dtype the run worked in, in which BASE is loaded before it is widened to
    fp32 (module docstring); default :func:`zoopt.runs.references.run_dtype` of TRAINED."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    dtype = run_dtype(trained_spec) if dtype is None else str(dtype)
    for spec in (base_spec, trained_spec):
        ensure_warmup(str(spec))  # a named warm-up is built into the cache on first use
    base, trained = load_base(base_spec, dtype), load_params(trained_spec)
    report = {"base": str(base_spec), "base_path": base.path, "trained": str(trained_spec),
              "trained_path": trained.path, "dtype": dtype, "n_tensors": len(base.params),
              **weight_report(base.params, trained.params, tau), "tau": float(tau)}
    counts, edges = magnitude_histogram(base.params, trained.params, bins=bins)
    report["histogram"] = {"counts": counts.tolist(), "edges": edges.tolist()}
    hist_png = plots.plot_magnitude_histogram(counts, edges, tau, out / "magnitude_histogram.png")
    report["plots"] = {"magnitude_histogram": str(hist_png)}
    report["thresholds"] = [write_thresholded(base, trained, t, out / tau_dirname(t))
                            for t in thresholds]
    del base, trained
    if eval_cfg is not None:
        report["eval"] = _evaluate_all(report, eval_cfg, progress)
    (out / "analysis.json").write_text(json.dumps(jsonable(report), indent=2))
    return report


def _evaluate_all(report: dict, eval_cfg: dict, progress) -> dict:
    objective = build_objective(eval_cfg)

    def run(path: str) -> dict:
        return evaluate_model({**eval_cfg, "model": path}, objective, progress).summary

    base_s, trained_s = run(report["base_path"]), run(report["trained_path"])
    keys = ("greedy_accuracy", "pass@1")
    for rec in report["thresholds"]:
        s = run(rec["dir"])
        rec["eval"] = s
        for key in keys:
            rec[f"{key}_change"] = _diff(_metric(s, key), _metric(trained_s, key))
            rec[f"{key}_retained"] = _retained(_metric(s, key), _metric(base_s, key),
                                               _metric(trained_s, key))
    settings = dict(eval_kwargs(eval_cfg))
    settings.update(objective=eval_cfg["objective"], objective_args=eval_cfg.get("objective_args"),
                    dtype=eval_cfg["dtype"], ks=list(settings["ks"]))
    return {"settings": settings, "base": base_s, "trained": trained_s}


# -- tables -------------------------------------------------------------------------------
def _fmt(value, spec: str = ".4f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return format(value, spec)


def tables(report: dict) -> list:
    """Rich tables: drift and shares per group; thresholds (with accuracies when evaluated)."""
    tau = report["tau"]
    t = Table(title=f"weight change {report['base']} → {report['trained']}  (τ = {tau:g}; base in "
                    f"{report.get('dtype', 'float32')}, as the run loaded it)")
    for col in ("group", "D_rel", "weights", "moved", "|Δ| ≤ τ of moved", "|Δ| > τ of moved"):
        t.add_column(col, justify="left" if col == "group" else "right")
    rows = [*report["shares_by_group"].items(), ("all", report["shares"])]
    for g, s in rows:
        t.add_row(g, _fmt(report["drift"].get(g), ".3e"), str(s["total"]), str(s["nonzero"]),
                  _fmt(s["share_small"]), _fmt(s["share_large"]))
    out = [t]
    if report["thresholds"] or "eval" in report:
        t = Table(title="thresholded checkpoints θ_τ = where(|Δ| > τ, θ, θ₀)")
        for col in ("model", "reverted of moved", "greedy acc", "Δ vs trained", "pass@1",
                    "Δ vs trained ", "retained (greedy)"):
            t.add_column(col, justify="left" if col == "model" else "right", no_wrap=col == "model")
        ev = report.get("eval") or {}
        for name in ("base", "trained"):
            if name in ev:
                s = ev[name]
                t.add_row(name, "", _fmt(s.get("greedy_accuracy")), "", _fmt(s.get("pass@1")),
                          "", "")
        for rec in report["thresholds"]:
            s = rec.get("eval") or {}
            t.add_row(f"τ = {rec['tau']:g}", _fmt(rec["share_reverted"]),
                      _fmt(s.get("greedy_accuracy")), _fmt(rec.get("greedy_accuracy_change"), "+.4f"),
                      _fmt(s.get("pass@1")), _fmt(rec.get("pass@1_change"), "+.4f"),
                      _fmt(rec.get("greedy_accuracy_retained"), ".2f"))
        out.append(t)
    return out
