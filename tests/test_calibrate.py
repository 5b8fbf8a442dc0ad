"""`zoopt calibrate`: Pass@k equal to `zoopt eval`'s, exact shares and failure tables, resume, target."""

import json
import math

import pytest

from objectives.arithmetic import Arithmetic
from objectives.countdown import Countdown
from zoopt.cli import main
from zoopt.config import ConfigError, load_config
from zoopt.metrics import pass_at_k
from zoopt.workflows.calibrate import TARGET, calibrate, powers_of_two, summarize, target_check
from zoopt.workflows.builders import build_engine, build_objective, evaluate_config

KEYS = ("pass@1", "pass@32", "share_0.01_0.1", "n_problems", "n_samples", "temperature")


@pytest.fixture
def cfg(reward_spec):
    cfg = load_config(overrides=["model=tiny", f"objective={reward_spec}", "objective_args.digits=1",
                                 "batch_size=3", "eval.max_new_tokens=3", "eval.temperature=0.6"])
    cfg["eval"]["n_problems"] = 7
    return cfg


def test_pass_at_k_equals_evaluate_at_the_same_settings(cfg, tmp_path, one_thread):
    result = calibrate(cfg, tmp_path / "c", n_samples=4, chunk=3)
    cfg["eval"].update(n_samples=4, ks=[1, 2, 4])
    ref = evaluate_config(build_engine(cfg), build_objective(cfg), cfg)  # prompt batches of batch_size = chunk
    assert result["n_problems"] == ref.summary["n_problems"] == 7
    counts = [p["n_correct"] for p in ref.per_problem]
    assert result["n_correct"] == counts
    for k in (1, 2, 4):
        assert result["pass_at_k"][str(k)] == ref.summary[f"pass@{k}"]
    assert result["greedy_accuracy"] == ref.summary["greedy_accuracy"]
    assert sum(counts) > 0 and sum(counts) < 28  # a temperature at which the tiny model is sometimes right
    assert result["failed_samples"] == 28 - sum(counts) == sum(result["failure_counts"].values())


def test_resume_reads_finished_chunks_and_refuses_other_settings(cfg, tmp_path, one_thread):
    out = tmp_path / "c"
    first = calibrate(cfg, out, n_samples=4, chunk=3)
    assert sorted(p.name for p in (out / "chunks").iterdir()) == [f"chunk-0000{b}.json" for b in range(3)]
    kept = (out / "chunks" / "chunk-00000.json").read_text()
    (out / "chunks" / "chunk-00001.json").unlink()
    (out / "calibration.json").unlink()
    again = calibrate(cfg, out, n_samples=4, chunk=3)
    assert (out / "chunks" / "chunk-00000.json").read_text() == kept  # read back, not regenerated
    drop = ("generation_s", "completions_per_s")
    assert {k: v for k, v in again.items() if k not in drop} == {k: v for k, v in first.items() if k not in drop}
    with pytest.raises(ConfigError, match="'n_samples' is 4, not 8"):
        calibrate(cfg, out, n_samples=8, chunk=3)


def _chunk(counts, n, failures=None, cut=0):
    problems = [{"index": i, "n_correct": c, "failures": (failures or {}).get(i, {"wrong": n - c}),
                 "failures_cut": cut, "tokens": 5 * n, "greedy_correct": c > n // 2} for i, c in enumerate(counts)]
    return {"chunk": 0, "problems": problems, "seconds": 2.0, "score": {"failed": 0, "timed_out": 0, "skipped": 0}}


def test_summary_numbers_are_exact():
    n, counts = 64, [0, 1, 6, 7, 32, 64]  # rates 0, 1/64, 6/64, 7/64 (> 0.1), 1/2, 1
    settings = {"n_samples": n, "seed": 0, "temperature": 0.6}
    failures = {1: {"wrong": 40, "no_answer": 20, "format": 3}}
    result = summarize([_chunk(counts, n, failures, cut=1)], settings)
    assert result["share_0.01_0.1"] == 2 / 6
    assert result["success_rate_histogram"] == {"0": 1 / 6, "(0, 0.01)": 0.0, "[0.01, 0.1]": 2 / 6,
                                                "(0.1, 0.5]": 2 / 6, "(0.5, 1)": 0.0, "1": 1 / 6}
    assert result["pass@1"] == sum(counts) / (6 * n)
    assert result["pass@32"] == sum(pass_at_k(n, c, 32) for c in counts) / 6
    assert list(result["pass_at_k"]) == ["1", "2", "4", "8", "16", "32", "64"]
    assert result["pass_at_k"]["64"] == 5 / 6
    wrong = 64 + 58 + 57 + 32 + 0 + 40  # problem 1's failures replaced by its own table
    assert result["failure_counts"] == {"wrong": wrong, "no_answer": 20, "format": 3}
    assert result["failure_modes"]["format"] == 3 / (wrong + 23)
    assert result["failures_cut_share"] == 6 / (wrong + 23)
    assert result["mean_completion_tokens"] == 5.0
    assert result["completions_per_s"] == 6 * 64 / 2.0
    assert result["greedy_accuracy"] == 1 / 6  # greedy_correct: c > 32, only the 64
    for key in KEYS:
        assert key in result


def test_target_check_names_each_criterion():
    base = {"pass@1": 0.3, "pass@32": 0.9, "share_0.01_0.1": 0.25, "failure_modes": {"format": 0.02}}
    check = target_check(base)
    assert list(check) == list(TARGET) and all(c["ok"] for c in check.values())
    assert not target_check({**base, "pass@1": 0.55})["pass@1"]["ok"]
    assert not target_check({**base, "pass@32": None})["pass@32"]["ok"]  # n < 32: not measured, not met
    assert not target_check({**base, "failure_modes": {"format": 0.2}})["format_share_of_failures"]["ok"]
    assert target_check({**base, "share_0.01_0.1": 0.2})["share_0.01_0.1"]["ok"]  # bounds are inclusive


def test_powers_of_two():
    assert powers_of_two(64) == [1, 2, 4, 8, 16, 32, 64]
    assert powers_of_two(48) == [1, 2, 4, 8, 16, 32]
    assert powers_of_two(1) == [1]


@pytest.mark.parametrize("prompt,completion,gold,mode", [
    ("What is 0 + 4? Reply with only the final number.", "0 + 4 = 7", "4", "wrong"),  # 4 only echoes the question
    ("What is 0 + 4? Reply with only the final number.", "4, since 0 + 4 = 4 and 1", "4", "format"),
    ("What is 1 - 8? Reply with only the final number.", "It is -7, not 7 - 1", "-7", "format"),
    ("What is 1 - 8? Reply with only the final number.", "1 - 8 = 5", "-7", "wrong"),
    ("What is 9 * 3? Reply with only the final number.", "twenty-seven", "27", "no_answer"),
    ("3 + 4 = 7\nWhat is 2 + 5?", "7, I think. 2 + 5 = 8", "7", "format"),  # a few-shot example's 7 is no echo
])
def test_arithmetic_failure_modes(prompt, completion, gold, mode):
    objective = Arithmetic(digits=1, operators="+-*")
    assert objective.reward(prompt, completion, gold) == 0.0
    assert objective.failure_mode(prompt, completion, {"prompt": prompt, "answer": gold}) == mode


def test_arithmetic_failure_mode_reads_a_chat_prompt():
    messages = [{"role": "system", "content": "1 + 1 = 2"}, {"role": "user", "content": "What is 0 + 2?"}]
    assert Arithmetic().failure_mode(messages, "0 + 2 = 3", {"prompt": messages, "answer": "2"}) == "wrong"


@pytest.mark.parametrize("completion,mode", [
    ("I think it is 7 </think>", "no_answer"),
    ("</think>\n<answer> 2 + x </answer>", "format"),
    ("</think>\n<answer> 2 + 3 + 4 </answer>", "wrong"),  # evaluates to 9, not 10
    ("</think>\n<answer> 6 + 4 </answer>", "wrong"),  # 10, but not with the given numbers
])
def test_countdown_failure_modes(completion, mode):
    objective = Countdown(counts=3)
    row = {"prompt": "p", "numbers": [2, 3, 4], "target": 10, "solution": "2 * 3 + 4"}
    assert objective.reward("p", completion, [2, 3, 4], 10) < 1.0
    assert objective.failure_mode("p", completion, row) == mode


def test_cli_writes_the_keys_and_resumes(tmp_path, capsys, one_thread):
    out = tmp_path / "cal"
    argv = ["calibrate", "--model", "tiny", "--objective", "arithmetic", "--set", "objective_args.digits=1",
            "--n-problems", "4", "--n", "4", "--chunk", "2", "--max-new-tokens", "3", "--batch-size", "8",
            "--out", str(out)]
    assert main(argv) == 0
    data = json.loads((out / "calibration.json").read_text())
    assert all(key in data for key in KEYS)
    assert (data["n_problems"], data["n_samples"], data["temperature"]) == (4, 4, 0.6)  # T defaults to 0.6
    assert data["pass@32"] is None and data["meets_target"] is False
    assert "calibration: 4 problems × 4 samples" in capsys.readouterr().out
    assert main(argv + ["--quiet"]) == 0
    assert json.loads((out / "calibration.json").read_text())["n_correct"] == data["n_correct"]
    assert main(argv[:-2] + ["--out", str(out), "--n", "2", "--quiet"]) == 2  # other settings: one-line error
    assert "use another --out" in capsys.readouterr().err


def test_paired_sample_size_closed_form():
    from zoopt.metrics import paired_sample_size

    assert paired_sample_size(0.3, 0.03) == 785          # (2.80159 · 10)² = 784.89
    assert paired_sample_size(0.0, 0.03) == 0
    assert paired_sample_size(0.15, 0.03, power=0.9) == math.ceil(((1.959964 + 1.281552) * 5) ** 2)
    with pytest.raises(ValueError, match="delta must be a finite number > 0"):
        paired_sample_size(0.3, 0.0)


def test_an_empty_system_prompt_reaches_the_engine():
    """An objective's system_prompt "" is an empty system turn, not the chat template's default one."""
    cfg = load_config(overrides=["model=smollm2-135m", "objective_args.system_prompt=''"])
    engine = build_engine(cfg, build_objective(cfg))
    text = engine.tokenizer.decode(engine.encode("What is 1 + 2?"))
    assert engine.system_prompt == "" and text.startswith("<|im_start|>system\n<|im_end|>")
    cfg = load_config(overrides=["model=smollm2-135m"])
    assert "You are a helpful AI assistant" in engine.tokenizer.decode(build_engine(cfg, build_objective(cfg)).encode("x"))
