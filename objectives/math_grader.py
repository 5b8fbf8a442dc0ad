r"""Checking final answers against gold answers under a hard time limit per check.

:class:`MathChecker` scores a batch of completions against their gold answers:

1. the answer is the content of the completion's last ``\boxed{}`` (:func:`objectives.boxed.last_boxed`,
   at most ``max_answer_chars`` characters, brackets nested at most 6 deep:
   :func:`objectives.boxed.too_deep`; a longer or deeper answer scores 0.0); without a box, the completion's last
   ``max_answer_chars`` characters go to math-verify, which (with TRL's settings) still finds an
   answer only in LaTeX anchored by a phrase such as "the final answer is $…$";
2. **fast path**, in this process: when the normalised answer equals the normalised gold
   (:func:`objectives.boxed.normalize`) the score is 1.0; when both are plain decimal numbers
   and differ, 0.0 — no worker is involved;
3. everything else goes to :func:`objectives.math_equivalence.equivalent` in a shared
   :class:`~zoopt.deadline.pool.DeadlinePool` (``workers`` processes): 1.0 when it says
   equal, else 0.0.  A check that runs past ``timeout_s`` has its worker killed and replaced and
   scores 0.0, **counted as a timeout** (:meth:`take_timeouts`, which objectives report to the
   reward guard); a check whose worker fails (an error, memory past ``memory_mb``) scores 0.0.

All checkers with the same ``workers`` and ``memory_mb`` share one pool per process, so a suite
of benchmarks keeps ``workers`` processes, not one set per benchmark.  Gold answers are
validated with :meth:`check_golds` when a dataset loads: one that math-verify cannot parse is a
one-line ValueError naming the row, never a silent 0.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

from zoopt.deadline.pool import DeadlinePool

from .boxed import MAX_ANSWER_CHARS, last_boxed, normalize, plain_number, too_deep

CHECK_FILE = Path(__file__).with_name("math_equivalence.py")
_shared: dict[tuple[int, int | None], DeadlinePool] = {}
_shared_lock = threading.Lock()


def shared_pool(workers: int, memory_mb: int | None) -> DeadlinePool:
    """The process-wide pool for ``(workers, memory_mb)``, created on first use."""
    with _shared_lock:
        key = (int(workers), memory_mb)
        if key not in _shared:
            _shared[key] = DeadlinePool(CHECK_FILE, "call", workers=int(workers), memory_mb=memory_mb)
        return _shared[key]


class MathChecker:
    """See the module doc.  ``timeout_s``: the deadline of one check in a worker."""

    def __init__(self, timeout_s: float = 1.0, workers: int = 2, memory_mb: int | None = 1024,
                 max_answer_chars: int = MAX_ANSWER_CHARS) -> None:
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ValueError(f"check_timeout_s must be a positive number of seconds, got {timeout_s!r}")
        if not (isinstance(workers, int) and workers >= 1):
            raise ValueError(f"check_workers must be an integer ≥ 1, got {workers!r}")
        self.timeout_s, self.workers, self.memory_mb = float(timeout_s), workers, memory_mb
        self.max_answer_chars = int(max_answer_chars)
        self._timeouts = 0

    @property
    def pool(self) -> DeadlinePool:
        return shared_pool(self.workers, self.memory_mb)

    def answer(self, completion: str) -> str | None:
        """The normalised content of the completion's last ``\\boxed{}``, or None."""
        boxed = last_boxed(completion, self.max_answer_chars)
        return None if boxed is None else normalize(boxed)

    def score(self, golds: Sequence[str], completions: Sequence[str],
              deadline_s: float | None = None) -> list[float]:
        """1.0 or 0.0 for each completion against its gold (see the module doc); the pool's
        part ends within ``deadline_s`` (checks not started by then score 0.0, as timeouts)."""
        scores = [0.0] * len(completions)
        pending: list[int] = []
        calls: list[tuple] = []
        for i, (gold, completion) in enumerate(zip(golds, completions)):
            boxed = last_boxed(completion, self.max_answer_chars)
            if boxed is not None:
                mine, theirs = normalize(boxed), normalize(gold)
                if mine == theirs:
                    scores[i] = 1.0
                    continue
                if (plain_number(mine) and plain_number(theirs)) or not mine or too_deep(boxed):
                    continue
                prediction = "\\boxed{" + boxed + "}"
            else:
                if "$" not in completion and "\\(" not in completion and "\\[" not in completion:
                    continue  # nothing math-verify's anchored LaTeX extraction could find
                prediction = completion[-self.max_answer_chars:]
                if too_deep(prediction):
                    continue
            pending.append(i)
            calls.append(("equivalent", gold, prediction))
        if calls:
            for i, outcome in zip(pending, self.pool.map(calls, self.timeout_s, deadline_s)):
                if outcome.status == "ok":
                    scores[i] = 1.0 if outcome.value is True else 0.0
                elif outcome.status in ("timeout", "cancelled"):
                    self._timeouts += 1
        return scores

    def take_timeouts(self) -> int:
        """Checks that ran out of time since the last call (then reset to 0)."""
        count, self._timeouts = self._timeouts, 0
        return count

    def check_golds(self, golds: Sequence[str], names: Sequence[str], what: str) -> None:
        """Raise a one-line ValueError naming the first row whose gold is empty or does not
        parse (plain numbers need no worker)."""
        todo: list[int] = []
        for i, gold in enumerate(golds):
            if not gold.strip():
                raise ValueError(f"{what}: {names[i]} has an empty gold answer")
            if not plain_number(normalize(gold)):
                todo.append(i)
        unique = sorted({golds[i] for i in todo})
        if not unique:
            return
        outcomes = dict(zip(unique, self.pool.map([("gold_parses", g) for g in unique],
                                                  timeout_s=max(self.timeout_s, 10.0))))
        for i in todo:
            outcome = outcomes[golds[i]]
            if outcome.status != "ok" or outcome.value is not True:
                why = "does not parse" if outcome.status == "ok" else f"could not be parsed ({outcome.status})"
                raise ValueError(f"{what}: {names[i]}'s gold answer {golds[i][:80]!r} {why} with "
                                 f"math-verify; fix the data or drop the row")
