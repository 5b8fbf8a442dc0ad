"""GSM8K objective: gold extraction, the embedded 100 problems and their split, reward table."""

import time

import pytest

from objectives.answers import parse_number
from objectives.gsm8k import GSM8K, embedded_problems, extract_hash_answer, safe_for_math_verify

MB = 1_000_000


@pytest.mark.parametrize("text,expected", [
    ("#### 1,234.", "1234"), ("#### $5", "5"), ("####  -3 ", "-3"), ("so\n#### 72\n", "72"),
    ("#### 3.50", "3.5"), ("#### 007", "7"), ("#### five", None), ("no marker 42", None),
    ("#### 1 #### 2", "2"), ("####", None),
])
def test_extract_hash_answer(text, expected):
    assert extract_hash_answer(text) == expected


def test_embedded_source_has_100_numeric_problems_split_without_overlap():
    objective = GSM8K()
    train, test = objective.dataset("train").to_list(), objective.dataset("test").to_list()
    assert len(embedded_problems()) == 100 and len(train) + len(test) == 100
    assert 30 <= len(test) <= 70
    questions_train = {r["solution"] for r in train}
    questions_test = {r["solution"] for r in test}
    assert not questions_train & questions_test
    assert len({r["prompt"] for r in train + test}) == 100
    for row in train + test:
        assert row["answer"] is not None and parse_number(row["answer"]) == row["answer"]
        assert extract_hash_answer(row["solution"]) == row["answer"]
        assert row["prompt"].endswith("?") or row["prompt"].endswith(".")
    assert objective.dataset("train", 5).to_list() == train[:5]
    # The first embedded problem (shark and remoras) has gold 10.
    assert any("remoras" in r["prompt"] and r["answer"] == "10" for r in train + test)


def test_embedded_split_is_deterministic():
    assert GSM8K().dataset("test").to_dict() == GSM8K().dataset("test").to_dict()


# (completion, gold, expected reward)
REWARD_TABLE = [
    ("6 * 2 = 12 inches... so 10%.\n#### 10", "10", 1.0),
    ("#### 10.", "10", 1.0),
    ("#### $10.00", "10", 1.0),
    ("#### 1,234", "1234", 1.0),
    ("The answer is 10", "10", 1.0),          # no ####: the last number
    ("10 was wrong, it is 11", "10", 0.0),
    ("#### 10\nthen 11 more words", "10", 1.0),  # after ####: its first number
    ("#### 11", "10", 0.0),
    ("#### -10", "10", 0.0),
    ("#### \\frac{20}{2}", "10", 1.0),           # only math_verify sees this
    ("#### 20/2", "10", 1.0),
    ("#### 3.5", "3.5", 1.0),
    ("#### 7/2", "3.5", 1.0),
    ("#### 3.50", "3.5", 1.0),
    ("", "10", 0.0),
    ("#### ten", "10", 0.0),
    # hostile
    ("#### 9**9**9**9", "10", 0.0),
    ("#### 9^{9^{9^{9}}}", "10", 0.0),
    ("#### 10^{10^{10}}", "100", 0.0),        # first number 10; sympy never sees the power
    ("#### 100000000!", "10", 0.0),
    ("#### ().__class__.__bases__[0].__subclasses__()", "10", 0.0),
    ("#### __import__('os').system('x')", "10", 0.0),
    ("#### " + "(" * 10_000 + "10" + ")" * 10_000, "10", 0.0),   # line cut at 200 chars: no number
    ("#### " + "{" * 95 + "5" + "}" * 95, "10", 0.0),
    ("#### " + "9" * MB, "10", 0.0),
    ("#### 1/0", "10", 0.0),
    ("x" * MB + " 10", "10", 1.0),
    ("####" * (MB // 4), "10", 0.0),
    ("9" * MB, "10", 0.0),
]


@pytest.fixture(scope="module")
def objective():
    gsm = GSM8K()
    gsm(["p"], ["#### \\frac{20}{2}"], answer=["10"])  # warm up math_verify (import ≈ 1 s)
    return gsm


@pytest.mark.parametrize("completion,gold,expected", REWARD_TABLE,
                         ids=[f"{i}:{c[:20]!r}" for i, (c, _, _) in enumerate(REWARD_TABLE)])
def test_reward_table(objective, completion, gold, expected):
    start = time.perf_counter()
    rewards = objective(["p"], [completion], answer=[gold])
    elapsed = time.perf_counter() - start
    assert rewards == [expected]
    assert elapsed < 0.5, f"scoring took {elapsed:.3f} s"


def test_extract_answer_and_gate():
    objective = GSM8K()
    assert objective.extract_answer("so 5 then\n#### $1,234.00 dollars") == "1234"
    assert objective.extract_answer("it is 41 or 42") == "42"
    assert objective.extract_answer("#### none") is None
    assert safe_for_math_verify("\\frac{20}{2}") and safe_for_math_verify("$10 \\text{ dollars}")
    assert not safe_for_math_verify("2^{10}") and not safe_for_math_verify("5!")
    assert not safe_for_math_verify("x=10") and not safe_for_math_verify("9**9")


def test_bad_source_and_split():
    with pytest.raises(ValueError, match="unknown gsm8k source 'web'"):
        GSM8K(source="web")
    with pytest.raises(ValueError, match="unknown split 'validation'"):
        GSM8K().dataset("validation")
    with pytest.raises(ValueError, match="asked"):
        GSM8K().dataset("train", 101)
