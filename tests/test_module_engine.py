"""ModuleEngine: bit-exact restore, fp32 accumulation, in-place writes, filters, bad input."""

import math

import pytest
import torch

from zoopt import Gaussian, LowRank, Rademacher, Update
from zoopt.engines import ModuleEngine


def small_net(dtype=torch.bfloat16, seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64), torch.nn.Linear(64, 8))
    return net.to(dtype)


def test_bf16_perturb_restore_10000_cycles_is_bit_exact():
    net = small_net()
    engine = ModuleEngine(net)
    start = engine.checksum()
    noise = Gaussian()
    for cycle in range(10_000):
        engine.perturb(noise, cycle, 1e-3)
        engine.restore()
    assert engine.checksum() == start


def test_subtracting_noise_again_would_drift_in_bf16():
    """Why the master copy exists: w + σε − σε in bf16 is not w (the test above would fail)."""
    w = small_net()[0].weight.detach().clone()
    eps = Gaussian().sample(0, "0.weight", w.shape)
    back = (w + (1e-3 * eps).to(w.dtype)) - (1e-3 * eps).to(w.dtype)
    assert not torch.equal(back, w)


def test_perturb_sets_weights_from_master_cast_once():
    net = small_net()
    engine = ModuleEngine(net)
    engine.perturb(Gaussian(), 5, 0.01)
    engine.perturb(Gaussian(), 5, 0.01)  # perturbing twice does not stack
    for name, p in net.named_parameters():
        expected = (engine.master[name] + 0.01 * Gaussian().sample(5, name, p.shape)).to(torch.bfloat16)
        assert torch.equal(p.detach(), expected), name


def test_writes_in_place_keep_parameter_storage():
    net = small_net()
    ptrs = {n: p.data_ptr() for n, p in net.named_parameters()}
    engine = ModuleEngine(net)
    engine.perturb(Gaussian(), 1, 0.1)
    engine.restore()
    engine.apply(Gaussian(), Update((1, 2), (0.1, -0.2)))
    assert ptrs == {n: p.data_ptr() for n, p in net.named_parameters()}


@pytest.mark.parametrize("noise", [Gaussian(), Rademacher(), LowRank(rank=2)], ids=lambda n: n.kind)
def test_apply_equals_independent_dense_update(noise):
    net = small_net()
    engine = ModuleEngine(net)
    before = {n: p.detach().double().clone() for n, p in net.named_parameters()}
    update = Update((3, 4, 5), (2.5e-3, -1e-3, 4e-4))
    engine.apply(noise, update)
    for name, p in net.named_parameters():
        dense = before[name] + sum(c * noise.sample(s, name, p.shape).double()
                                   for s, c in zip(update.seeds, update.coefficients))
        torch.testing.assert_close(engine.master[name].double(), dense, rtol=0, atol=1e-6)
        assert torch.equal(p.detach(), engine.master[name].to(torch.bfloat16))


def test_updates_accumulate_in_fp32_master_not_in_bf16():
    # 100 updates each far below bf16 resolution: a bf16 accumulator would not move at all
    net = small_net()
    engine = ModuleEngine(net)
    w0 = engine.master["0.weight"].clone()
    for step in range(100):
        engine.apply(Gaussian(), Update((step,), (1e-5,)))
    moved = (engine.master["0.weight"] - w0).abs().max().item()
    expected = sum(1e-5 * Gaussian().sample(s, "0.weight", w0.shape) for s in range(100))
    torch.testing.assert_close(engine.master["0.weight"] - w0, expected, rtol=0, atol=1e-6)
    assert moved > 1e-4


def test_filters_move_only_selected_parameters():
    net = small_net(torch.float32)
    engine = ModuleEngine(net)
    noise = Gaussian(include=("*.weight",), exclude=("1.*",))
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    engine.perturb(noise, 0, 0.1)
    changed = {n for n, p in net.named_parameters() if not torch.equal(p, before[n])}
    assert changed == {"0.weight", "2.weight"}
    with pytest.raises(ValueError, match="selects no parameter"):
        engine.perturb(Gaussian(include=("nothing*",)), 0, 0.1)


def test_noise_does_not_depend_on_other_parameters_or_order():
    class A(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = torch.nn.Parameter(torch.zeros(50, 20))
            self.other = torch.nn.Parameter(torch.zeros(7))

    class B(torch.nn.Module):  # different order, one extra parameter
        def __init__(self):
            super().__init__()
            self.extra = torch.nn.Parameter(torch.zeros(100))
            self.other = torch.nn.Parameter(torch.zeros(7))
            self.shared = torch.nn.Parameter(torch.zeros(50, 20))

    a, b = A(), B()
    ModuleEngine(a).perturb(Gaussian(), 42, 1.0)
    ModuleEngine(b).perturb(Gaussian(), 42, 1.0)
    assert torch.equal(a.shared, b.shared) and torch.equal(a.other, b.other)


def test_non_finite_update_or_scale_is_refused_and_weights_untouched():
    net = small_net()
    engine = ModuleEngine(net)
    start = engine.checksum()
    for bad in (float("nan"), math.inf):
        with pytest.raises(ValueError, match="finite"):
            engine.apply(Gaussian(), Update((1, 2), (0.1, bad)))
        with pytest.raises(ValueError, match="scale"):
            engine.perturb(Gaussian(), 1, bad)
    assert engine.checksum() == start
    assert all(torch.isfinite(p).all() for p in net.parameters())


def test_fp32_module_master_is_a_copy_and_export_round_trips(tmp_path):
    from safetensors.torch import load_file

    net = small_net(torch.float32)
    engine = ModuleEngine(net)
    engine.apply(Gaussian(), Update((9,), (0.5,)))
    path = engine.export(tmp_path / "out")
    loaded = load_file(str(path))
    assert all(torch.equal(loaded[n], p.detach()) for n, p in net.named_parameters())
    assert engine.master["0.weight"].data_ptr() != net[0].weight.data_ptr()


def test_tied_parameters_are_moved_once():
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    engine = ModuleEngine(model)
    assert list(engine.params) == ["emb.weight"]
    engine.perturb(Gaussian(), 1, 0.1)
    assert model["head"].weight is model["emb"].weight


def test_sync_master_takes_weights_changed_by_an_optimizer():
    net = small_net(torch.float32)
    engine = ModuleEngine(net)
    with torch.no_grad():
        net[0].weight.add_(1.0)
    engine.sync_master()
    engine.perturb(Gaussian(), 1, 0.1)
    engine.restore()
    assert torch.equal(engine.master["0.weight"], net[0].weight.detach())
    engine.perturb(Gaussian(), 1, 0.1)
    with pytest.raises(RuntimeError, match="restore"):
        engine.sync_master()


def test_noise_cache_changes_no_result_and_is_bounded():
    cached, plain = small_net(), small_net()
    a = ModuleEngine(cached, noise_cache_bytes=10**8)
    b = ModuleEngine(plain)
    update = Update((3, 4, 5), (2.5e-3, -1e-3, 4e-4))
    for engine in (a, b):
        for seed in update.seeds:
            engine.perturb(Gaussian(), seed, 0.01)
            engine.restore()
    assert a.weights.noise_cache_used > 0 and a.weights.noise_cache_entries == 3 * len(a.params)
    a.apply(Gaussian(), update)
    b.apply(Gaussian(), update)
    assert a.checksum() == b.checksum() and a.master_checksum() == b.master_checksum()
    assert a.weights.noise_cache_used == 0 and a.weights.noise_cache_entries == 0  # emptied by apply
    tight = ModuleEngine(small_net(), noise_cache_bytes=5000)
    tight.perturb(Gaussian(), 1, 0.01)
    assert 0 < tight.weights.noise_cache_used <= 5000


def test_the_apply_reads_the_noise_cache_for_a_tensor_with_any_seed_kept_and_draws_the_rest():
    """MasterWeights.sampler: a tensor with some of the update's seeds kept reads them from the
    cache (the others drawn one by one), a tensor with none draws all in batches; the same bits."""
    from zoopt.engines.weights import MasterWeights

    noise, seeds = Gaussian(), [3, 4, 5]
    update = Update(seeds=tuple(seeds), coefficients=(0.1, -0.2, 0.3))
    sums = []
    for kept in ([], [4], seeds):
        w = MasterWeights.of_module(torch.nn.Linear(6, 5), noise_cache_bytes=2**20)
        for seed in kept:
            w.noise(noise, seed, "weight", keep=True)
        assert (w.sampler(noise, "weight", seeds) is None) == (not kept)
        assert w.sampler(noise, "bias", seeds) is None  # nothing of "bias" kept
        sums.append({n: w.delta(noise, update, n) for n in ("weight", "bias")})
    for other in sums[1:]:
        assert all(torch.equal(other[n], sums[0][n]) for n in ("weight", "bias"))
