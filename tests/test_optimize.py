"""zoopt.workflows.optimize on closed-form problems: real optimisation, measured against the spec."""

import warnings

import pytest
import torch

from estimators import OnePoint, zscore
from zoopt import ES, optimize


class Vector(torch.nn.Module):
    def __init__(self, x):
        super().__init__()
        self.x = torch.nn.Parameter(x.clone(), requires_grad=False)


def test_quadratic_100d_shrinks_distance_below_10_percent_in_300_steps():
    target = torch.randn(100, generator=torch.Generator().manual_seed(0))
    module = Vector(torch.zeros(100))

    def fitness(m):
        return -float(((m.x - target) ** 2).sum())

    es = ES(OnePoint(zscore), population_size=32, sigma=0.1, lr=0.05, seed=1)
    start = (module.x - target).norm().item()
    history = optimize(module, fitness, es, steps=300)
    final = (module.x - target).norm().item()
    assert final < 0.1 * start, (start, final)
    assert len(history) == 300 and history[-1]["fitness"] == pytest.approx(-final ** 2, rel=1e-4)


def test_rosenbrock_10d_improves_by_more_than_90_percent():
    # the standard extended-Rosenbrock start (−1.2, 1, −1.2, 1, …): f = 2057
    module = Vector(torch.tensor([-1.2, 1.0] * 5))

    def fitness(m):
        x = m.x.double()
        return -float((100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum())

    f0 = -fitness(module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optimize(module, fitness, ES(OnePoint(zscore), population_size=32, sigma=0.01, lr=0.02, seed=1),
                 steps=600, eval_center=False)
    f1 = -fitness(module)
    assert f1 < 0.1 * f0, (f0, f1)


def test_restore_happens_even_if_fitness_raises():
    module = Vector(torch.zeros(4))
    calls = []

    def fitness(m):
        calls.append(1)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        optimize(module, fitness, ES(population_size=2, sigma=1.0), steps=1)
    assert torch.equal(module.x, torch.zeros(4)) and calls == [1]
