"""The oracle and its judge (zoopt/sandbox/judged_tests.py, judge_pool.py, trusted_judge.py):
the real datasets' canonical solutions, every shape of test, deadlines and bounds."""

from __future__ import annotations

import collections
import json
import os
import time

import pytest

from objectives.humaneval import HumanEval, load_problems
from objectives.mbpp import MBPP, _normalise, mbpp_tests
from worker_processes import zombie_children
from zoopt.sandbox.judge_pool import JudgePool
from zoopt.sandbox.judged_tests import JUDGE_GRACE_S, UnitTests, judge_programs


def judge(code: str, tests: UnitTests, **options):
    options.setdefault("timeout_s", 5.0)
    return judge_programs([code], [tests], workers=1, **options)[0]


def test_every_humaneval_canonical_solution_scores_one_with_all_tests_judged_outside():
    objective = HumanEval(test_fraction=1.0, workers=2, timeout_s=10.0, batch_timeout_s=600)
    rows = objective.dataset("test").to_list()
    solutions = {p["task_id"]: p["canonical_solution"] for p in load_problems()}
    columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
    rewards = objective(["p"] * len(rows), [solutions[r["task_id"]] for r in rows], **columns)
    outcomes = collections.Counter(o for j in objective.last_judgements for o in j.outcomes)
    assert len(rows) == 164 and rewards == [1.0] * 164
    assert outcomes == {"passed": 1181}  # docs/sandbox.md quotes this count


MBPP_SHAPES = [  # shapes of real MBPP problems, written for this test
    ("class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
     "def longest(pairs, n):\n    return max(p.b - p.a for p in pairs[:n])",
     ["assert longest([Pair(1, 5), Pair(2, 3)], 2) == 4"], ""),
    ("class Node:\n    def __init__(self, v):\n        self.v, self.left = v, None\n"
     "def depth(node):\n    return 0 if node is None else 1 + depth(node.left)",
     ["assert depth(root) == 2", "assert (depth(root1)) == 1"],
     "root = Node(1)\nroot.left = Node(2)\nroot1 = Node(3)"),
    ("from collections import Counter\ndef counts(xs):\n    return Counter(xs)",
     ["assert counts([1, 1, 2]) == {1: 2, 2: 1}"], ""),
    ("import cmath\ndef polar(x, y):\n    return cmath.polar(complex(x, y)), cmath.rect(2, 0)",
     ["assert polar(3, 4) == ((5.0, 0.9272952180016122), (2+0j))"], ""),
    ("def drop(xs, kind):\n    return [x for x in xs if not isinstance(x, kind)]",
     ["assert drop((1, 2.5), int) == [2.5]"], ""),
    ("def sum(a, b):\n    return a * b", ["assert sum(2, 3) == 6"], ""),
    ("import sys\ndef size(t):\n    return sys.getsizeof(t)",
     ["assert size((1, 2)) == sys.getsizeof((1, 2))"], ""),
    ("import math\ndef area(r):\n    return math.pi * r * r",
     ["assert math.isclose(area(2), 12.566, rel_tol=0.001)"], "import math"),
    ("def sort_words(words):\n    return sorted(Counter(words))",
     ["assert sort_words(['b', 'a', 'b']) == ['a', 'b']"], "from collections import Counter"),
]


@pytest.mark.parametrize("code, tests, setup", MBPP_SHAPES, ids=[c.split("def ")[-1][:12] for c, _, _ in MBPP_SHAPES])
def test_every_shape_of_mbpp_test_is_judged_in_the_trusted_process(code, tests, setup):
    from objectives.mbpp import defined_names

    unit_tests = mbpp_tests(tests, setup, defined_names(code))
    assert judge(code, unit_tests).outcomes == ("passed",) * len(tests)
    wrong = code.replace("return", "return None if True else", 1)
    assert "passed" not in judge(wrong, unit_tests).outcomes


@pytest.mark.slow
def test_mbpp_canonical_solutions_from_the_hub_or_a_local_copy():
    """All 974 problems of MBPP "full" (test_list and challenge_test_list): every reference
    solution scores 1.0 but task 414's, which returns 0/1 where its asserts expect False/True
    (strict: True is not 1).  Reads the JSON Lines file named by ZOOPT_MBPP_FILE (the
    hub's rows, e.g. the original release's mbpp.jsonl) or the hub; skips without either."""
    path = os.environ.get("ZOOPT_MBPP_FILE")
    if path:
        raw = [json.loads(line) for line in open(path)]
    else:
        try:
            from datasets import concatenate_datasets, load_dataset

            full = load_dataset("google-research-datasets/mbpp", "full")
        except Exception as exc:  # noqa: BLE001 - offline, no cache
            pytest.skip(f"MBPP is not reachable here ({type(exc).__name__}); set ZOOPT_MBPP_FILE")
        raw = concatenate_datasets([full[s] for s in full]).to_list()
    rows = [_normalise(r, challenge_tests=True) for r in raw]
    # task 123's reference takes 2.6 s of CPU for one call: a loaded machine needs the room
    objective = MBPP(data_files={}, workers=2, timeout_s=60.0, batch_timeout_s=3600)
    rewards = objective(["p"] * len(rows), [r["code"] for r in raw],
                        test_list=[r["tests"] for r in rows], test_setup_code=[r["setup"] for r in rows],
                        functions=[r["functions"] for r in rows])
    failing = {r["task_id"]: j.outcomes for r, j, x in zip(rows, objective.last_judgements, rewards) if x != 1.0}
    assert len(rows) == 974 and sum(len(j.outcomes) for j in objective.last_judgements) == 2938
    assert failing == {414: ("failed", "failed", "failed")}


def test_handles_go_back_to_the_program_but_cannot_be_compared():
    code = ("class Box:\n    def __init__(self, n):\n        self.n = n\n"
            "def make(n):\n    return Box(n)\ndef size(box):\n    return box.n\n")
    tests = UnitTests(functions=("make", "size"), tests=(
        "assert size(make(3)) == 3", "assert make(3) == make(3)", "assert make(3)",
        "assert make(3) is not None", "assert make(1).n == 1", "assert [make(1)] != [1]"))
    assert judge(code, tests).outcomes == (
        "passed", "not_plain", "not_plain", "passed", "not_plain", "not_plain")


def test_exceptions_of_the_model_reach_the_test_by_builtin_name_only():
    code = ("class Mine(Exception):\n    pass\n"
            "def f(x):\n    if x == 0:\n        raise ValueError\n    if x == 1:\n        raise Mine\n"
            "    raise SystemExit\n")
    expect = "try:\n    f({})\nexcept {}:\n    pass\nelse:\n    raise AssertionError"
    tests = UnitTests(functions=("f",), tests=(expect.format(0, "ValueError"),
                                               expect.format(1, "Exception"),
                                               expect.format(2, "Exception"),
                                               expect.format(0, "TypeError")))
    assert judge(code, tests).outcomes == ("passed", "passed", "passed", "failed")


def test_a_looping_test_is_stopped_and_its_worker_replaced():
    pool = JudgePool(1)
    tests = UnitTests(functions=("f",), tests=("assert f(1) == 1", "while True:\n    pass",
                                               "assert f(2) == 2"))
    try:
        start = time.monotonic()
        [verdict] = judge_programs(["def f(x):\n    return x\n"], [tests], workers=1,
                                   timeout_s=1.0, pool=pool)
        elapsed = time.monotonic() - start
        assert verdict.outcomes == ("passed", "not_run", "not_run") and verdict.judge == "timeout"
        assert elapsed < 1.0 + JUDGE_GRACE_S + 3.0 and pool.killed == 1
        [again] = judge_programs(["def f(x):\n    return x\n"], [UnitTests(("f",), ("assert f(2) == 2",))],
                                 workers=1, pool=pool)
        assert again.outcomes == ("passed",) and len(pool.pids()) == 1
    finally:
        pool.close()
    assert pool.pids() == [] and zombie_children() == set()


def test_messages_are_bounded_both_ways():
    tests = UnitTests(functions=("f",), tests=("assert f(1) == 'x'", "assert f('y' * 5000) == 1"))
    verdict = judge("def f(x):\n    return 'x' * 10_000 if x == 1 else 1\n", tests, max_message_bytes=4096)
    assert verdict.outcomes == ("unanswered", "not_plain")


def test_a_batch_deadline_keeps_what_was_judged():
    tests = UnitTests(functions=("f",), tests=("assert f(1) == 1", "assert f(2) == 2"))
    code = "import time\ndef f(x):\n    if x == 2:\n        time.sleep(30)\n    return x\n"
    start = time.monotonic()
    verdicts = judge_programs([code, code, "def f(x):\n    return x\n"], [tests] * 3, workers=2,
                              timeout_s=30.0, deadline_s=2.0)
    assert time.monotonic() - start < 8.0
    for v in verdicts[:2]:  # the second test: cut off by the deadline either in the program or the judge
        assert v.outcomes[0] == "passed" and v.outcomes[1] in ("unanswered", "not_run"), v
    assert verdicts[2].outcomes == ("not_run", "not_run") and verdicts[2].fraction == 0.0
    assert [v.sandbox.status for v in verdicts] == ["cancelled", "cancelled", "skipped"]
    assert verdicts[0].judge in ("done", "cancelled") and verdicts[2].judge == "skipped"


def test_unit_tests_are_checked():
    with pytest.raises(ValueError, match="functions"):
        UnitTests(functions=("not a name",), tests=("assert 1",))
    with pytest.raises(ValueError, match="either tests"):
        UnitTests(functions=("f",))
    assert UnitTests(functions=("f",), check="def check(c):\n    pass\n").count == 1
