"""GRPO on the tiny model: real learning, exact micro-batching, KL at the reference, ES consistency."""

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from zoopt.config import ConfigError, load_config
from zoopt.engines.base import Sampling
from zoopt.grpo import GRPO, LOSS_TYPES
from zoopt.noise import Gaussian
from zoopt.workflows.grpo import train_grpo
from zoopt.workflows.builders import build_engine

sys.path.insert(0, str(Path(__file__).parent))
from digits_objective import Digits  # noqa: E402

TINY = ["model=tiny", "prompts_per_step=8", "sampling.max_new_tokens=8", "sampling.n=8", "eval.n_problems=0",
        "export=false", "micro_batch_size=64"]


pytestmark = pytest.mark.usefixtures("one_thread")


def make(*overrides, engine=None):
    cfg = load_config(overrides=[*TINY, *overrides], base="grpo")
    obj = Digits()
    engine = engine or build_engine(cfg, obj)
    return GRPO.from_config(cfg, engine, obj), cfg


def center_reward(g):
    prompts = list(g.train_data["prompt"])
    out = g.engine.generate(prompts, Sampling(temperature=0.0, max_new_tokens=8))
    return float(np.mean(g.objective(prompts, [c[0].text for c in out])))


def grads(g):
    return [p.grad.detach().clone() for p in g.params]


def test_grpo_raises_the_digits_reward_on_the_tiny_model():
    g, _ = make("lr=1e-2")
    before = center_reward(g)
    t0 = time.perf_counter()
    history = [g.step() for _ in range(12)]
    after = center_reward(g)
    print(f"GRPO digit share {before:.3f} -> {after:.3f} in {time.perf_counter() - t0:.1f} s")
    assert after > before + 0.3, (before, after)
    assert history[-1]["reward_mean"] > history[0]["reward_mean"] + 0.3
    assert all(h["completions"] == 64 for h in history)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_micro_batches_give_the_full_batch_gradient(loss_type):
    g, _ = make(f"loss_type={loss_type}", "beta=0.1", "sampling.n=5")
    batch = g.rollout()
    batch.ref_logps = g._fixed_logps(g.ref, batch)
    assert len(set(batch.completion_mask.sum(1).tolist())) > 1  # uneven lengths
    g.micro_batch_size = batch.size
    full = g.backward(batch)
    full_grads = grads(g)
    g.micro_batch_size = 3  # 40 sequences: 13 micro-batches of 3 and one of 1
    parts = g.backward(batch)
    assert parts["loss"] == pytest.approx(full["loss"], abs=1e-6)
    assert parts["tokens"] == full["tokens"] == int(batch.completion_mask.sum())
    worst = max(float((a - b).abs().max()) for a, b in zip(full_grads, grads(g)))
    assert worst < 1e-6, worst
    assert max(float(a.abs().max()) for a in full_grads) > 1e-3  # a real gradient


def test_gradient_checkpointing_gives_the_same_gradient():
    g, _ = make("sampling.n=4")
    batch = g.rollout()
    g.backward(batch)
    plain = grads(g)
    h, _ = make("sampling.n=4", "gradient_checkpointing=true")
    assert getattr(h.policy, "is_activation_checkpointing", None) or h.policy.is_gradient_checkpointing
    h.backward(batch)
    assert max(float((a - b).abs().max()) for a, b in zip(plain, grads(h))) < 1e-6


@pytest.mark.parametrize("micro", [8, 20, 64])
def test_shared_prompts_give_the_same_log_probs_and_gradient(micro):
    g, _ = make("sampling.n=4", "loss_type=grpo")
    batch = g.rollout()
    assert len(set(batch.completion_mask.sum(1).tolist())) > 1  # uneven completions: right padding inside groups
    plain_logps = g._fixed_logps(g.policy, batch)
    g.backward(batch)
    plain = grads(g)
    h, _ = make("sampling.n=4", "loss_type=grpo", "share_prompt=true", f"micro_batch_size={micro}")
    assert [s.stop - s.start for s in h._slices(batch)][0] == min(batch.size, max(1, micro // 4) * 4)  # whole groups
    shared_logps = h._fixed_logps(h.policy, batch)
    mask = batch.completion_mask.bool()
    assert float((plain_logps - shared_logps).abs()[mask].max()) < 1e-5
    h.backward(batch)
    num = sum(float((a - b).pow(2).sum()) for a, b in zip(plain, grads(h))) ** 0.5
    den = sum(float(a.pow(2).sum()) for a in plain) ** 0.5
    assert den > 1e-3 and num / den < 1e-5, (num, den)  # measured ~5e-7 relative


def test_shared_prompts_refuse_a_batch_that_is_not_whole_groups():
    h, _ = make("sampling.n=4", "share_prompt=true")
    batch = h.rollout()
    batch.input_ids[1, batch.prompt_width - 1] += 1  # the second sequence's prompt is another one
    with pytest.raises(RuntimeError, match="whole groups of one prompt"):
        h._fixed_logps(h.policy, batch)


def test_shared_prompts_need_the_cache_that_checkpointing_turns_off():
    with pytest.raises(ConfigError, match="share_prompt needs"):
        make("share_prompt=true", "gradient_checkpointing=true")


def test_bf16_autocast_keeps_fp32_weights_and_approximates_the_gradient():
    g, _ = make("sampling.n=4")
    batch = g.rollout()
    g.backward(batch)
    fp32 = torch.cat([x.flatten() for x in grads(g)])
    h, _ = make("sampling.n=4", "autocast_bf16=true")
    h.backward(batch)
    bf16 = torch.cat([x.flatten() for x in grads(h)])
    assert all(p.dtype == torch.float32 for p in h.params)
    assert not torch.equal(fp32, bf16)  # the forward really ran in bf16
    cos = float(torch.nn.functional.cosine_similarity(fp32, bf16, dim=0))
    assert cos > 0.999, cos  # measured 0.99991


def test_kl_is_zero_at_the_reference_then_grows():
    g, _ = make("beta=0.5", "lr=1e-2")
    first = g.step()
    assert first["kl"] == 0.0  # the policy equals the frozen reference before the first update
    later = [g.step()["kl"] for _ in range(3)]
    assert later[-1] > 1e-4, later
    assert make("lr=1e-2")[0].step()["kl"] is None  # β = 0: no reference model at all


def test_more_iterations_clip_and_the_ratio_moves():
    g, _ = make("lr=5e-2", "num_iterations=3", "epsilon=0.01")
    record = g.step()
    assert record["optimizer_steps"] == 3
    assert record["clip_ratio_region"] > 0.0


def test_after_a_step_es_sees_the_grpo_weights():
    g, _ = make("lr=1e-2")
    engine = g.engine
    base = engine.master_checksum()
    g.step()
    assert engine.master_checksum() != base  # sync_master took the new weights
    for name, p in engine.params.items():
        assert torch.equal(engine.master[name], p.detach())
    trained = engine.checksum()
    engine.perturb(Gaussian(), seed=7, scale=0.1)
    assert engine.checksum() != trained
    engine.restore()
    assert engine.checksum() == trained  # restore returns to the GRPO weights, not the base


@pytest.mark.parametrize("override,needle", [("sampling.temperature=0", "sampling.temperature"),
                                             ("sampling.n=1", "sampling.n"),
                                             ("loss_type=ppo", "loss_type"),
                                             ("scale_rewards=std", "scale_rewards"),
                                             ("dtype=bfloat16", "config key 'dtype' must be one of float32, fp32"),
                                             ("micro_batch_size=0", "micro_batch_size"),
                                             ("micro_batch_size=2.5", "'micro_batch_size' must be an integer"),
                                             ("lr=fast", "'lr' must be a number")])
def test_bad_config_is_a_one_line_error(override, needle):
    with pytest.raises(ValueError) as info:
        make(override)
    assert needle in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="unknown config key 'los_type'; did you mean 'loss_type'"):
        load_config(overrides=["los_type=grpo"], base="grpo")


def test_the_dtype_rule_holds_in_python_too():
    """docs/configuration.md: GRPO's dtype is float32 (or fp32); an engine built in bf16 and handed to
    GRPO directly, where no config is checked, is refused by the trainer with the same rule."""
    from zoopt.hparams import GRPOConfig

    row = next(line for line in (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
               .split("## `grpo`")[1].splitlines() if line.startswith("| `dtype` |"))
    assert row.startswith("| `dtype` | one of float32, fp32 | `float32` | GRPO trains fp32 weights")
    assert GRPOConfig(dtype="fp32").dtype == "fp32"
    engine = build_engine(load_config(overrides=["model=tiny", "dtype=bfloat16", "noise_cache_gb=0"]), Digits())
    with pytest.raises(ValueError, match="GRPO trains fp32 weights: load the model with dtype=float32"):
        GRPO(engine, Digits(), Sampling(temperature=1.0, max_new_tokens=2, n=2))


def test_train_grpo_writes_a_run_directory(tmp_path):
    cfg = load_config(overrides=[*TINY, "lr=1e-2", "steps=3", "eval.n_problems=4", "export=true",
                                 f"run_dir={tmp_path / 'run'}"], base="grpo")
    result = train_grpo(cfg, show_progress=False, objective=Digits())
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [0, 1, 2]
    for key in ("reward_mean", "reward_std", "loss", "kl", "clip_ratio_region", "grad_norm", "tokens",
                "completions", "time_step_s", "entropy"):
        assert key in lines[0], key
    assert (tmp_path / "run" / "model" / "model.safetensors").exists()
    assert result.eval_before["checksum"] != result.eval_after["checksum"]
    assert (tmp_path / "run" / "checksum.txt").read_text().strip() == result.checksum


def test_the_run_loop_evaluates_every_n_steps_on_its_own_metrics_line(tmp_path):
    cfg = load_config(overrides=[*TINY, "lr=1e-2", "steps=3", "eval.n_problems=4", "eval.every=1",
                                 f"run_dir={tmp_path / 'run'}"], base="grpo")
    result = train_grpo(cfg, show_progress=False, objective=Digits())
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], "loss" in r, "eval_accuracy" in r) for r in lines] == [
        (0, True, False), (0, False, True), (1, True, False), (1, False, True), (2, True, False)]
    assert [("eval_accuracy" in r) for r in result.history] == [True, True, False]
    assert (tmp_path / "run" / "training.png").exists()


def test_zoopt_grpo_command(tmp_path):
    from zoopt.cli import build_parser

    parser = build_parser()
    digits = f"{Path(__file__).parent / 'digits_objective.py'}:Digits"
    args = parser.parse_args(["grpo", "--quiet", "--model", "tiny", "--objective", digits,
                              *[x for s in [*TINY, "steps=2", f"run_dir={tmp_path / 'r'}"] for x in ("--set", s)]])
    assert args.func(args) == 0
    assert len((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()) == 2
    bad = parser.parse_args(["grpo", "--quiet", "--set", "epsilon_hi=0.3"])
    with pytest.raises(ConfigError, match="unknown config key 'epsilon_hi'; did you mean 'epsilon_high'"):
        bad.func(bad)
