import math

import numpy as np
import pytest

from zoopt.metrics import maj_at_k, majority_vote_score


def test_clear_majority():
    assert maj_at_k(["1", "1", "2"], "1", k=3) == 1.0
    assert maj_at_k(["1", "2", "2"], "1", k=3) == 0.0


def test_ties_give_expected_value_under_uniform_tie_breaking():
    assert maj_at_k(["1", "2"], "1", k=2) == 0.5
    assert maj_at_k(["1", "2", "3"], "3", k=3) == pytest.approx(1 / 3)
    assert maj_at_k(["1", "1", "2", "2", "3"], "3", k=5) == 0.0   # gold not among the tied
    assert maj_at_k(["1", "1", "2", "2", "3"], "2", k=5) == 0.5


def test_none_never_votes():
    assert maj_at_k([None, None, None, "1"], "1", k=4) == 1.0
    assert maj_at_k([None, None], "1", k=2) == 0.0
    assert majority_vote_score([None, "2", None], "2") == 1.0


def test_subsets_are_averaged_exactly_and_seeded():
    answers = ["1", "1", "2", "2"]
    gold = "1"
    subsets, seed, k = 16, 3, 2
    # replicate the documented sampling: k-subsets without replacement from default_rng(seed)
    rng = np.random.default_rng(seed)
    want = 0.0
    for _ in range(subsets):
        idx = rng.choice(4, size=k, replace=False)
        pair = {answers[i] for i in idx}
        want += 1.0 if pair == {"1"} else (0.5 if pair == {"1", "2"} else 0.0)
    got = maj_at_k(answers, gold, k=k, subsets=subsets, seed=seed)
    assert got == pytest.approx(want / subsets, abs=1e-15)
    assert got == maj_at_k(answers, gold, k=k, subsets=subsets, seed=seed)


def test_subset_average_converges_to_exact_expectation():
    # ["1","1","2","2"], k=2: P({1,1})=1/6 → 1, P({2,2})=1/6 → 0, P(mixed)=4/6 → 0.5 ⇒ 0.5
    got = maj_at_k(["1", "1", "2", "2"], "1", k=2, subsets=4000, seed=0)
    assert abs(got - 0.5) < 4 * math.sqrt(0.25 * 2 / 6 / 4000)  # 4σ of the per-subset score


def test_k1_is_mean_accuracy_of_answers():
    got = maj_at_k(["1", "2", "1", None], "1", k=1, subsets=5000, seed=1)
    assert abs(got - 0.5) < 0.03


def test_errors():
    with pytest.raises(ValueError, match="k=3"):
        maj_at_k(["1", "2"], "1", k=3)


def test_does_not_touch_global_rng():
    np.random.seed(7)
    before = np.random.random()
    np.random.seed(7)
    maj_at_k(["1", "2", "3", "1"], "1", k=2)
    assert np.random.random() == before
