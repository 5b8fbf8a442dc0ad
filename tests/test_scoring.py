"""How runs call rewards: TRL-shaped inputs, the first failure shown once, a step of failures stops the run.

The end-to-end cases run the ``zoopt`` command in-process on the tiny model:
``trl.rewards.think_format_reward`` — TRL's own function, unchanged — scores 1.0 on
``<think>x</think>answer`` through ``zoopt train`` and ``zoopt eval`` (the ``think`` engine of
``tests/plugins/think_engine.py`` gives the tiny model a chat template and that completion), and
a reward that raises on every completion stops ``zoopt train`` and ``zoopt grpo`` with its own
message unless ``reward_errors: zero``.
"""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import objectives
from zoopt.cli import main
from zoopt.engines.hf import HFEngine
from zoopt.models import load_model
from zoopt.rewards.guard import ScoreResult, score
from zoopt.rewards.scoring import RewardError, RewardWarning, Scorer, chat_engine, trl_inputs

trl_rewards = pytest.importorskip("trl.rewards")  # installed in .venv by `make setup` (--no-deps)

TESTS = Path(__file__).resolve().parent
THINK_ENGINE = TESTS / "plugins" / "think_engine.py"
REWARDS = TESTS / "trl_rewards.py"
TINY = ["--model", "tiny", "--set", "steps=1", "--set", "population_size=2", "--set", "prompts_per_step=2",
        "--set", "export=false", "--quiet"]
CHAT = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant: "


# -- the shape of the inputs --------------------------------------------------------------
def test_trl_inputs_are_messages_for_chat_prompts_and_strings_otherwise():
    assert trl_inputs(["p"], ["c"], chat=False) == (["p"], ["c"])
    prompts, completions = trl_inputs(["p"], ["c"], chat=True, system_prompt="be brief")
    assert prompts == [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "p"}]]
    assert completions == [[{"role": "assistant", "content": "c"}]]
    conversation = [{"role": "user", "content": "q"}]  # a conversational dataset: messages either way
    assert trl_inputs([conversation], ["c"], chat=False) == ([conversation], [[{"role": "assistant", "content": "c"}]])


def test_chat_engine_follows_the_tokenizer_s_template():
    model, tokenizer = load_model("tiny")
    assert not chat_engine(HFEngine(model, tokenizer))
    tokenizer.chat_template = CHAT
    assert chat_engine(HFEngine(model, tokenizer))
    assert not chat_engine(None) and not chat_engine(object())


def test_think_format_reward_unchanged_needs_the_chat_shape():
    fn = trl_rewards.think_format_reward
    text = "<think>x</think>answer"
    assert Scorer(fn, chat=True).score(["p"], [text]).rewards == [1.0]
    with pytest.warns(RewardWarning, match=r"think_format_reward.*failed on a completion: (TypeError|KeyError)"):
        with pytest.raises(RewardError, match="failed on every completion"):
            scorer = Scorer(fn, chat=False)  # strings: TRL's function indexes completion[0]["content"]
            scorer.score(["p"], [text])
            scorer.finish()


@pytest.mark.parametrize("name, kwargs", [("arithmetic", {}), ("countdown", {}), ("gsm8k", {"source": "offline"}),
                                          ("champ", {})])
def test_builtin_objectives_score_both_shapes_alike(name, kwargs):
    objective = objectives.get(name, **kwargs)
    rows = objective.dataset("test", 4).to_list()
    prompts = [r.pop("prompt") for r in rows]
    columns = {k: [r[k] for r in rows] for k in rows[0]}
    gold = {"arithmetic": lambda r: f"The answer is {r['answer']}", "gsm8k": lambda r: f"so\n#### {r['answer']}",
            "countdown": lambda r: f"</think>\n<answer>{r['solution']}</answer>",
            "champ": lambda r: f"so \\boxed{{{r['answer']}}}"}[name]
    texts = [gold(r) for r in rows[:-1]] + ["no idea"]  # the last one wrong, the rest right
    plain = Scorer(objective, chat=False).score(prompts, texts, columns)
    chat = Scorer(objective, chat=True).score(prompts, texts, columns)
    assert plain.rewards == chat.rewards and plain.failed == chat.failed == 0
    assert objective.is_correct(plain.rewards) == [True, True, True, False]


# -- loud failures ------------------------------------------------------------------------
def make_raises_on_b():
    """A new reward function each time (the first failure is shown once per objective)."""
    def raises_on_b(prompts, completions, **columns):
        if any(c == "b" for c in completions):
            raise ValueError("cannot read 'b'")
        return [1.0] * len(completions)
    return raises_on_b


raises_on_b = make_raises_on_b()


def test_the_guard_names_the_first_failure():
    result = score(raises_on_b, ["p"] * 3, ["a", "b", "c"], timeout_s=2.0)
    assert result == ScoreResult([1.0, 0.0, 1.0], failed=1)
    assert result.error.startswith("ValueError: cannot read 'b' (test_scoring.py:")
    assert score(lambda prompts, completions, **k: ["x"] * len(completions), ["p"], ["a"]).error == "returned 'x', not a finite number"
    assert "returned 2 rewards for 1 completions" in score(lambda prompts, completions, **k: [1, 2], ["p"], ["a"]).error
    assert score(raises_on_b, ["p"], ["a"]).error is None
    nan = score(lambda prompts, completions, **k: [np.float64("nan")] * len(completions), ["p"], ["a"]).error
    assert nan == "returned nan, not a finite number"  # the number, not np.float64(nan)


def test_a_partial_failure_is_shown_once_and_the_step_goes_on():
    scorer = Scorer(make_raises_on_b())
    with pytest.warns(RewardWarning, match=r"'raises_on_b' failed on a completion: ValueError: cannot read 'b'"):
        scorer.score(["p"] * 3, ["a", "b", "c"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # shown once per objective: a second failure is only counted
        scorer.score(["p"] * 2, ["b", "a"])
    assert scorer.finish() == {"failed": 2, "timed_out": 0, "skipped": 0}


def test_a_step_where_every_reward_failed_raises_unless_zero():
    for policy in ("raise", "zero"):
        scorer = Scorer(make_raises_on_b(), reward_errors=policy)
        with pytest.warns(RewardWarning):
            scorer.score(["p"] * 2, ["b", "b"])
        if policy == "raise":
            with pytest.raises(RewardError, match=r"'raises_on_b' failed on every completion of step 3 \(2 of 2\): "
                                                  r"ValueError: cannot read 'b' .*reward_errors: zero"):
                scorer.finish("step 3")
        else:
            assert scorer.finish("step 3")["failed"] == 2
    with pytest.raises(ValueError, match="reward_errors must be one of raise, zero"):
        Scorer(raises_on_b, reward_errors="ignore")


# -- end to end: zoopt train / eval / grpo -------------------------------------------------
def test_trl_think_format_reward_gives_one_through_train_and_eval(tmp_path, capsys):
    objective = f"{REWARDS}:think_format_reward"
    run = tmp_path / "run"
    assert main(["train", "--plugin", str(THINK_ENGINE), "--engine", "think", "--objective", objective, *TINY,
                 "--set", "eval.n_problems=2", "--set", f"run_dir={run}"]) == 0
    record = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert (record["reward_mean"], record["reward_min"], record["reward_failed"]) == (1.0, 1.0, 0)
    assert json.loads((run / "eval_after.json").read_text())["greedy_accuracy"] == 1.0
    out = tmp_path / "eval"
    assert main(["eval", "--plugin", str(THINK_ENGINE), "--model", "tiny", "--engine", "think", "--objective",
                 objective, "--n-problems", "3", "--k", "1,2", "--n", "2", "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["greedy_accuracy"], summary["mean_reward"], summary["pass@2"]) == (1.0, 1.0, 1.0)
    assert summary["score_failed"] == 0


def test_a_reward_that_always_raises_stops_train_with_its_message(tmp_path, capsys):
    objective = f"{REWARDS}:always_raises"
    argv = ["train", "--objective", objective, *TINY, "--set", "eval.n_problems=0"]
    assert main([*argv, "--set", f"run_dir={tmp_path / 'a'}"]) == 2
    err = capsys.readouterr().err
    assert "zoopt: warning: reward 'always_raises' failed on a completion: ValueError: my reward is broken" in err
    assert ("zoopt train: error: the reward 'always_raises' failed on every completion of step 0 (4 of 4): "
            "ValueError: my reward is broken: no 'solution' column") in err
    assert not (tmp_path / "a" / "metrics.jsonl").exists()  # stopped before the update was logged
    assert main([*argv, "--set", "reward_errors=zero", "--set", f"run_dir={tmp_path / 'b'}"]) == 0
    record = json.loads((tmp_path / "b" / "metrics.jsonl").read_text())
    assert (record["reward_mean"], record["reward_failed"]) == (0.0, 4)


def test_a_reward_that_always_raises_stops_grpo_and_eval(tmp_path, capsys, one_thread):
    objective = f"{REWARDS}:always_raises"
    assert main(["grpo", "--model", "tiny", "--objective", objective, "--set", "steps=1", "--set", "prompts_per_step=2",
                 "--set", "sampling.n=2", "--set", "eval.n_problems=0", "--set", "export=false", "--quiet",
                 "--set", f"run_dir={tmp_path / 'g'}"]) == 2
    assert "failed on every completion of GRPO step 0 (4 of 4)" in capsys.readouterr().err
    assert main(["eval", "--model", "tiny", "--objective", objective, "--n-problems", "2", "--n", "0",
                 "--out", str(tmp_path / "e"), "--quiet"]) == 2
    assert "failed on every completion of the 'test' evaluation (2 of 2)" in capsys.readouterr().err
