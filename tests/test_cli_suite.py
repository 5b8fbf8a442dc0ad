"""`zoopt eval --suite` / `--objective a,b,c`: the paper's table agrees with each benchmark's own
files, a benchmark without data is a row that says so, --compare puts tables side by side."""

import csv
import json

import datasets
import pytest

from zoopt.cli import main
from zoopt.workflows.suite import suite_objectives, suites

TINY = ["--model", "tiny", "--n-problems", "3", "--n", "2", "--k", "1,2", "--max-new-tokens", "4", "--quiet"]


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite") / "ev"
    rc = main(["eval", *TINY, "--objective", "gsm8k,champ,math500", "--source", "offline", "--out", str(out)])
    assert rc == 0
    return out


def test_the_table_agrees_with_each_benchmarks_files(suite_dir):
    suite = json.loads((suite_dir / "suite.json").read_text())
    rows = {r["benchmark"]: r for r in suite["rows"]}
    assert list(rows) == ["gsm8k", "champ", "math500", "average"]
    assert suite["settings"]["ks"] == [1, 2] and suite["settings"]["objective_args"] == {"source": "offline"}
    for name in ("gsm8k", "champ"):
        summary = json.loads((suite_dir / name / "summary.json").read_text())
        with open(suite_dir / name / "per_problem.csv", newline="") as fh:
            assert len(list(csv.DictReader(fh))) == summary["n_problems"] == rows[name]["n_problems"] == 3
        for metric in ("pass@1", "pass@2", "maj@2"):
            assert rows[name][metric] == pytest.approx(100 * summary[metric])
        assert rows[name]["source"] == summary["data_source"] == "offline" and rows[name]["note"] is None
    assert rows["math500"]["pass@1"] is None and "math500 has no offline source" in rows["math500"]["note"]
    assert not (suite_dir / "math500").exists()
    for metric in ("pass@1", "pass@2", "maj@2"):
        assert rows["average"][metric] == pytest.approx((rows["gsm8k"][metric] + rows["champ"][metric]) / 2)
    assert rows["average"]["note"] == "mean of the 2 of 3 evaluated"
    table = (suite_dir / "table.md").read_text()
    assert "| benchmark | Pass@1 | Pass@2 | Maj@2 | problems | source | timed out |" in table
    assert "math500 has no offline source" in table
    with open(suite_dir / "table.csv", newline="") as fh:
        assert [r["benchmark"] for r in csv.DictReader(fh)] == ["gsm8k", "champ", "math500", "average"]


def test_compare_puts_suites_side_by_side(suite_dir, tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    data = json.loads((suite_dir / "suite.json").read_text())
    data["model"] = "runs/es-trained/model"
    data["rows"][0]["pass@1"] = 42.0
    (other / "suite.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["eval", "--compare", str(suite_dir), str(other)]) == 0
    out = capsys.readouterr().out
    assert "side by side" in out and "es-trained" in out and "ev" in out and "42.0" in out


def test_paper_suites_and_bad_names(capsys):
    assert suite_objectives("paper-math", None) == ["gsm8k", "math500", "aime24", "aime25", "amc23",
                                                   "minerva", "olympiadbench"]
    assert suite_objectives("paper-nonmath", None) == ["gpqa_diamond"] and set(suites()) == {"paper-math", "paper-nonmath"}
    assert main(["eval", "--model", "tiny", "--suite", "paper-maths"]) == 2
    assert "unknown suite 'paper-maths'" in capsys.readouterr().err
    assert main(["eval", "--model", "tiny", "--objective", "gsm8k,gsm8k"]) == 2
    assert main(["eval", "--model", "tiny", "--objective", "gsm8k,champ", "--n", "0"]) == 2
    assert "a suite's table needs sampled completions" in capsys.readouterr().err


def test_paper_nonmath_from_local_files_writes_no_question_text(tmp_path):
    rows = {"Question": [f"Secret question {i}?" for i in range(3)], "Correct Answer": ["r"] * 3,
            "Incorrect Answer 1": ["w1"] * 3, "Incorrect Answer 2": ["w2"] * 3, "Incorrect Answer 3": ["w3"] * 3,
            "Record ID": ["a", "b", "c"]}
    path = tmp_path / "gpqa.parquet"
    datasets.Dataset.from_dict(rows).to_parquet(str(path))
    out = tmp_path / "ev"
    assert main(["eval", *TINY, "--suite", "paper-nonmath", "--set", f"objective_args.data_files={path}",
                 "--out", str(out)]) == 0
    suite = json.loads((out / "suite.json").read_text())
    assert suite["rows"][0]["benchmark"] == "gpqa_diamond" and suite["rows"][0]["source"] == "files"
    written = "".join(p.read_text() for p in out.rglob("*") if p.is_file())
    assert "Secret question" not in written
