"""``sweeps.run``: run (or resume) an Optuna study of ES or GRPO hyper-parameters.

Layout: ``<run_root>/<study>/`` holds ``study.db`` (the default SQLite storage),
``trials/trial-NNNN/`` (one ``zoopt train``/``zoopt grpo`` run directory per trial), ``plots/*.png`` and
``best.yaml`` (see :mod:`sweeps.report`).

Budget: ``n_trials`` is the number of trials *this call* runs, exactly — split into shares
over ``workers`` processes (started with multiprocessing ``spawn``), each running
``study.optimize(n_trials=share)`` against the shared storage.  Optuna's ``n_trials`` counts
every trial a process runs, whatever its end state, so the shares add up to ``n_trials`` with
none lost or duplicated.  (``MaxTrialsCallback`` alone would not be exact here: it stops a
worker only after a trial ends, so two workers can both start the last trial.)

Resuming: the study is loaded if it exists, so calling ``run`` again adds ``n_trials`` trials.
Trials left RUNNING by a killed process are marked FAIL (heartbeats, see :mod:`sweeps.study`)
before new ones start.  The paper-defaults trial is enqueued only into an empty study.
``total_trials`` instead of ``n_trials`` runs the rest of a planned sweep: ``total_trials``
minus the study's finished (COMPLETE or PRUNED) trials, counted after the stale ones are failed,
so the same call, repeated after a cut, ends with exactly ``total_trials`` finished trials.
"""

from __future__ import annotations

import multiprocessing as mp
import warnings
from pathlib import Path

import optuna

from .objective import EvaluateFn, TrialObjective
from .spec import SweepSpec, check_name, load_spec
from .study import count_finished, count_trials, make_storage, open_study

DEFAULT_ROOT = Path("runs") / "sweeps"


def run(spec: str | Path | dict | SweepSpec, *, study_name: str | None = None, storage: str | None = None,
        n_trials: int | None = None, workers: int = 1, run_root: str | Path | None = None,
        evaluate_fn: EvaluateFn | None = None, report: bool = True,
        total_trials: int | None = None) -> optuna.Study:
    """Run ``n_trials`` (default: the spec's) trials of ``spec`` and return the study.

    ``total_trials``: run only as many trials as the study lacks of that many finished ones
    (exclusive with ``n_trials``; see the module docstring).

    ``storage``: an RDB URL; default ``sqlite:///<run_root>/<study>/study.db``.
    ``study_name``: default the spec's ``name`` (its file name).  ``evaluate_fn``: see
    :class:`sweeps.objective.TrialObjective`.  ``report``: write plots and ``best.yaml``.
    """
    spec = load_spec(spec)
    name = check_name(study_name) if study_name is not None else spec.name
    if n_trials is not None and total_trials is not None:
        raise ValueError(f"give n_trials ({n_trials!r}) or total_trials ({total_trials!r}), not both")
    _check_count("total_trials", total_trials)
    n_trials = spec.n_trials if n_trials is None and total_trials is None else n_trials
    _check_count("n_trials", n_trials)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    study_dir = Path(run_root or DEFAULT_ROOT) / name
    study_dir.mkdir(parents=True, exist_ok=True)
    url = storage or f"sqlite:///{(study_dir / 'study.db').resolve()}"
    rdb = make_storage(url, spec)
    n_existing = count_trials(rdb, name)
    study = open_study(spec, name, rdb, workers=workers, n_existing=n_existing)
    study.set_user_attr("study_dir", str(study_dir))
    study.set_user_attr("method", spec.method)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    if spec.enqueue_paper_defaults and not study.trials:
        study.enqueue_trial(spec.paper_trial(), user_attrs={"paper_defaults": True}, skip_if_exists=True)
    if total_trials is not None:
        n_trials = max(0, total_trials - count_finished(study))
    shares = [n_trials // workers + (i < n_trials % workers) for i in range(workers)]
    if workers == 1:
        _optimize(study, spec, study_dir, shares[0], evaluate_fn, worker=0)
    else:
        _spawn(spec, name, url, study_dir, shares, evaluate_fn, n_existing)
    if report:
        from .report import write_report

        write_report(study, study_dir)
    return study


def _check_count(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


def _optimize(study: optuna.Study, spec: SweepSpec, study_dir: Path, n_trials: int,
              evaluate_fn: EvaluateFn | None, worker: int) -> None:
    if n_trials:
        study.optimize(TrialObjective(spec, study_dir, evaluate_fn, worker=worker), n_trials=n_trials,
                       catch=(Exception,), gc_after_trial=True)


def _worker(spec: SweepSpec, name: str, url: str, study_dir: Path, n_trials: int,
            evaluate_fn: EvaluateFn | None, worker: int, workers: int, n_existing: int) -> None:
    study = open_study(spec, name, make_storage(url, spec), worker=worker, workers=workers,
                       n_existing=n_existing)
    _optimize(study, spec, study_dir, n_trials, evaluate_fn, worker)


def _spawn(spec: SweepSpec, name: str, url: str, study_dir: Path, shares: list[int],
           evaluate_fn: EvaluateFn | None, n_existing: int) -> None:
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, name=f"sweep-{name}-{i}",
                         args=(spec, name, url, study_dir, share, evaluate_fn, i, len(shares), n_existing))
             for i, share in enumerate(shares) if share]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    failed = [f"{p.name} (exit code {p.exitcode})" for p in procs if p.exitcode != 0]
    if failed:
        raise RuntimeError(f"sweep worker process(es) failed: {', '.join(failed)}")
