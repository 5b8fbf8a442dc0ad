"""perturb / restore / apply on a 50 M-parameter bf16 module, next to a plain copy_ of the bytes.

Run with `make bench` (pytest-benchmark); the default test run executes each once, untimed.
Compare the means in one report: each operation's ratio to `copy_baseline` is its cost in
"memory passes" over the weights.
"""

import pytest
import torch

from zoopt import Gaussian, Update
from zoopt.engines import ModuleEngine

N_PARAMS = 50_000_000


@pytest.fixture(scope="module")
def engine():
    torch.manual_seed(0)
    # 10 linear layers of 2236×2236 ≈ 50.0 M parameters
    net = torch.nn.Sequential(*[torch.nn.Linear(2236, 2236, bias=False) for _ in range(10)]).to(torch.bfloat16)
    return ModuleEngine(net)


def test_size(engine):
    assert abs(engine.num_parameters() - N_PARAMS) / N_PARAMS < 0.001


@pytest.mark.benchmark(group="module-engine-50M-bf16")
def test_copy_baseline(benchmark, engine):
    src = {n: m.to(torch.bfloat16) for n, m in engine.master.items()}

    def copy_all():
        for n, p in engine.params.items():
            p.data.copy_(src[n])

    benchmark(copy_all)


@pytest.mark.benchmark(group="module-engine-50M-bf16")
def test_perturb(benchmark, engine):
    benchmark(lambda: engine.perturb(Gaussian(), 1, 1e-3))
    engine.restore()


@pytest.mark.benchmark(group="module-engine-50M-bf16")
def test_restore(benchmark, engine):
    def cycle():
        engine.weights.dirty.update(engine.params)  # restore all tensors, as after a full perturb
        engine.restore()

    benchmark(cycle)


@pytest.mark.benchmark(group="module-engine-50M-bf16")
def test_apply_one_seed(benchmark, engine):
    start = engine.checksum()
    benchmark(lambda: engine.apply(Gaussian(), Update((1,), (1e-6,))))
    assert engine.checksum() != start
