"""``zoopt.trl``: a TRL ``GRPOTrainer`` script trained by ES with only the import changed.

TRL is installed by ``make setup`` (``--no-deps``): its classes give the signatures, and
``trl.rewards.think_format_reward`` runs unchanged; no TRL training runs here.
"""

import dataclasses
import inspect
import json

import datasets
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from trl import GRPOConfig, GRPOTrainer
from trl.rewards import think_format_reward

from zoopt import Sampling
from zoopt.cli import main
from zoopt.hparams import ES_KEYS, TRL_NAMES
from zoopt.hparams.trl_names import TRL_ONLY
from zoopt.models import tiny_model
from zoopt.runs.rundir import RunDir
from zoopt.rewards.scoring import Scorer
from zoopt.trl import ESConfig, ESTrainer

CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")
SEEN: list[dict] = []


def digit_share(prompts, completions, answer, **kwargs):
    """A user's reward in TRL's form: the share of digits, plus 1 when the answer column's value appears."""
    SEEN.append({"prompt": prompts[0], "completion": completions[0], "answer": answer[0], "keys": sorted(kwargs)})
    texts = [c[0]["content"] for c in completions]  # conversational: [{"role": "assistant", "content": ...}]
    return [(sum(ch.isdigit() for ch in t) / len(t) if t else 0.0) + (a in t) for t, a in zip(texts, answer)]


def conversations(start: int, n: int) -> datasets.Dataset:
    rows = [(a, a % 7) for a in range(start, start + n)]
    return datasets.Dataset.from_dict({"prompt": [[{"role": "user", "content": f"{a} + {b} ="}] for a, b in rows],
                                       "answer": [str(a + b) for a, b in rows]})


def chat_tiny():
    model, tokenizer = tiny_model()
    tokenizer.chat_template = CHAT_TEMPLATE  # so that prompts reach the model, and the rewards, as conversations
    return model, tokenizer


def greedy_digit_share(trainer) -> float:
    """The user reward's mean over the training prompts, greedy, at the current weights."""
    prompts = list(trainer.objective.dataset("train")["prompt"])
    texts = [c[0].text for c in trainer.engine.generate(prompts, Sampling(temperature=0.0, max_new_tokens=8))]
    return float(np.mean(digit_share(prompts, [[{"role": "assistant", "content": t}] for t in texts],
                                     trainer.objective.dataset("train")["answer"])))


SCRIPT = """
args = Config(output_dir=OUTPUT_DIR, learning_rate=0.05, per_device_train_batch_size=2, num_generations=2,
              max_completion_length=4, temperature=1.0, top_p=1.0, max_steps=1, logging_steps=1, save_steps=500,
              seed=0, report_to="none", bf16=False, reward_weights=[0.5, 1.0], disable_tqdm=True)
trainer = Trainer(model=model, reward_funcs=[think_format_reward, digit_share], args=args,
                  train_dataset=dataset, eval_dataset=None, processing_class=tokenizer)
trainer.train()
"""


def test_one_script_runs_on_es_and_binds_to_trls_signatures(tmp_path, one_thread):
    model, tokenizer = chat_tiny()
    common = dict(OUTPUT_DIR=str(tmp_path / "run"), model=model, tokenizer=tokenizer, dataset=conversations(0, 8),
                  think_format_reward=think_format_reward, digit_share=digit_share)
    bound = {}

    class GRPOTrainerSignature:  # TRL's classes, bound to the script's arguments without training
        def __init__(self, **kwargs):
            bound["trainer"] = inspect.signature(GRPOTrainer).bind(**kwargs)

        def train(self):
            bound["train"] = inspect.signature(GRPOTrainer.train).bind(self)

    exec(SCRIPT, {**common, "Config": lambda **kw: inspect.signature(GRPOConfig).bind(**kw),
                  "Trainer": GRPOTrainerSignature})
    assert set(bound["trainer"].arguments["args"].arguments) == set(TRL_NAMES) | set(TRL_ONLY)
    es = {**common, "Config": ESConfig, "Trainer": ESTrainer}
    exec(SCRIPT, es)  # the same lines, ES training for real
    assert es["trainer"].result.steps == 1 and (tmp_path / "run" / "seedlog.json").is_file()


def test_es_arguments_carry_trls_names_where_the_concept_is_the_same():
    trl_config = inspect.signature(GRPOConfig).parameters
    es_config = {f.name for f in dataclasses.fields(ESConfig)}
    assert {"learning_rate", "max_completion_length", "temperature", "top_p", "num_generations",
            "per_device_train_batch_size", "max_steps", "logging_steps", "save_steps", "output_dir", "seed",
            "report_to", "bf16"} <= set(TRL_NAMES) | set(TRL_ONLY)
    assert {"sigma", "population_size", "estimator", "shaping", "noise", "population", "engine"} <= set(ES_KEYS)
    assert es_config == set(TRL_NAMES) | set(TRL_ONLY) | set(ES_KEYS)
    assert set(TRL_NAMES) | set(TRL_ONLY) <= set(trl_config)  # spelled as TRL spells them
    assert not set(ES_KEYS) & set(trl_config)  # ES's own names mean nothing else in TRL
    es_trainer, trl_trainer = (list(inspect.signature(c).parameters) for c in (ESTrainer, GRPOTrainer))
    assert set(es_trainer) <= set(trl_trainer) and es_trainer[:5] == trl_trainer[:5] == [
        "model", "reward_funcs", "args", "train_dataset", "eval_dataset"]


def test_trls_think_format_reward_and_a_user_reward_train_the_tiny_model(tmp_path, capsys, one_thread):
    model, tokenizer = chat_tiny()
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = ESConfig(output_dir=str(tmp_path / "run"), max_steps=10, per_device_train_batch_size=8,
                    max_completion_length=8, learning_rate=0.05, sigma=0.05, population_size=8, bf16=False,
                    reward_weights=[2.0, 1.0], disable_tqdm=True)
    trainer = ESTrainer(model=model, reward_funcs=[think_format_reward, digit_share], args=args,
                        train_dataset=conversations(0, 16), eval_dataset=conversations(100, 4),
                        processing_class=tokenizer)
    before = greedy_digit_share(trainer)
    SEEN.clear()
    result = trainer.train()
    records = RunDir(result.run_dir).read_metrics()
    assert len(records) == 10
    for r in records:  # per reward function, as TRL logs them; the step's reward is their weighted sum
        assert r["reward_failed"] == 0  # think_format_reward got TRL's conversational completions
        assert r["reward_mean"] == pytest.approx(2.0 * r["rewards/think_format_reward/mean"]
                                                 + 1.0 * r["rewards/digit_share/mean"])
        assert r["rewards/digit_share/std"] > 0
    after = greedy_digit_share(trainer)
    print(f"greedy digit_share on the training prompts {before:.3f} -> {after:.3f}")
    assert after > before + 0.05, (before, after)
    assert not all(torch.equal(base[n], p) for n, p in trainer.model.named_parameters())  # trained in place
    # what the user's reward saw is what TRL passes: messages, and the dataset's other columns
    seen = SEEN[0]
    assert seen["prompt"][-1]["role"] == "user" and seen["completion"][0]["role"] == "assistant"
    assert seen["answer"].isdigit() and seen["keys"] == []
    # the same guard and sum on a completion whose format think_format_reward accepts
    scored = Scorer(trainer.objective, trainer.engine).score(
        [[{"role": "user", "content": "2 + 2 ="}]], ["<think>sum</think>4"], {"answer": ["4"]})
    assert scored.rewards == [pytest.approx(2.0 * 1.0 + 1.0 * (1 / 19 + 1))]  # "<think>sum</think>4": 1 digit of 19
    # held-out evaluations on eval_dataset, and a seed log that replays onto the exported base
    after_eval = json.loads((result.run_dir / "eval_after.json").read_text())
    assert after_eval["n_problems"] == 4 and trainer.evaluate()["greedy_accuracy"] == after_eval["greedy_accuracy"]
    assert main(["export", str(result.run_dir), "--out", str(tmp_path / "replayed")]) == 0
    replayed = load_file(str(tmp_path / "replayed" / "model.safetensors"))
    trained = load_file(str(trainer.save_model(tmp_path / "saved") / "model.safetensors"))
    assert trained.keys() == replayed.keys() and all(torch.equal(trained[k], replayed[k]) for k in trained)


def test_bad_arguments_are_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"config key 'learning_rate' must be a number > 0, got -1"):
        ESConfig(learning_rate=-1)
    with pytest.raises(ValueError, match="reward_weights has 1 weights for 2 reward functions"):
        ESTrainer("tiny", [think_format_reward, digit_share], ESConfig(reward_weights=[1.0]),
                  train_dataset=conversations(0, 2))
    with pytest.raises(ValueError, match="processing_class goes with a model object"):
        ESTrainer("tiny", think_format_reward, train_dataset=conversations(0, 2), processing_class=object())
    with pytest.raises(TypeError, match="args must be a zoopt.trl.ESConfig"):
        ESTrainer("tiny", think_format_reward, GRPOConfig, train_dataset=conversations(0, 2))
