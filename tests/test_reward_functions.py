"""``RewardFunctions``: TRL's weighted reward functions as one objective, scored one function at a time."""

import functools
import warnings

import datasets
import numpy as np
import pytest

from zoopt.rewards.functions import RewardFunctions, callable_name, weighted_sum
from zoopt.rewards.scoring import RewardError, RewardWarning, Scorer, reward_terms


def length(prompts, completions, **columns):
    return [float(len(c)) for c in completions]


def first_char_is_a(prompts, completions, **columns):
    return [None if not c else float(c[0] == "a") for c in completions]


def needs_solution(prompts, completions, solution, **columns):
    return [float(c == s) for c, s in zip(completions, solution)]


class Scaled:
    def __call__(self, prompts, completions, **columns):
        return [2.0] * len(completions)


DATA = datasets.Dataset.from_dict({"prompt": ["p0", "p1"], "solution": ["ab", "x"]})


def test_weighted_sum_is_trls_nansum_with_unscorable_rows_none():
    # r_j = Σ_f w_f r_fj over the functions with a value; None when no function has one
    assert weighted_sum([[1.0, None, None], [2.0, 3.0, None]], [0.5, 2.0]) == [4.5, 6.0, None]
    assert weighted_sum([[1.0, 2.0]], [1.0]) == [1.0, 2.0]


def test_names_are_trls_display_names():
    assert callable_name(length) == "length"
    assert callable_name(functools.partial(functools.partial(length))) == "length"
    assert callable_name(Scaled()) == "Scaled"
    objective = RewardFunctions([length, Scaled()], DATA, weights=[1, 0.5])
    assert objective.name == "length+Scaled"
    assert [(n, w) for n, _, w in reward_terms(objective)] == [("length", 1.0), ("Scaled", 0.5)]


def test_calling_it_sums_and_its_data_are_the_datasets():
    objective = RewardFunctions([length, first_char_is_a], DATA, weights=[0.5, 2.0])
    assert objective(prompts=["p", "p", "p"], completions=["ab", "b", ""]) == [3.0, 0.5, 0.0]
    assert objective.dataset("train") is DATA and objective.split_size("train") == 2
    assert objective.dataset("train", 1)["prompt"] == ["p0"]
    with pytest.raises(ValueError, match="no eval_dataset"):
        objective.dataset("test")


@pytest.mark.parametrize("kwargs,message", [
    (dict(reward_funcs=[]), "non-empty list of callables"),
    (dict(reward_funcs=[length], weights=[1, 2]), "2 weights for 1 reward functions"),
    (dict(reward_funcs=length, weights=[float("nan")]), "finite"),
    (dict(reward_funcs=length, train_dataset=datasets.Dataset.from_dict({"q": [1]})), "'prompt' column"),
])
def test_bad_arguments_are_one_line(kwargs, message):
    kwargs = {"train_dataset": DATA, **kwargs}
    with pytest.raises(ValueError, match=message):
        RewardFunctions(**kwargs)


def test_the_scorer_guards_each_function_and_logs_each_as_trl_does():
    objective = RewardFunctions([length, needs_solution, first_char_is_a], DATA, weights=[1.0, 10.0, 1.0])
    scorer = Scorer(objective)
    result = scorer.score(["p0", "p1", "p0"], ["ab", "b", ""], {"solution": ["ab", "x", "ab"]})
    # length: 2, 1, 0; needs_solution: 1, 0, 0 (×10); first_char_is_a: 1, 0, None
    assert result.rewards == [2 + 10 + 1, 1 + 0 + 0, 0 + 0]
    assert (result.failed, result.skipped) == (0, 0)
    metrics = scorer.reward_metrics()
    assert metrics["rewards/length/mean"] == 1.0 and metrics["rewards/length/std"] == pytest.approx(np.std([2, 1, 0], ddof=1))
    assert metrics["rewards/needs_solution/mean"] == pytest.approx(1 / 3)
    assert metrics["rewards/first_char_is_a/mean"] == 0.5  # the None is left out, as TRL's nanmean does
    assert metrics["rewards/first_char_is_a/std"] == pytest.approx(np.std([1, 0], ddof=1))
    # a function that fails on every completion (no 'solution' column) scores 0.0 there; the others still count
    with pytest.warns(RewardWarning, match="'needs_solution' failed on a completion: TypeError"):
        result = scorer.score(["p0"], ["ab"])
    assert result.rewards == [2 + 0 + 1] and result.failed == 1
    scorer.start()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the first failure of a function is shown once
        scorer.score(["p0"], ["ab"])
    with pytest.raises(RewardError, match=r"the reward 'needs_solution' failed on every completion of step 4 \(1 of 1\)"):
        scorer.finish("step 4")


def test_one_function_of_weight_one_scores_exactly_as_before():
    plain = Scorer(length).score(["p", "p"], ["abc", ""])
    wrapped = Scorer(RewardFunctions(length, DATA)).score(["p", "p"], ["abc", ""])
    assert plain == wrapped and plain.rewards == [3.0, 0.0]
