import math

import numpy as np
import pytest
import torch

from zoopt.metrics import (TAU, bootstrap_ci, magnitude_histogram, magnitude_shares,
                           threshold_state_dict)


def pair():
    base = {"a": torch.tensor([1.0, 2.0, 3.0, 4.0]),
            "b": torch.tensor([[0.5, 0.5], [0.5, 0.5]]),
            "h": torch.tensor([1.0, 1.0, -2.0], dtype=torch.bfloat16),
            "n": torch.tensor([1, 2])}
    trained = {"a": torch.tensor([1.0, 2.001, 3.01, 4.0]),    # Δ: 0, ~1e-3, ~1e-2, 0
               "b": torch.tensor([[0.5, 0.4995], [0.6, 0.5]]),  # Δ: 0, -5e-4, 0.1, 0
               "h": torch.tensor([1.0, 1.0078125, -2.0], dtype=torch.bfloat16),  # Δ: 0, 2^-7, 0
               "n": torch.tensor([1, 3])}
    return base, trained


def test_magnitude_shares_exact():
    base, trained = pair()
    s = magnitude_shares(base, trained, tau=TAU)
    assert TAU == 1.5e-3
    assert (s["total"], s["zero"], s["small"], s["large"], s["nonzero"]) == (11, 6, 2, 3, 5)
    assert s["share_zero"] == 6 / 11
    assert s["share_small"] == 2 / 5 and s["share_large"] == 3 / 5
    none = magnitude_shares(base, base)
    assert none["nonzero"] == 0 and math.isnan(none["share_small"])


def test_magnitude_histogram_exact():
    base = {"w": torch.zeros(5)}
    trained = {"w": torch.tensor([0.0, 1e-3, -1e-3, 1e-1, 10.0])}
    counts, edges = magnitude_histogram(base, trained, bins=[-4, -2, 0, 2])
    np.testing.assert_array_equal(counts, [2, 1, 1])
    np.testing.assert_array_equal(edges, [-4, -2, 0, 2])
    counts, edges = magnitude_histogram(base, trained, bins=3)
    assert counts.sum() == 4 and edges[0] == pytest.approx(-3, abs=1e-6)
    assert edges[-1] == pytest.approx(1, abs=1e-6)


def test_threshold_keeps_only_large_updates():
    base, trained = pair()
    out = threshold_state_dict(base, trained, tau=TAU)
    assert torch.equal(out["a"], torch.tensor([1.0, 2.0, 3.01, 4.0]))
    assert torch.equal(out["b"], torch.tensor([[0.5, 0.5], [0.6, 0.5]]))
    assert out["h"].dtype == torch.bfloat16
    assert torch.equal(out["h"], trained["h"])          # 2^-7 > τ
    assert torch.equal(out["n"], trained["n"])
    out2 = threshold_state_dict(base, trained, tau=0.05)
    assert torch.equal(out2["a"], base["a"]) and torch.equal(out2["h"], base["h"])


def test_threshold_extremes_are_bit_exact_including_bf16():
    g = torch.Generator().manual_seed(0)
    base = {"w": torch.randn(64, 32, generator=g).to(torch.bfloat16),
            "v": torch.randn(100, generator=g),
            "d": torch.randn(10, generator=g, dtype=torch.float64)}
    trained = {"w": (base["w"].float() + 1e-3 * torch.randn(64, 32, generator=g)).bfloat16(),
               "v": base["v"] + 1e-6 * torch.randn(100, generator=g),
               "d": base["d"] + 1e-13}                   # below float32 resolution
    zero = threshold_state_dict(base, trained, tau=0.0)
    inf = threshold_state_dict(base, trained, tau=math.inf)
    for k in base:
        assert zero[k].dtype == trained[k].dtype
        assert torch.equal(zero[k], trained[k]), k
        assert torch.equal(inf[k], base[k]), k
    assert not torch.equal(base["d"], trained["d"])


def test_threshold_dtype_mismatch_names_key():
    with pytest.raises(ValueError, match="'w'"):
        threshold_state_dict({"w": torch.ones(2)}, {"w": torch.ones(2, dtype=torch.bfloat16)})


def test_bootstrap_ci_brackets_mean_and_is_deterministic():
    x = [0.0] * 30 + [1.0] * 70
    lo, hi = bootstrap_ci(x, n_boot=2000, seed=1)
    assert lo < 0.7 < hi
    # normal approximation: 0.7 ± 1.96·sqrt(0.21/100) = 0.7 ± 0.0898
    assert lo == pytest.approx(0.61, abs=0.025) and hi == pytest.approx(0.79, abs=0.025)
    assert bootstrap_ci(x, n_boot=2000, seed=1) == (lo, hi)
    assert bootstrap_ci(x, n_boot=2000, seed=2) != (lo, hi)
    assert bootstrap_ci([0.3] * 5) == (pytest.approx(0.3), pytest.approx(0.3))
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_ci([])
