"""The reward guard ``score``: failures, time limits, None, NaN, fallback, RNG untouched."""

import math
import random
import signal
import threading
import time

import numpy as np
import pytest
import torch

import objectives
from zoopt.rewards.guard import ScoreResult, mean_reward, score

PROMPTS = ["p0", "p1", "p2"]
COMPLETIONS = ["a", "bad", "c"]
COLUMNS = {"answer": ["A", "B", "C"]}


def lengths(prompts, completions, **columns):
    return [float(len(c)) for c in completions]


def raises(prompts, completions, **columns):
    raise RuntimeError("reward crashed")


def sleeps(prompts, completions, **columns):
    time.sleep(30)
    return [1.0] * len(completions)


def sleeps_and_swallows(prompts, completions, **columns):
    try:
        time.sleep(30)
    except Exception:  # a reward that catches everything must still be stopped
        pass
    return [1.0] * len(completions)


def one_bad_completion(prompts, completions, answer):
    if "bad" in completions:
        raise ValueError("cannot score 'bad'")
    return [1.0 if c.upper() == a else 0.0 for c, a in zip(completions, answer)]


def one_slow_completion(prompts, completions, **columns):
    if "bad" in completions:
        time.sleep(30)
    return [2.0] * len(completions)


def test_a_reward_that_raises_scores_zero_and_counts_failed():
    result = score(raises, PROMPTS, COMPLETIONS, COLUMNS, timeout_s=1.0)
    assert result == ScoreResult([0.0, 0.0, 0.0], failed=3, timed_out=0, skipped=0)


def test_a_reward_that_hangs_is_stopped_and_counted():
    start = time.perf_counter()
    result = score(sleeps, PROMPTS[:1], COMPLETIONS[:1], {"answer": ["A"]}, timeout_s=0.2)
    elapsed = time.perf_counter() - start
    # one batch call and one per-completion call, 0.2 s each
    assert result == ScoreResult([0.0], failed=0, timed_out=1, skipped=0)
    assert elapsed < 1.5


def test_a_reward_cannot_swallow_the_timeout():
    start = time.perf_counter()
    result = score(sleeps_and_swallows, PROMPTS, COMPLETIONS, COLUMNS, timeout_s=0.1)
    assert result.timed_out == 3 and result.rewards == [0.0, 0.0, 0.0]
    assert time.perf_counter() - start < 2.0


def test_none_is_kept_and_counted_as_skipped():
    result = score(lambda prompts, completions, **k: [None, 1.0, None], PROMPTS, COMPLETIONS, COLUMNS)
    assert result == ScoreResult([None, 1.0, None], failed=0, timed_out=0, skipped=2)
    assert mean_reward(result.rewards) == 1.0
    assert mean_reward([None, None]) == 0.0
    assert mean_reward([0.5, None, 1.0]) == 0.75


def test_non_finite_and_non_numeric_rewards_fail():
    result = score(lambda prompts, completions, **k: [math.nan, -math.inf, "0.5"], PROMPTS, COMPLETIONS, COLUMNS)
    assert result == ScoreResult([0.0, 0.0, 0.0], failed=3, timed_out=0, skipped=0)
    result = score(lambda prompts, completions, **k: [np.float32(0.5), True, 2], PROMPTS, COMPLETIONS, COLUMNS)
    assert result == ScoreResult([0.5, 1.0, 2.0])


def test_fallback_keeps_the_good_completions_rewards():
    result = score(one_bad_completion, PROMPTS, ["a", "bad", "c"], COLUMNS, timeout_s=1.0)
    assert result == ScoreResult([1.0, 0.0, 1.0], failed=1, timed_out=0, skipped=0)


def test_fallback_after_a_timeout_keeps_the_fast_completions():
    start = time.perf_counter()
    result = score(one_slow_completion, PROMPTS, ["a", "bad", "c"], COLUMNS, timeout_s=0.2)
    assert result == ScoreResult([2.0, 0.0, 2.0], failed=0, timed_out=1, skipped=0)
    assert time.perf_counter() - start < 2.0


def test_a_malformed_batch_result_falls_back_per_completion():
    calls = []

    def wrong_length(prompts, completions, **columns):
        calls.append(len(completions))
        return [3.0] if len(completions) == 1 else [3.0, 3.0]

    result = score(wrong_length, PROMPTS, COMPLETIONS, COLUMNS)
    assert result == ScoreResult([3.0, 3.0, 3.0]) and calls == [3, 1, 1, 1]
    assert score(lambda prompts, completions, **k: "1.0", ["p"], ["a"], {}).failed == 1


def test_the_previous_alarm_handler_and_timer_are_restored():
    fired = []

    def handler(signum, frame):
        fired.append(signum)

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.6)
        result = score(sleeps, ["p"], ["a"], {}, timeout_s=0.1)
        assert result.timed_out == 1
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] < 0.6
        time.sleep(0.8)
        assert fired == [signal.SIGALRM]
        assert signal.getsignal(signal.SIGALRM) is handler
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_off_the_main_thread_the_call_is_abandoned_after_the_timeout():
    out = {}

    def worker():
        start = time.perf_counter()
        out["result"] = score(sleeps, ["p"], ["a"], {}, timeout_s=0.2)
        out["elapsed"] = time.perf_counter() - start
        out["good"] = score(lengths, ["p", "q"], ["ab", "c"], {}, timeout_s=1.0)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(10)
    assert out["result"] == ScoreResult([0.0], failed=0, timed_out=1, skipped=0)
    assert out["elapsed"] < 1.5
    assert out["good"] == ScoreResult([2.0, 1.0])


def test_inconsistent_arguments_are_the_callers_error():
    with pytest.raises(ValueError, match="column 'answer' has 1 values for 3 completions"):
        score(lengths, PROMPTS, COMPLETIONS, {"answer": ["A"]})
    assert score(lengths, [], [], {}) == ScoreResult([])
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        score(lengths, ["p"], ["a"], {}, timeout_s=0)


def _rng_states():
    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def _same(a, b):
    return (a[0] == b[0] and a[1][0] == b[1][0] and np.array_equal(a[1][1], b[1][1])
            and a[1][2:] == b[1][2:] and torch.equal(a[2], b[2]))


@pytest.mark.parametrize("name,completion", [
    ("arithmetic", "37 + 45 = 82"),
    ("countdown", "x</think>\n<answer>(1 + 2) / 3</answer>"),
    ("gsm8k", "so\n#### \\frac{20}{2}"),
    ("champ", "so \\boxed{\\frac{1}{2}}"),      # checked in a worker process
])
def test_scoring_and_data_never_touch_the_global_rngs(name, completion):
    random.seed(11)
    np.random.seed(11)
    torch.manual_seed(11)
    before = _rng_states()
    objective = objectives.get(name)
    data = objective.dataset("test", 8)
    rows = data.to_list()
    columns = {k: [r[k] for r in rows] for k in data.column_names if k != "prompt"}
    result = score(objective, data["prompt"], [completion] * len(rows), columns)
    assert len(result.rewards) == 8 and result.failed == 0 and result.timed_out == 0
    assert all(isinstance(r, float) for r in result.rewards)
    assert _same(before, _rng_states())
