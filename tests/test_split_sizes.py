"""Built-ins run with default settings: every objective states its split sizes, and an evaluation
asking for more problems than a split has uses the whole split, with a note naming the key."""

import json
import warnings
from pathlib import Path

import datasets
import pytest

import objectives
from zoopt.cli import main
from zoopt.workflows.evaluate import evaluate
from zoopt.objective import Objective, SplitSizeWarning, load_split
from zoopt.registry import ENGINES


@pytest.mark.parametrize("name, kwargs, sizes", [
    ("gsm8k", {}, {"train": 43, "test": 57}),            # the 100 offline problems
    ("arithmetic", {"digits": 1}, {"train": 73, "test": 27}),  # 10 × 10 one-digit additions
    ("arithmetic", {}, {"train": 6465, "test": 1635}),   # 90 × 90 two-digit additions
    ("countdown", {}, {"train": None, "test": None}),    # generated: as many as asked
])
def test_each_builtin_states_its_split_sizes(name, kwargs, sizes):
    objective = objectives.get(name, **kwargs)
    assert {s: objective.split_size(s) for s in sizes} == sizes
    if name == "arithmetic" and not kwargs:
        return  # drawing all 6,465 takes a while; one digit below shows the count is exact
    if sizes["train"] is not None:
        train, test = objective.dataset("train", sizes["train"]), objective.dataset("test", sizes["test"])
        assert (len(train), len(test)) == (sizes["train"], sizes["test"])
        assert len(set(train["prompt"])) == len(train) and not set(train["prompt"]) & set(test["prompt"])
        total = 100 if name in ("gsm8k", "arithmetic") else None
        assert len(train) + len(test) == total  # every problem of the space is in one split
        if name == "arithmetic":  # one more than the split has: arithmetic clamps with a note (its docstring)
            with pytest.warns(SplitSizeWarning, match=f"has {sizes['test']} 'test' problems, {sizes['test'] + 1} asked"):
                assert len(objective.dataset("test", sizes["test"] + 1)) == sizes["test"]
        else:
            with pytest.raises(ValueError):  # one more than the split has does not exist
                objective.dataset("test", sizes["test"] + 1)


def test_load_split_clamps_with_a_note_naming_the_key():
    gsm8k = objectives.get("gsm8k")
    with pytest.warns(SplitSizeWarning, match=r"objective 'gsm8k' has 57 'test' problems, 200 asked "
                                              r"\(eval.n_problems\): using all 57"):
        data = load_split(gsm8k, "test", 200, key="eval.n_problems")
    assert len(data) == 57
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_split(gsm8k, "test", 57)) == 57 and len(load_split(gsm8k, "train")) == 43


class SplitOnly(Objective):
    """Written to the contract as docs/concepts.md once gave it: ``dataset(split)``, no ``n``."""

    name = "split_only"

    def dataset(self, split):
        return datasets.Dataset.from_dict({"prompt": [f"{split} {i}" for i in range(5)], "answer": ["1"] * 5})

    def reward(self, prompt, completion, answer, **_):
        return 1.0


def test_an_objective_whose_dataset_takes_no_n_is_evaluated():
    engine = ENGINES.get("hf").from_pretrained("tiny")
    summary = evaluate(engine, SplitOnly(), n_problems=3, max_new_tokens=2).summary
    assert (summary["n_problems"], summary["greedy_accuracy"]) == (3, 1.0)
    with pytest.warns(SplitSizeWarning, match="has 5 'test' problems, 9 asked"):
        assert evaluate(engine, SplitOnly(), n_problems=9, max_new_tokens=2).summary["n_problems"] == 5


def test_zoopt_train_gsm8k_runs_with_the_default_eval_size(tmp_path, capsys, one_thread):
    """``zoopt train --objective gsm8k``: the default eval.n_problems (200) and prompts_per_step
    (32) on the 43/57 offline split; one short step on the tiny model."""
    run = tmp_path / "gsm8k"
    assert main(["train", "--model", "tiny", "--objective", "gsm8k", "--set", "steps=1",
                 "--set", "population_size=4", "--set", f"run_dir={run}", "--set", "export=false", "--quiet"]) == 0
    err = capsys.readouterr().err
    note = "zoopt: warning: objective 'gsm8k' has 57 'test' problems, 200 asked (eval.n_problems): using all 57"
    assert err.count(note) == 1  # once, though the run evaluates before and after
    assert json.loads((run / "eval_after.json").read_text())["n_problems"] == 57
    assert json.loads((run / "metrics.jsonl").read_text())["reward_failed"] == 0


def test_the_documented_one_digit_example_runs_as_written(tmp_path, capsys, one_thread):
    """docs/configuration.md's ``objective_args`` example, ``arithmetic: {digits: 1}``: 73 train and
    27 test problems exist, the defaults ask 2,000 and 200; both are clamped with one note each."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    assert "(e.g. arithmetic: {digits: 1})" in doc
    run = tmp_path / "one-digit"
    assert main(["train", "--model", "tiny", "--set", "objective_args={digits: 1}", "--set", "steps=1",
                 "--set", "population_size=2", "--set", "prompts_per_step=2", "--set", "sampling.max_new_tokens=2",
                 "--set", "eval.max_new_tokens=2", "--set", f"run_dir={run}", "--set", "export=false",
                 "--quiet"]) == 0
    err = capsys.readouterr().err
    assert err.count("has 73 'train' problems, 2000 asked (objective_args.n_train): using all 73") == 1
    assert err.count("objective 'arithmetic' has 27 'test' problems, 200 asked (eval.n_problems): using all 27") == 1
    assert json.loads((run / "eval_after.json").read_text())["n_problems"] == 27
