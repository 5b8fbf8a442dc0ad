"""Code rewards that a program cannot forge (issue 27; docs/sandbox.md "Reward integrity").

Each forgery below is a completion that tries to score without solving the task
(``add(2, 3) == 5`` and ``add(-1, 1) == 0``, as MBPP asserts and as a HumanEval
``check(candidate)``).  Every one of them scored 1.0 under the old harness (the tests ran in the
program's own process) or attacks a part of the new one; each must score 0.0 on ``mbpp`` and on
``humaneval``, in one batch beside a correct program (1.0) and one that passes half the tests
(0.5 with ``partial_credit``, else 0.0).
"""

from __future__ import annotations

import pytest

from objectives.humaneval import HumanEval
from objectives.mbpp import MBPP, mbpp_tests
from zoopt.sandbox.judged_tests import UnitTests, oracle_program

CORRECT = "def add(a, b):\n    return a + b\n"
HALF = "def add(a, b):\n    return 5\n"  # passes add(2, 3) == 5 only
WRONG_ADD = "def add(a, b):\n    return a - b\n"

FORGERIES = {
    # the three, written against the old harness and its names
    "calls_the_reporter": """
import os
for name, value in list(globals().items()):
    if name.startswith("_zoopt") and callable(value):
        for i in range(2):
            value("pass", i)
        value("done")
print("pass 0\\npass 1\\ndone")
os._exit(0)
""" + WRONG_ADD,
    "always_equal_object": """
class Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__
def add(a, b):
    return Anything()
""",
    "int_subclass": """
class Number(int):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = int.__hash__
def add(a, b):
    return Number(0)
""",
    "reads_the_program_file": """
import re, sys
source = open(sys.argv[0]).read()
expected = {}
for args, value in re.findall(r"add\\(([^)]*)\\) == (-?\\d+)", source):
    expected[args.replace(" ", "")] = int(value)
def add(a, b):
    return expected.get(f"{a},{b}")
""",
    # more of our own
    "str_and_float_subclasses": """
class Text(str):
    def __eq__(self, other):
        return True
    __hash__ = str.__hash__
def add(a, b):
    return Text("x")
""",
    "tampers_with_builtins": """
import builtins
builtins.isinstance = lambda *args: True
builtins.AssertionError = type("Nothing", (Exception,), {})
builtins.int = lambda *args: 5
builtins.__build_class__ = None
""" + WRONG_ADD,
    "tampers_with_sys_modules_and_json": """
import json, sys
fake = type(sys)("json")
fake.dumps = lambda *args, **kwargs: '["value",5]'
fake.loads = json.loads
sys.modules["json"] = fake
json.dumps = fake.dumps
""" + WRONG_ADD,
    "walks_the_calling_frames": """
import sys
def add(a, b):
    frame, seen = sys._getframe(1), []
    while frame is not None:
        for value in list(frame.f_locals.values()) + list(frame.f_globals.values()):
            if type(value) is int and value not in (a, b):
                seen.append(value)
        frame = frame.f_back
    return seen[0] if seen else a - b
""",
    "atexit_prints_passes": """
import atexit, os
atexit.register(lambda: os.write(1, b"pass 0\\npass 1\\ndone\\n"))
""" + WRONG_ADD,
    "prints_report_like_lines": """
for i in range(2):
    print(f"pass {i}")
print("done")
import sys
sys.stderr.write("ok\\n")
""" + WRONG_ADD,
    "reads_proc_self_and_its_fds": """
import os
found = ""
for path in ("/proc/self/cmdline", "/proc/self/environ", "/proc/self/status", "program.py"):
    try:
        found += open(path, "rb").read().decode(errors="replace")
    except OSError:
        pass
for fd in range(4, 64):
    try:
        found += os.read(fd, 4096).decode(errors="replace")
    except OSError:
        pass
needles = ("add(2, 3) " + "== 5", "candi" + "date(2, 3)")  # built here: this source holds neither
assert not any(n in found for n in needles), "a test reached the program"
""" + WRONG_ADD,
    "answers_the_channel_itself": """
import os
def frame(data):
    return len(data).to_bytes(4, "big") + data
os.write(3, frame(b'["value",5]') + frame(b'["value",5]'))  # guesses, sent before any call
""" + WRONG_ADD,
    "exits_before_answering": "import sys\nsys.exit(0)\n" + CORRECT,
    "os_exit_zero": "import os\nos._exit(0)\n" + CORRECT,
    "kills_itself": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n" + CORRECT,
    "raises_at_import": "raise ImportError('no')\n" + CORRECT,
    "exits_inside_the_call": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "false_for_zero": "def add(a, b):\n    return {5: 5.0, 0: False}[a + b]\n",  # 5.0 is 5; False is not 0
}


def mbpp_objective(**options):
    return MBPP(data_files={"train": "unused.jsonl"}, workers=2, timeout_s=5.0, **options)


MBPP_TESTS = ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]
HUMANEVAL_ROW = {"task_id": "Test/0", "entry_point": "add",
                 "code_prompt": 'def add(a, b):\n    """The sum of a and b."""\n',
                 "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n"
                         "    assert candidate(-1, 1) == 0\n"}


def score(objective, row: dict, completions: list[str]) -> list[float]:
    columns = {k: [v] * len(completions) for k, v in row.items()}
    return objective(["p"] * len(completions), completions, **columns)


@pytest.mark.parametrize("dataset", ["mbpp", "humaneval"])
def test_forgeries_score_zero_and_honest_programs_score_what_they_solve(dataset):
    names = sorted(FORGERIES)
    completions = [CORRECT, HALF] + [FORGERIES[n] for n in names]
    if dataset == "mbpp":
        row = {"task_id": 1, "test_list": MBPP_TESTS, "test_setup_code": "", "functions": ["add"]}
        strict, partial = mbpp_objective(), mbpp_objective(partial_credit=True)
    else:
        row = HUMANEVAL_ROW
        strict = HumanEval(workers=2, timeout_s=5.0)
        partial = HumanEval(workers=2, timeout_s=5.0, partial_credit=True)
    rewards = score(strict, row, completions)
    outcomes = dict(zip(["correct", "half"] + names, (j.outcomes for j in strict.last_judgements)))
    assert rewards == [1.0, 0.0] + [0.0] * len(names), outcomes
    assert score(partial, row, completions)[:2] == [1.0, 0.5]
    assert max(score(partial, row, completions)[2:]) <= 0.5  # a guess may hit one test, never both


def test_how_each_forgery_fails():
    """The reason recorded for each test, on ``mbpp``: objects that are not plain data, calls
    that got no answer, or plain answers that are wrong."""
    objective = mbpp_objective()
    row = {"task_id": 1, "test_list": MBPP_TESTS, "test_setup_code": "", "functions": ["add"]}
    names = sorted(FORGERIES)
    score(objective, row, [FORGERIES[n] for n in names])
    got = {n: j.outcomes for n, j in zip(names, objective.last_judgements)}
    assert got == {
        "always_equal_object": ("not_plain", "not_plain"),
        "answers_the_channel_itself": ("passed", "failed"),  # its guesses: 5 is right once
        "atexit_prints_passes": ("failed", "failed"),
        "calls_the_reporter": ("unanswered", "unanswered"),
        "exits_before_answering": ("unanswered", "unanswered"),
        "exits_inside_the_call": ("unanswered", "unanswered"),
        "int_subclass": ("not_plain", "not_plain"),
        "kills_itself": ("unanswered", "unanswered"),
        "os_exit_zero": ("unanswered", "unanswered"),
        "prints_report_like_lines": ("failed", "failed"),
        "raises_at_import": ("unanswered", "unanswered"),
        "reads_proc_self_and_its_fds": ("failed", "failed"),  # found no test: its assert held
        "reads_the_program_file": ("failed", "failed"),
        "false_for_zero": ("passed", "failed"),
        "str_and_float_subclasses": ("not_plain", "not_plain"),
        "tampers_with_builtins": ("unanswered", "unanswered"),  # it broke its own server
        "tampers_with_sys_modules_and_json": ("passed", "failed"),  # its fake encoder says 5 twice
        "walks_the_calling_frames": ("failed", "failed"),
    }


def test_true_is_not_one_and_a_list_is_not_a_tuple():
    tests = mbpp_tests(["assert f(1) == 1", "assert f(0) == False", "assert f(2) == (1, 2)",
                        "assert f(3) == [1, 2]", "assert f(4) == 2.0", "assert f(5) != True"])
    objective = mbpp_objective(partial_credit=True)
    code = ("def f(x):\n    return {1: True, 0: 0, 2: [1, 2], 3: [1, 2], 4: 2, 5: 1}[x]\n")
    row = {"task_id": 1, "test_list": list(tests.tests), "test_setup_code": "", "functions": ["f"]}
    score(objective, row, [code])
    assert objective.last_judgements[0].outcomes == (
        "failed", "failed", "failed", "passed", "passed", "passed")


def test_expected_values_never_enter_the_program():
    """The program the sandbox runs holds the model's code and the inputs, not the asserts:
    for every HumanEval problem its check() code is absent, for MBPP's fixture every assert."""
    from objectives.humaneval import load_problems

    objective = HumanEval(test_fraction=1.0, workers=1)
    for problem in load_problems():
        row = {"entry_point": problem["entry_point"], "code_prompt": problem["prompt"],
               "test": problem["test"]}
        program = oracle_program(objective.program(problem["canonical_solution"], row),
                                 objective.tests(row))
        asserts = [line.strip() for line in problem["test"].splitlines() if "assert" in line]
        assert asserts and not any(line in program for line in asserts), problem["task_id"]
    tests = mbpp_tests(MBPP_TESTS)
    program = oracle_program(CORRECT, tests)
    assert "assert" not in program and "== 5" not in program and "== 0" not in program
    assert UnitTests(functions=("add",), tests=tuple(MBPP_TESTS)).count == 2
