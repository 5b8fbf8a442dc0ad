"""The Optuna side of a sweep: storage, sampler, pruner and the study itself.

* Storage: any RDB URL (SQLite, PostgreSQL, MySQL) as an ``optuna.storages.RDBStorage`` with
  heartbeats, so a trial whose process died (RUNNING, silent past ``grace_period``) is marked
  FAIL by Optuna before the next trial starts — and re-queued when ``heartbeat.retry`` > 0.
  SQLite connections wait up to 60 s for a lock, so several processes can share one file.
  PostgreSQL needs a driver: ``pip install "zoopt-llm[postgres]"`` (psycopg2); a plain
  ``postgresql://`` URL uses SQLAlchemy's default driver when it is installed, else psycopg2.  A
  missing driver is a one-line :class:`~zoopt.extras.MissingDependency` naming what to install.
* Sampler: ``tpe`` | ``random`` | ``grid`` | ``nsga2`` with the spec's options.  Its seed is
  drawn from ``(spec.seed, worker, trials already in the study)``, so parallel workers and
  resumed runs do not replay each other's random draws; TPE in parallel workers uses
  ``constant_liar`` unless the spec says otherwise.  ``grid`` walks the product of the
  categorical/int params.
* Pruner: ``none`` | ``median`` | ``hyperband`` with the spec's options.
"""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import optuna
from optuna.storages import RDBStorage, RetryFailedTrialCallback

from zoopt.extras import MissingDependency, missing_dependency

from .samplers import build_pruner, build_sampler
from .space import SpecError
from .spec import SweepSpec

SQLITE_TIMEOUT_S = 60


def make_storage(url: str, spec: SweepSpec) -> RDBStorage:
    """An RDB storage for ``url`` with the spec's heartbeat settings."""
    hb = spec.heartbeat
    engine_kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}} if url.startswith("sqlite") else None
    retry = RetryFailedTrialCallback(max_retry=hb.retry) if hb.retry else None
    try:
        with warnings.catch_warnings():  # heartbeats are an "experimental" Optuna argument
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return RDBStorage(storage_url(url), engine_kwargs=engine_kwargs, heartbeat_interval=hb.interval,
                              grace_period=hb.grace_period, failed_trial_callback=retry)
    except ImportError as exc:  # Optuna's "Failed to import DB access module", caused by the driver's import
        raise missing_driver(url, exc) from exc


def storage_url(url: str) -> str:
    """``url``, except that a plain ``postgresql://`` names psycopg2 (the ``postgres`` extra) when
    SQLAlchemy's default PostgreSQL driver is not installed but psycopg2 is."""
    scheme, sep, rest = url.partition("://")
    if scheme != "postgresql" or not sep:
        return url
    from sqlalchemy.engine import make_url

    default = make_url(url).get_dialect().driver  # psycopg (SQLAlchemy ≥ 2.1) or psycopg2
    if importlib.util.find_spec(default) is None and importlib.util.find_spec("psycopg2") is not None:
        return f"postgresql+psycopg2://{rest}"
    return url


def missing_driver(url: str, exc: ImportError) -> ImportError:
    """The one-line error of a storage URL whose database driver is not installed (the URL's
    credentials are never repeated: only its scheme)."""
    scheme = url.partition("://")[0]
    cause = exc.__cause__ or exc.__context__
    if scheme.split("+")[0] == "postgresql":
        return MissingDependency(f"storage {scheme}://... needs a PostgreSQL driver, which is not installed "
                                 f"({cause}): pip install \"zoopt-llm[postgres]\"")
    known = missing_dependency(cause) if cause is not None else None
    if known is not None:
        return known
    name = getattr(cause, "name", None)
    what = f"the Python module {name!r}" if name else "a database driver"
    package = DRIVER_PACKAGES.get(name, name)
    return MissingDependency(f"storage {scheme}://... needs {what}, which is not installed"
                             + (f": pip install {package}" if name else f" ({exc})"))


# driver module → the distribution that installs it, where the names differ
DRIVER_PACKAGES = {"MySQLdb": "mysqlclient", "pymysql": "PyMySQL", "psycopg2": "psycopg2-binary"}


def sampler_seed(spec: SweepSpec, worker: int, n_existing: int) -> int:
    return int(np.random.SeedSequence([spec.seed, worker, n_existing]).generate_state(1)[0])


def make_sampler(spec: SweepSpec, *, worker: int = 0, n_existing: int = 0, workers: int = 1):
    """The spec's sampler for ``worker`` (see :func:`sweeps.samplers.build_sampler`)."""
    kind, options = spec.sampler
    return build_sampler(kind, options, sampler_seed(spec, worker, n_existing), spec.space, workers=workers)


def make_pruner(spec: SweepSpec):
    """The spec's pruner (see :func:`sweeps.samplers.build_pruner`)."""
    return build_pruner(*spec.pruner)


def count_trials(storage: RDBStorage, name: str) -> int:
    """Trials (any state) in study ``name`` of ``storage``; 0 when it does not exist yet."""
    try:
        return len(storage.get_all_trials(storage.get_study_id_from_name(name), deepcopy=False))
    except KeyError:
        return 0


def count_finished(study: optuna.Study) -> int:
    """Trials of ``study`` that ran to their end: COMPLETE or PRUNED (not FAIL, RUNNING, WAITING)."""
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return len(study.get_trials(deepcopy=False, states=states))


def open_study(spec: SweepSpec, name: str, storage: RDBStorage, *, worker: int = 0,
               workers: int = 1, n_existing: int = 0) -> optuna.Study:
    """Create the study or load it if it exists (a resumed sweep adds trials).

    ``n_existing`` (the study's trial count when the sweep started) seeds the sampler.
    A stored study whose metrics or directions differ from the spec's raises
    :class:`SpecError` (Optuna itself would silently keep the stored directions).
    """
    study = optuna.create_study(storage=storage, study_name=name, directions=spec.directions,
                                load_if_exists=True, pruner=make_pruner(spec),
                                sampler=make_sampler(spec, worker=worker, n_existing=n_existing,
                                                     workers=workers))
    stored = (study.metric_names or spec.metric_names, [d.name.lower() for d in study.directions])
    if stored != (spec.metric_names, spec.directions):
        raise SpecError(f"objectives: study {name!r} already optimises {_describe(*stored)}, the spec asks for "
                        f"{_describe(spec.metric_names, spec.directions)}; use another study name")
    if worker == 0:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(spec.metric_names)
    return study


def _describe(metrics: list[str], directions: list[str]) -> str:
    return ", ".join(f"{d} {m}" for m, d in zip(metrics, directions))
