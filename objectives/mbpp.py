"""MBPP (Austin et al. 2021): write a Python function from a one-line description; its three
``assert`` tests are the reward.

Data: ``datasets.load_dataset(path, config)`` — by default the hub's
``google-research-datasets/mbpp``, config ``"full"`` (columns ``task_id``, ``text``, ``code``,
``test_list``, ``test_setup_code``, ``challenge_test_list``) or ``"sanitized"`` (``prompt``
instead of ``text``, ``test_imports`` instead of ``test_setup_code``); it needs the hub or its
cache.  ``data_files`` reads local files in either format instead: a dict from the dataset's
split names to JSON Lines (or Parquet) files, e.g. ``{"train": "mbpp/train.jsonl", "test":
"mbpp/test.jsonl"}``.  ``source`` (:mod:`objectives.sources`): ``auto`` and ``hub`` read the hub
(its cache when offline); MBPP has no offline source, so ``offline``, or a hub that cannot be
read, is a one-line :class:`~zoopt.objective.DataUnavailable` saying so.  Our ``train``/``test`` are the dataset's own ``train``/``test`` splits
(``splits`` maps them otherwise, e.g. ``{"train": "validation"}``); MBPP's splits share no
problem.

The program run for a completion, in the sandbox: the completion's code
(:func:`zoopt.sandbox.program_tests.extract_code`: the last fenced block, else the whole text),
then the problem's setup code (as the official harness runs it: the solution may rely on its
imports, and two problems build their input trees there with the solution's ``Node`` class).
The tests of ``test_list`` (plus ``challenge_test_list`` with ``challenge_tests=True``) never go
there: each runs as one test in the trusted judge (:mod:`zoopt.sandbox.judged_tests`), with the
setup's imports, and with a stand-in for each name the test takes from the solution —
the names the problem's reference solution (``code``) defines, and any other name the test
uses that is neither a builtin, a standard-library module (imported in the judge) nor defined
by the setup's imports (the setup's trees reach the judge as handles).  Reward: 1.0 when every
test passed, else 0.0 (``partial_credit=True``: the fraction passed); see
:class:`zoopt.sandbox.program_tests.ProgramTestObjective` for the time limits and workers.

Columns: ``task_id``, ``test_list`` (list[str]), ``test_setup_code`` (str), ``functions``
(list[str]: the top-level names the reference solution defines; empty without one).
"""

from __future__ import annotations

import ast
import builtins
import sys
from pathlib import Path

from zoopt.objective import check_split
from zoopt.sandbox.judged_tests import UnitTests
from zoopt.sandbox.program_tests import ProgramTestObjective, extract_code

from . import register
from .sources import check_source, load_rows

# The prompt of the MBPP paper (and of lm-evaluation-harness' mbpp task), zero-shot.
TEMPLATE = ("You are an expert Python programmer, and here is your task: {description} "
            "Your code should pass these tests:\n\n{tests}\n")
HUB_PATH = "google-research-datasets/mbpp"


@register("mbpp")
class MBPP(ProgramTestObjective):
    """MBPP; ``template`` is formatted with ``description`` and ``tests`` (one per line)."""

    name = "mbpp"

    def __init__(self, path: str = HUB_PATH, config: str | None = "full",
                 data_files: dict[str, str | list[str]] | None = None,
                 splits: dict[str, str] | None = None, template: str = TEMPLATE,
                 challenge_tests: bool = False, system_prompt: str | None = None,
                 source: str = "auto", **options) -> None:
        self.source = check_source(source, "mbpp", has_offline=False)
        try:
            template.format(description="", tests="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"template must use only {{description}} and {{tests}}: {exc!r}") from None
        if data_files is not None and not isinstance(data_files, dict):
            raise ValueError("data_files must be a dict from split names to files, got "
                             f"{type(data_files).__name__}")
        self.path, self.config, self.data_files = path, config, data_files
        self.splits = {"train": "train", "test": "test", **(splits or {})}
        self.template, self.challenge_tests = template, bool(challenge_tests)
        self.system_prompt = system_prompt
        self._loaded: dict[str, list[dict]] = {}
        super().__init__(**options)

    def problems(self, split: str, n: int | None = None) -> list[dict]:
        """The problems of ``split`` (the first ``n``) as ``{task_id, description, tests,
        setup, functions}``."""
        check_split(split)
        if split not in self._loaded:
            self._loaded[split] = [_normalise(row, self.challenge_tests)
                                   for row in self._load(self.splits[split])]
        problems = self._loaded[split]
        if n is not None and n > len(problems):
            raise ValueError(f"mbpp has {len(problems)} {split!r} problems, {n} asked")
        return problems if n is None else problems[:int(n)]

    def split_size(self, split: str) -> int:
        """Problems in ``split``."""
        return len(self.problems(split))

    def _load(self, hub_split: str):
        from datasets import load_dataset

        if self.data_files is None:
            rows, self.data_source = load_rows(
                "mbpp", self.source,
                lambda: load_dataset(self.path, self.config, split=hub_split).to_list(), None)
            return rows
        self.data_source = "files"
        files = self.data_files.get(hub_split)
        if files is None:
            raise ValueError(f"mbpp data_files has no {hub_split!r} split "
                             f"(it has {', '.join(sorted(self.data_files))})")
        first = files if isinstance(files, str) else files[0]
        builder = "parquet" if Path(first).suffix == ".parquet" else "json"
        return load_dataset(builder, data_files={hub_split: files}, split=hub_split)

    def dataset(self, split: str, n: int | None = None):
        from datasets import Dataset

        problems = self.problems(split, n)
        return Dataset.from_dict({
            "prompt": [self.template.format(description=p["description"],
                                            tests="\n".join(p["tests"])) for p in problems],
            "task_id": [p["task_id"] for p in problems],
            "test_list": [p["tests"] for p in problems],
            "test_setup_code": [p["setup"] for p in problems],
            "functions": [p["functions"] for p in problems],
        })

    def program(self, completion: str, row: dict) -> str:
        return extract_code(completion)

    def tests(self, row: dict) -> UnitTests:
        return mbpp_tests(list(row["test_list"]), row.get("test_setup_code") or "",
                          row.get("functions") or ())


def mbpp_tests(tests: list[str], setup: str = "", reference_names=()) -> UnitTests:
    """MBPP's asserts as :class:`UnitTests` (see the module doc for which names are stand-ins).

    ``setup`` runs whole in the sandbox after the model's code; its import statements also run
    in the judge.  ``reference_names``: what the reference solution defines (``sum`` in a test
    is the builtin unless the solution defines its own)."""
    try:
        setup_tree = ast.parse(setup)
    except SyntaxError:
        setup_tree = ast.Module(body=[], type_ignores=[])
    imports = [s for s in setup_tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    imported = {(a.asname or a.name).split(".")[0] for s in imports for a in s.names}
    used, stored = set(), set()
    for test in tests:
        try:
            tree = ast.parse(test)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (used if isinstance(node.ctx, ast.Load) else stored).add(node.id)
    free = used - stored - imported
    modules = sorted(n for n in free if n in sys.stdlib_module_names and n not in reference_names)
    functions = sorted((free & set(reference_names))
                       | {n for n in free if not hasattr(builtins, n) and n not in modules})
    trusted = "\n".join([ast.unparse(s) for s in imports] + [f"import {m}" for m in modules])
    if not functions:
        raise ValueError(f"mbpp: these tests call no function of the solution: {tests!r:.200}")
    return UnitTests(functions=tuple(functions), tests=tuple(tests), setup=trusted,
                     program_setup=setup)


def _normalise(row: dict, challenge_tests: bool) -> dict:
    """A hub row of either config as ``{task_id, description, tests, setup, functions}``."""
    tests = list(row["test_list"]) + (list(row.get("challenge_test_list") or [])
                                      if challenge_tests else [])
    setup = row.get("test_setup_code") or "\n".join(row.get("test_imports") or [])
    return {"task_id": row["task_id"], "description": row.get("text") or row.get("prompt") or "",
            "tests": tests, "setup": setup, "functions": defined_names(row.get("code") or "")}


def defined_names(code: str) -> list[str]:
    """The functions and classes a (trusted) reference solution defines at top level."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
