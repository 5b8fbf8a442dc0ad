"""Countdown objective and safe_eval: reward and evaluation tables, the reference regexes,
generator reachability, splits."""

import random
import re
import time

import pytest

from objectives.countdown import TEMPLATE, Countdown, format_reward, last_answer
from objectives.safe_expr import UnsafeExpression, safe_eval

MB = 1_000_000
NESTED = "(" * 10_000 + "1" + ")" * 10_000

# ---- safe_eval ---------------------------------------------------------------------------

SAFE_VALUES = [
    ("1+2", 3.0), ("2*(3+4)", 14.0), ("7/2", 3.5), ("-3+5", 2.0), ("+4", 4.0), ("--4", 4.0),
    (" 3 * 5 + 7 ", 22.0), ("1.5*2", 3.0), ("3/(1/3)", 9.0), ("(((((1)))))", 1.0),
    ("1+" * 20 + "1", 21.0), ("1000000*1000000", 1e12), ("0/5", 0.0),
]

UNSAFE = [
    "9**9**9**9", "2**3", "7//2", "7%2", "x", "abs(1)", "1j", "True+1", "'a'", "[1]", "(1,2)",
    "lambda: 1", "1 if 1 else 2", "1==1", "a.b", "x[0]", "1e13", "1e999", "1000000*1000000*10",
    "().__class__.__bases__[0].__subclasses__()", "__import__('os').system('x')",
    NESTED, "1" * MB, "1/0", "1/(2-2)", "5/0.0", "1+" * 40 + "1", "", "   ", "1 2", "1+", "007",
]


@pytest.mark.parametrize("expr,value", SAFE_VALUES)
def test_safe_eval_values(expr, value):
    assert safe_eval(expr) == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("expr", UNSAFE, ids=[f"{i}:{e[:20]!r}" for i, e in enumerate(UNSAFE)])
def test_safe_eval_rejects_quickly(expr):
    start = time.perf_counter()
    with pytest.raises(UnsafeExpression):
        safe_eval(expr)
    assert time.perf_counter() - start < 0.5


def test_unsafe_expression_is_a_value_error():
    assert issubclass(UnsafeExpression, ValueError)


# ---- reward table --------------------------------------------------------------------------

N, T = [3, 5, 7], 22  # 3 * 5 + 7 = 22
GOOD = "x</think>\n<answer>3*5+7</answer>"

# (completion, numbers, target, expected reward); the default template ends inside <think>.
REWARD_TABLE = [
    (GOOD, N, T, 1.1),
    (GOOD + "\n", N, T, 1.1),                                   # `$` allows one final newline
    ("x</think>\n<answer>3 * 5 + 7</answer>", N, T, 1.1),
    ("x</think>\n<answer>7+(5*3)</answer>", N, T, 1.1),
    ("x</think>\n<answer>3*5+8</answer>", N, T, 0.1),          # wrong number
    ("x</think>\n<answer>(7+5)*3</answer>", N, T, 0.1),        # wrong value
    ("x</think> <answer>3*5+7</answer>", N, T, 1.06),          # no newline: 0.1 + 0.5
    ("x</think>\n<answer>3*5+7</answer> done", N, T, 1.06),     # text after the answer
    ("<answer>3*5+7</answer>", N, T, 1.05),                    # no </think>: answer block only
    ("x</think>", N, T, 0.01),                                 # think block only
    ("no tags at all", N, T, 0.0),
    ("x</think>\n<answer>1</answer><answer>3*5+7</answer>", N, T, 1.1),   # the LAST answer
    ("x</think>\n<answer>3*5+7</answer><answer>7</answer>", N, T, 0.1),
    ("x</think>\n<answer>\n3*5+7\n</answer>", N, T, 0.1),      # the reference whitelist: no \n
    ("x</think>\n<answer>3*5+7 = 22</answer>", N, T, 0.1),
    ("x</think>\n<answer>22</answer>", N, T, 0.1),             # numbers not used
    ("x</think>\n<answer>3*5+7+3-3</answer>", N, T, 0.1),      # a number reused
    ("x</think>\n<answer>3*5+7*1</answer>", N, T, 0.1),        # an extra number
    ("x</think>\n<answer>3/(1/3)</answer>", [3, 1, 3], 9, 1.1),  # float 9.000000000000002
    ("x</think>\n<answer>2**3*1</answer>", [2, 3, 1], 8, 0.1),   # ** is not allowed
    ("x</think>\n<answer>4/(2-2)</answer>", [4, 2, 2], 2, 0.1),  # division by zero
    ("x</think>\n<answer>-3+5*7-10</answer>", [3, 5, 7, 10], 22, 1.1),
    # hostile
    ("x</think>\n<answer>9**9**9**9</answer>", [9, 9, 9, 9], 1, 0.1),
    ("x</think>\n<answer>" + NESTED + "</answer>", [1], 1, 0.1),
    ("x</think>\n<answer>().__class__.__bases__[0].__subclasses__()</answer>", [0], 0, 0.1),
    ("x</think>\n<answer>__import__('os').system('x')</answer>", N, T, 0.1),
    ("x</think>\n<answer>" + "1" * MB + "</answer>", N, T, 0.1),
    ("x</think>\n<answer>" + "1+" * (MB // 2) + "1</answer>", N, T, 0.1),
    ("<answer>" * (MB // 8), N, T, 0.0),
    ("</think>\n<answer>" * (MB // 17), N, T, 0.01),
    ("</think>\n<answer>" * (MB // 17) + "</answer>x", N, T, 0.06),
    ("<think>" * (MB // 7), N, T, 0.0),
    ("x</think>\n<answer>3*5+7</answer>" + "y" * MB, N, T, 1.06),
]


@pytest.mark.parametrize("completion,numbers,target,expected", REWARD_TABLE,
                         ids=[f"{i}:{c[:24]!r}" for i, (c, *_) in enumerate(REWARD_TABLE)])
def test_reward_table(completion, numbers, target, expected):
    objective = Countdown()
    start = time.perf_counter()
    rewards = objective(["p"], [completion], numbers=[numbers], target=[target])
    elapsed = time.perf_counter() - start
    assert rewards == [pytest.approx(expected, abs=1e-12)]
    assert elapsed < 0.5, f"scoring took {elapsed:.3f} s"


def test_without_a_prefilled_think_the_completion_must_open_it():
    plain = Countdown(template="Use {numbers} to make {target}.")
    assert plain.think_prefilled is False
    assert plain(["p"], [GOOD], numbers=[N], target=[T]) == [pytest.approx(1.05)]
    assert plain(["p"], ["<think>" + GOOD], numbers=[N], target=[T]) == [pytest.approx(1.1)]
    assert Countdown().think_prefilled is True


# ---- the linear-time regex replacements match the reference regexes -------------------------

_FULL = re.compile(r"^<think>.*?<\/think>\n<answer>.*?<\/answer>$", re.DOTALL)


def _reference_format(text):
    if _FULL.match(text):
        return 1.0
    return (0.1 if re.search(r"<think>.*?<\/think>", text, re.DOTALL) else 0.0) + (
        0.5 if re.search(r"<answer>.*?<\/answer>", text, re.DOTALL) else 0.0)


def _reference_last_answer(text):
    found = re.findall(r"<answer>(.*?)<\/answer>", text, re.DOTALL)
    return found[-1] if found else None


def test_format_reward_and_last_answer_equal_the_reference_regexes():
    rng = random.Random(1234)  # a private RNG
    pieces = ["<think>", "</think>", "<answer>", "</answer>", "\n", "x", "1+2", "</think>\n<answer>"]
    seen = set()
    for _ in range(4000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 9)))
        assert format_reward(text) == _reference_format(text), text
        assert last_answer(text) == _reference_last_answer(text), text
        seen.add(format_reward(text))
    assert seen == {0.0, 0.1, 0.5, 0.6, 1.0}


# ---- data ------------------------------------------------------------------------------------

def test_every_generated_target_is_reached_by_its_solution():
    objective = Countdown(seed=7)
    rows = objective.dataset("train", 300).to_list() + objective.dataset("test", 100).to_list()
    counts = set()
    for row in rows:
        numbers, target, solution = row["numbers"], row["target"], row["solution"]
        counts.add(len(numbers))
        assert all(1 <= x <= 99 for x in numbers) and 1 <= target <= 1000
        assert sorted(int(x) for x in re.findall(r"\d+", solution)) == sorted(numbers)
        assert abs(safe_eval(solution) - target) < 1e-5
        assert row["prompt"] == TEMPLATE.format(numbers=numbers, target=target)
        completion = f"I can do it.</think>\n<answer>{solution}</answer>"
        assert objective(["p"], [completion], numbers=[numbers], target=[target]) == [pytest.approx(1.1)]
    assert counts == {3, 4}


def test_train_and_test_never_share_a_problem_and_seeds_matter():
    a, b = Countdown(seed=0), Countdown(seed=1)
    key = lambda row: (tuple(sorted(row["numbers"])), row["target"])  # noqa: E731
    train0 = {key(r) for r in a.dataset("train", 1000).to_list()}
    test0 = {key(r) for r in a.dataset("test").to_list()}
    test1 = {key(r) for r in b.dataset("test").to_list()}
    assert len(train0) == 1000 and len(test0) == 500
    assert not train0 & test0 and not train0 & test1
    assert a.dataset("test", 20).to_dict() == Countdown(seed=0).dataset("test", 20).to_dict()
    assert a.dataset("test", 20)["prompt"] != b.dataset("test", 20)["prompt"]


def test_extract_and_gold_answers_are_values():
    objective = Countdown()
    assert objective.extract_answer(GOOD) == "22"
    assert objective.extract_answer("<answer>7/2</answer>") == "3.5"
    assert objective.extract_answer("<answer>9**9**9**9</answer>") is None
    assert objective.extract_answer("nothing") is None
    assert objective.gold_answer({"target": 22, "numbers": N}) == "22"
    assert objective.is_correct([1.1, 1.0, 0.1, None]) == [True, True, False, False]


def test_bad_split_and_knobs():
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        Countdown().dataset("dev")
    with pytest.raises(ValueError, match="counts"):
        Countdown(counts=(1,))
    only3 = Countdown(counts=3, max_number=20, max_target=50).dataset("train", 50).to_list()
    assert {len(r["numbers"]) for r in only3} == {3}
    assert all(r["target"] <= 50 and max(r["numbers"]) <= 20 for r in only3)
