"""The vLLM batched population's adapters, without vLLM: factors, PEFT files, refusals.

``zoopt.engines.vllm.lora`` turns a ``LowRank`` population into PEFT LoRA adapters.  These
checks pin down, against closed forms, what vLLM is handed: each adapter's product equals the
member's dense perturbation, its factors are bit for bit the HF batched path's, its scaling
``lora_alpha/r`` is exactly 1, and what LoRA cannot move is refused by name.  The vLLM side
(token equality, adapters dropped per step) is ``tests/test_vllm_multilora.py``.
"""

from __future__ import annotations

import ast
import fnmatch
import json

import pytest
import torch
from safetensors.torch import load_file

from zoopt.engines.batched import BatchedLowRank, RowLayout, member_factors
from zoopt.engines.hf import HFEngine
from zoopt.models import load_model
from zoopt.engines.vllm.lora import (PEFT_PREFIX, adapter_tensors, check_lora_slots, exclude_patterns,
                                     lora_selection, round_lora_rank, write_adapter)
from zoopt.noise import LowRank
from zoopt.types import Member, Population

POP = Population(step=0, sigma=0.3, members=(Member(21), Member(21, -1), Member(22), Member(22, -1)))
LINEARS = ("*_proj.weight",)
SHAPES = {"model.embed_tokens.weight": (128, 64), "model.layers.0.self_attn.q_proj.weight": (64, 64),
          "model.layers.0.mlp.down_proj.weight": (64, 128), "model.layers.0.input_layernorm.weight": (64,),
          "model.layers.1.self_attn.q_proj.weight": (64, 64), "model.layers.1.input_layernorm.weight": (64,),
          "model.layers.1.self_attn.q_proj.bias": (64,), "model.norm.weight": (64,)}
COVERED = [n for n in SHAPES if fnmatch.fnmatchcase(n, "*_proj.weight")]


@pytest.mark.parametrize("rank", [1, 2])
def test_adapter_product_is_the_members_dense_perturbation(rank):
    """lora_B·lora_A (vLLM's delta with scaling 1) = sᵢσ·LowRank.sample(seedᵢ), every member."""
    noise = LowRank(rank=rank, include=LINEARS)
    names = lora_selection(noise, SHAPES, COVERED)
    adapters = adapter_tensors(noise, POP, names, SHAPES)
    for i, member in enumerate(POP.members):
        for name in names:
            module = PEFT_PREFIX + name.removesuffix(".weight")
            lora_a, lora_b = adapters[i][f"{module}.lora_A.weight"], adapters[i][f"{module}.lora_B.weight"]
            assert lora_a.shape == (rank, SHAPES[name][1]) and lora_b.shape == (SHAPES[name][0], rank)
            dense = POP.scale(i) * noise.sample(member.seed, name, SHAPES[name]).double()
            err = (lora_b.double() @ lora_a.double() - dense).abs().max().item()
            assert err < 1e-6 * dense.abs().max().item(), f"member {i} {name}: {err:.2e}"
    assert torch.equal(adapters[0][f"{module}.lora_A.weight"], adapters[1][f"{module}.lora_A.weight"])  # a pair
    assert torch.equal(adapters[0][f"{module}.lora_B.weight"], -adapters[1][f"{module}.lora_B.weight"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_factors_are_the_hf_batched_paths_bit_for_bit(dtype):
    """The HF batched path's tables are ``member_factors`` in the model's accumulation dtype, and
    the adapters carry exactly those tables (lora_B = a[i], lora_A = b[i]ᵀ)."""
    model, tokenizer = load_model("tiny", dtype="float32")
    engine = HFEngine(model.to(dtype), tokenizer)
    noise = LowRank(rank=2, include=("*.q_proj.weight", "*.down_proj.weight"))
    batch = BatchedLowRank(RowLayout(engine.module, engine.weights, noise), engine.weights, noise, POP)
    assert batch.a, "no matrix selected: the check would prove nothing"
    for name in batch.a:
        a, b = member_factors(noise, POP, name, engine.weights.shapes[name], dtype)
        assert torch.equal(a, batch.a[name]) and torch.equal(b, batch.b[name]), name
    if dtype == torch.float32:
        adapters = adapter_tensors(noise, POP, list(batch.a), engine.weights.shapes)
        for i in range(len(POP)):
            for name in batch.a:
                module = PEFT_PREFIX + name.removesuffix(".weight")
                assert torch.equal(adapters[i][f"{module}.lora_B.weight"], batch.a[name][i])
                assert torch.equal(adapters[i][f"{module}.lora_A.weight"], batch.b[name][i].T)


def test_peft_files_have_scaling_one(tmp_path):
    noise = LowRank(rank=2, include=LINEARS)
    tensors = adapter_tensors(noise, POP, COVERED, SHAPES)[3]
    path = write_adapter(tmp_path / "m3", tensors, rank=2)
    config = json.loads((path / "adapter_config.json").read_text())
    assert config["lora_alpha"] / config["r"] == 1.0 and not config["use_rslora"]
    assert config["target_modules"] == ["down_proj", "q_proj"]
    loaded = load_file(str(path / "adapter_model.safetensors"))
    assert set(loaded) == set(tensors) and all(torch.equal(loaded[k], tensors[k]) for k in tensors)
    assert all(k.startswith("base_model.model.model.layers.") for k in loaded)


def test_what_lora_cannot_move_is_refused_by_name_with_a_working_exclude():
    noise = LowRank(exclude=("model.norm.weight",))
    with pytest.raises(ValueError) as info:
        lora_selection(noise, SHAPES, COVERED)
    message = str(info.value)
    assert "\n" not in message and "'model.embed_tokens.weight'" in message and "(4 parameters)" in message
    exclude = ast.literal_eval(message.split("noise.exclude=")[1].split(" or ")[0])  # the list it proposes
    assert exclude == ["model.norm.weight", "model.embed_tokens.weight", "model.layers.*.input_layernorm.weight",
                       "model.layers.*.self_attn.q_proj.bias"]
    assert lora_selection(LowRank(exclude=tuple(exclude)), SHAPES, COVERED) == COVERED
    with pytest.raises(ValueError, match="selects no parameter"):
        lora_selection(LowRank(include=("nothing",)), SHAPES, COVERED)


def test_exclude_patterns_never_skip_a_name_to_keep():
    keep = ["model.layers.0.x.weight"]
    assert exclude_patterns(["model.layers.1.x.weight", "model.layers.2.x.weight"], keep) == \
        ["model.layers.1.x.weight", "model.layers.2.x.weight"]
    assert exclude_patterns(["model.layers.1.n.weight", "model.layers.2.n.weight"], keep) == ["model.layers.*.n.weight"]


def test_lora_ranks_round_up_to_vllms_and_slots_are_checked():
    allowed = (1, 8, 16, 32, 64, 128, 256, 320, 512)
    assert [round_lora_rank(r, allowed) for r in (1, 2, 8, 9, 300)] == [1, 8, 8, 16, 320]
    with pytest.raises(ValueError, match="exceeds vLLM's largest LoRA rank 512"):
        round_lora_rank(513, allowed)
    with pytest.raises(ValueError, match="positive integer"):
        round_lora_rank(0, allowed)
    with pytest.raises(ValueError, match="set engine_args.max_loras ≥ population_size"):
        check_lora_slots("batched", None)
    with pytest.raises(ValueError, match="max_loras must be an integer ≥ 1"):
        check_lora_slots("auto", 0)
    check_lora_slots("auto", None)
    check_lora_slots("batched", 4)
