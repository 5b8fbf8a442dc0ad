"""Procedurally generated integer arithmetic: ``a op b`` with ``digits``-digit operands.

A problem is a triple ``(a, op, b)`` with ``a, b`` drawn uniformly from the ``digits``-digit
integers (``[10^(d-1), 10^d − 1]``; ``[0, 9]`` for ``d = 1``) and ``op`` uniformly from
``operators`` (``+``, ``-``, ``*``; results may be negative).  ``digits`` may also be a pair
``[d_a, d_b]``: ``a`` has ``d_a`` digits and ``b`` has ``d_b`` (``[2, 1]``: ``47 + 6``).  Problems are assigned to
``train``/``test`` by ``blake2b`` of ``"a op b"`` (20 % test; see :mod:`objectives.splits`), so the
splits never overlap for any seed; within a split, problems are drawn without repetition from a
``numpy.random.Generator`` seeded with ``seed``.

Split sizes (:meth:`Arithmetic.split_size`): ``dataset(split)`` gives ``n_train`` (2000) /
``n_test`` (500) problems and ``dataset(split, n)`` any ``n`` the split holds.  For ``digits ≤ 2``
(both operands) the problem space is small enough to count exactly — two-digit addition (the default: 8,100
problems) has 6,465 train and 1,635 test problems; one-digit addition 100, of which 73 / 27 — and
a larger request is clamped with a note; for more digits the splits are effectively unbounded.

Reward (strict): the LAST number in the completion (see :mod:`objectives.answers`: optional
leading minus, thousands commas allowed) must equal the true result: 1.0, else 0.0.  A decimal
such as ``82.5`` is a number of its own and is wrong; ``82.0`` equals ``82``.
Columns: ``answer`` — the result as a canonical integer string.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Iterator

import numpy as np

from zoopt.objective import Objective, SplitSizeWarning, check_split, completion_text

from . import register
from .answers import iter_numbers, last_number, parse_number
from .splits import sample_split, split_of

COUNTED_DIGITS = 2  # split sizes are counted exactly up to this many digits (≤ 24,300 problems)

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
        pair = (digits, digits) if isinstance(digits, int) else tuple(digits) if isinstance(digits, (list, tuple)) else ()
        if len(pair) != 2 or not all(isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= 18 for d in pair):
            raise ValueError(f"digits must be an integer in 1..18 or a pair of them [digits of a, digits of b], "
                             f"got {digits!r}")
        operators = tuple(operators)
        bad = [op for op in operators if op not in OPERATORS]
        if not operators or bad:
            raise ValueError(f"operators must be a non-empty subset of + - *, got {operators!r}")
        try:
            template.format(a=1, op="+", b=2)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"template must use only {{a}}, {{op}} and {{b}}: {exc!r}") from None
        self.digits = digits if isinstance(digits, int) else pair
        self.operand_digits = pair
        self.operators, self.seed = operators, int(seed)
        self.n_train, self.n_test = int(n_train), int(n_test)
        self.template, self.system_prompt = template, system_prompt

    def _candidates(self) -> Iterator[tuple[int, str, int]]:
        rng = np.random.default_rng(self.seed)
        (low_a, high_a), (low_b, high_b) = (_operand_range(d) for d in self.operand_digits)
        while True:
            if (low_a, high_a) == (low_b, high_b):
                a, b = rng.integers(low_a, high_a, size=2)
            else:
                a, b = rng.integers(low_a, high_a), rng.integers(low_b, high_b)
            op = self.operators[int(rng.integers(len(self.operators)))]
            yield int(a), op, int(b)

    def split_size(self, split: str) -> int | None:
        """Problems in ``split``: counted exactly for ``digits ≤ 2``, else None (unbounded)."""
        check_split(split)
        if max(self.operand_digits) > COUNTED_DIGITS:
            return None
        return _split_counts(self.operand_digits, self.operators, self.test_fraction)[split]

    def problems(self, split: str, n: int | None = None) -> list[tuple[int, str, int]]:
        """The first ``n`` distinct ``(a, op, b)`` of ``split`` (``n_train``/``n_test`` if None).

        Where the split is counted (``digits ≤ 2``) a larger ``n`` is clamped to its size with a
        :class:`~zoopt.objective.SplitSizeWarning`, and the draws go on until every problem it
        asks for is found (they exist: the count is exact), so nothing is drawn in vain and
        nothing fails; a smaller ``n`` gives the same problems, in the same order, as before."""
        check_split(split)
        asked = (self.n_train if split == "train" else self.n_test) if n is None else int(n)
        size = self.split_size(split)
        if size is not None and asked > size:
            key = f"objective_args.n_{split}" if n is None else "n"
            warnings.warn(f"objective 'arithmetic' (digits={self.digits}, operators {' '.join(self.operators)}) "
                          f"has {size} {split!r} problems, {asked} asked ({key}): using all {size}",
                          SplitSizeWarning, stacklevel=2)
            asked = size
        draws = 100 * asked + 10_000 if size is None else None
        return sample_split(self._candidates(), lambda p: f"{p[0]} {p[1]} {p[2]}", split, asked,
                            self.test_fraction, max_draws=draws, what="arithmetic")

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

    def failure_mode(self, prompt, completion: str, row: dict) -> str:
        """Of an incorrect completion: ``"no_answer"`` when it holds no number; ``"format"`` when
        the right value is written but is not the last number (``"9. Because 8 + 1"``), i.e. the
        gold number occurs more often in the completion than in the question it may echo (the
        last ``a op b`` of the prompt: ``"0 + 4 = 7"`` for ``0 + 4`` is wrong, not format);
        ``"wrong"`` otherwise.  Numbers in words (``"nine"``) are not read: such a completion
        is ``"no_answer"`` or ``"wrong"``."""
        numbers = list(iter_numbers(completion))
        if not numbers:
            return "no_answer"
        gold = parse_number(str(row["answer"]))
        echoed = _question_operands(prompt).count(gold)
        return "format" if numbers.count(gold) > echoed else "wrong"


_QUESTION = re.compile(r"(-?\d+)\s*[-+*]\s*(-?\d+)")


def _question_operands(prompt) -> list[str]:
    """The canonical operands of the last ``a op b`` in ``prompt`` (a str, or messages whose
    last one holds the question); ``[]`` when there is none."""
    text = completion_text(prompt) if prompt is not None else ""
    last = None
    for last in _QUESTION.finditer(text):
        pass
    if last is None:
        return []
    return [n for n in (parse_number(last.group(1)), parse_number(last.group(2))) if n is not None]


def _operand_range(digits: int) -> tuple[int, int]:
    """``[low, high)`` of the ``digits``-digit integers (``[0, 10)`` for one digit)."""
    return (10 ** (digits - 1) if digits > 1 else 0), 10**digits


@functools.lru_cache(maxsize=None)
def _split_counts(digits: tuple[int, int], operators: tuple[str, ...], test_fraction: float) -> dict[str, int]:
    """``{"train": …, "test": …}``: every ``a op b`` of the space, assigned by :func:`split_of`."""
    (low_a, high_a), (low_b, high_b) = (_operand_range(d) for d in digits)
    test = sum(split_of(f"{a} {op} {b}", test_fraction) == "test"
               for op in set(operators) for a in range(low_a, high_a) for b in range(low_b, high_b))
    total = len(set(operators)) * (high_a - low_a) * (high_b - low_b)
    return {"train": total - test, "test": test}
