"""``RewardFunctions``: TRL's ``reward_funcs`` + ``reward_weights`` over your datasets, as one objective.

TRL's ``GRPOTrainer`` takes a list of reward functions, each ``f(prompts, completions, **columns)
-> list[float | None]``, and weights; the reward of completion j is

    r_j = Σ_f w_f · r_{f,j}     over the functions f whose r_{f,j} is not None,

and ``None`` when every function returned ``None`` for it (TRL: ``nansum``, unscorable rows NaN).
:class:`RewardFunctions` is that sum as a zoopt objective (:mod:`zoopt.objective`): its data is
the ``train_dataset`` (split ``train``) and ``eval_dataset`` (split ``test``) you give, each a
``datasets.Dataset`` with a ``prompt`` column (plain text or a conversation) whose other columns
reach every function as keyword arguments.

The trainers score each function on its own through the reward guard
(:class:`zoopt.rewards.scoring.Scorer`: its own time limit, its failures counted and shown once) and log
each function's mean and standard deviation per step as TRL does, ``rewards/{name}/mean`` and
``rewards/{name}/std``, where ``name`` is TRL's display name (:func:`callable_name`).
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Callable, Sequence

from ..objective import Objective, check_split

RewardFunction = Callable[..., Sequence[float | None]]


def callable_name(fn: Callable) -> str:
    """TRL's display name of a reward function (``trl.trainer.utils.get_callable_name``): a
    ``functools.partial`` is unwrapped; a function's ``__name__``, else (a callable object) its class name."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn.__name__ if inspect.isroutine(fn) else type(fn).__name__


def weighted_sum(values: Sequence[Sequence[float | None]], weights: Sequence[float]) -> list[float | None]:
    """``Σ_f w_f·values[f][j]`` over the functions with a value for completion j; None when none has one."""
    out: list[float | None] = []
    for column in zip(*values):
        terms = [w * float(v) for w, v in zip(weights, column) if v is not None]
        out.append(math.fsum(terms) if terms else None)
    return out


class RewardFunctions(Objective):
    """TRL-style reward functions with weights, scored on ``train_dataset`` and ``eval_dataset``.

    Args:
        reward_funcs: one callable or a list (TRL's reward-function signature).
        train_dataset: a ``datasets.Dataset`` with a ``prompt`` column; the rows of split ``train``.
        eval_dataset: the rows of split ``test`` (held-out evaluation), or None.
        weights: one number per function (TRL's ``reward_weights``); None: 1.0 each.
        success_threshold: a completion counts as correct (``greedy_accuracy``) iff its summed
            reward is ≥ this.

    Calling it returns the weighted sum (module docstring); the trainers score the functions one
    by one instead (:attr:`terms`), so that each is guarded and logged on its own.
    """

    def __init__(self, reward_funcs: RewardFunction | Sequence[RewardFunction], train_dataset,
                 eval_dataset=None, weights: Sequence[float] | None = None, *,
                 success_threshold: float = 1.0) -> None:
        funcs = [reward_funcs] if callable(reward_funcs) else list(reward_funcs)
        if not funcs or not all(callable(f) for f in funcs):
            raise ValueError(f"reward_funcs must be a callable or a non-empty list of callables, got {reward_funcs!r}")
        weights = [1.0] * len(funcs) if weights is None else [float(w) for w in weights]
        if len(weights) != len(funcs):
            raise ValueError(f"reward_weights has {len(weights)} weights for {len(funcs)} reward functions")
        if not all(math.isfinite(w) for w in weights):
            raise ValueError(f"reward_weights must be finite numbers, got {weights!r}")
        for split, data in (("train_dataset", train_dataset), ("eval_dataset", eval_dataset)):
            if data is not None and "prompt" not in data.column_names:
                raise ValueError(f"{split} needs a 'prompt' column, has {data.column_names}")
        if train_dataset is None:
            raise ValueError("train_dataset is required: the prompts ES trains on")
        self.funcs, self.weights = funcs, weights
        self.names = [callable_name(f) for f in funcs]
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.success_threshold = float(success_threshold)
        self.name = "+".join(self.names)

    @property
    def terms(self) -> list[tuple[str, RewardFunction, float]]:
        """``(name, function, weight)`` of each reward function, in order."""
        return list(zip(self.names, self.funcs, self.weights))

    def __call__(self, prompts: list, completions: list, **columns: list) -> list[float | None]:
        values = [list(f(prompts=prompts, completions=completions, **columns)) for f in self.funcs]
        return weighted_sum(values, self.weights)

    def _data(self, split: str):
        data = self.train_dataset if check_split(split) == "train" else self.eval_dataset
        if data is None:
            raise ValueError("no eval_dataset was given: there is no held-out split to evaluate on")
        return data

    def dataset(self, split: str, n: int | None = None):
        data = self._data(split)
        return data if n is None else data.select(range(min(n, len(data))))

    def split_size(self, split: str) -> int | None:
        return len(self._data(split))

    def __repr__(self) -> str:
        return f"RewardFunctions({self.names}, weights={self.weights})"


__all__ = ["RewardFunctions", "callable_name", "weighted_sum"]
