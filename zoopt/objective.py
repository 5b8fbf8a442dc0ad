"""The objective contract (a verifier reward plus its data) and the reward guard ``score``.

An objective is a reward function with TRL's signature,
``objective(prompts, completions, **columns) -> list[float | None]``, where ``columns`` are the
dataset's other columns, each a list aligned with ``completions``; ``None`` means "no opinion"
(the completion is skipped, not scored 0).  It also owns the data it is scored on:
``objective.dataset(split, n=None)`` is a ``datasets.Dataset`` with a ``prompt`` column (str, or a
conversation of ``{"role", "content"}`` messages) plus the answer columns the reward reads, and
``objective.split_size(split)`` says how many problems a split has (None: as many as asked).
Callers read data through :func:`load_split`, which also serves an objective whose ``dataset``
takes no ``n`` and clamps a request larger than the split, with a note.

Rules every objective keeps (``score`` enforces the first two for any reward function):

* never raises out of a step and never hangs;
* never ``eval``s model output;
* never touches the global RNGs (``random``, ``numpy.random``, ``torch``): data generation uses
  its own seeded ``numpy.random.Generator``;
* ``train`` and ``test`` never share a problem.

This module is core: it never imports the ``objectives`` plugin package.
"""

from __future__ import annotations

import inspect
import math
import signal
import threading
import time
import traceback
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

SPLITS = ("train", "test")


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


def mean_reward(rewards: Sequence[float | None]) -> float:
    """The mean over the non-None rewards; 0.0 when every reward is None (an ES member's score)."""
    valid = [float(r) for r in rewards if r is not None]
    return sum(valid) / len(valid) if valid else 0.0


# --------------------------------------------------------------------------------------------
# The guard.


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


class _Timeout(BaseException):
    """Raised by our SIGALRM handler.  A BaseException, so a reward's ``except Exception``
    cannot swallow it."""


def _raise_timeout(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _Timeout()


_OK, _ERROR, _TIMEOUT = "ok", "error", "timeout"


def _call_in_main_thread(fn: Callable[[], Any], timeout_s: float) -> tuple[str, Any]:
    """Run ``fn()`` under ``ITIMER_REAL``; restore the previous SIGALRM handler and timer.

    If an outer timer was running, ours is shortened to its remaining time and the outer timer
    is re-armed afterwards with whatever it had left (at least 1 µs, so it still fires).
    """
    previous_handler = signal.getsignal(signal.SIGALRM)
    previous_delay, previous_interval = signal.getitimer(signal.ITIMER_REAL)
    limit = min(timeout_s, previous_delay) if previous_delay > 0 else timeout_s
    start = time.monotonic()
    signal.signal(signal.SIGALRM, _raise_timeout)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, max(limit, 1e-6))
            try:
                return _OK, fn()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Timeout:
            return _TIMEOUT, None
        except Exception as exc:  # the reward's own failure
            return _ERROR, exc
    finally:
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous_handler is None else previous_handler)
        if previous_delay > 0:
            left = previous_delay - (time.monotonic() - start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), previous_interval)


def _call_in_thread(fn: Callable[[], Any], timeout_s: float) -> tuple[str, Any]:
    """Run ``fn()`` in a daemon thread; abandon it (it keeps running) after ``timeout_s``."""
    box: list[tuple[str, Any]] = []

    def target() -> None:
        try:
            box.append((_OK, fn()))
        except Exception as exc:
            box.append((_ERROR, exc))

    worker = threading.Thread(target=target, name="zoopt-reward", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return box[0] if box else (_TIMEOUT, None)


def call_with_timeout(fn: Callable[[], Any], timeout_s: float) -> tuple[str, Any]:
    """``("ok", value)``, ``("error", exception)`` or ``("timeout", None)``.

    From the main thread this uses ``signal.setitimer(ITIMER_REAL)``, which interrupts Python
    code (including ``time.sleep``), and ``KeyboardInterrupt``/``SystemExit`` propagate;
    elsewhere (or without ``setitimer``) the call runs in a daemon thread that is abandoned,
    still running, after ``timeout_s``.  Neither can interrupt one long C call that never
    returns to the interpreter (e.g. ``9**9**9**9``): reward code must bound such work itself.
    """
    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
        return _call_in_main_thread(fn, timeout_s)
    return _call_in_thread(fn, timeout_s)


def guard_time_left(limit_s: float, margin_s: float = 0.25) -> float:
    """``limit_s``, cut to end ``margin_s`` before an ``ITIMER_REAL`` armed in this (main) thread
    — the reward guard's, :func:`call_with_timeout` — would fire (at least 0.05 s), so that a
    reward bounding its own work finishes before the guard gives up on the whole batch."""
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "getitimer"):
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        if left > 0:
            return min(limit_s, max(left - margin_s, 0.05))
    return limit_s


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
        if status == _OK and len(value) == expected:
            return True
        if status == _TIMEOUT:
            errors.append(f"timed out after {timeout_s:g} s")
        elif status == _ERROR:
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
                timed_out += status == _TIMEOUT
                failed += status != _TIMEOUT
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
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _materialize(value: Any) -> list:
    """``list(value)`` (inside the time limit: the reward may return a lazy iterable)."""
    if value is None or isinstance(value, (str, bytes, dict)):
        raise TypeError(f"a reward function must return a list, got {type(value).__name__}")
    return list(value)
