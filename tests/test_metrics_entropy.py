import math

import pytest
import torch

from zoopt.metrics import mean_token_entropy, token_entropy


@pytest.mark.parametrize("V", [2, 7, 151936])
def test_uniform_logits_have_entropy_log_v(V):
    h = token_entropy(torch.full((3, V), 2.5))
    assert h.shape == (3,)
    assert torch.allclose(h, torch.full((3,), math.log(V)), atol=1e-5)


def test_one_hot_ish_is_near_zero_and_stable():
    logits = torch.tensor([[1000.0, 0.0, 0.0, 0.0]])
    h = token_entropy(logits)
    assert torch.isfinite(h).all()
    assert float(h) < 1e-6


def test_masked_logits_are_ignored():
    h = token_entropy(torch.tensor([0.0, 0.0, float("-inf")]))
    assert float(h) == pytest.approx(math.log(2), abs=1e-6)


@pytest.mark.parametrize("T", [0.3, 1.0, 2.0])
def test_two_token_temperature_closed_form(T):
    # logits (0, d): p = σ(d/T); H = −p log p − (1−p) log(1−p)
    d = 1.7
    p = 1 / (1 + math.exp(-d / T))
    want = -p * math.log(p) - (1 - p) * math.log(1 - p)
    got = float(token_entropy(torch.tensor([0.0, d], dtype=torch.float64), temperature=T))
    assert got == pytest.approx(want, abs=1e-6)


def test_mean_token_entropy_is_token_weighted():
    assert mean_token_entropy([[1.0, 1.0, 1.0], [4.0]]) == pytest.approx(7 / 4)
    assert math.isnan(mean_token_entropy([[], []]))
