"""``RunDir``: one place that reads and writes a run directory's files."""

import json

import pytest

from zoopt.config import ConfigError
from zoopt.runs.rundir import RunDir


def test_files_round_trip(tmp_path):
    run = RunDir(tmp_path / "r")
    assert not run.holds_run() and run.read_config() is None and run.read_eval("after") is None
    run.write_config({"model": "tiny", "eval": {"n_problems": 4}})
    assert run.read_config() == {"model": "tiny", "eval": {"n_problems": 4}}
    assert not run.holds_run()  # a config alone is not a run yet
    records = [{"step": 0, "reward_mean": 0.25}, {"step": 1, "reward_mean": None}]
    for r in records:
        run.append_metrics(r)
    assert run.read_metrics() == records and run.holds_run()
    assert [json.loads(x) for x in run.metrics_path.read_text().splitlines()] == records
    run.write_eval("before", {"greedy_accuracy": 0.5, "path": tmp_path})  # non-JSON values as str
    assert run.read_eval("before") == {"greedy_accuracy": 0.5, "path": str(tmp_path)}
    run.write_checksum("abc")
    assert run.checksum_path.read_text() == "abc\n" and run.read_checksum() == "abc"


def test_a_used_directory_is_refused_with_one_line(tmp_path):
    run = RunDir(tmp_path)
    run.refuse_if_used()
    run.seedlog_path.write_text("{}")
    with pytest.raises(ConfigError, match=r"already holds a run; use --resume"):
        run.refuse_if_used("; use --resume")
    with pytest.raises(FileNotFoundError, match="no metrics.jsonl"):
        run.read_metrics()


def test_an_atomic_file_is_whole_or_the_old_one(tmp_path):
    from zoopt.runs.atomic import atomic_file, write_text_atomic

    path = write_text_atomic(tmp_path / "sub" / "a.json", "old")
    with pytest.raises(RuntimeError):
        with atomic_file(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed while writing")
    assert path.read_text() == "old" and sorted(p.name for p in path.parent.iterdir()) == ["a.json"]
    write_text_atomic(path, "new")
    assert path.read_text() == "new" and sorted(p.name for p in path.parent.iterdir()) == ["a.json"]
