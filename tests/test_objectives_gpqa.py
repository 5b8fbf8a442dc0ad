"""GPQA-Diamond: the letter rule on odd formats, the fixed per-question permutation, the hub
format's column mapping, and that question texts never reach an evaluation's records."""

import json
import time
from collections import Counter

import datasets
import pytest

import objectives
from objectives.gpqa import GPQADiamond, extract_letter, option_order
from zoopt.engines.base import Completion
from zoopt.workflows.evaluate import evaluate
from zoopt.objective import DataUnavailable

MB = 1_000_000

# (completion, gold, expected reward)
REWARD_TABLE = [
    ("Reasoning...\nAnswer: B", "B", 1.0),
    ("Answer: C", "B", 0.0),
    ("ANSWER: B", "B", 1.0),
    ("answer:B", "B", 1.0),
    ("Answer: (B)", "B", 1.0),
    ("Answer: **B**", "B", 1.0),
    ("**Answer:** B", "B", 1.0),
    ("Answer: $\\boxed{B}$", "B", 1.0),
    ("Answer: \\text{B}", "B", 1.0),
    ("Answer: [B]", "B", 1.0),
    ("Answer: B) the second option", "B", 1.0),
    ("Answer: B.", "B", 1.0),
    ("Answer：B", "B", 1.0),                       # full-width colon
    ("Answer: A\nWait, no.\nAnswer: B", "B", 1.0),  # the last one counts
    ("Answer: B\nActually Answer: A", "B", 0.0),
    ("Answer: b", "B", 0.0),                       # lower case is not a letter answer
    ("Answer: a force of 5 N", "A", 0.0),
    ("Answer: AB", "A", 0.0),
    ("Answer: Because B", "B", 0.0),
    ("Answer: E", "E", 0.0),
    ("Answer: Ｂ", "B", 0.0),                       # full-width letter
    ("The answer is B", "B", 0.0),                 # no "Answer:"
    ("B", "B", 0.0),
    ("Answer:" + " " * 100 + "B", "B", 0.0),       # too far from the marker
    ("", "B", 0.0),
    ("Answer: \x00B", "B", 0.0),
    ("Answer: B\x00", "B", 1.0),
    ("Answer: " * (MB // 8) + "B", "B", 1.0),      # a megabyte of markers
    ("x" * MB + "\nAnswer: D", "D", 1.0),
    ("Answer: __import__('os').system('x')", "B", 0.0),
    ("\\boxed{B}", "B", 0.0),
]


@pytest.mark.parametrize("completion,gold,expected", REWARD_TABLE,
                         ids=[f"{i}:{c[:20]!r}" for i, (c, _, _) in enumerate(REWARD_TABLE)])
def test_reward_table(completion, gold, expected):
    objective = GPQADiamond()
    start = time.perf_counter()
    assert objective(prompts=["p"], completions=[completion], answer=[gold]) == [expected]
    assert time.perf_counter() - start < 2.0


def test_the_permutation_is_fixed_per_question_and_moves_the_correct_letter():
    questions = [f"Question number {i} about chemistry?" for i in range(400)]
    orders = [option_order(q) for q in questions]
    assert all(sorted(o) == [0, 1, 2, 3] for o in orders)
    assert orders == [option_order(q) for q in questions]           # fixed: depends on the text only
    gold_letters = Counter("ABCD"[o.index(0)] for o in orders)
    assert set(gold_letters) == set("ABCD") and min(gold_letters.values()) > 60   # ~100 each


def _hub_rows(n=3):
    return {"Question": [f"Secret question {i}: which particle?" for i in range(n)],
            "Correct Answer": [f"right {i}" for i in range(n)],
            "Incorrect Answer 1": [f"wrong1 {i}" for i in range(n)],
            "Incorrect Answer 2": [f"wrong2 {i}" for i in range(n)],
            "Incorrect Answer 3": [f"wrong3 {i}" for i in range(n)],
            "Record ID": [f"rec{i}" for i in range(n)], "High-level domain": ["Physics"] * n}


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_column_mapping_of_the_hub_format(tmp_path, fmt):
    data = datasets.Dataset.from_dict(_hub_rows())
    path = tmp_path / f"gpqa.{fmt}"
    data.to_parquet(str(path)) if fmt == "parquet" else data.to_json(str(path), lines=True)
    objective = objectives.get("gpqa_diamond", data_files=str(path))
    rows = objective.dataset("test").to_list()
    assert [r["id"] for r in rows] == ["rec0", "rec1", "rec2"] and objective.data_source == "files"
    for i, row in enumerate(rows):
        prompt, gold = row["prompt"], row["answer"]
        assert f"Secret question {i}: which particle?" in prompt and prompt.startswith("Answer the following")
        assert f"\n{gold}) right {i}\n" in prompt + "\n"               # the gold letter shows the correct answer
        shown = [line[3:] for line in prompt.splitlines() if line[:3] in ("A) ", "B) ", "C) ", "D) ")]
        assert sorted(shown) == sorted([f"right {i}", f"wrong1 {i}", f"wrong2 {i}", f"wrong3 {i}"])
        assert objective(prompts=[prompt], completions=[f"Answer: {gold}"], answer=[gold]) == [1.0]
    assert objective.publish_text is False


def test_a_row_without_its_options_is_an_error_naming_the_record(tmp_path):
    rows = _hub_rows(2)
    rows["Incorrect Answer 2"][1] = ""
    path = tmp_path / "gpqa.jsonl"
    datasets.Dataset.from_dict(rows).to_json(str(path), lines=True)
    with pytest.raises(ValueError, match=r"gpqa_diamond: row 1 \(Record ID 'rec1'\) has an empty option") as err:
        objectives.get("gpqa_diamond", data_files=str(path)).dataset("test")
    assert "Secret question" not in str(err.value)


class EchoEngine:
    """Completions that quote the whole prompt (question included), then answer."""

    system_prompt = None

    def generate(self, prompts, sampling):
        return [[Completion(text=f"{p}\nAnswer: A", token_ids=[0])] * sampling.n for p in prompts]

    def encode(self, prompt):
        raise NotImplementedError


def test_an_evaluation_writes_no_question_text(tmp_path):
    path = tmp_path / "gpqa.parquet"
    datasets.Dataset.from_dict(_hub_rows()).to_parquet(str(path))
    objective = objectives.get("gpqa_diamond", data_files=str(path))
    result = evaluate(EchoEngine(), objective, n_problems=3, ks=(1, 2), n_samples=2)
    result.to_csv(tmp_path / "per_problem.csv")
    result.to_json(tmp_path / "eval.json")
    written = (tmp_path / "per_problem.csv").read_text() + (tmp_path / "eval.json").read_text()
    assert "Secret question" not in written and "right 0" not in written
    assert json.loads((tmp_path / "eval.json").read_text())["summary"]["n_problems"] == 3
    assert result.per_problem[0]["greedy_reward"] in (0.0, 1.0) and "greedy_completion" not in result.per_problem[0]


def test_sources_and_letters():
    with pytest.raises(DataUnavailable, match="gpqa_diamond has no offline source"):
        objectives.get("gpqa_diamond", source="offline")
    assert extract_letter("Answer: D") == "D" and extract_letter("nothing") is None
