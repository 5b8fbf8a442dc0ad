"""The reward guard: :func:`score` calls any TRL-style reward function so that a step never
raises because of it nor hangs, and :class:`ScoreResult` says what failed.

Rewards are ``float | None``; ``None`` means "no opinion" (skipped, not scored 0), and
:func:`mean_reward` is the mean over the others.  Time limits come from
:mod:`zoopt.rewards.timeouts`; :mod:`zoopt.rewards.scoring` turns a ``ScoreResult`` into a step's rewards and
warnings.
"""

from __future__ import annotations

import math
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..objective import Objective
from .timeouts import ERROR, OK, TIMEOUT, call_with_timeout


def mean_reward(rewards: Sequence[float | None]) -> float:
    """The mean over the non-None rewards; 0.0 when every reward is None (an ES member's score)."""
    valid = [float(r) for r in rewards if r is not None]
    return sum(valid) / len(valid) if valid else 0.0


@dataclass
class ScoreResult:
    """Rewards (``None`` kept) and counts of completions that failed, timed out or were skipped.

    ``error``: what went wrong first, one line (``"KeyError: 0 (rewards.py:12 in my_reward)"``,
    ``"timed out after 5 s"``, ``"returned 'abc', not a number"``), None when nothing did.
    """

    rewards: list[float | None]
    failed: int = 0
    timed_out: int = 0
    skipped: int = 0
    error: str | None = field(default=None, compare=False)

    @property
    def n_failed(self) -> int:
        """Completions that scored 0.0 because their reward failed or timed out."""
        return self.failed + self.timed_out


def _as_reward(value: Any) -> tuple[float | None, bool]:
    """``(reward, ok)``: None stays None; finite numbers become float; anything else fails."""
    if value is None:
        return None, True
    if isinstance(value, (str, bytes)):
        return 0.0, False
    try:
        reward = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0, False
    return (reward, True) if math.isfinite(reward) else (0.0, False)


def score(objective: Callable[..., Sequence[float | None]], prompts: Sequence,
          completions: Sequence[str], columns: dict[str, list] | None = None,
          timeout_s: float = 5.0) -> ScoreResult:
    """Score ``completions`` with ``objective`` (any TRL-style reward function) and never raise
    because of it nor hang.

    1. ``objective(prompts=prompts, completions=completions, **columns)`` on the whole batch —
       keyword arguments, as TRL calls a reward function — time-limited to ``timeout_s``.
    2. If that raises, times out or returns something that is not a sequence of
       ``len(completions)`` values: one call per completion (its prompt, completion and column
       values as length-1 lists), each limited to ``timeout_s``; a call that raises, times out
       or returns a malformed result gives that completion 0.0, counted in ``failed`` or
       ``timed_out``.  Worst case: ``(len(completions) + 1)·timeout_s`` seconds.
    3. ``None`` is kept (counted in ``skipped``); a non-finite or non-numeric value (a string
       included) becomes 0.0 and is counted in ``failed``.
    4. An :class:`Objective` that scored completions 0.0 because its own checks ran out of time
       (:meth:`Objective.take_timeouts`) has them added to ``timed_out``.

    Time limits are described in :func:`call_with_timeout`.  ``score`` itself draws no random
    numbers.  Arguments that are inconsistent (a column whose length differs from
    ``completions``) are the caller's bug and raise ValueError.
    """
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    columns = dict(columns or {})
    prompts = list(prompts)
    completions = list(completions)
    n = len(completions)
    if len(prompts) != n:
        raise ValueError(f"score got {len(prompts)} prompts for {n} completions")
    for key, values in columns.items():
        if len(values) != n:
            raise ValueError(f"column {key!r} has {len(values)} values for {n} completions")
    if n == 0:
        return ScoreResult([])
    if isinstance(objective, Objective):
        objective.take_timeouts()  # counts left over from calls made outside the guard

    errors: list[str] = []  # what went wrong, first first

    def note(status: str, value: Any, expected: int) -> bool:
        """Whether a call gave ``expected`` values; records what went wrong otherwise."""
        if status == OK and len(value) == expected:
            return True
        if status == TIMEOUT:
            errors.append(f"timed out after {timeout_s:g} s")
        elif status == ERROR:
            errors.append(describe_exception(value))
        else:
            errors.append(f"returned {len(value)} rewards for {expected} completions")
        return False

    status, value = call_with_timeout(
        lambda: _materialize(objective(prompts=prompts, completions=completions, **columns)), timeout_s)
    batch = value if note(status, value, n) else None
    failed = timed_out = 0
    if batch is None:
        batch_error, errors[:] = errors[0], []  # a completion's own failure says more than the batch's
        batch = []
        for i in range(n):
            row = {k: [v[i]] for k, v in columns.items()}
            status, value = call_with_timeout(
                lambda i=i, row=row: _materialize(objective(prompts=[prompts[i]], completions=[completions[i]], **row)),
                timeout_s)
            if note(status, value, 1):
                batch.append(value[0])
            else:
                timed_out += status == TIMEOUT
                failed += status != TIMEOUT
                batch.append(0.0)
        if not errors:  # every completion alone was fine: the batch call was what failed
            errors.append(f"{batch_error} (on the whole batch; one completion at a time it worked)")
    rewards: list[float | None] = []
    for value in batch:
        reward, ok = _as_reward(value)
        if not ok:
            failed += 1
            errors.append(f"returned {_short(value)}, not a finite number")
        rewards.append(reward)
    if isinstance(objective, Objective):
        inner = objective.take_timeouts()
        if inner:
            timed_out += inner
            errors.append(f"checking {inner} of {n} completions ran out of the objective's own "
                          f"time limit (scored 0.0)")
    skipped = sum(r is None for r in rewards)
    return ScoreResult(rewards, failed=failed, timed_out=timed_out, skipped=skipped,
                       error=errors[0] if errors and (failed or timed_out) else None)


def describe_exception(exc: BaseException) -> str:
    """``"KeyError: 0 (rewards.py:12 in my_reward)"``: the exception and the line that raised it, one line."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    if frames:
        last = frames[-1]
        text += f" ({Path(last.filename).name}:{last.lineno} in {last.name})"
    return text


def _short(value: Any) -> str:
    """``repr(value)`` cut to 60 characters; a numpy scalar as the Python number it holds
    (``nan``, not ``np.float64(nan)``)."""
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 60 else text[:57] + "..."


def _materialize(value: Any) -> list:
    """``list(value)`` (inside the time limit: the reward may return a lazy iterable)."""
    if value is None or isinstance(value, (str, bytes, dict)):
        raise TypeError(f"a reward function must return a list, got {type(value).__name__}")
    return list(value)
