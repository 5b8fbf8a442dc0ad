"""Arithmetic objective: reward table (incl. hostile completions), number extraction, splits."""

import time

import pytest

import objectives
from objectives.answers import first_number, iter_numbers, last_number, parse_number
from objectives.arithmetic import Arithmetic
from objectives.splits import split_of
from zoopt.objective import SplitSizeWarning

MB = 1_000_000

# (completion, gold answer, expected reward)
REWARD_TABLE = [
    ("82", "82", 1.0),
    ("37 + 45 = 82", "82", 1.0),
    ("The answer is 82.", "82", 1.0),
    ("82.0", "82", 1.0),
    ("0082", "82", 1.0),
    ("82.5", "82", 0.0),
    ("-82", "82", 0.0),
    ("83", "82", 0.0),
    ("82 or maybe 83", "82", 0.0),
    ("83, no: 82", "82", 1.0),
    ("", "82", 0.0),
    ("eighty-two", "82", 0.0),
    ("x82", "82", 0.0),
    ("1,234", "1234", 1.0),
    ("The product is 123,456,789.", "123456789", 1.0),
    ("1234", "1234", 1.0),
    ("12,34", "1234", 0.0),
    ("37 - 45 = -8", "-8", 1.0),
    ("37-45=-8", "-8", 1.0),
    ("8", "-8", 0.0),
    ("5-8", "-8", 0.0),
    # hostile
    ("9**9**9**9", "82", 0.0),
    ("(" * 10_000 + "82" + ")" * 10_000, "82", 1.0),
    ("().__class__.__bases__[0].__subclasses__()", "82", 0.0),
    ("__import__('os').system('echo 82')", "82", 1.0),  # only text: its last number is 82
    ("8" * MB, "82", 0.0),
    ("9" * MB + " 82", "82", 1.0),
    ("1," * (MB // 2), "82", 0.0),
    ("x" * MB + " 82", "82", 1.0),
    ("-" * MB + "82", "82", 0.0),  # "--82": the minus sign attaches to 82, giving -82
    ("82/0", "82", 0.0),
]


@pytest.mark.parametrize("completion,answer,expected", REWARD_TABLE,
                         ids=[f"{i}:{c[:20]!r}" for i, (c, _, _) in enumerate(REWARD_TABLE)])
def test_reward_table(completion, answer, expected):
    objective = Arithmetic()
    start = time.perf_counter()
    rewards = objective(["p"], [completion], answer=[answer])
    elapsed = time.perf_counter() - start
    assert rewards == [expected]
    assert elapsed < 0.5, f"scoring took {elapsed:.3f} s"


def test_extract_answer_is_the_canonical_last_number():
    objective = Arithmetic()
    assert objective.extract_answer("37 + 45 = 82") == "82"
    assert objective.extract_answer("it is 1,234.50 or -0") == "0"
    assert objective.extract_answer("it is 1,234.50") == "1234.5"
    assert objective.extract_answer("no digits here") is None
    assert objective.gold_answer({"answer": "82"}) == "82"


def test_number_tokens():
    assert list(iter_numbers("3,5 and 1,234,567 then -0.50 and 007.")) == ["3", "5", "1234567", "-0.5", "7"]
    assert list(iter_numbers("v1.5 x2 5-3 =-8 (4)")) == ["5", "3", "-8", "4"]
    assert first_number("$5, then 6") == "5"
    assert last_number("") is None
    assert parse_number(" -0 ") == "0"
    assert parse_number("12 13") is None
    assert parse_number("1,234") == "1234"


def test_train_and_test_never_share_a_problem_across_seeds():
    a, b = Arithmetic(seed=0), Arithmetic(seed=1)
    train0, test0 = set(a.dataset("train")["prompt"]), set(a.dataset("test")["prompt"])
    test1 = set(b.dataset("test")["prompt"])
    assert len(train0) == 2000 and len(test0) == 500 and len(test1) == 500
    assert not train0 & test0
    assert not train0 & test1


def test_same_seed_same_data_different_seed_different_data_prefixes_agree():
    first, again, other = Arithmetic(seed=3), Arithmetic(seed=3), Arithmetic(seed=4)
    assert first.dataset("train", 50).to_dict() == again.dataset("train", 50).to_dict()
    assert first.dataset("train", 50)["prompt"] != other.dataset("train", 50)["prompt"]
    assert first.dataset("train", 10)["prompt"] == first.dataset("train", 50)["prompt"][:10]


def test_answers_are_the_true_results_and_prompts_follow_the_template():
    objective = Arithmetic(digits=3, operators=("+", "-", "*"), seed=5,
                           template="Compute {a} {op} {b}.")
    rows = objective.dataset("test", 200).to_list()
    ops = set()
    for row in rows:
        _, a, op, b = row["prompt"].rstrip(".").split(" ")
        ops.add(op)
        assert 100 <= int(a) <= 999 and 100 <= int(b) <= 999
        expected = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        assert row["answer"] == str(expected)
        assert objective([row["prompt"]], [f"= {expected:,}"], answer=[row["answer"]]) == [1.0]
    assert ops == {"+", "-", "*"}


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match="unknown split 'valid'"):
        Arithmetic().dataset("valid")
    with pytest.raises(ValueError, match="operators"):
        Arithmetic(operators=("/",))


def one_digit_split(split):
    return {(a, "+", b) for a in range(10) for b in range(10) if split_of(f"{a} + {b}", 0.2) == split}


@pytest.mark.parametrize("split, n, size, key", [("train", None, 73, "objective_args.n_train"),
                                                 ("test", None, 27, "objective_args.n_test"),
                                                 ("train", 2000, 73, "n")])
def test_a_request_larger_than_a_counted_split_is_clamped_with_a_note(split, n, size, key):
    """docs/configuration.md's objective_args: {digits: 1}: 73 train / 27 test one-digit additions."""
    objective = Arithmetic(digits=1)
    with pytest.warns(SplitSizeWarning) as notes:
        problems = objective.problems(split, n)
    asked = n or {"train": 2000, "test": 500}[split]
    assert [str(w.message) for w in notes] == [
        f"objective 'arithmetic' (digits=1, operators +) has {size} {split!r} problems, {asked} asked ({key}): "
        f"using all {size}"]
    assert len(problems) == size == len(set(problems)) and set(problems) == one_digit_split(split)
    assert objective.problems(split, 20) == problems[:20]  # clamping changed no prefix
    assert len(objective.dataset(split, n)) == size


def test_a_request_within_a_counted_split_draws_as_before_and_notes_nothing():
    """The first problems are the ones drawn before clamping existed (pinned), with no note."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Arithmetic().problems("train", 4) == [(86, "+", 67), (16, "+", 11), (25, "+", 83), (68, "+", 92)]
        assert Arithmetic().problems("test", 3) == [(56, "+", 34), (37, "+", 13), (33, "+", 65)]
        one = Arithmetic(digits=1).problems("train", 73)
    assert one[:5] == [(8, "+", 6), (5, "+", 2), (3, "+", 0), (0, "+", 0), (1, "+", 8)]
    assert set(one) == one_digit_split("train")


def test_small_problem_space_is_fully_covered_without_repeats():
    objective = Arithmetic(digits=1)
    train, test = objective.problems("train", 70), objective.problems("test", 10)
    assert len(set(train)) == 70 and len(set(test)) == 10 and not set(train) & set(test)


def test_registered_and_is_correct():
    objective = objectives.get("arithmetic", digits=2)
    assert isinstance(objective, Arithmetic)
    assert objective.is_correct([1.0, 0.0, None, 0.99]) == [True, False, False, False]


def test_digits_pair_gives_each_operand_its_own_length():
    objective = Arithmetic(digits=[2, 1], operators="+-")
    problems = objective.problems("test", 300)
    assert all(10 <= a <= 99 and 0 <= b <= 9 for a, _, b in problems)
    assert {op for _, op, _ in problems} == {"+", "-"}
    sizes = objective.split_size("train"), objective.split_size("test")
    assert sum(sizes) == 2 * 90 * 10 and sizes == (1463, 337)
    assert len(set(map(tuple, objective.problems("test", 337)))) == 337
    assert Arithmetic(digits=[3, 1]).split_size("test") is None  # not counted past two digits
    assert Arithmetic(digits=[2, 2]).problems("train", 7) == Arithmetic(digits=2).problems("train", 7)


@pytest.mark.parametrize("digits", [0, 19, [2], [2, 1, 1], [2, 0], "2", [True, 1]])
def test_bad_digits_is_one_line_naming_digits(digits):
    with pytest.raises(ValueError, match="digits must be an integer in 1..18 or a pair"):
        Arithmetic(digits=digits)
