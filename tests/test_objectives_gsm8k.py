"""GSM8K objective: gold extraction, the offline 100 problems and their split, the hub format, reward table."""

import time

import pytest

from objectives.answers import parse_number
import datasets

import objectives
from objectives.gsm8k import GSM8K, extract_hash_answer, offline_problems, safe_for_math_verify

MB = 1_000_000


@pytest.mark.parametrize("text,expected", [
    ("#### 1,234.", "1234"), ("#### $5", "5"), ("####  -3 ", "-3"), ("so\n#### 72\n", "72"),
    ("#### 3.50", "3.5"), ("#### 007", "7"), ("#### five", None), ("no marker 42", None),
    ("#### 1 #### 2", "2"), ("####", None),
])
def test_extract_hash_answer(text, expected):
    assert extract_hash_answer(text) == expected


def test_offline_source_has_100_numeric_problems_split_without_overlap():
    objective = GSM8K(source="offline")
    train, test = objective.dataset("train").to_list(), objective.dataset("test").to_list()
    assert len(offline_problems()) == 100 and len(train) + len(test) == 100
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
    # The first offline problem (shark and remoras) has gold 10.
    assert any("remoras" in r["prompt"] and r["answer"] == "10" for r in train + test)


def test_offline_split_is_deterministic():
    assert GSM8K(source="offline").dataset("test").to_dict() == GSM8K(source="offline").dataset("test").to_dict()


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
    gsm = GSM8K(source="offline")
    gsm(["p"], ["#### \\frac{20}{2}"], answer=["10"])  # warm up math_verify (import ≈ 1 s)
    return gsm


@pytest.mark.parametrize("completion,gold,expected", REWARD_TABLE,
                         ids=[f"{i}:{c[:20]!r}" for i, (c, _, _) in enumerate(REWARD_TABLE)])
def test_reward_table(objective, completion, gold, expected):
    start = time.perf_counter()
    rewards = objective(["p"], [completion], answer=[gold])
    elapsed = time.perf_counter() - start
    assert rewards == [expected]
    assert elapsed < 2.0, f"scoring took {elapsed:.3f} s"  # the bound every objective keeps (issue 16)


def test_extract_answer_and_gate():
    objective = GSM8K(source="offline")
    assert objective.extract_answer("so 5 then\n#### $1,234.00 dollars") == "1234"
    assert objective.extract_answer("it is 41 or 42") == "42"
    assert objective.extract_answer("#### none") is None
    assert safe_for_math_verify("\\frac{20}{2}") and safe_for_math_verify("$10 \\text{ dollars}")
    assert not safe_for_math_verify("2^{10}") and not safe_for_math_verify("5!")
    assert not safe_for_math_verify("x=10") and not safe_for_math_verify("9**9")


def test_bad_source_and_split():
    with pytest.raises(ValueError, match="gsm8k: unknown source 'web'"):
        GSM8K(source="web")
    with pytest.raises(ValueError, match="unknown split 'validation'"):
        GSM8K(source="offline").dataset("validation")
    with pytest.raises(ValueError, match="asked"):
        GSM8K(source="offline").dataset("train", 101)


def test_gold_may_be_a_whole_gsm8k_solution():
    """TRL-style callers pass openai/gsm8k's answer column (a solution ending in '#### N') as is."""
    reward = objectives.get("gsm8k")
    assert reward(prompts=["q"], completions=["#### 18"], answer=["Natalia sold ... #### 18"]) == [1.0]
    assert reward(prompts=["q"], completions=["#### 17"], answer=["Natalia sold ... #### 18"]) == [0.0]
    assert reward(prompts=["q"], completions=["#### 18"], answer=["no marker here"]) == [0.0]
    assert reward.gold_answer({"answer": "3 + 4 = <<3+4=7>>7\n#### 7"}) == "7"


def _hub_split(path, questions, solutions):
    datasets.Dataset.from_dict({"question": questions, "answer": solutions}).to_parquet(str(path))
    return str(path)


def test_column_mapping_of_the_hub_format(tmp_path):
    files = {"train": _hub_split(tmp_path / "train.parquet", ["Tom has 3 apples and buys 4. How many?"],
                                 ["He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7"]),
             "test": _hub_split(tmp_path / "test.parquet", ["A shop sells 1,200 pens a day. Pens in 2 days?",
                                                            "What is half of 9?"],
                                ["1,200 * 2 = <<1200*2=2400>>2,400\n#### 2,400", "9 / 2 = 4.5\n#### 4.5"])}
    objective = objectives.get("gsm8k", data_files=files)
    test = objective.dataset("test").to_list()
    assert [r["answer"] for r in test] == ["2400", "4.5"] and objective.data_source == "files"
    assert test[0]["prompt"].endswith("Question: A shop sells 1,200 pens a day. Pens in 2 days?")
    assert test[0]["solution"].endswith("#### 2,400")
    assert objective.split_size("train") == 1 and objective.dataset("train")[0]["answer"] == "7"
    assert objective(prompts=["p"] * 2, completions=["#### 2,400", "#### 4.5"], answer=[r["answer"] for r in test]) == [1.0, 1.0]


def test_a_solution_without_its_number_is_an_error_naming_the_row(tmp_path):
    files = {"train": _hub_split(tmp_path / "train.jsonl.parquet", ["q0", "q1"], ["#### 1", "the answer is seven"]),
             "test": _hub_split(tmp_path / "test.parquet", ["q"], ["#### 2"])}
    with pytest.raises(ValueError, match=r"gsm8k \(files\): train row 1's solution has no number after '####'"):
        objectives.get("gsm8k", data_files=files).dataset("test")
