"""``zoopt study``: the paper's findings as one resumable study (docs/study.md).

* :mod:`~zoopt.study.spec` — the study YAML (shipped: ``paper-toy``, ``paper-easy``,
  ``paper-hard`` in ``zoopt/configs/studies/``), profiles and ``--set`` overrides;
* :mod:`~zoopt.study.verdict` — the paired bootstrap over problems and the three verdicts;
* :mod:`~zoopt.study.validation` — the validation split carved from train (tuning never sees
  the held-out problems);
* :mod:`~zoopt.study.claims` — C1–C8 computed from the runs' per-problem evaluations;
* :mod:`~zoopt.study.narrowing` — C1S, C1's strong form over seeds, checkpoints and temperatures;
* :mod:`~zoopt.study.frontier` — ΔPass@k against ΔPass@1 along the runs' checkpoints, and Pass@k
  at matched Pass@1 gain (``zoopt frontier``);
* :mod:`~zoopt.study.moved_weights` — C3's numbers of the weights: drift, shares of small moves,
  the τ of each sparsity level;
* :mod:`~zoopt.study.outcome` — every claim of a spec judged from the runs' records;
* :mod:`~zoopt.study.report` — ``report.md``, ``report.json`` and the plots.

These are the study's pure analyses.  The runs themselves are driven by
:mod:`zoopt.workflows.study` (the runner), which reuses ``compare``'s methods, the sweeps,
``analyze`` and :mod:`zoopt.workflows.coverage`.  This package imports none of its modules:
import the one you need.
"""
