import math

import pytest
import torch

from zoopt.metrics import drift_by_group, param_group, relative_drift


def test_relative_drift_exact():
    base = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([[0.0, 4.0]]),
            "step": torch.tensor(5)}
    trained = {"a": torch.tensor([3.0, 1.0]), "b": torch.tensor([[2.0, 4.0]]),
               "step": torch.tensor(9)}           # int buffers are ignored
    assert relative_drift(base, trained) == pytest.approx(math.sqrt(5) / 5, abs=1e-15)
    assert relative_drift(base, base) == 0.0


def test_relative_drift_accumulates_in_float64():
    base = {"w": torch.ones(1000, dtype=torch.bfloat16)}
    trained = {"w": torch.full((1000,), 1.0078125, dtype=torch.bfloat16)}  # next bf16 after 1
    assert relative_drift(base, trained) == pytest.approx(0.0078125, rel=1e-12)


def test_mismatch_errors_name_the_key():
    with pytest.raises(ValueError, match="'b'"):
        relative_drift({"a": torch.ones(2), "b": torch.ones(2)}, {"a": torch.ones(2)})
    with pytest.raises(ValueError, match="'c'"):
        relative_drift({"a": torch.ones(2)}, {"a": torch.ones(2), "c": torch.ones(2)})
    with pytest.raises(ValueError, match="'a'.*\\(2,\\).*\\(3,\\)"):
        relative_drift({"a": torch.ones(2)}, {"a": torch.ones(3)})


@pytest.mark.parametrize("name,group", [
    ("model.embed_tokens.weight", "embeddings"),
    ("lm_head.weight", "embeddings"),
    ("model.layers.3.self_attn.q_proj.weight", "attention"),
    ("model.layers.3.self_attn.k_proj.bias", "attention"),
    ("model.layers.3.self_attn.o_proj.weight", "attention"),
    ("model.layers.3.mlp.gate_proj.weight", "mlp"),
    ("model.layers.3.mlp.down_proj.weight", "mlp"),
    ("model.layers.3.input_layernorm.weight", "norms"),
    ("model.layers.3.post_attention_layernorm.weight", "norms"),
    ("model.layers.3.self_attn.q_norm.weight", "norms"),
    ("model.norm.weight", "norms"),
    ("transformer.h.0.ln_1.weight", "norms"),
    ("score.weight", "other"),
])
def test_param_group(name, group):
    assert param_group(name) == group


def test_drift_by_group_exact():
    base = {"model.embed_tokens.weight": torch.tensor([1.0, 0.0]),
            "model.layers.0.self_attn.q_proj.weight": torch.tensor([0.0, 2.0]),
            "model.layers.0.mlp.up_proj.weight": torch.tensor([2.0, 0.0]),
            "model.norm.weight": torch.tensor([1.0, 1.0])}
    trained = {"model.embed_tokens.weight": torch.tensor([1.0, 0.0]),
               "model.layers.0.self_attn.q_proj.weight": torch.tensor([0.0, 3.0]),
               "model.layers.0.mlp.up_proj.weight": torch.tensor([2.0, 2.0]),
               "model.norm.weight": torch.tensor([1.0, 1.0])}
    got = drift_by_group(base, trained)
    assert got == {"embeddings": 0.0, "attention": 0.5, "mlp": 1.0, "norms": 0.0,
                   "all": pytest.approx(math.sqrt(5) / math.sqrt(11), abs=1e-15)}
    assert got["all"] == pytest.approx(relative_drift(base, trained), abs=1e-15)
