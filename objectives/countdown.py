"""Countdown (TinyZero / ES-at-scale): reach ``target`` with ``numbers``, each used exactly once.

Reward, as in the ES-at-scale code (``countdown_task.reward_function``)::

    reward = 0.1 · format_reward + answer_reward

* ``format_reward`` is 1.0 when ``"<think>" + completion`` (the prompt ends inside ``<think>``;
  see ``think_prefilled``) matches ``^<think>.*?</think>\\n<answer>.*?</answer>$`` (DOTALL);
  otherwise 0.1 if it contains a ``<think>…</think>`` block, plus 0.5 if it contains an
  ``<answer>…</answer>`` block.  The three regexes are evaluated by equivalent linear-time
  string searches (the regexes are quadratic on hostile megabyte strings).
* ``answer_reward`` reads the LAST ``<answer>…</answer>`` of the completion (as ``re.findall``
  would).  Its content must consist of ``0-9 + - * / ( )`` and spaces only (the reference's
  character whitelist), its integer literals sorted must equal ``sorted(numbers)`` (each number
  exactly once), and :func:`objectives.safe_expr.safe_eval` must give a value within 1e-5 of
  ``target``: 1.0, else 0.0.  (The reference ``eval``\\s the answer; we never do.)

So a correct answer scores 1.1 with perfect format, and ``success_threshold`` is 1.0.

Problems: ``count`` numbers (chosen uniformly from ``counts``, default 3 or 4) drawn uniformly
from ``[min_number, max_number]``; the target is the value of a random expression over all of
them (random pairing, random ``+ - * /``) that is an integer in ``[1, max_target]``, kept in the
``solution`` column.  Problems are keyed by ``(sorted numbers, target)`` and split by blake2b
(20 % test), drawn from a ``numpy.random.Generator(seed)``.
Split sizes: generated, effectively unbounded (``split_size`` is None): ``dataset(split)`` gives
``n_train`` (2000) / ``n_test`` (500) problems, ``dataset(split, n)`` any ``n``.
Columns: ``numbers`` (list[int]), ``target`` (int), ``solution`` (str).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Iterator

import numpy as np

from zoopt.objective import Objective, check_split

from . import register
from .answers import canonical_number
from .safe_expr import MAX_CHARS, UnsafeExpression, safe_eval
from .splits import sample_split

# TinyZero's "base" template (examples/data_preprocess/countdown.py), used by ES-at-scale.
TEMPLATE = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant "
    "solves it. The assistant first thinks about the reasoning process in the mind and then "
    "provides the user with the answer.\n"
    "User: Using the numbers {numbers}, create an equation that equals {target}. You can use "
    "basic arithmetic operations (+, -, *, /) and each number can only be used once. Show your "
    "work in <think> </think> tags. And return the final answer in <answer> </answer> tags, for "
    "example <answer> (1 + 2) / 3 </answer>.\n"
    "Assistant: Let me solve this step by step.\n<think>"
)

_ALLOWED = re.compile(r"[0-9+\-*/() ]+")
_INTEGER = re.compile(r"\d+")
_OPS = ("+", "-", "*", "/")


def format_reward(text: str) -> float:
    """1.0 for ``^<think>.*?</think>\\n<answer>.*?</answer>$``, else 0.1·[think] + 0.5·[answer]."""
    if _full_format(text):
        return 1.0
    return (0.1 if _has_block(text, "<think>", "</think>") else 0.0) + (
        0.5 if _has_block(text, "<answer>", "</answer>") else 0.0)


def _has_block(text: str, open_tag: str, close_tag: str) -> bool:
    """``re.search(open.*?close, text, DOTALL)`` in linear time."""
    start = text.find(open_tag)
    return start != -1 and text.find(close_tag, start + len(open_tag)) != -1


def _full_format(text: str) -> bool:
    """``re.match(r"^<think>.*?</think>\\n<answer>.*?</answer>$", text, DOTALL)`` in linear time
    (``$`` also matches before one final newline)."""
    if not text.startswith("<think>"):
        return False
    tail = "</answer>"
    if text.endswith(tail + "\n"):
        end = len(text) - len(tail) - 1
    elif text.endswith(tail):
        end = len(text) - len(tail)
    else:
        return False
    middle = "</think>\n<answer>"
    k = text.find(middle, len("<think>"))
    return k != -1 and k + len(middle) <= end


def last_answer(text: str) -> str | None:
    """The content of the last ``<answer>…</answer>`` (``re.findall(r"<answer>(.*?)</answer>",
    text, DOTALL)[-1]``), in linear time; None when there is none."""
    last, pos = None, 0
    while True:
        start = text.find("<answer>", pos)
        if start == -1:
            return last
        end = text.find("</answer>", start + len("<answer>"))
        if end == -1:
            return last
        last, pos = text[start + len("<answer>"):end], end + len("</answer>")


def _evaluate(content: str | None) -> float | None:
    """``safe_eval(content)`` when ``content`` passes the character whitelist, else None."""
    if not content or len(content) > MAX_CHARS or not _ALLOWED.fullmatch(content):
        return None
    try:
        return safe_eval(content)
    except UnsafeExpression:
        return None


def answer_reward(completion: str, numbers: list[int], target: float) -> float:
    """1.0 iff the last answer uses each of ``numbers`` exactly once and equals ``target``."""
    content = last_answer(completion)
    value = _evaluate(content)
    if value is None or abs(value - float(target)) >= 1e-5:
        return 0.0
    used = sorted(int(x) for x in _INTEGER.findall(content))
    return 1.0 if used == sorted(int(x) for x in numbers) else 0.0


@register("countdown")
class Countdown(Objective):
    """Countdown problems; ``template`` is formatted with ``numbers`` (a list) and ``target``.

    ``think_prefilled`` (default: whether the template ends with ``<think>``) prepends
    ``"<think>"`` to the completion for the format reward, as the reference does.
    """

    name = "countdown"
    success_threshold = 1.0
    test_fraction = 0.2

    def __init__(self, counts: tuple[int, ...] | int = (3, 4), min_number: int = 1,
                 max_number: int = 99, max_target: int = 1000, seed: int = 0,
                 n_train: int = 2000, n_test: int = 500, template: str = TEMPLATE,
                 think_prefilled: bool | None = None, system_prompt: str | None = None) -> None:
        counts = (counts,) if isinstance(counts, int) else tuple(int(c) for c in counts)
        if not counts or any(not 2 <= c <= 6 for c in counts):
            raise ValueError(f"counts must be integers in 2..6, got {counts!r}")
        if not 1 <= min_number <= max_number <= 9999:
            raise ValueError(f"need 1 ≤ min_number ≤ max_number ≤ 9999, got {min_number}, {max_number}")
        if max_target < 1:
            raise ValueError(f"max_target must be ≥ 1, got {max_target}")
        try:
            template.format(numbers=[1, 2, 3], target=6)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"template must use only {{numbers}} and {{target}}: {exc!r}") from None
        self.counts, self.min_number, self.max_number = counts, int(min_number), int(max_number)
        self.max_target, self.seed = int(max_target), int(seed)
        self.n_train, self.n_test = int(n_train), int(n_test)
        self.template, self.system_prompt = template, system_prompt
        self.think_prefilled = (template.rstrip().endswith("<think>") if think_prefilled is None
                                else bool(think_prefilled))

    # ---- data ---------------------------------------------------------------------------
    def _candidates(self) -> Iterator[tuple[list[int], int, str]]:
        rng = np.random.default_rng(self.seed)
        while True:
            count = self.counts[int(rng.integers(len(self.counts)))]
            numbers = [int(x) for x in rng.integers(self.min_number, self.max_number + 1, size=count)]
            for _ in range(20):
                found = _random_expression(rng, numbers)
                if found is None:
                    continue
                expression, value = found
                if (value.denominator == 1 and 1 <= value <= self.max_target
                        and _reaches(expression, value)):
                    yield numbers, int(value), expression
                    break

    def problems(self, split: str, n: int | None = None) -> list[tuple[list[int], int, str]]:
        """The first ``n`` distinct ``(numbers, target, solution)`` of ``split``."""
        check_split(split)
        n = (self.n_train if split == "train" else self.n_test) if n is None else int(n)
        return sample_split(self._candidates(), lambda p: f"{sorted(p[0])}->{p[1]}", split, n,
                            self.test_fraction, max_draws=100 * n + 10_000, what="countdown")

    def dataset(self, split: str, n: int | None = None):
        from datasets import Dataset

        problems = self.problems(split, n)
        return Dataset.from_dict({
            "prompt": [self.template.format(numbers=nums, target=t) for nums, t, _ in problems],
            "numbers": [nums for nums, _, _ in problems],
            "target": [t for _, t, _ in problems],
            "solution": [s for _, _, s in problems],
        })

    # ---- reward -------------------------------------------------------------------------
    def reward(self, prompt, completion: str, numbers, target, **_) -> float:
        """``0.1 · format_reward + answer_reward`` (see the module doc)."""
        shown = "<think>" + completion if self.think_prefilled else completion
        return 0.1 * format_reward(shown) + answer_reward(completion, numbers, target)

    def extract_answer(self, completion: str) -> str | None:
        """The canonical value of the last answer's expression (whitelisted, safely evaluated),
        so majority voting compares values; number usage is not checked here."""
        value = _evaluate(last_answer(completion))
        if value is None:
            return None
        if abs(value - round(value)) < 1e-9:
            return str(int(round(value)))
        integer, _, fraction = f"{abs(value):.9f}".partition(".")
        return canonical_number("-" if value < 0 else "", integer, fraction)

    def gold_answer(self, row: dict) -> str | None:
        return str(int(row["target"]))

    def failure_mode(self, prompt, completion: str, row: dict) -> str:
        """Of an incorrect completion: ``"no_answer"`` without an ``<answer>…</answer>`` block,
        ``"format"`` when the last block's content is not an expression of the whitelisted
        characters that evaluates, ``"wrong"`` when it evaluates (to another value, or with the
        numbers not used exactly once)."""
        content = last_answer(completion)
        if content is None:
            return "no_answer"
        return "format" if _evaluate(content) is None else "wrong"


def _reaches(expression: str, value: Fraction) -> bool:
    """Whether the reward's own evaluator gives ``value`` (within 1e-5) for ``expression``."""
    got = _evaluate(expression)
    return got is not None and abs(got - float(value)) < 1e-5


def _random_expression(rng: np.random.Generator, numbers: list[int]) -> tuple[str, Fraction] | None:
    """Combine ``numbers`` pairwise in random order with random operators until one remains;
    returns ``(expression, exact value)`` or None on a division by zero."""
    items = [(str(x), Fraction(x)) for x in numbers]
    while len(items) > 1:
        i = int(rng.integers(len(items)))
        j = int(rng.integers(len(items) - 1))
        j += j >= i  # a second, distinct index
        (left, a), (right, b) = items[i], items[j]
        op = _OPS[int(rng.integers(len(_OPS)))]
        if op == "/" and b == 0:
            return None
        value = a + b if op == "+" else a - b if op == "-" else a * b if op == "*" else a / b
        items = [item for k, item in enumerate(items) if k not in (i, j)]
        items.append((f"({left} {op} {right})", value))
    expression, value = items[0]
    if expression.startswith("("):
        expression = expression[1:-1]
    return expression, value
