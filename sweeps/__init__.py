"""Hyper-parameter sweeps of ES or GRPO training with Optuna (see ``docs/sweeps.md``).

``sweeps.run(spec, study_name=..., storage=..., n_trials=..., workers=...)`` runs or resumes a
study and returns it; ``sweeps.load_spec`` parses and validates a spec.  Modules: ``space``
(params), ``spec`` (the spec), ``samplers`` (Optuna samplers and pruners), ``study`` (storage and
the study), ``objective`` (one trial),
``runner`` (the study loop and worker processes), ``report`` (table, plots, ``best.yaml``).
"""

from .runner import run
from .space import Param, SpecError
from .spec import SweepSpec, load_spec

__all__ = ["run", "load_spec", "SweepSpec", "Param", "SpecError"]
