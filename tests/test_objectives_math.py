"""Math benchmarks: reward tables with hostile completions, math-verify's known false positives,
timeouts counted, and the column mapping of each hub format from local fixtures."""

import json
import time
import warnings

import datasets
import pytest

import objectives
from objectives.boxed import last_boxed, normalize, too_deep
from objectives.math_objective import MathBenchmark, gold_text
from objectives.sources import DataSourceNote
from worker_processes import worker_pids, zombie_children
from zoopt.objective import DataUnavailable
from zoopt.rewards.guard import score

MB = 1_000_000
MATH_NAMES = ["math500", "aime24", "aime25", "amc23", "minerva", "olympiadbench", "deepscaler", "champ"]

# (completion, gold, expected reward)
REWARD_TABLE = [
    ("so the answer is \\boxed{42}", "42", 1.0),
    ("\\boxed{042}", "42", 1.0),
    ("\\boxed{41}", "42", 0.0),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\dfrac{14}{3}}", "\\frac{14}{3}", 1.0),
    ("\\boxed{\\frac{28}{6}}", "\\dfrac{14}{3}", 1.0),        # a bare \dfrac gold parses
    ("\\boxed{x = 5}", "5", 1.0),
    ("\\boxed{2+3=5}", "5", 1.0),
    ("The final answer is $\\frac{3}{4}$.", "\\frac{3}{4}", 1.0),  # anchored LaTeX without a box
    ("the answer is 42", "42", 0.0),                        # TRL's settings: no anchor-free extraction
    ("\\boxed{(1, 2)}", "(1,2)", 1.0),
    ("\\boxed{\\sqrt{2}}", "\\sqrt{2}", 1.0),
    ("\\boxed{\\sqrt{3}}", "\\sqrt{2}", 0.0),
    # math-verify's known false positives, guarded
    ("\\boxed{\\frac{1}{2^{98}}}", "\\frac{1}{2^{99}}", 0.0),   # tiny values
    ("\\boxed{\\frac{1}{2^{99}}}", "\\frac{1}{2^{99}}", 1.0),
    ("\\boxed{1+1=5}", "5", 0.0),                              # equation reduced to its right side
    ("\\boxed{1}\\boxed{2}", "12", 0.0),                       # repeated boxes: only the last counts
    ("\\boxed{1}, \\boxed{2}", "1,2", 0.0),
    ("draft \\boxed{7} ... final \\boxed{8}", "8", 1.0),
    ("draft \\boxed{8} ... final \\boxed{7}", "8", 0.0),
    # hostile
    ("\\boxed{5^{5^{5^{5}}}}", "5", 0.0),                      # power tower: sympy hangs in C
    ("\\boxed{100000000!}", "5", 0.0),                         # factorial bomb
    ("\\boxed{((((((((((((((((((((((((((((((5))))))))))))))))))))))))))))))}", "7", 0.0),
    ("\\boxed{" + "{" * 400 + "5" + "}" * 400 + "}", "7", 0.0),   # nesting bomb
    ("\\boxed{\\left(\\frac{\\sqrt{2}}{2}\\right)^{2}}", "\\frac{1}{2}", 1.0),  # 3 deep is read
    ("The final answer is $" + "(" * 50 + "$", "5", 0.0),
    ("\\boxed{" + "9" * MB + "}", "5", 0.0),                   # megabyte answer: past the length bound
    ("x" * MB + " \\boxed{5}", "5", 1.0),                      # megabyte of text, then the answer
    ("\\boxed{5", "5", 0.0),                                   # unbalanced braces
    ("\\boxed{5}}}}{{{", "5", 1.0),
    ("\\boxed{{{{{{", "5", 0.0),
    ("\\boxed{__import__('os').system('touch /tmp/pwned')}", "5", 0.0),
    ("\\boxed{().__class__.__bases__[0].__subclasses__()}", "5", 0.0),
    ("\\boxed{5\x00}", "5", 1.0),                              # NUL bytes are dropped
    ("\x00" * 1000, "5", 0.0),
    ("", "5", 0.0),
    ("$" * 10_000, "5", 0.0),
    ("\\boxed{\\frac{1}{0}}", "5", 0.0),
]


@pytest.fixture(scope="module")
def math500():
    objective = objectives.get("math500")
    objective(prompts=["p"], completions=["\\boxed{0.5}"], answer=["\\frac{1}{2}"])  # workers up
    return objective


@pytest.mark.parametrize("completion,gold,expected", REWARD_TABLE,
                         ids=[f"{i}:{c[:24]!r}" for i, (c, _, _) in enumerate(REWARD_TABLE)])
def test_reward_table(math500, completion, gold, expected):
    assert math500.checker.pool.warm()  # a worker killed by the previous row is replaced first
    start = time.perf_counter()
    rewards = math500(prompts=["p"], completions=[completion], answer=[gold])
    elapsed = time.perf_counter() - start
    assert rewards == [expected]
    assert elapsed < 2.0, f"scoring took {elapsed:.2f} s"
    assert len(worker_pids()) <= 2 and not zombie_children()


@pytest.mark.parametrize("name", MATH_NAMES)
def test_every_math_objective_scores_and_bounds_the_same_way(name):
    objective = objectives.get(name)
    assert objective.checker.pool.warm()
    completions = ["\\boxed{7}", "\\boxed{8}", "\\boxed{5^{5^{5^{5}}}}", [{"role": "assistant", "content": "\\boxed{7}"}]]
    start = time.perf_counter()
    result = score(objective, ["p"] * 4, completions, {"answer": ["7"] * 4}, timeout_s=5.0)
    assert result.rewards == [1.0, 0.0, 0.0, 1.0]
    assert result.timed_out == 1 and result.failed == 0           # the tower ran out of time: counted
    assert "ran out of the objective's own time limit" in result.error
    assert time.perf_counter() - start < 2.0
    assert len(worker_pids()) <= 2 and not zombie_children()


def test_a_batch_is_cut_before_the_reward_guard_fires(math500):
    """Eight towers at 1 s each on 2 workers would take 4 s: under a 1.5 s guard, the checks
    still running when the batch must end score 0 as timeouts and the guard never fires."""
    completions = ["\\boxed{5^{5^{5^{%d}}}}" % (5 + i) for i in range(8)] + ["\\boxed{7}"]
    assert math500.checker.pool.warm()
    start = time.perf_counter()
    result = score(math500, ["p"] * 9, completions, {"answer": ["7"] * 9}, timeout_s=1.5)
    assert result.rewards == [0.0] * 8 + [1.0]
    assert result.timed_out == 8 and time.perf_counter() - start < 3.0


def test_extract_and_gold_answers_for_majority_voting(math500):
    assert math500.extract_answer("so \\boxed{ \\dfrac{1}{2} }.") == "\\frac{1}{2}"
    assert math500.extract_answer("\\boxed{007}") == "7"
    assert math500.extract_answer("no box") is None
    assert math500.gold_answer({"answer": "\\dfrac{1}{2}"}) == "\\frac{1}{2}"
    assert too_deep("(" * 7 + "5") and not too_deep("((((((5))))))") and not too_deep(")))(((")
    assert last_boxed("a \\fbox{3} b") == "3" and last_boxed("\\boxed 5 apples") == "5"
    assert normalize("\\left( 1,\\, 2 \\right).") == "(1,2)"
    assert gold_text(["$1$", "$2$"]) == "$1$, $2$" and gold_text(27.0) == "27" and gold_text(3) == "3"


# -- data: hub formats through local files ---------------------------------------------------
HUB_ROWS = {  # synthetic rows in each hub dataset's column layout (extra columns included)
    "math500": {"problem": ["What is $1+1$?", "Simplify $\\frac{2}{4}$."], "solution": ["$\\boxed{2}$", "..."],
                "answer": ["2", "\\frac{1}{2}"], "subject": ["Algebra"] * 2, "level": [1, 2],
                "unique_id": ["test/algebra/1.json", "test/algebra/2.json"]},
    "aime24": {"id": [60, 61], "problem": ["Find $x$.", "Find $y$."], "solution": ["...", "..."],
               "answer": ["204", "025"], "url": ["u1", "u2"], "year": ["2024", "2024"]},
    "aime25": {"problem": ["Find $n$.", "Find $m$."], "answer": ["70", "588"], "id": ["0", "1"]},
    "amc23": {"id": [0, 1], "question": ["How many?", "What is the area?"], "answer": [27.0, 4.5],
              "url": ["u", "u"]},
    "minerva": {"question": ["Compute the mass.", "Find the speed."], "answer": ["3.5e-5", "\\frac{c}{2}"]},
    "olympiadbench": {"id": [1606, 1607], "question": ["Find all $n$.", "Find $k$."],
                      "final_answer": [["$2$", "$3$"], ["$\\frac{1}{2}$"]], "is_multiple_answer": [True, False]},
    "deepscaler": {"problem": [f"Problem {i}?" for i in range(300)], "answer": [str(i) for i in range(300)],
                   "solution": ["..."] * 300},
}
EXPECTED = {  # (first prompt's question, golds, ids) after the mapping
    "math500": ("What is $1+1$?", ["2", "\\frac{1}{2}"], ["test/algebra/1.json", "test/algebra/2.json"]),
    "aime24": ("Find $x$.", ["204", "025"], ["60", "61"]),
    "aime25": ("Find $n$.", ["70", "588"], ["0", "1"]),
    "amc23": ("How many?", ["27", "4.5"], ["0", "1"]),
    "minerva": ("Compute the mass.", ["3.5e-5", "\\frac{c}{2}"], ["0", "1"]),
    "olympiadbench": ("Find all $n$.", ["$2$, $3$", "$\\frac{1}{2}$"], ["1606", "1607"]),
}


def _write(rows: dict, path, fmt: str):
    data = datasets.Dataset.from_dict(rows)
    if fmt == "parquet":
        data.to_parquet(str(path))
    else:
        data.to_json(str(path), lines=True)
    return str(path)


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_column_mapping_of_each_hub_format(tmp_path, name, fmt):
    path = _write(HUB_ROWS[name], tmp_path / f"{name}.{fmt}", fmt)
    objective = objectives.get(name, data_files=path)
    data = objective.dataset("test").to_list()
    question, golds, ids = EXPECTED[name]
    assert [r["answer"] for r in data] == golds and [r["id"] for r in data] == ids
    assert data[0]["prompt"].startswith(question) and data[0]["prompt"].endswith("within \\boxed{}.")
    assert objective.data_source == "files" and objective.split_size("train") == 0
    with pytest.raises(ValueError, match="no 'train' problems.*evaluation set"):
        objective.dataset("train")
    # the mapped rows score as they should
    rewards = objective(prompts=[r["prompt"] for r in data], answer=[r["answer"] for r in data],
                        completions=["\\boxed{" + normalize(g.split(",")[0]) + "}" for g in golds])
    assert rewards == [1.0, 1.0] if name != "olympiadbench" else rewards == [0.0, 1.0]


def test_deepscaler_is_a_training_set_with_a_held_out_percent(tmp_path):
    path = _write(HUB_ROWS["deepscaler"], tmp_path / "d.parquet", "parquet")
    objective = objectives.get("deepscaler", data_files=path)
    train, test = objective.dataset("train").to_list(), objective.dataset("test").to_list()
    assert len(train) + len(test) == 300 and 0 < len(test) < 12
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    assert objective.dataset("train", 5).to_list() == train[:5]


def test_an_unparseable_gold_is_a_load_time_error_naming_the_row(tmp_path):
    rows = {"problem": ["a", "b", "c"], "answer": ["1", "\\frac{", "3"], "unique_id": ["u0", "u1", "u2"]}
    objective = objectives.get("math500", data_files=_write(rows, tmp_path / "bad.jsonl", "jsonl"))
    with pytest.raises(ValueError, match=r"math500: row 1 \(unique_id='u1'\)'s gold answer '\\\\frac\{' does not parse"):
        objective.dataset("test")
    rows = {"problem": ["a"], "answer": [""], "unique_id": ["u0"]}
    with pytest.raises(ValueError, match=r"row 0 .* has an empty gold answer"):
        objectives.get("math500", data_files=_write(rows, tmp_path / "empty.jsonl", "jsonl")).dataset("test")
    with pytest.raises(ValueError, match="row 0 has no column 'answer'"):
        objectives.get("minerva", data_files=_write({"question": ["q"], "ans": ["1"]}, tmp_path / "m.jsonl",
                                                     "jsonl")).dataset("test")


def test_champ_is_the_offline_math_set():
    champ = objectives.get("champ")
    data = champ.dataset("test").to_list()
    assert len(data) == 85 and champ.data_source == "offline"
    assert data[0]["id"] == "P_Combinatorics_1" and data[0]["answer"] == "239"
    assert len({r["id"] for r in data}) == 85
    assert champ(prompts=["p"], completions=["\\boxed{239}"], answer=["239"]) == [1.0]
    with pytest.raises(ValueError, match="champ is not on the hub"):
        objectives.get("champ", data_files="x.parquet")


def test_sources(tmp_path):
    with pytest.raises(DataUnavailable, match="math500 has no offline source"):
        objectives.get("math500", source="offline")
    with pytest.raises(ValueError, match="unknown source 'web'"):
        objectives.get("aime24", source="web")
    with pytest.raises(DataUnavailable, match=r"aime24: the hub dataset could not be loaded \(.*\) and aime24 has no offline"):
        objectives.get("aime24").dataset("test")   # tests run with HF_HUB_OFFLINE=1 and an empty cache
    with pytest.raises(DataUnavailable, match="could not be loaded"):
        objectives.get("gsm8k", source="hub").dataset("test")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gsm = objectives.get("gsm8k")                # auto: the hub fails, the offline 100 are used
        assert gsm.split_size("test") == 57 and gsm.data_source == "offline"
    assert any(issubclass(w.category, DataSourceNote) for w in caught)
    with pytest.raises(ValueError, match="data_files must be"):
        objectives.get("math500", data_files=str(tmp_path / "x.txt")).dataset("test")


def test_one_table_row_per_registered_math_benchmark():
    """objectives/math_benchmarks.py is a table: each row's class is the registry's target of its name."""
    import pickle

    from objectives import math_benchmarks
    from zoopt.registry import OBJECTIVES

    assert list(math_benchmarks.CLASSES) == MATH_NAMES
    for class_name, doc, spec in math_benchmarks.TABLE:
        cls = OBJECTIVES.get(spec.name)
        assert cls is math_benchmarks.CLASSES[spec.name] and getattr(math_benchmarks, class_name) is cls
        assert cls.__name__ == class_name and cls.__doc__ == doc and cls.benchmark is spec and cls.name == spec.name
        assert issubclass(cls, MathBenchmark) and pickle.loads(pickle.dumps(cls)) is cls


def test_registered_names_and_contract():
    for name in MATH_NAMES:
        objective = objectives.get(name)
        assert isinstance(objective, MathBenchmark) and objective.name == name
    assert objectives.get("math500").benchmark.hub.path == "HuggingFaceH4/MATH-500"
    with pytest.raises(ValueError, match="template must use only {question}"):
        objectives.get("math500", template={"question": None})    # what YAML makes of --set ...template={question}
    with pytest.raises(ValueError, match="check_timeout_s must be"):
        objectives.get("math500", check_timeout_s=0)
    assert json.dumps(objectives.names())  # names are plain strings
