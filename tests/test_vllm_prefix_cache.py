"""Prefix caching with perturbed weights: KV blocks cached under one member's weights must never
serve another member.  With ``enable_prefix_caching=True`` the engine resets vLLM's prefix cache
after every weight change (perturb, restore, apply, load_weights).

Run inside ``.venv-vllm`` with ``pytest -m vllm``.  The prompts are long (the tiny tokenizer
reads characters: ~300 tokens), so their first blocks are cached; the control test switches the
reset off and shows that the stale blocks then change the output.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

from zoopt.engines.base import Sampling  # noqa: E402
from zoopt.engines.hf import HFEngine  # noqa: E402
from zoopt.noise import Gaussian  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_vllm_engine import tiny_hd32, tokens  # noqa: E402

GREEDY = Sampling(temperature=0.0, max_new_tokens=12)
LONG = ["the quick brown fox jumps over the lazy dog " * 7 + f"and then {i} + {i} =" for i in range(4)]


@pytest.fixture(scope="module")
def cached(request, tmp_path_factory):
    from zoopt.engines.vllm import VLLMEngine

    path = tiny_hd32(tmp_path_factory.mktemp("tiny_hd32_prefix"))
    v = VLLMEngine.from_pretrained(str(path), dtype="float32", max_model_len=512, batch_size=32,
                                   enable_prefix_caching=True)
    request.addfinalizer(v.close)
    return v, HFEngine.from_pretrained(str(path), dtype="float32")


def perturbed_outputs(v, hf, seed):
    """(vLLM, HF) greedy tokens of the member ``seed``, after vLLM cached the base's prompt blocks."""
    v.generate(LONG, GREEDY)  # fills the prefix cache under the base weights
    v.perturb(Gaussian(), seed, 0.3)
    hf.perturb(Gaussian(), seed, 0.3)
    try:
        return tokens(v.generate(LONG, GREEDY)), tokens(hf.generate(LONG, GREEDY))
    finally:
        v.restore()
        hf.restore()


def test_members_never_reuse_another_members_cached_prompt(cached):
    v, hf = cached
    base = tokens(hf.generate(LONG, GREEDY))
    assert tokens(v.generate(LONG, GREEDY)) == base
    for seed in (1, 2):
        out_v, out_hf = perturbed_outputs(v, hf, seed)
        assert out_v == out_hf != base
    assert tokens(v.generate(LONG, GREEDY)) == base  # restore resets too: no perturbed block survives


def test_control_without_the_reset_stale_blocks_change_the_output(cached, monkeypatch):
    v, hf = cached
    monkeypatch.setattr(v, "prefix_caching", False)  # the engine no longer knows to reset
    out_v, out_hf = perturbed_outputs(v, hf, 1)
    assert out_v != out_hf, "stale prefix blocks went unnoticed: the test above would prove nothing"
    v.llm.reset_prefix_cache()
