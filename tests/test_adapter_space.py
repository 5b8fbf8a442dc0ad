"""Adapter space: ES over a LoRA adapter on a frozen (optionally int8) base, through the same
contracts as full space — names, start, exact restore, one-call population, export, seed log."""

import sys
from pathlib import Path

import pytest
import torch

from zoopt.adapters import AdapterSpace, QUANTIZATIONS, SPACES
from zoopt.config import ConfigError, load_config
from zoopt.engines.adapter_rows import AdapterRows
from zoopt.engines.base import Sampling
from zoopt.engines.hf import HFEngine
from zoopt.hparams import run_configs
from zoopt.models import load_model
from zoopt.noise import Gaussian, LowRank
from zoopt.types import Member, Population, Update
from zoopt.workflows.train import Trainer, export_from_seedlog

sys.path.insert(0, str(Path(__file__).parent))
from digits_objective import Digits  # noqa: E402

PROMPTS = ["12+30=", "7+8=", "hello"]
GREEDY = Sampling(temperature=0.0, max_new_tokens=6)


def engine(adapter=None, quantization="none", dtype="float32", **kw):
    return HFEngine.from_pretrained("tiny:0", dtype=dtype, quantization=quantization,
                                    adapter=adapter if adapter is not None else AdapterSpace(r=4), **kw)


def logits(e, ids=((5, 6, 7, 8, 9),)):
    with torch.no_grad():
        return e.module(input_ids=torch.tensor(ids)).logits


def tokens(results):
    return [[c.token_ids for c in per_prompt] for per_prompt in results]


def test_the_weights_are_the_adapter_under_peft_names_and_the_base_is_frozen():
    from peft import get_peft_model_state_dict

    e = engine(AdapterSpace(r=4, target_modules=("q_proj", "v_proj")))
    assert set(e.weights.shapes) == set(get_peft_model_state_dict(e.peft_model))
    cfg = e.module.config
    kv = cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads)
    assert e.num_parameters() == cfg.num_hidden_layers * 4 * ((cfg.hidden_size + cfg.hidden_size) + (cfg.hidden_size + kv))
    assert all(not p.requires_grad for n, p in e.module.named_parameters() if "lora_" not in n)
    assert e.space == "adapter" and e.space_record()["adapter"]["target_modules"] == ["q_proj", "v_proj"]
    assert SPACES == run_configs.SPACES and QUANTIZATIONS == run_configs.QUANTIZATIONS


def test_b_zero_start_is_the_base_and_hides_a_perturbation_of_a():
    """The documented choice (init_lora_weights=True): the run starts at the base, and at B = 0
    moving A alone changes nothing — the first step's signal comes from B."""
    base, _ = load_model("tiny:0", dtype="float32")
    e = engine()
    assert torch.equal(logits(e), logits(type("M", (), {"module": base})))
    e.perturb(Gaussian(include=("*lora_A*",)), seed=3, scale=0.5)
    assert torch.equal(logits(e), logits(type("M", (), {"module": base})))
    e.perturb(Gaussian(include=("*lora_B*",)), seed=3, scale=0.05)
    assert not torch.allclose(logits(e), logits(type("M", (), {"module": base})))
    e.restore()
    random_start = engine(AdapterSpace(r=4, init_lora_weights=False))
    assert not torch.allclose(logits(random_start), logits(type("M", (), {"module": base})))


def test_the_start_is_the_same_for_the_same_init_seed_only():
    a, b, c = engine(), engine(), engine(AdapterSpace(r=4, init_seed=1))
    assert a.checksum() == b.checksum() != c.checksum()


def test_restore_is_exact_over_1000_cycles_on_a_bf16_base():
    e = engine(dtype="bfloat16")
    before, master, base = e.checksum(), e.master_checksum(), e.base_checksum()
    noise = Gaussian()
    for seed in range(1000):
        e.perturb(noise, seed, 0.01 * (1 if seed % 2 else -1))
        if seed == 0:
            assert e.checksum() != before
        e.restore()
    assert (e.checksum(), e.master_checksum(), e.base_checksum()) == (before, master, base)


@pytest.mark.parametrize("batch_size", [64, 5], ids=["one-batch", "uneven-micro-batches"])
@pytest.mark.parametrize("noise", [Gaussian(), LowRank(rank=1), Gaussian(include=("*q_proj*",))],
                         ids=["gaussian", "low_rank", "q_proj-only"])
def test_the_population_in_one_call_equals_member_by_member(noise, batch_size):
    """Also in micro-batches of 5 of the 12 rows: some members absent, the others unevenly many."""
    e = engine(AdapterSpace(r=4, init_lora_weights=False), batch_size=batch_size)
    pop = Population(step=0, sigma=0.2, members=tuple(Member(seed=s, sign=(-1) ** s) for s in range(4)))
    assert e.population_path(noise) == "batched"
    before = e.checksum()
    batched = e.generate_population(noise, pop, PROMPTS, GREEDY)
    assert e.checksum() == before  # the batched call never writes the adapter
    sequential = []
    for i, m in enumerate(pop.members):
        e.perturb(noise, m.seed, pop.scale(i))
        sequential.append(e.generate(PROMPTS, GREEDY))
        e.restore()
    assert [tokens(m) for m in batched] == [tokens(m) for m in sequential]
    assert len({str(tokens(m)) for m in batched}) > 1  # the members do differ


def test_the_rows_compute_no_discarded_lora_product_and_leave_every_linear_as_it_was(monkeypatch):
    """Inside ``rows`` the LoRA linears run only the members' bmm (Linear.forward is never called
    on them, so the working adapter's product is not computed to be thrown away); on exit —
    also by an error — no replaced forward is left and the model computes what it did before."""
    e = engine(AdapterSpace(r=4, init_lora_weights=False))
    pop = Population(step=0, sigma=0.2, members=tuple(Member(seed=s, sign=1) for s in range(2)))
    rows = AdapterRows(e.module, e.weights, Gaussian(), pop)
    lora = {id(mod) for mod, _ in rows.linears}
    assert lora
    ref = logits(e)
    called = []
    plain_forward = torch.nn.Linear.forward
    monkeypatch.setattr(torch.nn.Linear, "forward", lambda self, x: called.append(id(self)) or plain_forward(self, x))
    with rows.rows([0, 1]):
        inside = logits(e, ids=((5, 6, 7, 8, 9), (5, 6, 7, 8, 9)))
    assert called and not lora & set(called)  # the base linears ran, no LoRA linear did
    assert not torch.equal(inside[0], inside[1])  # two members, two outputs
    with pytest.raises(RuntimeError, match="saw 1 rows, not 2"), rows.rows([0, 1]):
        logits(e)
    assert not any("forward" in vars(mod) for mod, _ in rows.linears)
    assert torch.equal(logits(e), ref)


@pytest.mark.parametrize("noise", [Gaussian(), LowRank(rank=1)], ids=["gaussian", "low_rank"])
def test_the_population_call_keeps_its_noise_for_the_update_and_changes_no_bit(noise):
    """With a noise-cache budget the one-call population keeps every member's ε for ``apply``
    (which then draws nothing); the update is bit for bit the one drawn afresh, and a budget
    too small for a tensor's rows keeps none of them."""
    pop = Population(step=0, sigma=0.2, members=tuple(Member(seed=s, sign=(-1) ** s) for s in range(4)))
    update = Update(seeds=tuple(m.seed for m in pop.members), coefficients=(0.3, -0.1, 0.2, 0.05))
    sums = []
    for budget in (2**30, 0, 1):
        e = engine(AdapterSpace(r=4, init_lora_weights=False), noise_cache_bytes=budget)
        e.generate_population(noise, pop, PROMPTS, GREEDY)
        kept = e.weights.noise_cache_entries
        assert kept == (len(pop) * len(e.weights.selected(noise)) if budget == 2**30 else 0)
        e.apply(noise, update)
        assert e.weights.noise_cache_entries == 0
        sums.append(e.checksum())
    assert sums[0] == sums[1] == sums[2]


def test_an_int8_base_is_untouched_by_a_step_and_the_adapter_moves():
    e = engine(quantization="int8")
    w = e.module.model.layers[0].self_attn.q_proj.base_layer.weight
    assert "Int8" in type(w).__name__
    base, adapter = e.base_checksum(), e.checksum()
    noise = Gaussian()
    pop = Population(step=0, sigma=0.1, members=(Member(seed=1, sign=1), Member(seed=2, sign=1)))
    e.generate_population(noise, pop, PROMPTS, GREEDY)
    e.perturb(noise, 5, 0.1)
    e.apply(noise, Update(seeds=(1, 2), coefficients=(0.01, -0.02)))
    assert e.base_checksum() == base and e.checksum() != adapter


def test_export_loads_in_peft_and_in_zoopt_and_merges(tmp_path):
    from peft import PeftModel

    e = engine(AdapterSpace(r=4, init_lora_weights=False))
    e.apply(Gaussian(), Update(seeds=(1, 2), coefficients=(0.05, -0.03)))
    want = tokens(e.generate(PROMPTS, GREEDY))
    out = e.export_pretrained(tmp_path / "adapter")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in out.iterdir()}
    base, tok = load_model("tiny:0", dtype="float32")
    peft = PeftModel.from_pretrained(base, str(out)).get_base_model()
    assert tokens(HFEngine(peft, tok).generate(PROMPTS, GREEDY)) == want
    assert tokens(HFEngine(*load_model(str(out))).generate(PROMPTS, GREEDY)) == want
    merged = e.export_merged(tmp_path / "merged")
    assert not (merged / "adapter_config.json").exists()
    assert tokens(HFEngine(*load_model(str(merged))).generate(PROMPTS, GREEDY)) == want
    with pytest.raises(ValueError, match="quantized"):
        engine(quantization="int8").export_merged(tmp_path / "no")


TINY = ["model=tiny", "dtype=float32", "prompts_per_step=8", "sampling.max_new_tokens=8", "eval.n_problems=0",
        "export=false", "population_size=8", "sigma=0.3", "lr=0.1", "space=adapter", "adapter.r=2",
        "adapter.init_lora_weights=false"]


def run(tmp_path, name, steps, extra=()):
    cfg = load_config(overrides=[*TINY, *extra, f"run_dir={tmp_path / name}"])
    trainer = Trainer(cfg, tmp_path / name, objective=Digits())
    try:
        for _ in range(steps):
            trainer.step()
        return trainer.engine.checksum()
    finally:
        trainer.close()


def test_resume_is_bit_for_bit_and_the_seed_log_exports_the_same_adapter(tmp_path):
    whole = run(tmp_path, "whole", 3)
    run(tmp_path, "cut", 2)
    assert run(tmp_path, "cut", 1) == whole
    _, exported = export_from_seedlog(tmp_path / "cut" / "seedlog.json", tmp_path / "out")
    assert exported == whole
    assert (tmp_path / "out" / "adapter_config.json").is_file()
    merged, _ = export_from_seedlog(tmp_path / "cut" / "seedlog.json", tmp_path / "merged", merge=True)
    want = tokens(HFEngine(*load_model(str(tmp_path / "out"))).generate(PROMPTS, GREEDY))
    assert tokens(HFEngine(*load_model(str(merged))).generate(PROMPTS, GREEDY)) == want
    for extra, key in ((["adapter.init_seed=3"], "'adapter'"), (["space=full"], "'space'"),
                       (["quantization=int8"], "'quantization'")):
        with pytest.raises(ConfigError, match=key) as err:
            run(tmp_path, "cut", 1, extra=extra)
        assert "\n" not in str(err.value)
    assert run(tmp_path, "cut", 0) == whole  # nothing was written by the refused resumes


def test_a_quantization_this_machine_cannot_run_is_one_line(monkeypatch):
    import torchao.quantization

    def refuse(model, config):
        raise NotImplementedError("no kernel for this layout\nsecond line")

    monkeypatch.setattr(torchao.quantization, "quantize_", refuse)
    with pytest.raises(ValueError, match=r"^quantization: int4 cannot run on cpu here \(no kernel for this layout\)$"):
        engine(quantization="int4")


def test_es_trainer_takes_a_peft_config(tmp_path):
    from datasets import Dataset
    from peft import LoraConfig

    from zoopt.trl import ESConfig, ESTrainer

    data = Dataset.from_dict({"prompt": ["1+1=", "2+3=", "4+4=", "5+1="]})
    args = ESConfig(output_dir=str(tmp_path / "es"), max_steps=1, per_device_train_batch_size=2,
                    population_size=2, max_completion_length=4, report_to="none")
    trainer = ESTrainer("tiny", lambda completions, **kw: [float(len(c)) for c in completions], args=args,
                        train_dataset=data, peft_config=LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    assert trainer.engine.space == "adapter" and trainer.engine.num_parameters() == 2 * 2 * (64 + 64)
    trainer.train()
    assert (tmp_path / "es" / "model" / "adapter_config.json").is_file()


@pytest.mark.parametrize("override, key", [
    ("adapter.r=0", "adapter.r"), ("quantization=int8", "quantization"),
    ("adapter.init_lora_weights=maybe", "adapter.init_lora_weights"), ("space=lora", "space"),
    ("engine=vllm quantization=int8", "quantization"), ("engine=vllm", "space")])
def test_bad_adapter_config_is_one_line_naming_the_key(override, key):
    """``engine=vllm`` alone is refused for ``zoopt grpo`` (GRPO in adapter space trains the adapter
    in this process: hf only); vLLM takes adapter space for ES on a base it loads itself, so
    torchao's int8/int4 are the hf engine's."""
    *before, override = override.split()
    base = "grpo" if override == "engine=vllm" else "train"
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as err:
        extra = ["space=full"] if override == "quantization=int8" and not before else []
        load_config(overrides=[*(TINY if base == "train" else ["model=tiny", "space=adapter"]), *extra, *before,
                               override], base=base)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("engine", ["hf", "vllm", "ray"])
def test_adapter_space_trains_on_every_llm_engine(engine):
    assert load_config(overrides=[*TINY, f"engine={engine}"])["space"] == "adapter"


def test_a_missing_target_module_names_the_key():
    with pytest.raises(ValueError, match=r"adapter\.target_modules: the model has no linear module 'qkv'") as err:
        engine(AdapterSpace(target_modules=("q_proj", "qkv")))
    assert "\n" not in str(err.value)


def test_a_trl_peft_config_becomes_the_adapter_space_and_what_it_cannot_do_is_named():
    from peft import LoraConfig

    space = AdapterSpace.from_lora_config(LoraConfig(r=4, lora_alpha=8, target_modules=["v_proj", "q_proj"]))
    assert (space.r, space.lora_alpha, space.target_modules, space.scaling) == (4, 8.0, ("q_proj", "v_proj"), 2.0)
    with pytest.raises(ValueError, match="lora_dropout"):
        AdapterSpace.from_lora_config(LoraConfig(r=4, lora_dropout=0.1))


def test_grpo_trains_the_same_adapter_and_leaves_an_int8_base_alone(tmp_path):
    from zoopt.grpo import GRPO

    e = engine(quantization="int8")
    base, adapter = e.base_checksum(), e.checksum()
    grpo = GRPO(e, Digits(), Sampling(temperature=1.0, max_new_tokens=6, n=4), prompts_per_step=4, lr=1e-2)
    assert {id(p) for p in grpo.params} == {id(p) for p in e.weights.params.values()}
    grpo.step()
    assert e.base_checksum() == base and e.checksum() != adapter
    assert e.checksum() == e.master_checksum()  # sync_master took the trained adapter as the master


def test_compare_refuses_a_per_method_space():
    from zoopt.workflows.compare import load_compare_config

    with pytest.raises(ConfigError, match=r"'es\.space': zoopt compare runs full space only"):
        load_compare_config(overrides=["es.space=adapter"])


def test_ray_replicas_hold_the_same_adapter_as_one_engine():
    from ray_helpers import local_cluster, tiny_ray

    space = AdapterSpace(r=4, init_lora_weights=False)
    noise = Gaussian()
    pop = Population(step=0, sigma=0.2, members=tuple(Member(seed=s, sign=1) for s in range(4)))
    update = Update(seeds=(0, 1, 2, 3), coefficients=(0.05, -0.02, 0.01, 0.03))
    local = HFEngine.from_pretrained("tiny", dtype="float32", adapter=space)
    want_pop = [tokens(m) for m in local.generate_population(noise, pop, PROMPTS, GREEDY)]
    local.apply(noise, update)
    with local_cluster():
        ray_engine = tiny_ray(2, adapter=space)
        try:
            assert ray_engine.space == "adapter" and ray_engine.space_record() == local.space_record()
            assert [tokens(m) for m in ray_engine.generate_population(noise, pop, PROMPTS, GREEDY)] == want_pop
            ray_engine.apply(noise, update)
            assert ray_engine.checksum() == local.checksum()  # agreed by both replicas, else it raises
            assert tokens(ray_engine.generate(PROMPTS, GREEDY)) == tokens(local.generate(PROMPTS, GREEDY))
        finally:
            ray_engine.close()


def test_an_adapter_space_run_directory_is_a_model_reference(tmp_path):
    """`zoopt eval --model RUN` / analyze read an adapter-space run's exported PEFT model/."""
    from zoopt.runs.references import resolve_model

    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "config.yaml").write_text("space: adapter\n")
    with pytest.raises(FileNotFoundError, match="has no exported model/"):
        resolve_model(run)
    (run / "model" / "adapter_config.json").write_text("{}")
    assert resolve_model(run) == str(run / "model")
