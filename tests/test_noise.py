"""Noise streams: reproducible, keyed by (seed, name), unit variance, and the documented shapes.

Both streams (the counter stream, the default, and the numpy stream old seed logs replay with)
pass the same contract tests; ``tests/test_counter_stream.py`` checks the counter stream's bits
and distribution in detail."""

import pickle

import pytest
import torch

import zoopt.noise as noise_mod
from zoopt import Gaussian, LowRank, Rademacher
from zoopt.noise import BLOCK, noise_from_dict, noise_from_record

KINDS = [Gaussian(), Rademacher(), LowRank(rank=4),
         Gaussian(stream="numpy"), Rademacher(stream="numpy"), LowRank(rank=4, stream="numpy")]


def label(noise) -> str:
    return f"{noise.kind}-{noise.stream}"


@pytest.mark.parametrize("noise", KINDS, ids=label)
def test_same_seed_same_tensor_and_different_seed_differs(noise):
    a = noise.sample(7, "w", (300, 200))
    assert a.dtype == torch.float32 and a.shape == (300, 200)
    assert torch.equal(a, noise.sample(7, "w", (300, 200)))
    assert not torch.equal(a, noise.sample(8, "w", (300, 200)))


@pytest.mark.parametrize("noise", KINDS, ids=label)
def test_unit_variance_zero_mean(noise):
    # elements of one low-rank draw are dependent, so average over seeds rather than elements
    x = torch.stack([noise.sample(s, "w", (300, 300)).double() for s in range(20)])
    assert abs(x.mean().item()) < 5e-3
    assert abs(x.pow(2).mean().item() - 1.0) < 1.5e-2


@pytest.mark.parametrize("noise", [n for n in KINDS if n.kind != "low_rank"], ids=label)
def test_different_names_and_seeds_are_uncorrelated(noise):
    n = 1_000_000
    a = noise.sample(1, "layer.0.weight", (n,)).double()
    b = noise.sample(1, "layer.1.weight", (n,)).double()
    c = noise.sample(2, "layer.0.weight", (n,)).double()
    for other in (b, c):
        corr = torch.corrcoef(torch.stack([a, other]))[0, 1].item()
        assert abs(corr) < 0.01, corr


@pytest.mark.parametrize("stream", noise_mod.STREAMS)
def test_rademacher_values(stream):
    x = Rademacher(stream=stream).sample(0, "w", (10_000,))
    assert set(x.unique().tolist()) == {-1.0, 1.0}


@pytest.mark.parametrize("stream", noise_mod.STREAMS)
@pytest.mark.parametrize("rank", [1, 3, 8])
def test_low_rank_has_rank_at_most_r(rank, stream):
    x = LowRank(rank=rank, stream=stream).sample(5, "w", (64, 48))
    sv = torch.linalg.svdvals(x.double())
    # fp32 products leave ~1e-7 relative round-off in the trailing singular values
    assert (sv[rank - 1] / sv[0]).item() > 1e-3 and (sv[rank:] / sv[0]).max().item() < 1e-5
    # vectors fall back to full Gaussian noise of the same stream
    assert torch.equal(LowRank(rank=rank, stream=stream).sample(5, "b", (64,)), Gaussian(stream=stream).sample(5, "b", (64,)))


@pytest.mark.parametrize("stream", noise_mod.STREAMS)
def test_correlated_mode_repeats_the_stream_across_names(stream):
    n = Gaussian(correlated=True, stream=stream)
    assert torch.equal(n.sample(4, "a.weight", (50, 50)), n.sample(4, "b.weight", (50, 50)))
    g = Gaussian(stream=stream)
    assert not torch.equal(g.sample(4, "a.weight", (50, 50)), g.sample(4, "b.weight", (50, 50)))


def test_the_streams_differ_and_the_default_is_the_counter_stream():
    assert Gaussian().stream == noise_mod.DEFAULT_STREAM == "counter"
    assert not torch.equal(Gaussian().sample(3, "w", (100,)), Gaussian(stream="numpy").sample(3, "w", (100,)))


def test_numpy_stream_prefix_stability_across_shapes_is_blockwise():
    # a tensor's noise is its blocks' streams: the first BLOCK elements do not depend on size
    g = Gaussian(stream="numpy")
    a = g.sample(9, "w", (BLOCK + 10,))
    b = g.sample(9, "w", (2 * BLOCK,))
    assert torch.equal(a[:BLOCK], b[:BLOCK])


def test_numpy_stream_independent_of_thread_count(monkeypatch):
    big = (3 * BLOCK + 17,)
    pooled = Gaussian(stream="numpy").sample(11, "w", big)
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(noise_mod, "_POOL", ThreadPoolExecutor(1))
    assert torch.equal(pooled, Gaussian(stream="numpy").sample(11, "w", big))


def test_name_filters():
    n = Gaussian(include=("model.*",), exclude=("*norm*", "*embed*"))
    names = ["model.layers.0.q_proj.weight", "model.norm.weight", "model.embed_tokens.weight", "lm_head.weight"]
    assert n.select(names) == ["model.layers.0.q_proj.weight"]
    assert Gaussian(include="*.weight").include == ("*.weight",)


def test_picklable_frozen_and_round_trips_through_dict():
    for n in [Gaussian(exclude=("*norm*",)), Rademacher(correlated=True), LowRank(rank=2), LowRank(rank=2, stream="numpy")]:
        assert pickle.loads(pickle.dumps(n)) == n
        assert noise_from_dict(n.to_dict()) == n
        assert noise_from_record(n.to_dict()) == n
        assert n.to_dict()["stream"] == n.stream
        with pytest.raises(Exception):
            n.correlated = True


def test_a_record_without_a_stream_is_the_numpy_stream_a_config_the_default():
    assert noise_from_record({"kind": "low_rank", "rank": 2}) == LowRank(rank=2, stream="numpy")
    assert noise_from_dict({"kind": "low_rank", "rank": 2}) == LowRank(rank=2, stream="counter")


def test_bad_inputs():
    with pytest.raises(ValueError, match="rank"):
        LowRank(rank=0)
    with pytest.raises(ValueError, match="seed"):
        Gaussian().sample(-1, "w", (3,))
    with pytest.raises(LookupError, match="did you mean 'gaussian'"):
        noise_from_dict({"kind": "gausian"})
    with pytest.raises(LookupError, match="rnak"):
        noise_from_dict({"kind": "low_rank", "rnak": 3})
    with pytest.raises(ValueError, match="noise stream must be one of counter, numpy, got 'philox'"):
        Gaussian(stream="philox")


def test_streams_are_pinned():
    """Golden values: a seed log written today must rebuild the same weights tomorrow.

    If this fails, the noise stream changed and every saved seed log became invalid.
    """
    assert noise_mod.name_key("model.layers.0.mlp.up_proj.weight") == 0x345b65baf420f1e5
    numpy = Gaussian(stream="numpy"), Rademacher(stream="numpy")
    assert numpy[0].sample(0, "w", (4,)).tolist() == [0.1671513319015503, -0.1807432323694229, -0.6110982298851013, -1.6730715036392212]
    assert numpy[1].sample(0, "w", (6,)).tolist() == [1.0, 1.0, 1.0, -1.0, 1.0, 1.0]
    assert Gaussian().sample(0, "w", (4,)).tolist() == COUNTER_GAUSSIAN
    assert Rademacher().sample(0, "w", (6,)).tolist() == COUNTER_RADEMACHER


# the counter stream's first values of (seed 0, "w"): pinned like the numpy stream's above
COUNTER_GAUSSIAN = [0.15233677625656128, 1.035233497619629, 1.7929438352584839, 0.7182278037071228]
COUNTER_RADEMACHER = [-1.0, -1.0, 1.0, -1.0, 1.0, -1.0]
