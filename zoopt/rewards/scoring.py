"""How a run calls its reward: in the shape TRL would use, through the guard, and loudly when it fails.

**TRL-shaped inputs.** TRL's ``GRPOTrainer`` calls a reward function with the prompts and
completions of a *conversational* batch as chat messages, and of a *standard* (plain-text)
batch as strings.  zoopt does the same for the prompts as the engine feeds them to the model
(:func:`trl_inputs`):

* the engine applies a chat template (:func:`chat_engine`: a plain prompt becomes one user
  message), or the dataset's prompts are conversations → ``prompts[i]`` is the list of messages
  (``[{"role": "system", ...}, {"role": "user", "content": ...}]``, the system message when the
  engine has a ``system_prompt``) and ``completions[i]`` is
  ``[{"role": "assistant", "content": text}]``;
* otherwise (a model without a chat template, such as ``tiny``) → both are strings.

:class:`~zoopt.objective.Objective` subclasses read either shape (their ``__call__`` passes
``completion_text(c)`` to ``reward``), so zoopt's own objectives do not care.

**Loud failures.** A reward function never crashes a step by raising on some completions:
:func:`zoopt.rewards.guard.score` scores those 0.0 and counts them.  But a reward that fails
silently on everything trains on zeros, so a :class:`Scorer`

* shows the first failure of each reward function once, with its message (a :class:`RewardWarning`;
  the ``zoopt`` command prints it as one ``zoopt: warning: ...`` line), and
* stops at the end of a step (or an evaluation) in which **every** completion's reward (of one
  reward function, when the objective sums several: :func:`reward_terms`) failed or timed out, with :class:`RewardError` carrying that message — unless ``reward_errors`` is
  ``"zero"``, which scores such steps 0.0 and carries on (``reward_errors: raise | zero`` in
  the run config; default ``raise``).
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..objective import ZooptWarning
from .functions import RewardFunctions, weighted_sum
from .guard import ScoreResult, score

REWARD_ERRORS = ("raise", "zero")


class RewardWarning(ZooptWarning):
    """A reward function failed (raised, timed out or returned a non-number) on a completion."""


class RewardError(RuntimeError):
    """Every completion's reward failed in a step; the message is one line with the reward's own error."""


def chat_engine(engine: Any) -> bool:
    """Whether ``engine`` feeds a plain-text prompt to the model as a one-message conversation
    (through its chat template): its ``encode`` gives the same ids for ``"x"`` and for
    ``[{"role": "user", "content": "x"}]``.  False for an engine without prompt encoding (and for
    a stand-in object that has no ``encode`` at all)."""
    if engine is None:
        return False
    try:
        return engine.encode("x") == engine.encode([{"role": "user", "content": "x"}])
    except (NotImplementedError, ValueError, AttributeError):
        return False


def trl_inputs(prompts: Sequence, texts: Sequence[str], chat: bool,
               system_prompt: str | None = None) -> tuple[list, list]:
    """``(prompts, completions)`` as TRL passes them to a reward function (see the module doc):
    messages when ``chat`` or when a prompt already is a conversation, else strings."""
    if not chat and not any(isinstance(p, (list, tuple)) for p in prompts):
        return list(prompts), list(texts)
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    conversations = []
    for p in prompts:
        if isinstance(p, (list, tuple)):
            messages = list(p)
            if system and not any(isinstance(m, dict) and m.get("role") == "system" for m in messages):
                messages = system + messages
        else:
            messages = system + [{"role": "user", "content": p}]
        conversations.append(messages)
    return conversations, [[{"role": "assistant", "content": t}] for t in texts]


def check_reward_errors(value: str) -> str:
    if value not in REWARD_ERRORS:
        raise ValueError(f"reward_errors must be one of {', '.join(REWARD_ERRORS)}, got {value!r}")
    return value


# objectives whose first failure has been shown (once per objective object, whoever scores it)
_reported: "weakref.WeakSet[Any]" = weakref.WeakSet()
_reported_ids: set[int] = set()  # for objectives that cannot be weakly referenced


def _first_report(objective: Any) -> bool:
    try:
        if objective in _reported:
            return False
        _reported.add(objective)
    except TypeError:
        if id(objective) in _reported_ids:
            return False
        _reported_ids.add(id(objective))
    return True


def reward_name(objective: Any) -> str:
    name = getattr(objective, "name", None) or getattr(objective, "__name__", None)
    return str(name or type(objective).__name__)


def reward_terms(objective: Any) -> list[tuple[str, Callable[..., Sequence[float | None]], float]]:
    """``(name, function, weight)`` of each reward ``objective`` sums: the terms of a
    :class:`~zoopt.rewards.functions.RewardFunctions`, else the objective itself with weight 1."""
    if isinstance(objective, RewardFunctions):
        return objective.terms
    return [(reward_name(objective), objective, 1.0)]


@dataclass
class _TermCounts:
    """One reward function's completions, failures (first error) and rewards in the current step."""

    completions: int = 0
    bad: int = 0
    error: str | None = None
    rewards: list = field(default_factory=list)


class Scorer:
    """Scores a run's completions with ``objective`` (see the module doc).

    ``engine`` decides the shape of the inputs (:func:`chat_engine`, its ``system_prompt``);
    ``chat`` overrides that.  ``timeout_s`` limits each reward call (:func:`zoopt.rewards.guard.score`).
    Call :meth:`start` before a step's first :meth:`score` and :meth:`finish` after its last.
    ``warn(message)`` shows the first failure (default: a :class:`RewardWarning`).

    An objective that sums several reward functions (:func:`reward_terms`) has each function
    scored on its own through the guard, and the weighted sum returned
    (:func:`~zoopt.rewards.functions.weighted_sum`); :meth:`reward_metrics` gives each function's
    mean and standard deviation over the step, as TRL logs them.
    """

    def __init__(self, objective: Callable[..., Sequence[float | None]], engine: Any = None, *,
                 timeout_s: float = 5.0, reward_errors: str = "raise", chat: bool | None = None,
                 warn: Callable[[str], None] | None = None) -> None:
        self.objective = objective
        self.terms = reward_terms(objective)
        self.timeout_s = timeout_s
        self.reward_errors = check_reward_errors(reward_errors)
        self.chat = chat_engine(engine) if chat is None else bool(chat)
        self.system_prompt = engine.system_prompt if (engine is not None and self.chat) else None
        self.warn = warn or (lambda message: warnings.warn(message, RewardWarning, stacklevel=4))
        self.start()

    def start(self) -> None:
        """Begin a step: reset the counts :meth:`finish` checks."""
        self.completions = self.failed = self.timed_out = self.skipped = 0
        self.error: str | None = None
        self._counts = [_TermCounts() for _ in self.terms]

    def score(self, prompts: Sequence, texts: Sequence[str], columns: dict[str, list] | None = None) -> ScoreResult:
        """Rewards of ``texts`` (completions of ``prompts``), through the guard; counted for the step."""
        trl_prompts, completions = trl_inputs(prompts, texts, self.chat, self.system_prompt)
        results = []
        for (name, fn, _), counts in zip(self.terms, self._counts):
            result = score(fn, trl_prompts, completions, columns, timeout_s=self.timeout_s)
            counts.completions += len(texts)
            counts.bad += result.failed + result.timed_out
            counts.rewards.extend(result.rewards)
            if result.error is not None:
                counts.error = counts.error or result.error
                if _first_report(fn):
                    self.warn(f"reward {name!r} failed on a completion: {result.error} (shown once; failed "
                              f"completions score 0.0, counted as reward_failed/reward_timed_out)")
            results.append(result)
        result = results[0] if [w for _, _, w in self.terms] == [1.0] else _combined(results, self.terms)
        self.completions += len(texts)
        self.failed += result.failed
        self.timed_out += result.timed_out
        self.skipped += result.skipped
        self.error = self.error or result.error
        return result

    def finish(self, where: str = "the step") -> dict:
        """End a step: its counts, or :class:`RewardError` when every completion of one reward
        function failed and ``reward_errors`` is ``"raise"``."""
        counts = {"failed": self.failed, "timed_out": self.timed_out, "skipped": self.skipped}
        for (name, _, _), term in zip(self.terms, self._counts):
            if term.completions and term.bad == term.completions and self.reward_errors == "raise":
                raise RewardError(
                    f"the reward {name!r} failed on every completion of {where} "
                    f"({term.bad} of {term.completions}): {term.error}; fix the reward, or set reward_errors: zero "
                    f"to score failures as 0.0")
        return counts

    def reward_metrics(self) -> dict[str, float | None]:
        """Each reward function's ``rewards/{name}/mean`` and ``rewards/{name}/std`` over the step's
        scored completions (``None`` rewards left out; the std with Bessel's correction, as TRL's
        ``nanstd``; None where undefined)."""
        out: dict[str, float | None] = {}
        for (name, _, _), term in zip(self.terms, self._counts):
            values = np.array([r for r in term.rewards if r is not None], dtype=np.float64)
            out[f"rewards/{name}/mean"] = float(values.mean()) if values.size else None
            out[f"rewards/{name}/std"] = float(values.std(ddof=1)) if values.size > 1 else None
        return out


def _combined(results: list[ScoreResult], terms) -> ScoreResult:
    """The weighted sum of per-function results; failures add up, the first error is kept."""
    rewards = weighted_sum([r.rewards for r in results], [w for _, _, w in terms])
    errors = [r.error for r in results if r.error is not None]
    return ScoreResult(rewards, failed=sum(r.failed for r in results), timed_out=sum(r.timed_out for r in results),
                       skipped=sum(r is None for r in rewards), error=errors[0] if errors else None)


__all__ = ["Scorer", "reward_terms", "RewardError", "RewardWarning", "ZooptWarning", "REWARD_ERRORS", "chat_engine",
           "trl_inputs", "check_reward_errors"]
