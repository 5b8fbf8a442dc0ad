"""Drawing noise on the CPU: the counter stream against the numpy stream, side by side.

Run with `make bench` (or `pytest tests/benchmarks/test_bench_noise.py --benchmark-enable`);
the default test run executes each once, untimed.  Each group is one pair — the same draw from
both streams, with the machine's torch threads (both streams fill a tensor from a pool of that
many threads), each warmed up by one untimed draw (the counter stream's first large CPU draw in
a process compiles its fused kernel) — so the ratio of the two means is the counter stream's
cost relative to the numpy stream:

- ``noise-gaussian`` / ``noise-rademacher``: one dense tensor of 2²² elements (16 MiB fp32),
  what the sequential full-rank path draws per member and tensor;
- ``noise-low-rank-factors``: the rank-1 factor tables of N = 32 members of a SmolLM2-135M
  MLP matrix (1536 × 576), what the batched population call and its update draw per matrix.
"""

from __future__ import annotations

import pytest
import torch

from zoopt.noise import STREAMS, Gaussian, LowRank, Rademacher

SIZE = 1 << 22
SEEDS = list(range(1000, 1032))


@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize("kind", [Gaussian, Rademacher], ids=["gaussian", "rademacher"])
def test_dense_draw(benchmark, kind, stream):
    benchmark.group = f"noise-{kind.kind}"
    noise = kind(stream=stream)
    noise.sample(7, "model.layers.0.mlp.up_proj.weight", (SIZE,))  # warm-up
    out = benchmark(noise.sample, 7, "model.layers.0.mlp.up_proj.weight", (SIZE,))
    assert out.shape == (SIZE,) and out.dtype == torch.float32


@pytest.mark.parametrize("stream", STREAMS)
def test_low_rank_factor_tables(benchmark, stream):
    benchmark.group = "noise-low-rank-factors"
    noise = LowRank(rank=1, stream=stream)
    noise.factor_table(SEEDS, "model.layers.0.mlp.up_proj.weight", (1536, 576))  # warm-up
    a, b = benchmark(noise.factor_table, SEEDS, "model.layers.0.mlp.up_proj.weight", (1536, 576))
    assert a.shape == (32, 1536, 1) and b.shape == (32, 576, 1)
