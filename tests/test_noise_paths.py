"""One stream through every code path: the batched population call's factor tables, the
update's factors, the dense ``sample`` and the master's ``apply`` draw the same bits (on the
CPU here; ``tests/test_ray_engine.py`` checks a Ray replica's draw, ``test_cuda_paths_…`` and
``tests/benchmarks/es_step_gpu.py`` CUDA's).

Rank 1 and σ = 1 make every coefficient ±1, so a factor times its coefficient is the factor
itself, bit for bit, and "the same bits" can be asserted with ``torch.equal``.
"""

from __future__ import annotations

import pytest
import torch

import zoopt.counter_stream as cs
from zoopt.engines.batched import BatchedLowRank, RowLayout, member_factors
from zoopt.engines.hf import HFEngine
from zoopt.noise import Gaussian, LowRank, Rademacher
from zoopt.types import Member, Population, Update

NOISE = LowRank(rank=1)
POP = Population(step=0, sigma=1.0, members=(Member(21), Member(21, -1), Member(22), Member(23, -1)))


@pytest.fixture(scope="module")
def engine():
    return HFEngine.from_pretrained("tiny", dtype="float32")


def test_factors_are_the_first_gaussian_elements_of_the_stream():
    m, n = 7, 5
    a, b = NOISE.factors(3, "w", (m, n))
    flat = Gaussian().sample(3, "w", ((m + n),))
    assert torch.equal(a.reshape(-1), flat[:m]) and torch.equal(b.reshape(-1), flat[m:])
    assert torch.equal(flat, cs.normal([Gaussian().counter_key(3, "w")], m + n)[0])
    assert torch.equal(NOISE.sample(3, "w", (m, n)), a @ b.T)  # the dense sample multiplies them out


def test_population_tables_update_factors_and_dense_sample_are_the_same_bits(engine):
    weights = engine.weights
    batch = BatchedLowRank(RowLayout(engine.module, weights, NOISE), weights, NOISE, POP)
    seeds = [m.seed for m in POP.members]
    assert batch.layout.matrices, "no matrix to compare"
    for name in batch.layout.matrices:
        shape = weights.shapes[name]
        ua, ub = NOISE.update_factors(seeds, [1.0] * len(seeds), name, shape)
        for i, member in enumerate(POP.members):
            a, b = NOISE.factors(member.seed, name, shape)
            assert torch.equal(batch.a[name][i], a * member.sign) and torch.equal(batch.b[name][i], b), name
            assert torch.equal(ua[:, i:i + 1], a) and torch.equal(ub[:, i:i + 1], b), name
    for name in batch.layout.vector_names:  # vectors: the member's cast(M + sσ·ε) from the dense sample
        for i, member in enumerate(POP.members):
            want = (NOISE.sample(member.seed, name, weights.shapes[name]) * POP.scale(i)).add_(weights.master[name])
            assert torch.equal(batch.vec[name][i], want), name


def test_member_factors_on_any_device_are_the_cpu_ones():
    a, b = member_factors(NOISE, POP, "w", (6, 4))
    for i, member in enumerate(POP.members):
        fa, fb = NOISE.factors(member.seed, "w", (6, 4))
        assert torch.equal(a[i], fa * member.sign) and torch.equal(b[i], fb)


def test_apply_adds_the_update_factors_product(engine):
    name = next(n for n in NOISE.select(engine.weights.shapes) if len(engine.weights.shapes[n]) == 2)
    update = Update((21, 22, 23), (0.5, -0.25, 0.0))
    a, b = NOISE.update_factors(update.seeds, update.coefficients, name, engine.weights.shapes[name])
    assert a.shape[1] == 2  # the zero coefficient is dropped
    assert torch.equal(engine.weights.delta(NOISE, update, name), a @ b.T)


@pytest.mark.gpu
def test_cuda_paths_draw_the_cpu_bits():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    for noise, shape in ((Gaussian(), (3000,)), (Gaussian(), (64, 48)), (Rademacher(), (64, 48)), (NOISE, (3000,))):
        assert torch.equal(noise.sample(5, "w", shape, "cuda").cpu(), noise.sample(5, "w", shape))
    # a low-rank matrix is a matmul of the factors (its rounding may differ on CUDA): compare the factors
    fa, fb = NOISE.factor_table([1, 2, 2], "w", (64, 48), "cuda")
    ca, cb = NOISE.factor_table([1, 2, 2], "w", (64, 48))
    assert torch.equal(fa.cpu(), ca) and torch.equal(fb.cpu(), cb)
    ua, ub = NOISE.update_factors([1, 2], [0.5, -1.0], "w", (64, 48), "cuda")
    va, vb = NOISE.update_factors([1, 2], [0.5, -1.0], "w", (64, 48))
    assert torch.equal(ua.cpu(), va) and torch.equal(ub.cpu(), vb)
