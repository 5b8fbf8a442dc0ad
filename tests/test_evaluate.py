import csv
import json
import re

import datasets
import pytest
from rich.console import Console

from zoopt.engines.base import Completion
from zoopt.workflows.evaluate import EvalResult, evaluate
from zoopt.objective import Objective
from zoopt.metrics import bootstrap_ci, maj_at_k

# prompt -> (answer, greedy completion, sampled completions)
TABLE = {
    "1+1": ("2", "2", ["2", "2", "3", "x"]),        # rewards 1 1 0 0    c=2
    "2+3": ("5", "4", ["5", "4", "4", "CRASH"]),    # rewards 1 0 0 None c=1
    "9+9": ("18", "18", ["17", "18", "17", "18"]),  # rewards 0 1 0 1    c=2
}


class FakeEngine:
    """Deterministic completions from TABLE; sample j of problem i has j+1 tokens of entropy i+1."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, sampling):
        self.calls.append((list(prompts), sampling.n, sampling.seed, sampling.greedy,
                           sampling.logprobs))
        out = []
        for p in prompts:
            i = list(TABLE).index(p)
            _, greedy, samples = TABLE[p]
            if sampling.greedy:
                out.append([Completion(text=greedy, token_ids=[0])])
            else:
                out.append([Completion(text=t, token_ids=[0] * (j + 1),
                                       entropies=[float(i + 1)] * (j + 1) if sampling.logprobs
                                       else None)
                            for j, t in enumerate(samples[:sampling.n])])
        return out


class FakeObjective(Objective):
    def dataset(self, split, n):
        rows = [{"prompt": p, "answer": a, "split": split} for p, (a, _, _) in TABLE.items()]
        return datasets.Dataset.from_list(rows[:n] if n is not None else rows)

    def extract_answer(self, text):
        m = re.findall(r"-?\d+", text)
        return m[-1] if m else None

    def __call__(self, prompts, completions, answer, **columns):
        assert len(prompts) == len(completions) == len(answer) == len(columns["split"])
        return [None if c == "CRASH" else float(self.extract_answer(c) == a)
                for c, a in zip(completions, answer)]

    def is_correct(self, rewards):
        return [r is not None and r > 0.5 for r in rewards]


def test_summary_numbers_are_exact():
    engine = FakeEngine()
    res = evaluate(engine, FakeObjective(), n_problems=None, ks=(1, 2, 4), n_samples=4,
                   batch_size=2, seed=0)
    s = res.summary
    assert s["n_problems"] == 3
    assert s["greedy_accuracy"] == pytest.approx(2 / 3)
    assert s["pass@1"] == pytest.approx((0.5 + 0.25 + 0.5) / 3)
    assert s["pass@2"] == pytest.approx((5 / 6 + 0.5 + 5 / 6) / 3)
    assert s["pass@4"] == pytest.approx(1.0)
    assert s["maj@4"] == pytest.approx((1 + 0 + 0.5) / 3)     # clear win, wrong win, 2-way tie
    assert s["mean_reward"] == pytest.approx(5 / 11)           # None reward excluded
    assert s["entropy"] == pytest.approx((10 * 1 + 10 * 2 + 10 * 3) / 30)
    assert (s["score_failed"], s["score_timed_out"], s["score_skipped"]) == (0, 0, 1)
    assert s["greedy_accuracy_ci"] == list(bootstrap_ci([1.0, 0.0, 1.0], seed=0))
    assert s["pass@2_ci"] == list(bootstrap_ci([5 / 6, 0.5, 5 / 6], seed=0))
    json.dumps(s)  # JSON-able

    p = res.per_problem
    assert [r["n_correct"] for r in p] == [2, 1, 2]
    assert [r["greedy_correct"] for r in p] == [True, False, True]
    assert [r["maj@4"] for r in p] == [1.0, 0.0, 0.5]
    assert [r["entropy"] for r in p] == [1.0, 2.0, 3.0]
    assert p[1]["answers"] == ["5", "4", "4", None]
    assert p[1]["mean_reward"] == pytest.approx(1 / 3)
    for i, r in enumerate(p):
        assert r["maj@1"] == maj_at_k(r["answers"], r["gold"], 1, seed=i)
    assert s["maj@1"] == pytest.approx(sum(r["maj@1"] for r in p) / 3)

    # batches of 2: [P0, P1] then [P2], sampling seeds seed + batch index; logprobs for samples
    assert [(c[0], c[1], c[2], c[3], c[4]) for c in engine.calls] == [
        (["1+1", "2+3"], 1, 0, True, False), (["9+9"], 1, 1, True, False),
        (["1+1", "2+3"], 4, 0, False, True), (["9+9"], 4, 1, False, True)]


def test_a_raising_reward_is_guarded_and_counted():
    class Raising(FakeObjective):
        def __call__(self, prompts, completions, answer, **columns):
            if "x" in completions:
                raise ValueError("cannot parse")
            return super().__call__(prompts, completions, answer, **columns)

    s = evaluate(FakeEngine(), Raising(), ks=(1, 2, 4), n_samples=4).summary
    assert (s["score_failed"], s["score_timed_out"], s["score_skipped"]) == (1, 0, 1)
    assert s["mean_reward"] == pytest.approx(5 / 11)    # "x" scores 0.0 either way
    assert s["pass@2"] == pytest.approx((5 / 6 + 0.5 + 5 / 6) / 3)


def test_gold_answer_hook_and_n_problems():
    class Gold(FakeObjective):
        def gold_answer(self, row):
            return "4" if row["prompt"] == "2+3" else row["answer"]

    res = evaluate(FakeEngine(), Gold(), n_problems=2, ks=(4,), n_samples=4, greedy=False)
    assert res.summary["n_problems"] == 2
    assert "greedy_accuracy" not in res.summary
    assert [r["maj@4"] for r in res.per_problem] == [1.0, 1.0]


def test_greedy_only_and_progress_callback():
    seen = []
    res = evaluate(FakeEngine(), FakeObjective(), progress=lambda *a: seen.append(a))
    assert res.summary["greedy_accuracy"] == pytest.approx(2 / 3)
    assert "pass@1" not in res.summary
    assert seen == [("greedy", 3, 3)]


def test_outputs(tmp_path):
    res = evaluate(FakeEngine(), FakeObjective(), ks=(1, 2), n_samples=2)
    res.to_json(tmp_path / "r.json")
    loaded = json.loads((tmp_path / "r.json").read_text())
    assert loaded["summary"]["pass@2"] == res.summary["pass@2"]
    assert len(loaded["per_problem"]) == 3
    res.to_csv(tmp_path / "r.csv")
    rows = list(csv.DictReader(open(tmp_path / "r.csv")))
    assert [r["n_correct"] for r in rows] == ["2", "1", "1"]
    assert json.loads(rows[1]["answers"]) == ["5", "4"]
    console = Console(record=True, width=100)
    console.print(res.table())
    text = console.export_text()
    assert "pass@2" in text and "greedy_accuracy" in text and "0.6667" in text


def test_errors():
    with pytest.raises(ValueError, match="n_samples=2"):
        evaluate(FakeEngine(), FakeObjective(), ks=(1, 4), n_samples=2)
    with pytest.raises(ValueError, match="nothing to evaluate"):
        evaluate(FakeEngine(), FakeObjective(), greedy=False)
    assert isinstance(evaluate(FakeEngine(), FakeObjective()), EvalResult)


def test_objective_without_answers_gives_no_maj_at_k_instead_of_crashing():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from digits_objective import Digits

    from zoopt.engines.hf import HFEngine
    from zoopt.workflows.evaluate import evaluate

    engine = HFEngine.from_pretrained("tiny")
    result = evaluate(engine, Digits(), n_problems=4, ks=(1, 2), n_samples=2, max_new_tokens=4)
    assert result.summary["maj@2"] is None and result.per_problem[0]["maj@2"] is None
    assert 0.0 <= result.summary["pass@2"] <= 1.0 and result.summary["mean_reward"] is not None
