"""Procedurally generated integer arithmetic: ``a op b`` with ``digits``-digit operands.

A problem is a triple ``(a, op, b)`` with ``a, b`` drawn uniformly from the ``digits``-digit
integers (``[10^(d-1), 10^d − 1]``; ``[0, 9]`` for ``d = 1``) and ``op`` uniformly from
``operators`` (``+``, ``-``, ``*``; results may be negative).  Problems are assigned to
``train``/``test`` by ``blake2b`` of ``"a op b"`` (20 % test; see :mod:`objectives.splits`), so the
splits never overlap for any seed; within a split, problems are drawn without repetition from a
``numpy.random.Generator`` seeded with ``seed``.

Reward (strict): the LAST number in the completion (see :mod:`objectives.answers`: optional
leading minus, thousands commas allowed) must equal the true result: 1.0, else 0.0.  A decimal
such as ``82.5`` is a number of its own and is wrong; ``82.0`` equals ``82``.
Columns: ``answer`` — the result as a canonical integer string.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from zoopt.objective import Objective, check_split

from . import register
from .answers import last_number, parse_number
from .splits import sample_split

TEMPLATE = "What is {a} {op} {b}? Reply with only the final number."
OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


@register("arithmetic")
class Arithmetic(Objective):
    """``a op b`` problems; ``template`` is formatted with ``a``, ``op`` and ``b``."""

    name = "arithmetic"
    test_fraction = 0.2

    def __init__(self, digits: int = 2, operators: tuple[str, ...] | str = ("+",), seed: int = 0,
                 n_train: int = 2000, n_test: int = 500, template: str = TEMPLATE,
                 system_prompt: str | None = None) -> None:
        if not (isinstance(digits, int) and 1 <= digits <= 18):
            raise ValueError(f"digits must be an integer in 1..18, got {digits!r}")
        operators = tuple(operators)
        bad = [op for op in operators if op not in OPERATORS]
        if not operators or bad:
            raise ValueError(f"operators must be a non-empty subset of + - *, got {operators!r}")
        try:
            template.format(a=1, op="+", b=2)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"template must use only {{a}}, {{op}} and {{b}}: {exc!r}") from None
        self.digits, self.operators, self.seed = digits, operators, int(seed)
        self.n_train, self.n_test = int(n_train), int(n_test)
        self.template, self.system_prompt = template, system_prompt

    def _candidates(self) -> Iterator[tuple[int, str, int]]:
        rng = np.random.default_rng(self.seed)
        low = 10 ** (self.digits - 1) if self.digits > 1 else 0
        high = 10**self.digits  # exclusive
        while True:
            a, b = rng.integers(low, high, size=2)
            op = self.operators[int(rng.integers(len(self.operators)))]
            yield int(a), op, int(b)

    def problems(self, split: str, n: int | None = None) -> list[tuple[int, str, int]]:
        """The first ``n`` distinct ``(a, op, b)`` of ``split`` (``n_train``/``n_test`` if None)."""
        check_split(split)
        n = (self.n_train if split == "train" else self.n_test) if n is None else int(n)
        return sample_split(self._candidates(), lambda p: f"{p[0]} {p[1]} {p[2]}", split, n,
                            self.test_fraction, max_draws=100 * n + 10_000, what="arithmetic")

    def dataset(self, split: str, n: int | None = None):
        from datasets import Dataset

        problems = self.problems(split, n)
        return Dataset.from_dict({
            "prompt": [self.template.format(a=a, op=op, b=b) for a, op, b in problems],
            "answer": [str(OPERATORS[op](a, b)) for a, op, b in problems],
        })

    def reward(self, prompt, completion: str, answer, **_) -> float:
        """1.0 iff the last number in ``completion`` equals ``answer``."""
        gold = parse_number(str(answer))
        return 1.0 if gold is not None and last_number(completion) == gold else 0.0

    def extract_answer(self, completion: str) -> str | None:
        return last_number(completion)
