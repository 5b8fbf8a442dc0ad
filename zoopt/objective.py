"""The objective contract: a verifier reward plus its data (the guard that calls it: :mod:`zoopt.rewards.guard`).

An objective is a reward function with TRL's signature,
``objective(prompts, completions, **columns) -> list[float | None]``, where ``columns`` are the
dataset's other columns, each a list aligned with ``completions``; ``None`` means "no opinion"
(the completion is skipped, not scored 0).  It also owns the data it is scored on:
``objective.dataset(split, n=None)`` is a ``datasets.Dataset`` with a ``prompt`` column (str, or a
conversation of ``{"role", "content"}`` messages) plus the answer columns the reward reads, and
``objective.split_size(split)`` says how many problems a split has (None: as many as asked).
Callers read data through :func:`load_split`, which also serves an objective whose ``dataset``
takes no ``n`` and clamps a request larger than the split, with a note.

Rules every objective keeps (:func:`zoopt.rewards.guard.score` enforces the first two for any
reward function):

* never raises out of a step and never hangs;
* never ``eval``s model output;
* never touches the global RNGs (``random``, ``numpy.random``, ``torch``): data generation uses
  its own seeded ``numpy.random.Generator``;
* ``train`` and ``test`` never share a problem.

This module is core: it never imports the ``objectives`` plugin package.
"""

from __future__ import annotations

import inspect
import warnings
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from .registry import resolve_target

SPLITS = ("train", "test")
#: the kinds of failure :meth:`Objective.failure_mode` tells apart
FAILURE_MODES = ("wrong", "no_answer", "format")
OBJECTIVES_LOAD = "objectives:load"  # the plugin package's loader: a lazy target, never an import


class ZooptWarning(UserWarning):
    """Something a user should see once; the ``zoopt`` command prints it as one line."""


class SplitSizeWarning(ZooptWarning):
    """More problems were asked of a split than it has; all of them are used instead."""


class DataUnavailable(ValueError):
    """An objective's data cannot be had here (no hub, no cache, no offline source); the message
    is one line saying what was tried.  A suite evaluation reports such a benchmark and goes on."""


def check_split(split: str) -> str:
    """Return ``split`` if it is ``"train"`` or ``"test"``, else raise a one-line ValueError."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    return split


class Objective:
    """A verifier reward with TRL's signature plus the data it is scored on.

    Subclasses implement :meth:`dataset` and either :meth:`reward` (one completion; the default
    :meth:`__call__` maps it over the batch) or :meth:`__call__` itself.

    * ``success_threshold`` — a completion is correct iff its reward is ``≥`` this.
    * ``system_prompt`` — an optional system message for chat-templated engines.
    """

    name: str = "objective"
    success_threshold: float = 1.0
    system_prompt: str | None = None
    #: whether prompts and completions may be written to run directories and logs; False for data
    #: whose authors ask that it not be published (GPQA): evaluations then keep no completion text
    publish_text: bool = True
    #: where the loaded data came from, for reports: "hub", "offline" or "files" (local files in
    #: the hub's format); None for generated data or before the data loads
    data_source: str | None = None

    def __call__(self, prompts: list, completions: list[str], **columns: list) -> list[float | None]:
        """Rewards for a batch: ``[reward(prompts[i], text(completions[i]), **row_i)]`` where
        ``text`` is :func:`completion_text`."""
        rows = _rows(len(completions), columns)
        prompts = list(prompts) if prompts is not None else [None] * len(completions)
        return [self.reward(p, completion_text(c), **row) for p, c, row in zip(prompts, completions, rows)]

    def reward(self, prompt: Any, completion: str, **row: Any) -> float | None:
        """The reward of one completion; ``row`` holds this problem's answer columns."""
        raise NotImplementedError(f"{type(self).__name__} implements neither reward() nor __call__()")

    def dataset(self, split: str, n: int | None = None):
        """A ``datasets.Dataset`` with a ``prompt`` column (str or messages) and answer columns.

        ``split`` is ``"train"`` or ``"test"`` (the two never share a problem; any other name
        is a one-line ValueError).  ``n`` rows (the first ``n`` of the split, at most
        :meth:`split_size`); when None, the objective's default set (all of a fixed split).
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement dataset()")

    def split_size(self, split: str) -> int | None:
        """How many problems ``split`` has — the most ``dataset(split, n)`` can return — or None
        when the objective makes as many as asked (generated problems).  Default: None."""
        check_split(split)
        return None

    def extract_answer(self, completion: str) -> str | None:
        """The completion's final answer as a canonical string (for majority voting), or None."""
        raise NotImplementedError(f"{type(self).__name__} does not implement extract_answer()")

    def gold_answer(self, row: dict) -> str | None:
        """The canonical gold answer of a dataset row, comparable with :meth:`extract_answer`."""
        answer = row.get("answer")
        return None if answer is None else str(answer)

    def failure_mode(self, prompt: Any, completion: str, row: dict) -> str:
        """Why an incorrect ``completion`` of the problem ``row`` failed, one of
        :data:`FAILURE_MODES`, read through the objective's own answer extraction:

        * ``"no_answer"`` — :meth:`extract_answer` finds no answer;
        * ``"format"`` — the answer is right but the reward rejects its form (the extracted
          answer equals :meth:`gold_answer`); objectives refine this (arithmetic: the right
          value is written but is not the last number);
        * ``"wrong"`` — an answer that is not the gold one.

        Only called for completions the reward judged incorrect.  An objective without
        :meth:`extract_answer` calls every failure ``"wrong"``."""
        try:
            answer = self.extract_answer(completion)
        except NotImplementedError:
            return "wrong"
        if answer is None:
            return "no_answer"
        return "format" if answer == self.gold_answer(row) else "wrong"

    def take_timeouts(self) -> int:
        """Completions this objective scored 0.0 since the last call because checking them ran
        out of its own time limit (e.g. a math check killed at its deadline); the count is reset.
        :func:`score` adds them to ``timed_out``.  Default: 0."""
        return 0

    def is_correct(self, rewards: Sequence[float | None]) -> list[bool]:
        """``reward is not None and reward ≥ success_threshold`` for each reward."""
        return [r is not None and r >= self.success_threshold for r in rewards]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def load_split(objective: Any, split: str, n: int | None = None, key: str = "n"):
    """``objective.dataset(split, n)``, for any objective, never more rows than the split has.

    * ``n`` larger than ``objective.split_size(split)`` is clamped to it, with a
      :class:`SplitSizeWarning` naming ``key`` (the setting that asked, e.g. ``eval.n_problems``),
      once per objective object and request;
    * an objective whose ``dataset`` takes only ``split`` (an older form of the contract) gets
      ``dataset(split)``, of which the first ``n`` rows are used (fewer: the same warning).
    """
    size = objective.split_size(split) if isinstance(objective, Objective) else None
    if n is not None and size is not None and n > size:
        _warn_clamped(objective, split, size, n, key)
        n = size
    if _takes_n(objective.dataset):
        return objective.dataset(split, n)
    data = objective.dataset(split)
    if n is None:
        return data
    if len(data) < n:
        _warn_clamped(objective, split, len(data), n, key)
    return data.select(range(min(n, len(data))))


def _takes_n(dataset: Callable) -> bool:
    try:
        parameters = list(inspect.signature(dataset).parameters.values())
    except (TypeError, ValueError):
        return True
    return len(parameters) >= 2 or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters)


_clamp_noted: "weakref.WeakKeyDictionary[Any, set]" = weakref.WeakKeyDictionary()


def _warn_clamped(objective: Any, split: str, size: int, n: int, key: str) -> None:
    """The note, once per objective object and request (a run evaluates before and after)."""
    try:
        noted = _clamp_noted.setdefault(objective, set())
    except TypeError:  # not weakly referenceable: note every time
        noted = set()
    if (split, n, key) in noted:
        return
    noted.add((split, n, key))
    name = getattr(objective, "name", type(objective).__name__)
    warnings.warn(f"objective {name!r} has {size} {split!r} problems, {n} asked ({key}): using all {size}",
                  SplitSizeWarning, stacklevel=3)


def completion_text(completion: Any) -> str:
    """The text of a completion: a str as is; a TRL conversational completion (a list of
    ``{"role", "content"}`` messages) as its last message's content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (list, tuple)) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"a completion must be a str or a list of messages, got {type(completion).__name__}")


def _rows(n: int, columns: dict[str, list]) -> list[dict]:
    for key, values in columns.items():
        if len(values) != n:
            raise ValueError(f"column {key!r} has {len(values)} values for {n} completions")
    return [{k: v[i] for k, v in columns.items()} for i in range(n)]


def load_objective(spec: str, **kwargs: Any) -> Objective:
    """The objective ``spec`` (a registered name, ``path/file.py:attr`` or ``module:attr``) built
    with ``kwargs``, through :func:`objectives.load` (reached by its lazy target: the core never
    imports a plugin package)."""
    return resolve_target(OBJECTIVES_LOAD)(spec, **kwargs)


def step_indices(n_rows: int, seed: int, step: int, k: int) -> np.ndarray:
    """The training rows of ``step``: ``k`` distinct rows drawn from (seed, step) alone (ES and
    GRPO draw a step's prompts this way, so a resumed run sees the same prompts)."""
    rng = np.random.default_rng([int(seed), int(step), 0x5EED])
    return rng.choice(n_rows, size=min(k, n_rows), replace=False)
