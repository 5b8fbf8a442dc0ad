"""``zoopt study SPEC``: tuning, the runs of C1–C7, the analyses of C3 and C8, and the report.

Stages, each resumable (re-run the same command: what is finished is read back, not redone):

1. **tuning** (:mod:`zoopt.workflows.tuning`): a grid sweep per method on the validation split
   carved from train; the chosen σ, α (ES) and lr (GRPO) apply to every run below;
2. **runs**: every method the claims need (``base``, ``es``, ``grpo``; ``es_raw`` and
   ``es_centered_rank`` for C4; ``es_two_point`` for C5; ``es_n{N}`` for C6, ``es`` itself at
   its own N; ``es_grpo`` and ``grpo_es`` for C7) is a ``zoopt compare`` method
   (:func:`zoopt.workflows.compare.plan_methods` and
   :func:`~zoopt.workflows.compare.run_method`) at the same ``budget`` of sampled
   completions, evaluated on the same held-out problems (``runs/<name>/eval.json``, per
   problem).  ``runs/<name>/result.json``, written once the run and all its evaluations are
   done, marks a finished run, which is skipped.  A killed run resumes: its ES phases replay
   their seed logs (``--resume``'s replay: the same checksum as a run never interrupted); its
   GRPO phases continue from their ``trainer_state.pt`` (``grpo.state_every``; bit for bit on
   the same machine), and one without a state starts again from its start weights;
3. **analyses**: C3 (the weights' numbers of :mod:`zoopt.study.moved_weights`, then
   :func:`zoopt.workflows.analyze.analyze` of base → ES, thresholded checkpoints at
   ``c3.sparsity`` evaluated like the runs) and C8
   (:func:`zoopt.workflows.coverage.population_coverage` around the ES model);
4. **report**: every claim judged from what the runs and analyses wrote
   (:func:`zoopt.study.outcome.judge_claims`), then :mod:`zoopt.study.report` writes
   ``report.md``, ``report.json`` and the plots.

This module is the runner: it trains and evaluates models, resumes and records; the arithmetic
of the claims on what it records (and C3's on the weights) lives in :mod:`zoopt.study`.

With ``seeds`` every trained run is repeated per training seed, with ``es.checkpoint_every`` /
``grpo.checkpoint_every`` its checkpoints are evaluated as training writes them, and with
``final_temperatures`` its final weights (and the base) at more temperatures
(:mod:`zoopt.workflows.study_seeds`); claim C1S reads them (:mod:`zoopt.study.narrowing`).
The study's wall time over all invocations is kept in ``wall_time.json`` and reported.

``only`` (``zoopt study --runs``) runs just the named runs and stops before the analyses and the
report: a long study split over machines or sessions, each holding the study directory's
small files (weights are never needed again once a run is done), then finished by a run
without it.

A study split over machines must give every run the same base: ``base.json`` keeps the digest
of the base weights as the first invocation built them (the embedded model and its warm-ups
are built at run time), and a later invocation whose machine builds other weights is refused.

Layout of the study directory: ``spec.yaml``, ``base.json``, ``tuning/``, ``runs/<name>/`` (with
``checkpoints/`` and ``eval-T<T>.json`` when asked), ``analysis/``, ``wall_time.json``,
``report.md``, ``report.json``, ``*.png``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..config import ConfigError, default_config
from ..engines.weights import digest
from ..objective import load_split
from ..runs.atomic import write_text_atomic
from ..runs.jsonable import jsonable
from ..runs.references import load_base, load_params
from ..runs.rundir import RunDir
from ..study.moved_weights import weight_numbers
from ..study.outcome import c6_runs, judge_claims
from ..study.report import write_report
from ..warmups import ensure_warmup
from .analyze import analyze, evaluate_model, tau_dirname
from .builders import build_objective
from .compare import eval_config, run_method
from .coverage import population_coverage
from .study_seeds import (WallClock, checkpoint_evaluator, coverage_points, extra_evaluations, model_eval_config,
                          plan_runs, pooled_eval)
from .tuning import base_validation, grid_size, tune, untuned

COMPARE_KEYS = ("model", "dtype", "device", "engine", "engine_args", "objective", "objective_args", "seed",
                "batch_size", "reward_timeout_s", "reward_errors", "budget", "eval")


def study_dir_for(spec: dict, out: str | Path | None) -> Path:
    """``out``, else ``runs/study-<name>`` (``-<profile>`` unless the default): re-running resumes."""
    if out:
        return Path(out)
    suffix = "" if spec["profile"] == "default" else f"-{spec['profile']}"
    return Path("runs") / f"study-{spec['name']}{suffix}"


def methods_for(spec: dict) -> dict[str, list]:
    """The schedules (``compare`` methods) the spec's claims need."""
    claims, es, grpo = set(spec["claims"]), {"method": "es", "budget_fraction": 1.0}, {"method": "grpo", "budget_fraction": 1.0}
    m = {"base": [], "es": [es]}
    if claims & {"C1", "C1S", "C2", "C3", "C7"}:
        m["grpo"] = [grpo]
    if "C4" in claims:
        m["es_raw"] = [{**es, "overrides": {"shaping": "raw"}}]
        m["es_centered_rank"] = [{**es, "overrides": {"shaping": "centered_rank"}}]
    if "C5" in claims:
        m["es_two_point"] = [{**es, "overrides": {"estimator": "two_point"}}]
    if "C6" in claims:
        for n, name in c6_runs(spec).items():
            if name != "es":
                m[name] = [{**es, "overrides": {"population_size": n}}]
    if "C7" in claims:
        m["es_grpo"] = [{**es, "budget_fraction": 0.5}, {**grpo, "budget_fraction": 0.5}]
        m["grpo_es"] = [{**grpo, "budget_fraction": 0.5}, {**es, "budget_fraction": 0.5}]
    return m


def compare_config(spec: dict, tuned: dict, root: Path) -> dict:
    """A ``compare.yaml`` config of every run: the shared keys, the tuned ES/GRPO settings."""
    cfg = default_config("compare")
    cfg.update({k: spec[k] for k in COMPARE_KEYS})
    cfg.update(es={**spec["es"], **tuned["es"]["chosen"]}, grpo={**spec["grpo"], **tuned["grpo"]["chosen"]},
               methods=methods_for(spec), isolate=False, keep_models=True, run_dir=str(root))
    return cfg


def _check_resume(study_dir: Path, spec: dict) -> None:
    path = study_dir / "spec.yaml"
    if not path.exists():
        study_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return
    saved = yaml.safe_load(path.read_text())
    for key in sorted(set(saved) | set(spec)):
        if key != "profiles" and saved.get(key) != spec.get(key):
            raise ConfigError(f"study directory {str(study_dir)!r} holds a study whose {key!r} is "
                              f"{saved.get(key)!r}, not {spec.get(key)!r}; use another --out")


def run_study(spec: dict, out: str | Path | None = None, quiet: bool = False, log=print,
              only: list[str] | None = None) -> dict | None:
    """Run (or resume) the study ``spec`` (:func:`zoopt.study.spec.load_study_spec`); its report,
    or ``None`` when ``only`` names the runs to do now (see the module docstring)."""
    study_dir = study_dir_for(spec, out)
    objective = build_objective(spec)
    check_data(spec, objective)
    _check_resume(study_dir, spec)
    check_base(study_dir, spec)
    clock = WallClock(study_dir / "wall_time.json")
    tuning_on = bool(spec["tuning"]["enabled"])
    columns = (TextColumn("[bold]study {task.fields[name]}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("{task.description}"))
    with Progress(*columns, disable=quiet) as bar:
        task = bar.add_task("tuning", total=None, name=spec["name"])
        tuned = _tuning(spec, study_dir / "tuning", bar, task, tuning_on)
        clock.tick()
        cfg = compare_config(spec, tuned, study_dir / "runs")
        runs = plan_runs(spec, cfg, len(objective.dataset("train")))
        selected = selected_runs(spec, runs, only)
        tuning_units = 1 + sum(grid_size(spec["tuning"][m]) for m in ("es", "grpo")) if tuning_on else 0
        bar.update(task, total=tuning_units + len(selected) + (0 if only else 2))
        evals, results = {}, {}

        def describe(text: str) -> None:  # a new unit of work (a run, a checkpoint, an evaluation)
            bar.update(task, description=text)
            clock.tick()  # so that a kill inside a long run loses only the unit at hand

        for name, run in runs.items():
            if name not in selected:
                continue
            describe(f"run {name}")
            run_dir = study_dir / "runs" / name
            results[name] = _run(name, run, spec, cfg, run_dir, objective, describe)
            evals[name] = json.loads((run_dir / "eval.json").read_text())
            bar.advance(task)
            clock.tick()
        if only:
            done = [n for n in runs if (study_dir / "runs" / n / "result.json").exists()]
            log(f"study: {len(done)} of {len(runs)} runs done ({', '.join(done)}); run it without --runs "
                f"for the rest, the analyses and the report")
            return None
        bar.update(task, description="analysis C3")
        c3 = _c3(spec, cfg, results, study_dir / "analysis" / "c3") if "C3" in spec["claims"] else None
        bar.advance(task)
        bar.update(task, description="analysis C8")
        c8 = _c8(spec, cfg, results, study_dir / "analysis") if "C8" in spec["claims"] else None
        bar.advance(task)
        clock.tick()
    outcome = _judge(spec, tuned, evals, results, runs, c3, c8, study_dir)
    report = write_report(study_dir, spec, tuned, results, outcome, wall=clock.tick())
    log(f"study: wrote {study_dir / 'report.md'} and {study_dir / 'report.json'}")
    return report


def check_base(study_dir: Path, spec: dict) -> str:
    """The digest of the study's base weights as this machine builds them (``load_base``:
    ``model`` in ``dtype``), written to ``base.json`` on the first call and compared after: a
    one-line ``ConfigError`` when they differ, since runs from two bases are not comparable.  A
    warm-up base (:data:`zoopt.warmups.WARMUPS`) is built first if this machine has not built it."""
    path = study_dir / "base.json"
    ensure_warmup(spec["model"])
    now = digest(load_base(spec["model"], spec["dtype"]).params.items())
    if not path.exists():
        path.write_text(json.dumps({"model": spec["model"], "dtype": spec["dtype"], "digest": now}, indent=1))
        return now
    saved = json.loads(path.read_text())["digest"]
    if saved != now:
        raise ConfigError(f"model: {spec['model']!r} builds to weights {now} on this machine, but the study in "
                          f"{str(study_dir)!r} started from {saved}: its runs would not share a base")
    return now


def selected_runs(spec: dict, runs: dict, only: list[str] | None) -> list[str]:
    """The runs to do now: ``only`` (each a run of the plan, else a one-line ``ConfigError``
    listing them), or all."""
    if only is None:
        return list(runs)
    unknown = [n for n in only if n not in runs]
    if unknown or not only:
        raise ConfigError(f"--runs: {'no run ' + repr(unknown[0]) if unknown else 'no run named'} in study "
                          f"{spec['name']!r}; its runs: {', '.join(runs)}")
    return list(only)


def check_data(spec: dict, objective) -> None:
    """Read the objective's train and test data before any work (and before the study directory
    exists): data that cannot be had (no hub, no offline source) is its objective's one-line
    error now, not hours later, and a validation carve that leaves nothing to train on says so
    with the train split's size."""
    n_train = len(objective.dataset("train"))
    load_split(objective, "test", max(1, int(spec["eval"]["n_problems"])), key="eval.n_problems")
    n_validation = int(spec["tuning"]["validation"])
    if spec["tuning"]["enabled"] and n_validation >= n_train:
        raise ConfigError(f"tuning.validation: {n_validation} problems leave none of the {n_train} train problems "
                          f"of {spec['objective']!r} to train on")


def _tuning(spec, out: Path, bar, task, enabled: bool) -> dict:
    if not enabled:
        return {m: untuned(spec, m) for m in ("es", "grpo")}
    bar.update(task, description="tuning: base on validation")
    base = base_validation(spec, out).get(spec["tuning"]["metric"])
    bar.advance(task)
    tuned = {}
    for method in ("es", "grpo"):
        bar.update(task, description=f"tuning {method}")
        tuned[method] = tune(spec, method, out, base)
        bar.advance(task, grid_size(spec["tuning"][method]))
    return tuned


def _run(name: str, run: dict, spec: dict, cfg: dict, run_dir: Path, objective, describe) -> dict:
    """Run (or resume) one run of the study, its checkpoints evaluated as they come, then its
    other evaluations (:func:`~zoopt.workflows.study_seeds.extra_evaluations`); ``result.json`` is
    written last, so a run is marked done only when everything it owes is on disk."""
    done = run_dir / "result.json"
    if done.exists():  # its evaluations are all there, unless deleted by hand: then redone if its weights are
        result = json.loads(done.read_text())
        extra_evaluations(spec, cfg, result, run_dir, describe)
        return result
    for i, phase in enumerate(run["phases"]):  # a GRPO phase with no state to resume from starts again
        phase_dir = RunDir(run_dir / f"phase{i}-{phase.method}")
        if phase.method == "grpo" and phase_dir.path.exists() and not phase_dir.trainer_state_path.exists():
            shutil.rmtree(phase_dir.path)
    method = {"name": name, "dir": str(run_dir), "shared": run["shared"], "eval": eval_config(cfg),
              "phases": [p.to_dict() for p in run["phases"]]}
    result = run_method(method, objective=objective, on_checkpoint=checkpoint_evaluator(cfg, run_dir, describe))
    extra_evaluations(spec, cfg, result, run_dir, describe)
    write_text_atomic(done, json.dumps(jsonable(result), indent=2))
    for phase in result["phases"]:  # a finished run is never resumed: its GRPO states (3 models' size) go
        RunDir(phase["dir"]).trainer_state_path.unlink(missing_ok=True)
    return result


def _eval_cfg(cfg: dict, model: str) -> dict:
    return model_eval_config(cfg, model)


def _c3(spec: dict, cfg: dict, results: dict, out: Path) -> dict:
    """C3's analysis record, ``out/c3.json`` (read back when there): the weights' numbers
    (:func:`zoopt.study.moved_weights.weight_numbers`), then ES's update thresholded at each τ of
    ``c3.sparsity`` (``zoopt analyze``) and each thresholded model evaluated like the runs."""
    path = out / "c3.json"
    if path.exists():
        return json.loads(path.read_text())
    base = load_base(cfg["model"], cfg["dtype"])  # as every run's engine loaded it (zoopt.runs.references.load_base)
    es, grpo = load_params(results["es"]["model_dir"]), load_params(results["grpo"]["model_dir"])
    alpha = float(cfg["es"].get("lr", default_config("train")["lr"]))
    weights = weight_numbers(spec["c3"], alpha, base.params, es.params, grpo.params)
    del base, es, grpo
    report = analyze(cfg["model"], results["es"]["model_dir"], out, tau=weights["tau_paper"],
                     thresholds=tuple(weights["taus"]), dtype=cfg["dtype"])
    thresholds = []
    for rec in report["thresholds"]:
        ev = evaluate_model(_eval_cfg(cfg, rec["dir"]))
        ev.to_json(out / f"{tau_dirname(rec['tau'])}.eval.json")
        thresholds.append({"tau": rec["tau"], "share_reverted": rec["share_reverted"],
                           "eval": {"summary": ev.summary, "per_problem": ev.per_problem}})
        shutil.rmtree(rec["dir"], ignore_errors=True)  # ~ a model's size each; rebuilt by zoopt analyze --threshold
    record = {"drift": weights["drift"], "dtype": cfg["dtype"], "alpha": alpha, "tau_paper": weights["tau_paper"],
              "tau_scaled": weights["tau_scaled"], "shares": weights["shares"], "thresholds": thresholds,
              "histogram": report["plots"]["magnitude_histogram"]}
    path.write_text(json.dumps(jsonable(record), indent=2, default=str))
    return record


def _c8(spec: dict, cfg: dict, results: dict, out: Path) -> dict:
    """C8's analysis record, ``out/c8.json`` (read back when there): population coverage
    (:func:`zoopt.workflows.coverage.population_coverage`) around the ES model at its σ."""
    path = out / "c8.json"
    if path.exists():
        return json.loads(path.read_text())
    es_cfg = {**default_config("train"), **_eval_cfg(cfg, results["es"]["model_dir"])}
    es_cfg.update({k: cfg["es"][k] for k in ("sigma", "noise") if k in cfg["es"]}, noise_cache_gb=0)
    record = population_coverage(es_cfg, int(spec["c8"]["members"]), spec["c8"]["ks"])
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2))
    return record


def _judge(spec, tuned, evals, results, runs, c3, c8, study_dir: Path) -> dict:
    """:func:`zoopt.study.outcome.judge_claims`, with C1S's points and C2's seed-pooled
    evaluations read for the claims that need them."""
    claims = spec["claims"]
    coverage = coverage_points(spec, runs, results, evals, study_dir) if "C1S" in claims else None
    pooled = {m: pooled_eval(evals, runs, m, "entropy") for m in ("es", "grpo")} if "C2" in claims else None
    return judge_claims(spec, tuned, evals, results, runs, c3=c3, c8=c8, coverage=coverage, pooled_entropy=pooled)
