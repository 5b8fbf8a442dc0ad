"""Fitness shaping functions give exact, documented outputs."""

from functools import partial

import numpy as np
import pytest

from estimators import centered_rank, mean_baseline, raw, zscore


def test_zscore_exact_ddof0_and_ddof1():
    r = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(zscore(r), [-1.224744871, 0.0, 1.224744871], rtol=1e-7)  # eps=1e-8 in the denominator
    np.testing.assert_allclose(partial(zscore, ddof=1)(r), [-1.0, 0.0, 1.0], rtol=1e-7)


def test_zscore_eps_keeps_constant_rewards_finite():
    out = zscore(np.array([0.5, 0.5, 0.5]))
    assert np.all(out == 0.0)


def test_centered_rank_exact_with_ties():
    np.testing.assert_array_equal(centered_rank(np.array([3.0, 1.0, 2.0])), [0.5, -0.5, 0.0])
    # ties share the mean of their ranks: ranks (0.5, 0.5, 2) / 2 − 0.5
    np.testing.assert_array_equal(centered_rank(np.array([1.0, 1.0, 2.0])), [-0.25, -0.25, 0.5])
    out = centered_rank(np.random.default_rng(0).normal(size=33))
    assert abs(out.sum()) < 1e-12 and out.min() == -0.5 and out.max() == 0.5


def test_raw_and_mean_baseline_exact():
    r = np.array([1.0, 4.0, 7.0])
    np.testing.assert_array_equal(raw(r), r)
    np.testing.assert_array_equal(mean_baseline(r), [-3.0, 0.0, 3.0])


def test_shaping_does_not_mutate_input():
    r = np.array([3.0, 1.0, 2.0])
    for fn in (zscore, centered_rank, raw, mean_baseline):
        fn(r)
    np.testing.assert_array_equal(r, [3.0, 1.0, 2.0])


@pytest.mark.parametrize("fn", [zscore, centered_rank, mean_baseline])
def test_invariant_to_reward_offset(fn):
    r = np.random.default_rng(1).normal(size=16)
    np.testing.assert_allclose(fn(r), fn(r + 100.0), atol=1e-9)
